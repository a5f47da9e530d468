"""Training metrics of a DLite drafter (no gradients): top-1 agreement with the target, 1 - TV (the expected
acceptance of a draft position under speculative sampling) and the expected acceptance length they imply. Pure
functions of logits, as the losses in `losses.py` are."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .losses import (
    DEFAULT_CHUNK_SIZE,
    _acceptance,
    _check_block_tensor,
    _check_inputs,
    _l1_rows,
    _l1_support_rows,
    _masked_mean_over_blocks,
)

__all__ = [
    "expected_acceptance_length",
    "one_minus_tv",
    "one_minus_tv_on_support",
    "top1_agreement",
    "top1_agreement_from_ids",
]


@torch.no_grad()
def top1_agreement(p_logits: torch.Tensor, q_logits: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Per-position fraction of valid blocks where ``argmax q == argmax p`` (greedy acceptance proxy).

    Args:
        p_logits: ``[N, K, V]`` teacher / target logits.
        q_logits: ``[N, K, V]`` student logits.
        valid: ``[N, K]`` bool.

    Returns:
        ``[K]`` float32 in [0, 1]; NaN for a position with no valid block.
    """
    _check_inputs(q_logits, valid, p_logits=p_logits)
    agree = p_logits.argmax(dim=-1) == q_logits.argmax(dim=-1)
    return _masked_mean_over_blocks(agree, valid)


@torch.no_grad()
def top1_agreement_from_ids(p_top1: torch.Tensor, q_top1: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """:func:`top1_agreement` from the argmax token ids ``[N, K]`` (when the full logits were never built)."""
    _check_block_tensor("valid", valid, 2)
    if p_top1.shape != valid.shape or q_top1.shape != valid.shape:
        raise ValueError(
            f"p_top1 {tuple(p_top1.shape)}, q_top1 {tuple(q_top1.shape)} and valid {tuple(valid.shape)} must all "
            "be [N, K]."
        )
    return _masked_mean_over_blocks(p_top1 == q_top1, valid)


@torch.no_grad()
def one_minus_tv_on_support(
    p_log_probs: torch.Tensor,
    q_logits: torch.Tensor,
    valid: torch.Tensor,
    chunk_size: int | None = DEFAULT_CHUNK_SIZE,
) -> torch.Tensor:
    """:func:`one_minus_tv` for a student on a token subset S; arguments as :func:`weighted_l1_on_support`."""
    return _acceptance(_l1_support_rows, p_log_probs, q_logits, valid, chunk_size)


@torch.no_grad()
def one_minus_tv(
    p_logits: torch.Tensor,
    q_logits: torch.Tensor,
    valid: torch.Tensor,
    chunk_size: int | None = DEFAULT_CHUNK_SIZE,
) -> torch.Tensor:
    r"""Per-position mean of :math:`1 - \tfrac12 \|p - q\|_1 = \sum_v \min(p(v), q(v))`.

    This is the probability that speculative sampling accepts a token drawn from ``q`` when the verifier's
    distribution is ``p``.

    Args:
        p_logits: ``[N, K, V]`` target logits.
        q_logits: ``[N, K, V]`` student logits.
        valid: ``[N, K]`` bool.
        chunk_size: anchor blocks per chunk (``None``: one chunk).

    Returns:
        ``[K]`` float32 in [0, 1]; NaN for a position with no valid block.
    """
    return _acceptance(_l1_rows, p_logits, q_logits, valid, chunk_size)


def expected_acceptance_length(per_position_accept: torch.Tensor | Sequence[float]) -> float:
    r"""Expected tokens per verification round, :math:`\tau \approx 1 + \sum_{k=1}^{K} \prod_{j \le k} a_j`.

    The leading 1 is the token the target always contributes (the correction or bonus token); draft ``k`` is kept
    only if drafts ``1..k`` are all accepted.

    Approximation: ``a_j`` is read as the *conditional* acceptance rate of position ``j`` given that positions
    ``< j`` were accepted. Training measures ``a_j`` with the target's own tokens as the block's prefix, which is
    exactly the accepted path, so this reading is natural; but the rates are averaged over blocks before the
    product is taken (``E[prod] != prod E`` when acceptances correlate across positions), so the result is a
    proxy for tau, not an unbiased estimate.

    Args:
        per_position_accept: ``[K]`` rates in [0, 1] (e.g. :func:`top1_agreement` or :func:`one_minus_tv`).

    Returns:
        A float in ``[1, K + 1]``; NaN if any rate is NaN (a position with no data).
    """
    rates = torch.as_tensor(per_position_accept, dtype=torch.float64).detach().cpu()
    if rates.dim() != 1 or rates.numel() == 0:
        raise ValueError(
            f"per_position_accept must be a non-empty 1-D sequence of rates, got shape {tuple(rates.shape)}."
        )
    if torch.isnan(rates).any():
        return float("nan")
    if (rates < 0).any() or (rates > 1).any():
        raise ValueError(f"per_position_accept={rates.tolist()} is invalid: every rate must lie in [0, 1].")
    return float(1.0 + torch.cumprod(rates, dim=0).sum())
