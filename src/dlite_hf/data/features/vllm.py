"""`dlite-hf features`: fill a feature cache with vLLM's forward of the target, several times faster than
transformers' here.

This side reads the training rows as the trainer will (`RegeneratedDataset`), opens the cache with the trainer's
manifest and, per sequence, its key and kept positions (`FeatureCache.row_entry`), and hands them to the vLLM
environment's worker (`dlite_hf_vllm.workers.features`) as a job file. A later `dlite-hf train` with the same
`--feature_cache_dir`, `--anchor_stride` and `--max_length` reads these entries instead of running the target."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...training.data import RegeneratedDataset
from ..vllm_worker import require_python, run_worker, worker_command
from .cache import FeatureCache


def features_vllm(
    target_dir: str | Path,
    target_name: str,
    drafter_dir: str | Path,
    layer_ids: list[int],
    rows: str | Path | list[dict[str, Any]],
    cache_dir: str | Path,
    anchor_stride: int = 1,
    max_length: int = 1024,
    dtype: str = "bfloat16",
    max_num_seqs: int = 16,
    enforce_eager: bool = False,
    python: str | Path | None = None,
    shard: tuple[int, int] = (0, 1),
    all_positions: bool = False,
) -> dict[str, Any]:
    """Write the cache entries of `rows` that `cache_dir` lacks; returns the worker's counts. `target_name` is the
    name the trainer's target reports (`config._name_or_path`), `shard=(i, n)` takes every n-th sequence from the
    i-th on, and `all_positions` writes every position (the history-aware layout) instead of the history-free one."""
    index, count = shard
    if not 0 <= index < count:
        raise ValueError(f"shard {index}/{count} is invalid: expected I/N with 0 <= I < N, e.g. 0/2 and 1/2.")
    python = require_python(
        python, "without vLLM, `dlite-hf train --feature_cache_dir` fills the cache with transformers' forward"
    )
    dataset = RegeneratedDataset(rows, max_length=max_length)
    cache = FeatureCache(
        str(cache_dir),
        target_name,
        layer_ids,
        history_free=not all_positions,
        anchor_stride=anchor_stride,
        producer=f"vllm-{dtype}",
    )
    if cache.producer != f"vllm-{dtype}":
        raise ValueError(
            f"Feature cache {cache_dir} holds entries from {cache.producer}; vLLM's would mix two forwards in one "
            "cache. Use another folder for vLLM's features."
        )
    job = Path(cache_dir) / f"vllm-job-{index}of{count}.jsonl"
    rows_here = dataset.rows[index::count]
    written, present, longest = 0, 0, 0
    with open(job, "w", encoding="utf-8") as handle:
        for row in rows_here:
            ids = row["input_ids"]
            key, first, positions = cache.row_entry(ids, row["loss_mask"].index(1))
            if cache.has(key):
                present += 1
                continue
            record = {"key": key, "input_ids": ids, "first": first, "state_positions": positions.tolist()}
            handle.write(json.dumps(record, separators=(",", ":")) + "\n")
            written += 1
            longest = max(longest, len(ids))
    summary_path = job.with_suffix(".summary.json")
    if written:
        options = {
            "model": target_dir,
            "drafter": drafter_dir,
            "job": job,
            "cache": cache_dir,
            "dtype": dtype,
            "max-model-len": longest + 2,
            "max-num-seqs": max_num_seqs,
            "summary": summary_path,
        }
        command = worker_command(python, "features", options, *(["enforce-eager"] if enforce_eager else []))
        summary = run_worker(command, summary_path, "feature worker", "Entries")
    else:
        summary = {"todo": 0, "tokens": 0, "missing": 0}
    job.unlink(missing_ok=True)
    return {**summary, "sequences": len(rows_here), "already_cached": present, "producer": cache.producer}
