"""Regeneration with transformers' `generate()` in this environment (`dlite-hf regenerate --engine transformers`).

Batches are formed from prompts of similar length (left padding) to keep padding small; each batch's rows are
appended and fsync'ed at once (the rows and the resume rules: `dlite_hf.data.regenerate`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ...jsonl import completed_ids
from . import exclusive_writer, pending_prompts, response_row

__all__ = ["regenerate"]


def _batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _eos_ids(model: Any) -> set[int]:
    eos = model.generation_config.eos_token_id
    if eos is None:
        return set()
    return {int(eos)} if isinstance(eos, int) else {int(e) for e in eos}


@torch.no_grad()
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
    """Append the target's responses to `prompts` to `out_path` (JSONL); returns counts.

    Prompts longer than `max_prompt_tokens` are skipped (counted in the result), and so are those whose id is in
    `skip_ids` (rows already shipped in the dataset, see `--skip-dataset`). Batches are formed from prompts of
    similar length (left padding) to keep padding small. `out_path` is locked while rows are appended
    (`exclusive_writer`): a second job on the same file raises `OutputBusyError`.
    """
    if batch_size < 1 or max_new_tokens < 1 or max_prompt_tokens < 1:
        raise ValueError(
            f"batch_size={batch_size}, max_new_tokens={max_new_tokens}, max_prompt_tokens={max_prompt_tokens}: "
            "all must be >= 1."
        )
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_writer(out_path):
        done = completed_ids(out_path) | set(skip_ids)
        todo, skipped = pending_prompts(tokenizer, prompts, done, max_prompt_tokens)
        todo.sort(key=lambda item: len(item[1]))
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        sampling = {"temperature": temperature, "top_p": top_p} if do_sample else {}  # empty: greedy
        model.eval()
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(todo), desc="regenerate", unit="prompt")
        with open(out_path, "a", encoding="utf-8") as handle:
            for number, batch in enumerate(_batches(todo, batch_size)):
                torch.manual_seed(seed + number)
                rows = _answer(model, batch, pad_id, max_new_tokens, sampling)
                handle.write("".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows))
                handle.flush()
                os.fsync(handle.fileno())
                if bar is not None:
                    bar.update(len(batch))
        if bar is not None:
            bar.close()
    already = len(done & {p["id"] for p in prompts})
    return {"written": len(todo), "already_done": already, "skipped_too_long": skipped}


def _answer(
    model: Any, batch: list[tuple[str, list[int], str | None]], pad_id: int, max_new_tokens: int, sampling: dict
) -> list[dict[str, Any]]:
    """One `generate()` call over `batch` (left-padded to its longest prompt); its rows, each response cut after the
    first end-of-sequence token (`finished`) or at `max_new_tokens`."""
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
    eos_ids = _eos_ids(model)
    rows = []
    for row, (prompt_id, ids, workload) in enumerate(batch):
        response = output[row, width:].tolist()
        finished = False
        for position, token in enumerate(response):
            if token in eos_ids:
                response, finished = response[: position + 1], True
                break
        rows.append(response_row(prompt_id, workload, ids, response, finished))
    return rows
