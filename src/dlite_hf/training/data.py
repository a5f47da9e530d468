"""Regenerated samples as a torch dataset, and the collator that pads them and samples anchor blocks."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from ..data.text_rows import TARGET_LABELS
from ..jsonl import read_jsonl
from .anchors import block_labels, sample_anchors


class RegeneratedDataset(Dataset):
    """Rows of a `dlite-hf regenerate` or `dlite-hf label-text` JSONL file: `input_ids` and `loss_mask`, truncated
    to `max_length`. A row with `"label_source": "target"` (label-text) is trained on the target's own argmax at
    every position instead of its next tokens; any other `label_source` is refused."""

    def __init__(self, path_or_rows: str | Path | list[dict[str, Any]], max_length: int = 1024):
        rows = read_jsonl(path_or_rows) if isinstance(path_or_rows, (str, Path)) else list(path_or_rows)
        self.rows = []
        for index, row in enumerate(rows):
            if "input_ids" not in row or "loss_mask" not in row or len(row["input_ids"]) != len(row["loss_mask"]):
                raise ValueError(
                    f"Row {index} ({row.get('id', '?')}) has no input_ids/loss_mask of equal length; expected the "
                    "output of `dlite-hf regenerate`."
                )
            source = row.get("label_source", "data")
            if source not in ("data", TARGET_LABELS):
                raise ValueError(
                    f"Row {index} ({row.get('id', '?')}) has label_source={source!r}; expected 'data' (the row's "
                    f"own tokens, as regenerate writes) or {TARGET_LABELS!r} (the target's argmax; label-text)."
                )
            ids, mask = row["input_ids"][:max_length], row["loss_mask"][:max_length]
            if sum(mask[2:]) > 0:  # an anchor needs a position before it and a masked label after it
                self.rows.append({"input_ids": ids, "loss_mask": mask, "target_labels": source == TARGET_LABELS})
        if not self.rows:
            raise ValueError("No usable rows: every row is empty or has no response tokens within max_length.")

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return self.rows[index]


@dataclass
class DLiteCollator:
    """Right-pads a batch and samples `num_anchors` anchor blocks per sequence.

    Returns `input_ids`, `attention_mask` `[B, T]`, `anchors`, `anchor_valid` `[B, A]`, `labels` `[B, A, K]`
    (-100 where invalid), so the Trainer counts `num_items_in_batch` over all gradient-accumulation micro-batches,
    `target_labels` `[B]` (rows whose labels the trainer replaces by the target's argmax) and `response_start`
    `[B]` (each row's first label position; the feature cache keeps nothing a history-free block reads before it).
    Anchors are drawn at positions divisible by `anchor_stride` only.
    """

    pad_token_id: int
    num_anchors: int
    num_draft_tokens: int
    seed: int = 0
    anchor_stride: int = 1

    def __post_init__(self) -> None:
        self.generator = torch.Generator().manual_seed(self.seed)

    def fresh(self) -> DLiteCollator:
        """The same collator with its anchor sampler reseeded (evaluation: the same anchors every time)."""
        return replace(self)

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        width = max(len(f["input_ids"]) for f in features)
        input_ids = torch.full((len(features), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(features), width), dtype=torch.long)
        loss_mask = torch.zeros((len(features), width), dtype=torch.bool)
        for row, feature in enumerate(features):
            n = len(feature["input_ids"])
            input_ids[row, :n] = torch.tensor(feature["input_ids"])
            attention[row, :n] = 1
            loss_mask[row, :n] = torch.tensor(feature["loss_mask"], dtype=torch.bool)
        anchors, anchor_valid = sample_anchors(
            loss_mask, self.num_anchors, self.num_draft_tokens, self.generator, stride=self.anchor_stride
        )
        has_label = loss_mask.any(1)
        first_label = loss_mask.int().argmax(1)  # argmax of a 0/1 row: its first 1 (0 for a row without labels)
        response_start = torch.where(has_label, first_label, torch.full_like(first_label, width))
        labels, _ = block_labels(input_ids, anchors, self.num_draft_tokens, loss_mask, anchor_valid)
        return {
            "input_ids": input_ids,
            "attention_mask": attention,
            "anchors": anchors,
            "anchor_valid": anchor_valid,
            "labels": labels,
            "target_labels": torch.tensor([bool(f.get("target_labels", False)) for f in features]),
            "response_start": response_start,
        }


def response_token_counts(dataset: RegeneratedDataset, vocab_size: int) -> torch.Tensor:
    """How often each token occurs in the responses (loss mask 1), plus a tie-breaker below one count that
    prefers lower ids (BPE ids roughly follow merge order, i.e. corpus frequency) for unseen tokens."""
    counts = torch.zeros(vocab_size, dtype=torch.float64)
    for index, row in enumerate(dataset.rows):
        ids = torch.tensor([t for t, m in zip(row["input_ids"], row["loss_mask"]) if m], dtype=torch.long)
        if not ids.numel():
            continue
        if int(ids.max()) >= vocab_size or int(ids.min()) < 0:
            raise ValueError(
                f"Row {index} has response token ids in [{int(ids.min())}, {int(ids.max())}], outside the drafter's "
                f"vocabulary [0, {vocab_size}): the data was regenerated by a target with another tokenizer. Use "
                "rows regenerated by the drafter's own target (`dlite-hf regenerate --target ...`)."
            )
        counts += torch.bincount(ids, minlength=vocab_size).double()
    return counts + 0.5 * (1.0 - torch.arange(vocab_size, dtype=torch.float64) / vocab_size)
