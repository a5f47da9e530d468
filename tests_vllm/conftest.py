"""Tests of the vLLM side (`vllm_plugin/`), run by `make test-vllm` with the vLLM environment's python.

Fast tests build a tiny seeded drafter folder from the repository's own modeling files (no model download, no
engine). Tests marked `engine` start vLLM on the real SmolLM2 target with the shipped drafter (each engine load
takes 30-60 s on this CPU); the real prompts and dlite-hf's own generate() results come from
`benchmarks/vllm_prompts.py`, run in the package's environment (.venv).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
DRAFTER = ROOT / "drafters" / "dlite-smollm2-135m"
TARGET = Path(os.environ.get("DLITE_VLLM_TARGET", Path.home() / ".cache" / "dlite-hf" / "models" / "smollm2-135m"))
PACKAGE_PYTHON = Path(os.environ.get("DLITE_PACKAGE_PYTHON", ROOT / ".venv" / "bin" / "python"))
TINY_VOCAB, TINY_HIDDEN, TINY_LAYERS = 128, 64, 4


def pytest_configure(config):
    config.addinivalue_line("markers", "engine: starts a vLLM engine on the real target (slow)")


def _tiny_config(**overrides) -> dict:
    config = json.loads((DRAFTER / "config.json").read_text())
    config.update(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        head_rank=16,
        num_target_layers=TINY_LAYERS,
        target_hidden_size=TINY_HIDDEN,
        vocab_size=TINY_VOCAB,
        target_layer_ids=[0, 1, 3],
        draft_vocab_size=None,
        num_draft_tokens=4,
        draft_lengths=None,
        draft_confidence_threshold=0.0,
        draft_skip_threshold=0.0,
        target_model={"architecture": "LlamaForCausalLM", "model_type": "llama", "name_or_path": "tiny"},
    )
    config.update(overrides)
    return config


def make_tiny_drafter_folder(folder: Path, seed: int = 0, **overrides) -> Path:
    """A seeded random DLite drafter saved with the repository's modeling files (loadable with trust_remote_code)."""
    from transformers import AutoConfig, AutoModel

    folder.mkdir(parents=True, exist_ok=True)
    for source in (ROOT / "modeling").glob("*.py"):
        if source.name != "__init__.py":
            shutil.copy(source, folder / source.name)
    (folder / "config.json").write_text(json.dumps(_tiny_config(**overrides)))
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    torch.manual_seed(seed)
    model = AutoModel.from_config(config, trust_remote_code=True)
    model.save_pretrained(folder)
    for source in (ROOT / "modeling").glob("*.py"):  # save_pretrained may rewrite them: keep the repository's
        if source.name != "__init__.py":
            shutil.copy(source, folder / source.name)
    return folder


class FakeVLLMTarget(nn.Module):
    """The two modules of a vLLM decoder LM that the drafter borrows (`model.embed_tokens`, `lm_head`), with
    `padding` extra vocabulary rows as vLLM's padded embeddings have."""

    def __init__(self, seed: int = 0, padding: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(TINY_VOCAB + padding, TINY_HIDDEN)
        self.lm_head = nn.Linear(TINY_HIDDEN, TINY_VOCAB + padding, bias=False)


def tiny_hf_config():
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=TINY_VOCAB,
        hidden_size=TINY_HIDDEN,
        num_hidden_layers=TINY_LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
    )


def fake_vllm_config(folder: Path, num_tokens: int = 4, max_model_len: int = 1024, lookup=None):
    """The fields of vLLM's VllmConfig that DLiteProposer reads (`lookup`: the hybrid's (max, min) or None)."""
    from dlite_hf_vllm.proposer import DRAFTER_FOLDER, LOOKUP

    spec = SimpleNamespace(num_speculative_tokens=num_tokens, **{DRAFTER_FOLDER: str(folder), LOOKUP: lookup})
    model = SimpleNamespace(max_model_len=max_model_len, hf_config=tiny_hf_config(), dtype=torch.float32)
    return SimpleNamespace(speculative_config=spec, model_config=model)


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory) -> Path:
    return make_tiny_drafter_folder(tmp_path_factory.mktemp("tiny-drafter"))


@pytest.fixture(scope="session")
def real_prompts(tmp_path_factory) -> dict:
    """Two real prompts per workload (first turns, chat template applied) with dlite-hf's generate() results."""
    if not TARGET.is_dir():
        pytest.fail(f"No target at {TARGET}: run `make assets` (or set DLITE_VLLM_TARGET).")
    if not PACKAGE_PYTHON.is_file():
        pytest.fail(f"No package environment at {PACKAGE_PYTHON}: run `make setup` (or set DLITE_PACKAGE_PYTHON).")
    out = tmp_path_factory.mktemp("prompts") / "prompts.json"
    subprocess.run(
        [
            str(PACKAGE_PYTHON),
            str(ROOT / "benchmarks" / "vllm_prompts.py"),
            "--out",
            str(out),
            "--num-prompts",
            "3",
            "--max-new-tokens",
            "64",
            "--hf-stats",
        ],
        check=True,
        cwd=ROOT,
    )
    return json.loads(out.read_text())


def spec_counters(llm) -> dict[str, float]:
    """vLLM's cumulative spec-decode counters (`num_drafts`, `num_draft_tokens`, `num_accepted_tokens`) of the one
    engine alive: they come from the process-wide Prometheus registry, which every new engine resets."""
    return {
        m.name.removeprefix("vllm:spec_decode_"): m.value
        for m in llm.get_metrics()
        if m.name.startswith("vllm:spec_decode_num") and hasattr(m, "value")
    }


def accepted_per_position(llm) -> list[int]:
    """vLLM's cumulative accepted drafts by position in the draft (0 is a draft's first token)."""
    return next(list(m.values) for m in llm.get_metrics() if m.name == "vllm:spec_decode_num_accepted_tokens_per_pos")


class Engine:
    """A vLLM engine on the real target, with or without the shipped DLite drafter (a context manager that shuts
    the engine process down on exit, so that only one holds memory at a time)."""

    def __init__(self, dtype: str = "float32", dlite: bool = True, num_tokens: int = 7, spec=None, **kwargs):
        """`spec`: more speculative_config keys beside the drafter (the hybrid's prompt_lookup_max, a schedule)."""
        from vllm import LLM

        speculative = {"model": str(DRAFTER), "num_speculative_tokens": num_tokens, **(spec or {})}
        spec = {"speculative_config": speculative} if dlite else {}
        options = {"max_model_len": 4096, **kwargs}
        self.llm = LLM(
            model=str(TARGET),
            dtype=dtype,
            gpu_memory_utilization=0.15,
            enforce_eager=True,
            seed=0,
            disable_log_stats=False,
            **spec,
            **options,
        )

    def generate(self, prompt_ids: list[list[int]], params) -> list[list[int]]:
        from vllm.inputs import TokensPrompt

        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompt_ids], params, use_tqdm=False)
        return [list(choice.token_ids) for out in outputs for choice in out.outputs]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        import gc

        self.llm.llm_engine.engine_core.shutdown()
        del self.llm
        gc.collect()
