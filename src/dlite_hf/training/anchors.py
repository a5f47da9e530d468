"""Anchor sampling and per-block labels: one target forward serves many draft blocks.

An *anchor* at position ``a`` defines one training block: the drafter reads the target's tapped states at ``a - 1``
and the token ``x_a``, and predicts ``x_{a+1} .. x_{a+K}``. Shapes: ``B`` sequences of length ``T``, ``A`` anchors
per sequence, ``K`` draft tokens per block.
"""

from __future__ import annotations

import torch

__all__ = ["IGNORE_INDEX", "block_labels", "sample_anchors"]

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
    loss_mask: torch.Tensor,
    num_anchors: int,
    num_draft_tokens: int,
    generator: torch.Generator | None = None,
    stride: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw up to ``num_anchors`` anchor positions per sequence, uniformly and without replacement.

    Candidates are the positions ``a >= 1`` (the context is the target's state at ``a - 1``) with ``a + 1 < T`` and
    ``loss_mask[a + 1]`` (the first label carries a loss), divisible by ``stride`` (so that a feature cache can keep
    the states there alone). Later draft positions may run past the sequence or the mask: :func:`block_labels`
    marks those invalid. ``loss_mask`` is ``[T]`` or ``[B, T]``; ``num_draft_tokens`` is validated only.

    Returns ``anchors`` ``[B, A]`` long (each row's valid anchors ascending, then padding holding ``min(1, T - 1)``,
    an index safe to gather with) and ``anchor_valid`` ``[B, A]`` bool, False for padding.
    """
    mask = _as_batched_mask(loss_mask)
    _check_positive_int("num_anchors", num_anchors)
    _check_positive_int("num_draft_tokens", num_draft_tokens)
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
    sort_key = torch.where(anchor_valid, anchors, torch.full_like(anchors, seq_len))
    order = sort_key.argsort(dim=1, stable=True)
    return anchors.gather(1, order), anchor_valid.gather(1, order)


def block_labels(
    input_ids: torch.Tensor,
    anchors: torch.Tensor,
    num_draft_tokens: int,
    loss_mask: torch.Tensor,
    anchor_valid: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels of every draft position of every block: ``labels[b, a, i - 1] = input_ids[b, anchors[b, a] + i]``.

    Returns ``labels`` ``[B, A, K]`` long (``IGNORE_INDEX`` where not valid, so ``labels.ne(-100)`` equals
    ``valid``) and ``valid`` ``[B, A, K]`` bool: ``anchor + i < T``, ``loss_mask[anchor + i]`` and the anchor valid
    (``anchor_valid``, optional).
    """
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
    labels = torch.where(valid, tokens, torch.full_like(tokens, IGNORE_INDEX))
    return labels, valid
