"""A broken or mismatched drafter checkpoint fails to load with a message that names what is wrong."""

from __future__ import annotations

import json
import os

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
