"""Regeneration (``dlite-hf regenerate``): the target answers the training prompts, so the drafter learns the
target's own distribution. One module per engine, ``transformers`` and ``vllm``; both write the same rows and
share what is here.

Rows: ``{"id", "workload", "input_ids", "loss_mask", "prompt_tokens", "finished"}``, the chat-templated prompt then
the response, the loss mask on the response. They are appended and fsync'ed as they come; a restart skips the ids
already written and cuts a torn last line, so a kill never duplicates or loses a sample.

Rows from existing text (``dlite-hf label-text``, :func:`label_text`) cost no decoding: a request and a reference
reply, labelled by the target in training. The trainer's teacher-forced target forward gives the target's
distribution at every reply position, and rows with ``"label_source": "target"`` use the target's argmax as the label
there, never the text's next token (:class:`~dlite_hf.training.data.RegeneratedDataset`). They are appended and
resumed the same way, ``{"id", "workload", "input_ids", "loss_mask", "prompt_tokens", "label_source"}``."""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ...chat_template import chat_prompt_ids, token_ids
from ...jsonl import completed_ids


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
    row_id: str, workload: str | None, prompt_ids: list[int], response: list[int], **extra: Any
) -> dict[str, Any]:
    """One training row: the prompt's ids followed by the response's, the loss mask on the response, then `extra`
    (a regenerated row's `finished`, a label-text row's `label_source`)."""
    return {
        "id": row_id,
        "workload": workload,
        "input_ids": prompt_ids + response,
        "loss_mask": [0] * len(prompt_ids) + [1] * len(response),
        "prompt_tokens": len(prompt_ids),
        **extra,
    }


class OutputBusyError(RuntimeError):
    """Another process holds the output file's lock (`exclusive_writer`)."""


@contextmanager
def exclusive_writer(out_path: Path) -> Iterator[None]:
    """Hold an exclusive lock (`<out>.lock`, its folder created) while a job appends to `out_path`; `OutputBusyError`
    when another process holds it (two jobs appending to one file would tear each other's lines)."""
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
        yield  # closing the file releases the lock


# ---------------------------------------------------------------------------------------------- label-text rows
TARGET_LABELS = "target"  # the `label_source` of a row labelled by the target's predictions, not its next tokens


def conversation_ids(tokenizer: Any, messages: list[dict[str, str]]) -> tuple[list[int], int]:
    """Token ids of a whole conversation (chat template) and the length of its prompt part, ``messages[:-1]`` with
    the generation prompt; the rest is the final assistant reply."""
    if not messages or messages[-1].get("role") != "assistant":
        raise ValueError(
            f"A text row must end with the assistant's reply (the text to label); its last role is "
            f"{messages[-1].get('role') if messages else None!r}."
        )
    prompt = chat_prompt_ids(tokenizer, messages[:-1])
    full = token_ids(tokenizer.apply_chat_template(messages, tokenize=True, enable_thinking=False, return_dict=False))
    if full[: len(prompt)] != prompt or len(full) <= len(prompt):
        raise ValueError(
            "The chat template renders the prompt differently inside the whole conversation, so the reply's tokens "
            "cannot be located; use a template whose generation prompt is a prefix of the rendered reply."
        )
    return full, len(prompt)


def label_text(
    tokenizer: Any,
    items: list[dict[str, Any]],
    out_path: str | Path,
    max_tokens: int = 1024,
    min_reply_tokens: int = 16,
) -> dict[str, int]:
    """Append one training row per item (request + reference reply) to ``out_path``, cut to ``max_tokens``; returns
    counts. Items with fewer than ``min_reply_tokens`` reply tokens left, or already there (by id), are skipped."""
    if max_tokens < 2 or min_reply_tokens < 1:
        raise ValueError(f"max_tokens={max_tokens} must be >= 2 and min_reply_tokens={min_reply_tokens} >= 1.")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    done = completed_ids(out_path)
    seen: set[str] = set()
    written = skipped = 0
    with open(out_path, "a", encoding="utf-8") as handle:
        for number, item in enumerate(items, start=1):
            id_ = item.get("id")
            if not isinstance(id_, str) or not isinstance(item.get("messages"), list):
                raise ValueError(
                    f"Text item {number}: expected an `id` string and a `messages` list, got {item!r:.160}."
                )
            if id_ in seen:
                raise ValueError(f"Duplicate text item id {id_!r}; ids must be unique.")
            seen.add(id_)
            if id_ in done:
                continue
            try:
                ids, prompt_tokens = conversation_ids(tokenizer, item["messages"])
            except ValueError as error:
                raise ValueError(f"Text item {id_!r}: {error}") from None
            ids = ids[:max_tokens]
            if len(ids) - prompt_tokens < min_reply_tokens:
                skipped += 1
                continue
            prompt_ids, reply = ids[:prompt_tokens], ids[prompt_tokens:]
            record = response_row(id_, item.get("workload"), prompt_ids, reply, label_source=TARGET_LABELS)
            handle.write(json.dumps(record, separators=(",", ":")) + "\n")
            written += 1
        handle.flush()
        os.fsync(handle.fileno())
    return {"written": written, "already_done": len(done & seen), "skipped_short": skipped}
