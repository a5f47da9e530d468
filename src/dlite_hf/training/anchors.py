"""Anchor sampling and per-block targets: one target forward serves many draft blocks.

An *anchor* at position ``a`` of a sequence ``x_0 .. x_{T-1}`` defines one training block: the drafter receives the
target's tapped hidden states at position ``a - 1`` and the anchor token ``x_a`` (the block's context), and
predicts ``x_{a+1} .. x_{a+K}`` at its K draft positions. Since the target's states at ``a - 1`` already encode the
prefix ``x_{<a}``, a history-free drafter needs nothing else; the history-aware teacher and the sliding-window
ablations may additionally attend to earlier positions (their mask is built by the model,
`DLiteForSpeculation.forward` with `history_window != 0`).

Shapes: ``B`` sequences of length ``T``, ``A`` anchors per sequence, ``K`` draft tokens per block.
"""

from __future__ import annotations

import torch

__all__ = ["IGNORE_INDEX", "block_labels", "sample_anchors"]

IGNORE_INDEX = -100  # transformers' convention: `labels.ne(-100)` counts the items that carry a loss


def _check_positive_int(name: str, value: int, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r} is invalid: expected an int >= {minimum}.")


def _as_batched_mask(name: str, mask: torch.Tensor) -> torch.Tensor:
    """``[T]`` or ``[B, T]`` bool / 0-1 tensor -> ``[B, T]`` bool."""
    if not isinstance(mask, torch.Tensor) or mask.dim() not in (1, 2):
        shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"{name} must be a [T] or [B, T] tensor, got {shape}.")
    if mask.dtype != torch.bool:
        if mask.is_floating_point() or mask.is_complex():
            raise ValueError(f"{name} must be a bool (or integer 0/1) tensor, got dtype {mask.dtype}.")
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

    Candidates are the positions ``a`` with ``a >= 1`` (the context needs the target's state at ``a - 1``),
    ``a + 1 < T`` and ``loss_mask[a + 1]`` (the first draft label ``x_{a+1}`` carries a loss). Later draft positions
    may run past the sequence or the loss mask; :func:`block_labels` marks those invalid.

    Args:
        loss_mask: ``[T]`` or ``[B, T]`` bool, True where token ``x_t`` is a training label (e.g. response
            tokens, not prompt or padding).
        num_anchors: A, anchors per sequence (>= 1).
        num_draft_tokens: K (>= 1). Validated only: candidates depend on the first label alone, so blocks near the
            end of a response still train their first positions.
        generator: optional ``torch.Generator`` (on ``loss_mask``'s device) for reproducible draws.
        stride: only positions ``a`` divisible by ``stride`` are candidates (>= 1; 1: every position), so that a
            feature cache can keep the target's states at those positions alone.

    Returns:
        ``anchors``: ``[B, A]`` long, each row's valid anchors sorted ascending, followed by padding.
        ``anchor_valid``: ``[B, A]`` bool, False for padding (rows with fewer than A candidates). Padding anchors
        hold ``min(1, T - 1)``, an index that is safe to gather with (``a - 1 >= 0`` when ``T >= 2``); ignore them
        through ``anchor_valid``.
    """
    mask = _as_batched_mask("loss_mask", loss_mask)
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
    ignore_index: int = IGNORE_INDEX,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels of every draft position of every block: ``labels[b, a, i - 1] = input_ids[b, anchors[b, a] + i]``.

    Args:
        input_ids: ``[B, T]`` long.
        anchors: ``[B, A]`` long anchor positions (from :func:`sample_anchors`).
        num_draft_tokens: K (>= 1).
        loss_mask: ``[B, T]`` bool, True where a token is a training label.
        anchor_valid: optional ``[B, A]`` bool; padding anchors give all-invalid blocks.
        ignore_index: value written at invalid positions (-100, so ``labels.ne(-100)`` equals ``valid``).

    Returns:
        ``labels``: ``[B, A, K]`` long, ``ignore_index`` wherever ``valid`` is False.
        ``valid``: ``[B, A, K]`` bool, True iff ``anchor + i < T``, ``loss_mask[anchor + i]`` and the anchor is valid.
    """
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise ValueError(f"input_ids must be a [B, T] tensor, got {getattr(input_ids, 'shape', type(input_ids))}.")
    batch, seq_len = input_ids.shape
    mask = _as_batched_mask("loss_mask", loss_mask)
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
    labels = torch.where(valid, tokens, torch.full_like(tokens, ignore_index))
    return labels, valid
