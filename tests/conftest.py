"""Shared fixtures: tiny seeded targets built in code, DLite drafters for them, and the real SmolLM2 target."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch
from tiny_models import fit_drafter_to_greedy, make_drafter, make_tiny_target

import dlite_hf
from dlite_hf import DLiteForSpeculation

torch.set_num_threads(int(os.environ.get("DLITE_TEST_THREADS", "2")))

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_script():
    """Import a script of the checkout that is not part of the package (``benchmarks/goals.py``, ...) by its path
    relative to the repository root; returns the module."""

    def load(relative: str):
        path = REPO / relative
        spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_"), path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(scope="module")
def target():
    """A tiny seeded Qwen3 target (vocabulary 128, hidden 64, 4 layers; tests/tiny_models.py)."""
    return make_tiny_target("qwen3", seed=11)


@pytest.fixture(scope="module")
def one_thread():
    """Torch on one thread for a module (`pytestmark = pytest.mark.usefixtures("one_thread")`): tiny models gain
    nothing from threads, and on a busy machine extra threads only wait for each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_pair():
    """A tiny seeded Qwen3 target (vocabulary 128) and an untrained DLite drafter for it: the shared fixture of the
    tests that need a drafter and a target but not accepted drafts (refusals, checkpoints, the hybrid's lookups)."""
    target = make_tiny_target("qwen3", seed=3)
    return target, make_drafter(target, seed=4)


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


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir):
    """The real SmolLM2 tokenizer (ChatML template), so prompts are templated as for the real target."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


assert dlite_hf.DLiteForSpeculation is DLiteForSpeculation  # the package import registered the classes
