"""Regeneration (``dlite-hf regenerate``): the target answers the training prompts, so the drafter learns the
target's own distribution. One module per engine, ``transformers`` and ``vllm``; both write the same rows and
share what is here.

Rows: ``{"id", "workload", "input_ids", "loss_mask", "prompt_tokens", "finished"}``, the chat-templated prompt then
the response, the loss mask on the response. They are appended and fsync'ed as they come; a restart skips the ids
already written and cuts a torn last line, so a kill never duplicates or loses a sample."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ...chat_template import chat_prompt_ids


def pending_prompts(
    tokenizer: Any, prompts: list[dict[str, Any]], done: set[str], max_prompt_tokens: int, first_id: str = "{id}"
) -> tuple[list[tuple[str, list[int], str | None]], int]:
    """The prompts still to answer as `(id, chat-templated ids, workload)`, and how many were over
    `max_prompt_tokens`. A prompt is done when `first_id` (its first row's id, e.g. "{id}#0") is in `done`."""
    seen: set[str] = set()
    todo, skipped = [], 0
    for prompt in prompts:
        if prompt["id"] in seen:
            raise ValueError(f"Duplicate prompt id {prompt['id']!r} in the prompt file; ids must be unique.")
        seen.add(prompt["id"])
        if first_id.format(id=prompt["id"]) in done:
            continue
        ids = chat_prompt_ids(tokenizer, prompt["messages"])
        if len(ids) > max_prompt_tokens:
            skipped += 1
            continue
        todo.append((prompt["id"], ids, prompt.get("workload")))
    return todo, skipped


def shard_prompts(prompts: list[dict[str, Any]], index: int, count: int) -> list[dict[str, Any]]:
    """The prompts of shard `index` of `count`: those whose id's CRC-32 is `index` mod `count`, so that N workers
    answer disjoint prompts across any number of resumes."""
    if not 0 <= index < count:
        raise ValueError(f"shard {index}/{count} is invalid: expected I/N with 0 <= I < N, e.g. 0/2 and 1/2.")
    return [p for p in prompts if zlib.crc32(p["id"].encode("utf-8")) % count == index]


def response_row(
    row_id: str, workload: str | None, prompt_ids: list[int], response: list[int], finished: bool
) -> dict[str, Any]:
    """One training row: the prompt's ids followed by the response's, the loss mask on the response."""
    return {
        "id": row_id,
        "workload": workload,
        "input_ids": prompt_ids + response,
        "loss_mask": [0] * len(prompt_ids) + [1] * len(response),
        "prompt_tokens": len(prompt_ids),
        "finished": finished,
    }


class OutputBusyError(RuntimeError):
    """Another process holds the output file's lock (`exclusive_writer`)."""


@contextmanager
def exclusive_writer(out_path: Path) -> Iterator[None]:
    """Hold an exclusive lock (`<out>.lock`) while a job appends to `out_path`; `OutputBusyError` when another process
    holds it (two jobs appending to one file would tear each other's lines)."""
    import fcntl  # POSIX: imported here so that the rest of this module imports anywhere

    lock_path = Path(out_path).with_suffix(".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputBusyError(
                f"Another process is writing {out_path} (it holds {lock_path}); wait for it or stop it, or give this "
                "job its own output file (e.g. one --out per --shard I/N)."
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
