"""Tiny seeded models built in code, for the unit tests: targets of three architectures, DLite drafters for them,
a drafter fitted to a target's greedy outputs, a small `dlite-hf train` run on disk, and the names of the Hub code
files every saved drafter carries. Imported by the tests (`from tiny_models import ...`) and by `conftest.py`'s
fixtures."""

from __future__ import annotations

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from dlite_hf import DLiteConfig, DLiteForSpeculation

__all__ = [
    "HUB_CODE_FILES",
    "TINY_ARCHS",
    "fit_drafter_to_greedy",
    "make_drafter",
    "make_smollm_vocab_target",
    "make_tiny_target",
    "target_with_hidden",
    "tiny_prompt",
    "write_tiny_training_run",
]

# The model code in modeling/ that every saved drafter folder carries beside its weights (trust_remote_code loads it
# from there); test_packaging.py checks that this is every file of modeling/ but its __init__.py.
HUB_CODE_FILES = (
    "configuration_dlite.py",
    "modeling_dlite.py",
    "blocks.py",
    "candidate_generators.py",
    "drafting.py",
    "integration.py",
    "decoding_options.py",
    "tapping.py",
    "suffix_index.py",
    "target_binding.py",
    "packed_linear.py",
)

TINY_ARCHS = {
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
}


def make_tiny_target(arch: str = "qwen3", seed: int = 0, vocab_size: int = 128, num_layers: int = 4, **config):
    """A seeded random decoder LM: vocab 128, hidden 64, 4 layers (``config`` overrides any config field). Its
    generation config never stops at eos (a random model must not stop early by chance: fixed lengths)."""
    config_cls, model_cls = TINY_ARCHS[arch]
    fields = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
    )
    fields.update(config)
    torch.manual_seed(seed)
    model = model_cls(config_cls(**fields)).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = fields["pad_token_id"]
    return model


def target_with_hidden(hidden: int):
    """A seeded 4-layer Qwen3 target of width `hidden` (vocab 128, head_dim 12): pairs a drafter with a target of
    another width, for the refusal tests."""
    return make_tiny_target(hidden_size=hidden, intermediate_size=96, head_dim=12, max_position_embeddings=40960)


def tiny_prompt(vocab: int = 128, batch: int = 1, length: int = 5) -> torch.Tensor:
    """Seeded random prompt ids in [1, vocab)."""
    return torch.randint(1, vocab, (batch, length), generator=torch.Generator().manual_seed(0))


def make_smollm_vocab_target(seed: int = 0, num_layers: int = 2, max_positions: int = 2048) -> LlamaForCausalLM:
    """A seeded random Llama with SmolLM2's vocabulary (49152) and special token ids (bos 1, eos = pad 2), hidden
    32, tied embeddings: real prompts tokenized by the SmolLM2 tokenizer run through it."""
    return make_tiny_target(
        "llama",
        seed=seed,
        vocab_size=49152,
        num_layers=num_layers,
        hidden_size=32,
        intermediate_size=64,
        head_dim=8,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )


def make_drafter(target, seed: int = 0, **overrides) -> DLiteForSpeculation:
    """A seeded random DLite drafter for `target` (a model, or only its config): 3 tapped layers, hidden 32, 2
    layers, head rank 16, recorded as drafting for "tiny"; ``overrides`` changes any `DLiteConfig.for_target`
    argument (``target_name_or_path`` included)."""
    kwargs = dict(
        target_name_or_path="tiny",
        num_target_layers_tapped=3,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_rank=16,
        intermediate_size=64,
    )
    kwargs.update(overrides)
    config = DLiteConfig.for_target(getattr(target, "config", target), **kwargs)
    torch.manual_seed(seed)
    return DLiteForSpeculation(config).eval()


def fit_drafter_to_greedy(target, drafter, prompts: torch.Tensor, new_tokens: int, steps: int, lr: float = 3e-3):
    """Fit `drafter` (teacher-forced CE) to the target's own greedy continuations of `prompts` [B, P]."""
    from dlite_hf.data.features.transformers import target_features

    sequences = target.generate(
        prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new_tokens, do_sample=False
    )
    states, _ = target_features(target, sequences, drafter.config.target_layer_ids)
    k = drafter.config.num_draft_tokens
    anchors = torch.arange(prompts.shape[1], sequences.shape[1] - k)
    context = states[:, anchors - 1].flatten(0, 1)
    anchor_ids = sequences[:, anchors].flatten()
    labels = torch.stack([sequences[:, anchors + i] for i in range(1, k + 1)], -1).flatten(0, 1)
    drafter.bind_target(target).train()
    optimizer = torch.optim.AdamW(drafter.parameters(), lr=lr)
    for _ in range(steps):
        logits = drafter(context, anchor_ids, labels).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    drafter.eval()
    return sequences, float(loss.detach())


def write_tiny_training_run(folder, tokenizer_dir, rows: int = 8) -> list[str]:
    """A tiny Llama target (with a real tokenizer, the CLI loads one) and regenerated rows on disk; returns the
    `dlite-hf train` arguments of a small stable run on them (append `--output_dir` and any overrides)."""
    import json

    from transformers import AutoTokenizer

    target = make_tiny_target("llama", seed=0)
    target.save_pretrained(folder / "target")
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(folder / "target")
    prompts = torch.randint(1, 128, (rows, 6), generator=torch.Generator().manual_seed(1))
    sequences = target.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=12, do_sample=False)
    with open(folder / "data.jsonl", "w") as handle:
        for i, row in enumerate(sequences.tolist()):
            handle.write(json.dumps({"id": str(i), "input_ids": row, "loss_mask": [0] * 6 + [1] * 12}) + "\n")
    small = {
        "--target": folder / "target",
        "--data": folder / "data.jsonl",
        "--per_device_train_batch_size": 2,
        "--num_anchors": 2,
        "--num_tapped_layers": 2,
        "--drafter_hidden_size": 32,
        "--drafter_layers": 1,
        "--drafter_heads": 2,
        "--drafter_kv_heads": 1,
        "--head_rank": 8,
        "--save_strategy": "no",
        "--report_to": "none",
    }
    return ["train", "--stage", "stable"] + [str(x) for pair in small.items() for x in pair]
