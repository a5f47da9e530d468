"""`dlite-hf features --cached-rows`: the rows whose feature-cache entries exist, found by the trainer's own keys."""

from __future__ import annotations

import json

import pytest
import torch

from dlite_hf.cli import main
from dlite_hf.data.features.cache import FeatureCache
from dlite_hf.training.data import RegeneratedDataset


def _drafter(tmp_path) -> list[int]:
    from tiny_models import make_drafter, make_tiny_target

    drafter = make_drafter(make_tiny_target())
    drafter.save_pretrained(tmp_path / "drafter")
    return list(drafter.config.target_layer_ids)


def _run(tmp_path, cache, out, max_length, capsys):
    args = ["features", "--rows", str(tmp_path / "rows.jsonl"), "--cache", str(cache), "--drafter"]
    args += [str(tmp_path / "drafter"), "--anchor-stride", "4", "--max-length", str(max_length), "--cached-rows", out]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_keeps_exactly_the_rows_with_entries_in_order(tmp_path, capsys):
    rows = [
        {"id": f"r{i}", "input_ids": list(range(100 * i + 1, 100 * i + 20 + i)), "loss_mask": [0] * 8 + [1] * (11 + i)}
        for i in range(4)
    ]
    held = {**rows[0], "id": "stdlib/json.dump"}  # r0's entry would match it: dropped as training drops it
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in [*rows, held]))
    layers = _drafter(tmp_path)
    cache = FeatureCache(str(tmp_path / "c"), "tiny", layers, history_free=True, anchor_stride=4, producer="vllm-x")
    for row in [RegeneratedDataset(rows, max_length=16).rows[i] for i in (0, 3)]:  # as truncated for training
        first, _ = cache.kept(len(row["input_ids"]), row["loss_mask"].index(1))
        cache._write(cache.entry_key(torch.tensor(row["input_ids"]), first), {"x": torch.zeros(1)})
    out = str(tmp_path / "cached.jsonl")
    assert _run(tmp_path, tmp_path / "c", out, 16, capsys) == {"rows": 4, "cached": 2, "out": out}
    assert [json.loads(line)["id"] for line in (tmp_path / "cached.jsonl").read_text().splitlines()] == ["r0", "r3"]
    # another truncation gives other keys: no entry matches
    assert _run(tmp_path, tmp_path / "c", out, 64, capsys)["cached"] == 0
    assert (tmp_path / "cached.jsonl").read_text() == ""


def test_refuses_a_folder_without_a_manifest(tmp_path, capsys):
    (tmp_path / "rows.jsonl").write_text("")
    _drafter(tmp_path)
    with pytest.raises(SystemExit, match="has no manifest.json: expected a folder `dlite-hf features` filled"):
        _run(tmp_path, tmp_path / "empty", str(tmp_path / "o.jsonl"), 16, capsys)
