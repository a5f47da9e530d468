"""Regenerated samples as a torch dataset, and the collator that pads them and samples anchor blocks.

An *anchor* at position ``a`` defines one training block: the drafter reads the target's tapped states at ``a - 1``
and the token ``x_a``, and predicts ``x_{a+1} .. x_{a+K}``; one target forward serves every block of a sequence.
Shapes: ``B`` sequences of length ``T``, ``A`` anchors per sequence, ``K`` draft tokens per block.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from ..data.regenerate import TARGET_LABELS
from ..data.stdlib import held_out_row
from ..jsonl import read_jsonl

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100  # transformers' convention: `labels.ne(-100)` counts the items that carry a loss


def _check_positive_int(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} is invalid: expected an int >= 1.")


def _as_batched_mask(mask: torch.Tensor) -> torch.Tensor:
    """``loss_mask``, a ``[T]`` or ``[B, T]`` bool / 0-1 tensor, as ``[B, T]`` bool."""
    if not isinstance(mask, torch.Tensor) or mask.dim() not in (1, 2):
        shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"loss_mask must be a [T] or [B, T] tensor, got {shape}.")
    if mask.dtype != torch.bool:
        if mask.is_floating_point() or mask.is_complex():
            raise ValueError(f"loss_mask must be a bool (or integer 0/1) tensor, got dtype {mask.dtype}.")
        mask = mask != 0
    return mask.unsqueeze(0) if mask.dim() == 1 else mask


def sample_anchors(
    loss_mask: torch.Tensor, num_anchors: int, generator: torch.Generator | None = None, stride: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Up to ``num_anchors`` anchor positions per sequence, uniformly without replacement, among the ``a >= 1`` with
    ``a + 1 < T`` and ``loss_mask[a + 1]``, divisible by ``stride`` (a feature cache keeps the states there alone).

    Returns ``anchors`` ``[B, A]`` long (each row's valid anchors ascending, then padding holding ``min(1, T - 1)``,
    an index safe to gather with) and ``anchor_valid`` ``[B, A]`` bool, False for padding."""
    mask = _as_batched_mask(loss_mask)
    _check_positive_int("num_anchors", num_anchors)
    _check_positive_int("stride", stride)
    batch, seq_len = mask.shape
    device = mask.device

    candidate = torch.zeros_like(mask)
    if seq_len >= 3:
        candidate[:, 1 : seq_len - 1] = mask[:, 2:]  # anchor a is a candidate iff loss_mask[a + 1], 1 <= a <= T-2
    if stride > 1:
        candidate &= (torch.arange(seq_len, device=device) % stride == 0)[None, :]

    # Uniform sampling without replacement = the top-A of i.i.d. uniform keys over the candidates.
    keys = torch.rand((batch, seq_len), generator=generator, device=device)
    keys = torch.where(candidate, keys, torch.full_like(keys, -1.0))
    num_taken = min(num_anchors, seq_len)
    top_keys, top_positions = keys.topk(num_taken, dim=1)
    taken_valid = top_keys >= 0

    pad_value = min(1, seq_len - 1)
    anchors = torch.full((batch, num_anchors), pad_value, dtype=torch.long, device=device)
    anchor_valid = torch.zeros((batch, num_anchors), dtype=torch.bool, device=device)
    anchors[:, :num_taken] = torch.where(taken_valid, top_positions, torch.full_like(top_positions, pad_value))
    anchor_valid[:, :num_taken] = taken_valid

    # Sort valid anchors ascending, padding last: sort on a key that pushes padding past every position.
    order = torch.where(anchor_valid, anchors, torch.full_like(anchors, seq_len)).argsort(dim=1, stable=True)
    return anchors.gather(1, order), anchor_valid.gather(1, order)


def block_labels(
    input_ids: torch.Tensor,
    anchors: torch.Tensor,
    num_draft_tokens: int,
    loss_mask: torch.Tensor,
    anchor_valid: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels of every draft position of every block: ``labels[b, a, i - 1] = input_ids[b, anchors[b, a] + i]``.

    Returns ``labels`` ``[B, A, K]`` long (``IGNORE_INDEX`` where not valid) and ``valid`` ``[B, A, K]`` bool:
    ``anchor + i < T``, ``loss_mask[anchor + i]`` and the anchor valid (``anchor_valid``, optional)."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise ValueError(f"input_ids must be a [B, T] tensor, got {getattr(input_ids, 'shape', type(input_ids))}.")
    batch, seq_len = input_ids.shape
    mask = _as_batched_mask(loss_mask)
    if tuple(mask.shape) != (batch, seq_len):
        raise ValueError(f"loss_mask shape {tuple(mask.shape)} must equal input_ids shape {(batch, seq_len)}.")
    if not isinstance(anchors, torch.Tensor) or anchors.dim() != 2 or anchors.shape[0] != batch:
        raise ValueError(f"anchors must be a [B={batch}, A] tensor, got {getattr(anchors, 'shape', type(anchors))}.")
    _check_positive_int("num_draft_tokens", num_draft_tokens)
    if anchor_valid is not None and tuple(anchor_valid.shape) != tuple(anchors.shape):
        raise ValueError(f"anchor_valid shape {tuple(anchor_valid.shape)} must equal anchors shape {anchors.shape}.")

    offsets = torch.arange(1, num_draft_tokens + 1, device=anchors.device)
    positions = anchors.long().unsqueeze(-1) + offsets  # [B, A, K]
    in_range = (positions >= 0) & (positions < seq_len)
    safe = positions.clamp(0, max(seq_len - 1, 0)).view(batch, -1)  # [B, A*K]
    tokens = input_ids.gather(1, safe).view_as(positions)
    valid = in_range & mask.gather(1, safe).view_as(positions)
    if anchor_valid is not None:
        valid = valid & anchor_valid.bool().unsqueeze(-1)
    return torch.where(valid, tokens, torch.full_like(tokens, IGNORE_INDEX)), valid


class RegeneratedDataset(Dataset):
    """Rows of a `dlite-hf regenerate` or `dlite-hf label-text` JSONL file: `input_ids` and `loss_mask`, truncated
    to `max_length`. A row with `"label_source": "target"` (label-text) is trained on the target's own argmax at
    every position instead of its next tokens; any other `label_source` is refused. Rows whose prompt is a function
    of a module the bench's coding sessions read are dropped (`held_out`: their ids)."""

    def __init__(self, path_or_rows: str | Path | list[dict[str, Any]], max_length: int = 1024):
        rows = read_jsonl(path_or_rows) if isinstance(path_or_rows, (str, Path)) else list(path_or_rows)
        self.rows, self.held_out = [], []
        for index, row in enumerate(rows):
            if held_out_row(str(row.get("id", ""))):
                self.held_out.append(row["id"])
                continue
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
        if self.held_out:
            logger.warning(
                "Dropped %d rows of held-out standard-library modules: %s", len(self.held_out), self.held_out
            )
        if not self.rows:
            raise ValueError("No usable rows: every row is empty or has no response tokens within max_length.")

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return self.rows[index]


@dataclass
class DLiteCollator:
    """Right-pads a batch and samples `num_anchors` anchor blocks per sequence, at positions divisible by
    `anchor_stride`: `input_ids`, `attention_mask` `[B, T]`, `anchors`, `anchor_valid` `[B, A]`, `labels`
    `[B, A, K]` (-100 where invalid: the Trainer counts `num_items_in_batch` from them), `target_labels` `[B]` (rows
    labelled by the target's argmax) and `response_start` `[B]` (each row's first label position, for the cache)."""

    pad_token_id: int
    num_anchors: int
    num_draft_tokens: int
    seed: int = 0
    anchor_stride: int = 1

    def __post_init__(self) -> None:
        self.generator = torch.Generator().manual_seed(self.seed)

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
        anchors, anchor_valid = sample_anchors(loss_mask, self.num_anchors, self.generator, self.anchor_stride)
        first_label = loss_mask.int().argmax(1)  # argmax of a 0/1 row: its first 1 (0 for a row without labels)
        response_start = torch.where(loss_mask.any(1), first_label, torch.full_like(first_label, width))
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
