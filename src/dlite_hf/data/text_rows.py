"""Training rows from existing text (``dlite-hf label-text``): a request and a reference reply, labelled by the target
in training.

A row costs no decoding: the trainer's teacher-forced target forward gives the target's distribution at every reply
position, and rows with ``"label_source": "target"`` use the target's argmax as the label there, never the text's
next token (:class:`~dlite_hf.training.data.RegeneratedDataset`). Rows: ``{"id", "workload", "input_ids",
"loss_mask", "prompt_tokens", "label_source"}``, appended and resumed like ``regenerate``'s."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..chat_template import chat_prompt_ids, token_ids
from ..jsonl import completed_ids

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
            record = {
                "id": id_,
                "workload": item.get("workload"),
                "input_ids": ids,
                "loss_mask": [0] * prompt_tokens + [1] * (len(ids) - prompt_tokens),
                "prompt_tokens": prompt_tokens,
                "label_source": TARGET_LABELS,
            }
            handle.write(json.dumps(record, separators=(",", ":")) + "\n")
            written += 1
        handle.flush()
        os.fsync(handle.fileno())
    return {"written": written, "already_done": len(done & seen), "skipped_short": skipped}
