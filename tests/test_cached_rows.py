"""scripts/cached_rows.py: the rows whose feature-cache entries exist, found by the trainer's own keys."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from dlite_hf.data.features.cache import FeatureCache
from dlite_hf.training.data import RegeneratedDataset

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "cached_rows.py"


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def test_keeps_exactly_the_rows_with_entries_in_order(tmp_path):
    rows = [
        {"id": f"r{i}", "input_ids": list(range(100 * i + 1, 100 * i + 20 + i)), "loss_mask": [0] * 8 + [1] * (11 + i)}
        for i in range(4)
    ]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    cache = FeatureCache(str(tmp_path / "c"), "tiny", [0, 2], history_free=True, anchor_stride=4, producer="vllm-x")
    for row in [RegeneratedDataset(rows, max_length=16).rows[i] for i in (0, 3)]:  # as truncated for training
        first, _ = cache.kept(len(row["input_ids"]), row["loss_mask"].index(1))
        cache._write(cache.entry_key(torch.tensor(row["input_ids"]), first), {"x": torch.zeros(1)})
    out = tmp_path / "cached.jsonl"
    args = ["--rows", tmp_path / "rows.jsonl", "--cache", tmp_path / "c", "--anchor-stride", 4, "--out", out]
    result = _run(*args, "--max-length", 16)
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["r0", "r3"]
    assert json.loads(result.stdout) == {"rows": 4, "cached": 2, "out": str(out)}
    # another truncation gives other keys: no entry matches
    assert _run(*args, "--max-length", 64).returncode == 0 and out.read_text() == ""


def test_refuses_a_folder_without_a_manifest(tmp_path):
    (tmp_path / "rows.jsonl").write_text("")
    rows, out = tmp_path / "rows.jsonl", tmp_path / "o.jsonl"
    result = _run("--rows", rows, "--cache", tmp_path, "--max-length", 16, "--anchor-stride", 4, "--out", out)
    assert (
        result.returncode != 0
        and "has no manifest.json: expected a folder `dlite-hf features` filled" in result.stderr
    )
