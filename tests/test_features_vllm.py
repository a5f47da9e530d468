"""`dlite-hf features --engine vllm`, the side that runs here (no vLLM needed): the job matches the trainer's cache
keys and layout, and refusals. The worker itself runs in the vLLM environment: tests_vllm/test_features.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from dlite_hf.data.features.cache import FeatureCache, features_vllm
from dlite_hf.training.data import RegeneratedDataset

PLUGIN = Path(__file__).resolve().parents[1] / "vllm_plugin"


def _rows():
    return [
        {"id": f"r{i}", "input_ids": list(range(1, 20 + i)), "loss_mask": [0] * 8 + [1] * (11 + i)} for i in range(3)
    ]


def _write_job(tmp_path, cache_dir, layers=(0, 2), rows=None, **kwargs):
    """Write the worker's job for tapped `layers` of a "tiny" target, then start the worker."""
    kwargs = {"anchor_stride": 4, "max_length": 16, "python": sys.executable, **kwargs}
    return features_vllm(tmp_path, "tiny", tmp_path, list(layers), rows or _rows(), cache_dir, **kwargs)


def test_the_job_names_the_trainers_cache_keys_and_kept_positions(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(PLUGIN))
    cache_dir = tmp_path / "cache"
    with pytest.raises(RuntimeError, match=r"feature worker exited with status 1 .*run the same command again"):
        _write_job(tmp_path, cache_dir)  # this interpreter has no vLLM
    job = [json.loads(line) for line in (cache_dir / "vllm-job-0of1.jsonl").read_text().splitlines()]
    trainer_cache = FeatureCache(str(cache_dir), "tiny", [0, 2], history_free=True, anchor_stride=4)
    assert trainer_cache.producer == "vllm-bfloat16"
    for row, item in zip(RegeneratedDataset(_rows(), max_length=16).rows, job):
        assert item["input_ids"] == row["input_ids"] and len(item["input_ids"]) == 16  # the trainer's truncation
        first, positions = trainer_cache.kept(16, 8)
        assert item["first"] == first == 7 and item["state_positions"] == positions.tolist() == [7, 11]
        assert item["key"] == f"{trainer_cache.key(torch.tensor(row['input_ids']))}-{first}"


def test_all_positions_writes_the_layout_history_aware_training_reads(tmp_path, monkeypatch):
    """`all_positions=True`: every position's states from position 0, under the keys a history-aware trainer's cache
    (history_free=False) looks up; a history-free trainer reads the same entries (a superset of its layout)."""
    monkeypatch.setenv("PYTHONPATH", str(PLUGIN))
    cache_dir = tmp_path / "cache"
    with pytest.raises(RuntimeError, match="feature worker exited"):
        _write_job(tmp_path, cache_dir, all_positions=True)
    job = [json.loads(line) for line in (cache_dir / "vllm-job-0of1.jsonl").read_text().splitlines()]
    trainer_cache = FeatureCache(str(cache_dir), "tiny", [0, 2], history_free=False)
    for row, item in zip(RegeneratedDataset(_rows(), max_length=16).rows, job):
        assert item["first"] == 0 and item["state_positions"] == list(range(16))
        assert item["key"] == trainer_cache.row_entry(row["input_ids"], row["loss_mask"].index(1))[0]
    assert not FeatureCache(str(cache_dir), "tiny", [0, 2], history_free=True, anchor_stride=4).history_free


def test_shards_split_the_rows_into_their_own_jobs(tmp_path, monkeypatch):
    """Two workers on one cache: disjoint rows whose union is every row, each in a job file of its own."""
    monkeypatch.setenv("PYTHONPATH", str(PLUGIN))
    rows = [
        {"id": f"r{i}", "input_ids": list(range(1, 12 + i)), "loss_mask": [0] * 4 + [1] * (7 + i)} for i in range(5)
    ]
    jobs = []
    for index in (0, 1):
        with pytest.raises(RuntimeError, match="feature worker exited"):  # this interpreter has no vLLM
            _write_job(tmp_path, tmp_path / "c", [0], rows, anchor_stride=1, max_length=32, shard=(index, 2))
        lines = (tmp_path / "c" / f"vllm-job-{index}of2.jsonl").read_text().splitlines()
        jobs.append([json.loads(line)["input_ids"] for line in lines])
    assert [len(job) for job in jobs] == [3, 2]
    assert sorted(map(len, jobs[0] + jobs[1])) == [len(row["input_ids"]) for row in rows]
    with pytest.raises(ValueError, match=r"shard 2/2 is invalid: expected I/N with 0 <= I < N"):
        _write_job(tmp_path, tmp_path / "c", [0], rows, shard=(2, 2))


def test_refusals_name_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"No vLLM environment at .*make vllm"):
        _write_job(tmp_path, tmp_path / "c", python=tmp_path / "nope")
    FeatureCache(str(tmp_path / "hf"), "tiny", [0], history_free=True, producer="transformers-float32")
    with pytest.raises(
        ValueError, match=r"from transformers-float32 of layers \[0\]; this pass writes vllm-bf.*folder"
    ):
        _write_job(tmp_path, tmp_path / "hf", [0], anchor_stride=1, max_length=1024)
    FeatureCache(
        str(tmp_path / "wide"), "tiny", [0, 1, 2], history_free=True, anchor_stride=4, producer="vllm-bfloat16"
    )
    with pytest.raises(
        ValueError,
        match=r"vllm-bfloat16 of layers \[0, 1, 2\]; .* the --drafter's layers \[0, 2\]. Use another folder",
    ):
        _write_job(tmp_path, tmp_path / "wide")  # a subset's reader, but the worker would write 2 of 3 layers
    wide = FeatureCache(str(tmp_path / "wide"), "tiny", [0, 2], history_free=True, anchor_stride=4)
    for row in RegeneratedDataset(_rows(), max_length=16).rows:  # every entry there: nothing to write, no refusal
        wide._write(wide.row_entry(row["input_ids"], 8)[0], {"final": torch.zeros(1)})
    assert _write_job(tmp_path, tmp_path / "wide")["already_cached"] == 3


def test_the_cli_refuses_a_history_drafter_and_bad_numbers(tmp_path):
    from tiny_models import make_drafter, make_tiny_target

    from dlite_hf.cli import main

    folder = tmp_path / "teacher"
    make_drafter(make_tiny_target(), history_window=-1).save_pretrained(folder)
    base = ["features", "--rows", str(tmp_path / "rows.jsonl"), "--cache", str(tmp_path / "c"), "--drafter"]
    with pytest.raises(SystemExit, match=r"attends to history \(history_window=-1\).*Add --all-positions"):
        main([*base, str(folder)])
    with pytest.raises(SystemExit, match=r"--anchor-stride 0 is invalid: expected an integer >= 1"):
        main([*base, str(folder), "--anchor-stride", "0"])
    with pytest.raises(SystemExit, match=r"--shard '1/1' is invalid: expected I/N with 0 <= I < N"):
        main([*base, str(folder), "--shard", "1/1"])


@pytest.mark.parametrize(
    ("native", "flag", "expected"),
    [
        (True, None, "bfloat16"),
        (False, None, "float32"),
        (False, "bfloat16", "bfloat16"),
        (True, "float32", "float32"),
    ],
)
def test_the_cli_runs_vllm_in_the_machines_fastest_dtype_unless_told(tmp_path, monkeypatch, native, flag, expected):
    """`--dtype fastest` (the default): bfloat16 where the machine computes it natively, float32 where vLLM would
    emulate it; an explicit `--dtype` is passed as given."""
    from tiny_models import make_drafter, make_tiny_target

    from dlite_hf import defaults
    from dlite_hf.cli import main
    from dlite_hf.data.features import cache as module

    target = make_tiny_target()
    target.save_pretrained(tmp_path / "target")
    make_drafter(target).save_pretrained(tmp_path / "drafter")
    seen = {}
    monkeypatch.setattr(defaults, "native_bfloat16", lambda device="cpu": native)
    monkeypatch.setattr(module, "features_vllm", lambda *args, **kwargs: seen.update(kwargs) or {"written": 0})
    argv = [
        "features",
        "--rows",
        str(tmp_path / "rows.jsonl"),
        "--cache",
        str(tmp_path / "c"),
        "--drafter",
        str(tmp_path / "drafter"),
        "--target",
        str(tmp_path / "target"),
    ]
    assert main([*argv, *(["--dtype", flag] if flag else [])]) == 0
    assert seen["dtype"] == expected
