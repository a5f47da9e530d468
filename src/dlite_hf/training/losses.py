r"""Training losses of DLite and the acceptance proxies logged beside them: pure functions of logits, labels, masks
and weights.

Shapes: ``N`` anchor blocks, ``K`` draft positions, ``V`` vocabulary. ``q_logits`` (the student) and ``p_logits``
(the history-aware teacher's :math:`p^H` in warm-up, the target's :math:`p^T` in the stable stage) are ``[N, K, V]``;
``labels`` ``[N, K]`` long; ``valid`` ``[N, K]`` bool (False past the sequence, outside the loss mask, or for a
padding anchor); ``weights`` ``[K]``. Per position: cross-entropy, forward KL, or the L1 distance
:math:`\sum_v |p - q| \in [0, 2]` (the paper's :math:`L_{TV}`), reduced as :math:`L = \frac{1}{Z} \sum_{valid} w_i
\ell_{n,i}` with ``Z = max(1, num_items_in_batch)`` (else the valid count), so micro-batch losses with the global
``num_items_in_batch`` sum to the full-batch loss. Divergences run ``chunk_size`` blocks at a time (:func:`_chunked`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

POSITION_WEIGHT_FORMS = ("divide", "multiply")
DEFAULT_CHUNK_SIZE = 8  # anchor blocks per chunk: one float32 [8, 7, 152k] tensor is ~34 MB

NumItems = int | torch.Tensor | None


def position_weights(
    num_positions: int,
    gamma: float = 4.0,
    form: str = "divide",
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    r"""``[K]`` weights of the draft positions, ``w_1 = 1``: :math:`\exp(-(i - 1) / \gamma)` for ``form="divide"``
    (DFlash style), :math:`\exp(-(i - 1) \gamma)` for ``"multiply"`` (the paper's literal formula)."""
    if isinstance(num_positions, bool) or not isinstance(num_positions, int) or num_positions < 1:
        raise ValueError(f"num_positions={num_positions!r} is invalid: expected an int >= 1.")
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not math.isfinite(gamma) or gamma <= 0:
        raise ValueError(f"gamma={gamma!r} is invalid: expected a finite number > 0.")
    if form not in POSITION_WEIGHT_FORMS:
        raise ValueError(f"form={form!r} is invalid: expected one of {POSITION_WEIGHT_FORMS}.")
    offsets = torch.arange(num_positions, device=device, dtype=torch.float64)  # i - 1
    return torch.exp(-offsets / gamma if form == "divide" else -offsets * gamma).to(dtype)


def _shape(tensor: Any) -> Any:
    return tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__


def _check_inputs(
    q_logits: torch.Tensor,
    valid: torch.Tensor,
    weights: torch.Tensor | None = None,
    p_logits: torch.Tensor | None = None,
    labels: torch.Tensor | None = None,
) -> None:
    """Raise ``ValueError`` unless the tensors follow the ``[N, K, V]`` / ``[N, K]`` / ``[K]`` convention."""
    if not isinstance(q_logits, torch.Tensor) or q_logits.dim() != 3:
        raise ValueError(f"q_logits must be a 3-D tensor [N, K, V], got {_shape(q_logits)}.")
    n, k, v = q_logits.shape
    expected = (
        ("p_logits", p_logits, (n, k, v), None),
        ("valid", valid, (n, k), torch.bool),
        ("labels", labels, (n, k), torch.long),
        ("weights", weights, (k,), None),
    )
    for name, tensor, shape, dtype in expected:
        if tensor is not None and _shape(tensor) != shape:
            raise ValueError(
                f"{name} must have shape {shape} (q_logits is [N, K, V] = {(n, k, v)}), got {_shape(tensor)}."
            )
        if tensor is not None and dtype is not None and tensor.dtype != dtype:
            raise ValueError(f"{name} must be a {dtype} tensor, got dtype {tensor.dtype}.")


def _chunked(fn: Callable[..., torch.Tensor], tensors: Sequence[torch.Tensor], chunk_size: int | None) -> torch.Tensor:
    """Apply a row-wise ``fn`` (``[n, K, ...] -> [n, K]``) to ``chunk_size`` rows at a time; under autograd each
    chunk is checkpointed, so its float32 intermediates are recomputed in the backward pass instead of kept."""
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size={chunk_size!r} is invalid: expected None (no chunking) or an int >= 1.")
    if chunk_size is None or tensors[0].shape[0] <= chunk_size:
        return fn(*tensors)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    outputs = [
        checkpoint(fn, *chunk, use_reentrant=False, preserve_rng_state=False) if needs_grad else fn(*chunk)
        for chunk in zip(*(torch.split(t, chunk_size, dim=0) for t in tensors))
    ]
    return torch.cat(outputs, dim=0)


def _cross_entropy_rows(q_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``[n, K, V], [n, K] -> [n, K]``: ``-log softmax(q)[label]`` in float32."""
    n, k, v = q_logits.shape
    return F.cross_entropy(q_logits.float().reshape(n * k, v), labels.reshape(n * k), reduction="none").view(n, k)


def _forward_kl_rows(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """``[n, K, V] x2 -> [n, K]``: ``sum_v p (log p - log q)`` in float32, with ``0 log 0 = 0``."""
    log_p = p_logits.float().log_softmax(dim=-1)
    log_q = q_logits.float().log_softmax(dim=-1)
    p = log_p.exp()
    return torch.where(p > 0, p * (log_p - log_q), torch.zeros((), dtype=p.dtype, device=p.device)).sum(dim=-1)


def _l1_rows(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """``[n, K, V] x2 -> [n, K]``: ``sum_v |p - q|`` in float32, in [0, 2]."""
    return (p_logits.float().softmax(dim=-1) - q_logits.float().softmax(dim=-1)).abs().sum(dim=-1)


def _l1_support_rows(p_log_probs: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """``[n, K, S] x2 -> [n, K]``: the whole vocabulary's ``sum_v |p - q|`` for a ``q`` on the support S, from the
    full-vocabulary log-probabilities of S's tokens: off S ``q = 0``, adding ``1 - sum_S p`` (clamped at 0)."""
    p = p_log_probs.float().exp()
    return (p - q_logits.float().softmax(dim=-1)).abs().sum(dim=-1) + (1.0 - p.sum(dim=-1)).clamp(min=0.0)


def _reduce(
    per_position: torch.Tensor, valid: torch.Tensor, weights: torch.Tensor, num_items_in_batch: NumItems
) -> torch.Tensor:
    """``sum_{valid (n, i)} w_i * loss_{n,i} / Z``; invalid positions are selected out (NaN/inf there is harmless)."""
    items = num_items_in_batch
    number = isinstance(items, (int, float)) and not isinstance(items, bool)
    if not (items is None or number or (isinstance(items, torch.Tensor) and items.numel() == 1)):
        raise ValueError(f"num_items_in_batch={items!r} is invalid: expected None, an int or a 1-element tensor.")
    total = valid.sum() if items is None else torch.as_tensor(items).detach().reshape(())
    w = weights.to(device=per_position.device, dtype=torch.float32)
    zero = torch.zeros((), dtype=torch.float32, device=per_position.device)
    normalizer = total.to(device=valid.device, dtype=torch.float32).clamp(min=1.0)
    return torch.where(valid, per_position * w, zero).sum() / normalizer


def weighted_cross_entropy(
    q_logits: torch.Tensor,
    labels: torch.Tensor,
    valid: torch.Tensor,
    weights: torch.Tensor,
    num_items_in_batch: NumItems = None,
    chunk_size: int | None = DEFAULT_CHUNK_SIZE,
) -> torch.Tensor:
    r"""Position-weighted token cross-entropy :math:`\frac{1}{Z}\sum_{valid} -w_i \log q_{n,i}(y_{n,i})` (0-dim):
    the teacher stage's loss and the stable stage's ``lambda_ce`` term. ``num_items_in_batch``: the valid items of
    all gradient-accumulation micro-batches (None: this batch's)."""
    _check_inputs(q_logits, valid, weights=weights, labels=labels)
    safe_labels = torch.where(valid, labels, torch.zeros_like(labels))
    per_position = _chunked(_cross_entropy_rows, (q_logits, safe_labels), chunk_size)
    return _reduce(per_position, valid, weights, num_items_in_batch)


def _weighted_divergence(rows: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], doc: str) -> Callable:
    """The position-weighted loss ``(p, q_logits, valid, weights, num_items_in_batch=None, chunk_size=8)`` (0-dim)
    of the row-wise divergence ``rows``; ``p`` is detached, the other arguments as :func:`weighted_cross_entropy`."""

    def loss(p, q_logits, valid, weights, num_items_in_batch=None, chunk_size=DEFAULT_CHUNK_SIZE) -> torch.Tensor:
        _check_inputs(q_logits, valid, weights=weights, p_logits=p)
        return _reduce(_chunked(rows, (p.detach(), q_logits), chunk_size), valid, weights, num_items_in_batch)

    loss.__doc__ = doc
    return loss


weighted_forward_kl = _weighted_divergence(
    _forward_kl_rows,
    r"""Position-weighted forward KL :math:`\frac{1}{Z}\sum_{valid} w_i \,\mathrm{KL}(p_{n,i} \| q_{n,i})` (>= 0): the
    warm-up stage's loss, ``p`` the history-aware teacher's logits.""",
)
weighted_l1 = _weighted_divergence(
    _l1_rows,
    r"""Position-weighted L1 distance :math:`\frac{1}{Z}\sum_{valid} w_i \| p_{n,i} - q_{n,i} \|_1`: the stable
    stage's TV term, ``p`` the target's own logits.""",
)
weighted_l1_on_support = _weighted_divergence(
    _l1_support_rows,
    r""":func:`weighted_l1` over the whole vocabulary for a student on a token subset S (the draft vocabulary), with
    every tensor ``[N, K, |S|]`` (~6x less work for SmolLM2 with an 8,192-token S): ``p`` are the target's
    *full-vocabulary* log-probabilities of S's tokens, ``q_logits`` in the same order.""",
)


def _masked_mean_over_blocks(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``[N, K] -> [K]`` float32 mean over the valid blocks of each position; NaN where a position has none."""
    values = values.float()
    total = torch.where(valid, values, torch.zeros((), dtype=values.dtype, device=values.device)).sum(dim=0)
    count = valid.sum(dim=0).to(values.dtype)
    return torch.where(count > 0, total / count.clamp(min=1.0), torch.full_like(total, float("nan")))


# Acceptance proxies (logging only, no gradients): top-1 agreement with the target, 1 - TV (the expected acceptance
# of a draft position under speculative sampling) and the expected acceptance length they imply.


@torch.no_grad()
def top1_agreement_from_ids(p_top1: torch.Tensor, q_top1: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``[K]`` share of valid blocks with ``q_top1 == p_top1`` (greedy acceptance), from the argmax token ids
    ``[N, K]`` (the full logits are never built); NaN where none is valid."""
    if valid.dim() != 2 or p_top1.shape != valid.shape or q_top1.shape != valid.shape:
        shapes = f"p_top1 {tuple(p_top1.shape)}, q_top1 {tuple(q_top1.shape)} and valid {tuple(valid.shape)}"
        raise ValueError(f"{shapes} must all be [N, K].")
    return _masked_mean_over_blocks(p_top1 == q_top1, valid)


def _acceptance_proxy(rows: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], doc: str) -> Callable:
    """The ``[K]`` acceptance proxy ``(p, q_logits, valid, chunk_size=8)``: the mean over the valid blocks of
    ``1 - rows / 2`` (NaN for a position with no valid block)."""

    @torch.no_grad()
    def proxy(p, q_logits, valid, chunk_size=DEFAULT_CHUNK_SIZE) -> torch.Tensor:
        _check_inputs(q_logits, valid, p_logits=p)
        return _masked_mean_over_blocks(1.0 - 0.5 * _chunked(rows, (p, q_logits), chunk_size), valid)

    proxy.__doc__ = doc
    return proxy


one_minus_tv = _acceptance_proxy(
    _l1_rows,
    r""":math:`1 - \tfrac12 \|p - q\|_1 = \sum_v \min(p(v), q(v))` per position: the probability that speculative
    sampling accepts a token drawn from ``q`` when the verifier's distribution is ``p`` (logits both).""",
)
one_minus_tv_on_support = _acceptance_proxy(
    _l1_support_rows,
    ":func:`one_minus_tv` for a student on a token subset S; ``p`` as :func:`weighted_l1_on_support`.",
)


def expected_acceptance_length(per_position_accept: torch.Tensor | Sequence[float]) -> float:
    r"""Expected tokens per verification round, :math:`\tau \approx 1 + \sum_{k=1}^{K} \prod_{j \le k} a_j`, in
    ``[1, K + 1]`` (NaN if a rate is NaN): the target's own token plus draft k, kept if drafts 1..k are accepted.

    A proxy, not an unbiased estimate: ``a_j`` (measured with the target's own tokens as the prefix) is read as the
    conditional rate given positions ``< j`` accepted, and rates are averaged over blocks before the product."""
    rates = torch.as_tensor(per_position_accept, dtype=torch.float64).detach().cpu()
    if rates.dim() != 1 or rates.numel() == 0:
        raise ValueError(f"per_position_accept must be a non-empty 1-D sequence, got shape {tuple(rates.shape)}.")
    if torch.isnan(rates).any():
        return float("nan")
    if (rates < 0).any() or (rates > 1).any():
        raise ValueError(f"per_position_accept={rates.tolist()} is invalid: every rate must lie in [0, 1].")
    return float(1.0 + torch.cumprod(rates, dim=0).sum())
