"""Training rows: the target's answers to the training prompts (``dlite-hf regenerate``), with transformers'
``generate()`` (:func:`regenerate`) or vLLM in its own environment (:func:`regenerate_vllm`), and request + reference
reply rows labelled by the target in training (``dlite-hf label-text``, :func:`label_text`).

Rows (:func:`response_row`) are appended and fsync'ed as they come; a restart skips the ids already written and cuts
a torn last line, so a kill never duplicates or loses a sample."""

from __future__ import annotations

import json
import os
import random
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..chat_template import chat_prompt_ids, token_ids
from ..jsonl import completed_ids, write_jsonl
from .vllm_worker import require_python, run_worker, worker_command


def pending_prompts(
    tokenizer: Any, prompts: list[dict[str, Any]], done: set[str], max_prompt_tokens: int, first_id: str = "{id}"
) -> tuple[list[tuple[str, list[int], str | None]], int]:
    """The prompts still to answer as `(id, chat-templated ids, workload)`, and how many were over
    `max_prompt_tokens`; done when `first_id` (its first row's id, e.g. "{id}#0") is in `done`."""
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
    """The prompts whose id's CRC-32 is `index` mod `count`: N workers answer disjoint prompts across resumes."""
    if not 0 <= index < count:
        raise ValueError(f"shard {index}/{count} is invalid: expected I/N with 0 <= I < N, e.g. 0/2 and 1/2.")
    return [p for p in prompts if zlib.crc32(p["id"].encode("utf-8")) % count == index]


def response_row(
    row_id: str, workload: str | None, prompt_ids: list[int], response: list[int], **extra: Any
) -> dict[str, Any]:
    """One training row: the prompt's ids then the response's, the loss mask on the response, then `extra`."""
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
    """Hold a lock (`<out>.lock`) while a job appends to `out_path`: two jobs would tear each other's lines."""
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
    """Token ids of a whole conversation and the length of its prompt, ``messages[:-1]`` with the generation prompt."""
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
    """Append one row per item (request + reference reply) to ``out_path``, cut to ``max_tokens``; returns counts.
    Items with fewer than ``min_reply_tokens`` reply tokens left, or already there (by id), are skipped."""
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
                raise ValueError(f"Text item {number} needs an `id` string and a `messages` list, got {item!r:.160}.")
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


def regenerate(
    model: Any,
    tokenizer: Any,
    prompts: list[dict[str, Any]],
    out_path: str | Path,
    max_new_tokens: int = 256,
    max_prompt_tokens: int = 1024,
    batch_size: int = 8,
    do_sample: bool = False,
    temperature: float = 0.7,
    top_p: float = 0.9,
    seed: int = 0,
    progress: bool = True,
    skip_ids: frozenset[str] | set[str] = frozenset(),
) -> dict[str, int]:
    """Append the target's responses to `prompts` to `out_path` (JSONL, locked meanwhile) with transformers, batches
    of prompts of similar length left-padded; returns counts. Prompts over `max_prompt_tokens` are skipped (counted),
    and so are ids in `skip_ids` (rows already shipped)."""
    import torch
    from tqdm.auto import tqdm

    if batch_size < 1 or max_new_tokens < 1 or max_prompt_tokens < 1:
        raise ValueError(
            f"batch_size={batch_size}, max_new_tokens={max_new_tokens}, max_prompt_tokens={max_prompt_tokens}: "
            "all must be >= 1."
        )
    out_path = Path(out_path)
    with exclusive_writer(out_path):
        done = completed_ids(out_path) | set(skip_ids)
        todo, skipped = pending_prompts(tokenizer, prompts, done, max_prompt_tokens)
        todo.sort(key=lambda item: len(item[1]))
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        sampling = {"temperature": temperature, "top_p": top_p} if do_sample else {}  # empty: greedy
        model.eval()
        bar = tqdm(total=len(todo), desc="regenerate", unit="prompt", disable=not progress)
        with bar, open(out_path, "a", encoding="utf-8") as handle:
            for number, start in enumerate(range(0, len(todo), batch_size)):
                batch = todo[start : start + batch_size]
                torch.manual_seed(seed + number)
                rows = _answer(model, batch, pad_id, max_new_tokens, sampling)
                handle.write("".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows))
                handle.flush()
                os.fsync(handle.fileno())
                bar.update(len(batch))
    return {"written": len(todo), "already_done": len(done & {p["id"] for p in prompts}), "skipped_too_long": skipped}


def _answer(
    model: Any, batch: list[tuple[str, list[int], str | None]], pad_id: int, max_new_tokens: int, sampling: dict
) -> list[dict[str, Any]]:
    """One `generate()` over `batch`, left-padded; each response is cut after its first end-of-sequence token."""
    import torch

    width = max(len(ids) for _, ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (_, ids, _) in enumerate(batch):
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        attention[row, width - len(ids) :] = 1
    output = model.generate(
        input_ids=input_ids.to(model.device),
        attention_mask=attention.to(model.device),
        max_new_tokens=max_new_tokens,
        do_sample=bool(sampling),
        pad_token_id=pad_id,
        **sampling,
    )
    eos = model.generation_config.eos_token_id  # None, an id or a list of ids
    eos_ids = {int(e) for e in ((eos,) if isinstance(eos, int) else eos or ())}
    rows = []
    for row, (prompt_id, ids, workload) in enumerate(batch):
        response = output[row, width:].tolist()
        end = next((i for i, token in enumerate(response) if token in eos_ids), None)
        if end is not None:
            response = response[: end + 1]
        rows.append(response_row(prompt_id, workload, ids, response, finished=end is not None))
    return rows


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
    skipped ones. The prompts are templated here (the same ids as :func:`regenerate`) and handed to the worker as a
    job file; it fsyncs rows chunk by chunk. `samples` = 0 is greedy, N > 0 writes N sampled responses per prompt
    (ids `<id>#0` ..); ids in `skip_ids` (rows already shipped) count as done."""
    python = require_python(python, "vLLM runs in an environment of its own; or use --engine transformers")
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
        summary = run_worker(worker_command(python, "regenerate", options), summary_path, "worker", "Rows")
        job.unlink(missing_ok=True)
    return {
        **summary,
        "already_done": len(done) - len(shipped),
        "already_shipped": len(shipped),
        "skipped_too_long": skipped,
        "todo": len(todo),
    }
