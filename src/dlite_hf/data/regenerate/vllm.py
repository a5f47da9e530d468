"""Regeneration with vLLM (`dlite-hf regenerate --engine vllm`), in its own environment
(`dlite_hf.data.vllm_worker`): this side tokenizes each prompt with the target's chat template (the same ids as
`--engine transformers`), skips those already answered or too long, and hands the rest to the worker as a job file.
The worker appends rows chunk by chunk with an fsync each, so a kill loses at most one chunk."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from ...jsonl import completed_ids, write_jsonl
from ..vllm_worker import require_python, run_worker, worker_command
from . import exclusive_writer, pending_prompts


def regenerate_vllm(
    model_dir: str | Path,
    tokenizer: Any,
    prompts: list[dict[str, Any]],
    out_path: str | Path,
    max_new_tokens: int = 256,
    max_prompt_tokens: int = 1024,
    samples: int = 0,
    temperature: float = 0.7,
    top_p: float = 0.9,
    seed: int = 0,
    dtype: str = "bfloat16",
    chunk: int = 256,
    python: str | Path | None = None,
    skip_ids: frozenset[str] | set[str] = frozenset(),
) -> dict[str, Any]:
    """Append vLLM's responses to `prompts` to `out_path` (locked meanwhile); returns the worker's counts and the
    skipped ones. `samples` = 0 is greedy, N > 0 writes N sampled responses per prompt (ids `<id>#0` ..); ids in
    `skip_ids` (rows already shipped) count as done."""
    python = require_python(
        python, "`--engine vllm` runs vLLM in an environment of its own; or use --engine transformers"
    )
    if max_new_tokens < 1 or max_prompt_tokens < 1 or chunk < 1 or samples < 0:
        raise ValueError(
            f"max_new_tokens={max_new_tokens}, max_prompt_tokens={max_prompt_tokens}, chunk={chunk}: all must be "
            f">= 1; samples={samples}: expected >= 0 (0 is greedy)."
        )
    out_path = Path(out_path)
    with exclusive_writer(out_path):  # the rows, the job file and the summary are this job's until it ends
        done = completed_ids(out_path)
        shipped = set(skip_ids) - done
        done |= shipped
        first_id = "{id}#0" if samples else "{id}"
        pending, skipped = pending_prompts(tokenizer, prompts, done, max_prompt_tokens, first_id)
        todo = [{"id": i, "workload": workload, "prompt_ids": ids} for i, ids, workload in pending]
        random.Random(seed).shuffle(todo)  # so that every finished chunk covers every domain of the mix
        job = write_jsonl(todo, out_path.with_suffix(".job.jsonl"))
        summary_path = out_path.with_suffix(".summary.json")
        options = {
            "model": model_dir,
            "job": job,
            "out": out_path,
            "dtype": dtype,
            "max-new-tokens": max_new_tokens,
            "max-model-len": max_prompt_tokens + max_new_tokens,
            "chunk": chunk,
            "samples": samples,
            "temperature": temperature,
            "top-p": top_p,
            "seed": seed,
            "summary": summary_path,
        }
        command = worker_command(python, "regenerate", options)
        summary = run_worker(command, summary_path, "worker", "Rows")
        job.unlink(missing_ok=True)
    return {
        **summary,
        "already_done": len(done) - len(shipped),
        "already_shipped": len(shipped),
        "skipped_too_long": skipped,
        "todo": len(todo),
    }
