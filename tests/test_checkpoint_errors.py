"""A broken or mismatched drafter checkpoint fails to load with a message that names what is wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel

from dlite_hf import DLiteForSpeculation

# ---------------------------------------------------------------------------------------------------------------------
# broken checkpoints
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def checkpoint(tiny_pair, tmp_path):
    """The tiny pair's drafter saved in a folder of its own for each test (the tests break it)."""
    _, drafter = tiny_pair
    folder = tmp_path / "drafter"
    drafter.save_pretrained(folder)
    return folder


LOADERS = {"DLiteForSpeculation": DLiteForSpeculation.from_pretrained, "AutoModel": AutoModel.from_pretrained}


@pytest.mark.parametrize("loader", list(LOADERS))
@pytest.mark.parametrize("keep", [0.0, 0.001, 0.5, 0.9999])
def test_truncated_checkpoint(checkpoint, loader, keep):
    weights = checkpoint / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ValueError) as raised:
        LOADERS[loader](checkpoint)
    message = str(raised.value)
    assert "truncated or corrupt" in message and str(checkpoint) in message, message
    assert "save the drafter again" in message


@pytest.mark.parametrize("loader", list(LOADERS))
def test_partial_checkpoint_lists_missing_keys(checkpoint, loader):
    state = load_file(checkpoint / "model.safetensors")
    dropped = ["head.cell.weight_hh", "norm.weight", "depth_embedding.weight"]
    save_file({k: v for k, v in state.items() if k not in dropped}, checkpoint / "model.safetensors", {"format": "pt"})
    with pytest.raises(ValueError) as raised:
        LOADERS[loader](checkpoint)
    message = str(raised.value)
    assert "missing_keys" in message and "partial" in message, message
    for key in dropped:
        assert key in message, (key, message)


@pytest.mark.parametrize("loader", list(LOADERS))
def test_unexpected_keys_are_an_error(checkpoint, loader):
    state = load_file(checkpoint / "model.safetensors")
    state["head.extra.weight"] = torch.zeros(3)
    save_file(state, checkpoint / "model.safetensors", {"format": "pt"})
    with pytest.raises(ValueError, match=r"unexpected_keys: \['head.extra.weight'\]"):
        LOADERS[loader](checkpoint)


@pytest.mark.parametrize("loader", list(LOADERS))
@pytest.mark.parametrize("field,value,key", [("hidden_size", 48, "norm.weight"), ("head_rank", 8, "head.up.weight")])
def test_config_that_does_not_match_the_weights(checkpoint, loader, field, value, key):
    config = json.loads((checkpoint / "config.json").read_text())
    config[field] = value
    (checkpoint / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError) as raised:
        LOADERS[loader](checkpoint)
    message = str(raised.value)
    assert "does not match its config" in message and "mismatched_keys" in message, message
    assert key in message and "config.json belongs to these weights" in message, message


@pytest.mark.parametrize(
    "override,field",
    [
        ({"num_draft_tokens": 0}, "num_draft_tokens=0"),
        ({"target_layer_ids": [0, 1, 40]}, "target_layer_ids=[0, 1, 40]"),
        ({"draft_lengths": [99]}, "draft_lengths=[99]"),
        ({"lookup_min_match": 0}, "lookup_min_match=0"),
    ],
)
def test_load_time_overrides_are_validated(checkpoint, override, field):
    with pytest.raises(ValueError) as raised:
        DLiteForSpeculation.from_pretrained(checkpoint, **override)
    message = str(raised.value)
    assert f"DLiteConfig.{field} is invalid" in message and "keyword overrides" in message, message


def test_intact_checkpoint_still_loads_and_returns_loading_info(checkpoint):
    model, info = DLiteForSpeculation.from_pretrained(checkpoint, output_loading_info=True)
    assert isinstance(model, DLiteForSpeculation)
    assert not any(v for k, v in info.items())
    assert os.path.exists(checkpoint / "model.safetensors")


_MIXED_RELEASES_SCRIPT = """
import importlib.abc
import sys


class BlockDliteHf(importlib.abc.MetaPathFinder):  # the trust_remote_code route: the folder's own code files
    def find_spec(self, name, path=None, target=None):
        if name == "dlite_hf" or name.startswith("dlite_hf."):
            raise ImportError(name)


sys.meta_path.insert(0, BlockDliteHf())
from transformers import AutoModel

try:
    AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True)
except ImportError as error:
    print("IMPORT ERROR: " + str(error))
"""


@pytest.mark.heavy  # a fresh interpreter without dlite_hf: in `make test` and CI, not test-fast
def test_code_files_from_different_releases_are_named_with_the_fix(tiny_pair, tmp_path):
    """A folder holding one code file of an older release (it imports a name the others no longer define) fails on
    the trust_remote_code route with the cause and the fix, not a bare ImportError from deep inside."""
    _, drafter = tiny_pair
    folder = tmp_path / "drafter_mixed_releases"
    drafter.save_pretrained(folder)
    older = folder / "candidate_generators.py"
    older.write_text(
        older.read_text().replace("import DECODING_OPTIONS,", "import DECODING_OPTIONS, check_option,", 1)
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "HF_", "TRANSFORMERS_"))}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), HF_MODULES_CACHE=str(tmp_path / "modules"))
    run = subprocess.run(
        [sys.executable, "-I", "-c", _MIXED_RELEASES_SCRIPT, str(folder)], env=env, capture_output=True, text=True
    )
    message = run.stdout.partition("IMPORT ERROR: ")[2]
    assert "check_option" in message and "drafter_mixed_releases" in message, run.stdout + run.stderr
    assert "different dlite-hf versions" in message and "save it again" in message, message
