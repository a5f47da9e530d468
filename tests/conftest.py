"""Shared fixtures: tiny seeded targets built in code, DLite drafters for them, and the real SmolLM2 target."""

from __future__ import annotations

import os

import pytest
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

import dlite_hf
from dlite_hf import DLiteConfig, DLiteForSpeculation

torch.set_num_threads(int(os.environ.get("DLITE_TEST_THREADS", "2")))

TINY_ARCHS = {
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
}


def make_tiny_target(arch: str = "qwen3", seed: int = 0, vocab_size: int = 128, num_layers: int = 4):
    """A seeded random decoder LM: vocab 128, hidden 64, 4 layers."""
    config_cls, model_cls = TINY_ARCHS[arch]
    config = config_cls(
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
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def make_drafter(target, seed: int = 0, **overrides) -> DLiteForSpeculation:
    kwargs = dict(
        num_target_layers_tapped=3,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_rank=16,
        intermediate_size=64,
    )
    kwargs.update(overrides)
    config = DLiteConfig.for_target(target.config, target_name_or_path="tiny", **kwargs)
    torch.manual_seed(seed)
    return DLiteForSpeculation(config).eval()


def fit_drafter_to_greedy(target, drafter, prompts: torch.Tensor, new_tokens: int, steps: int, lr: float = 3e-3):
    """Fit `drafter` (teacher-forced CE) to the target's own greedy continuations of `prompts` [B, P]."""
    from dlite_hf.training.features import target_features

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


@pytest.fixture(scope="session")
def fitted_pair():
    """A tiny Qwen3 target and a drafter fitted to its greedy outputs of 8 prompts (long accepted runs)."""
    target = make_tiny_target("qwen3", seed=0)
    drafter = make_drafter(target, seed=0)
    prompts = torch.randint(0, 128, (8, 6), generator=torch.Generator().manual_seed(1))
    sequences, loss = fit_drafter_to_greedy(target, drafter, prompts, new_tokens=40, steps=150, lr=1e-2)
    return target, drafter, prompts, sequences, loss


def pytest_collection_modifyitems(config, items):
    """Every test that needs the real SmolLM2 files (through the `smollm2_dir` fixture) is a `real` test, so
    `pytest -m "not real"` runs without a downloaded model."""
    for item in items:
        if "smollm2_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.real)


@pytest.fixture(scope="session")
def smollm2_dir():
    """The real SmolLM2-135M-Instruct, converted by `dlite-hf assets fetch smollm2-135m` (make assets)."""
    from dlite_hf.assets import fetch_model

    return fetch_model("smollm2-135m", progress=False)


@pytest.fixture(scope="session")
def smollm2(smollm2_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    return model, tokenizer


assert dlite_hf.DLiteForSpeculation is DLiteForSpeculation  # the package import registered the classes


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
