"""Regeneration with transformers' `generate()` in this environment (`dlite-hf regenerate --engine transformers`):
batches of prompts of similar length (left padding), each batch's rows appended and fsync'ed at once."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from ...jsonl import completed_ids
from . import exclusive_writer, pending_prompts, response_row


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
    """Append the target's responses to `prompts` to `out_path` (JSONL, locked meanwhile); returns counts.

    Prompts over `max_prompt_tokens` are skipped (counted), and so are ids in `skip_ids` (rows already shipped)."""
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
    already = len(done & {p["id"] for p in prompts})
    return {"written": len(todo), "already_done": already, "skipped_too_long": skipped}


def _answer(
    model: Any, batch: list[tuple[str, list[int], str | None]], pad_id: int, max_new_tokens: int, sampling: dict
) -> list[dict[str, Any]]:
    """One `generate()` over `batch`, left-padded; each response is cut after its first end-of-sequence token."""
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
        end = next((i for i, token in enumerate(response) if token in eos_ids), None)
        if end is not None:
            response = response[: end + 1]
        rows.append(response_row(prompt_id, workload, ids, response, finished=end is not None))
    return rows
