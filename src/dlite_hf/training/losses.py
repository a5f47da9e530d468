r"""Training losses of DLite and the acceptance proxies logged next to them.

Everything here is a pure function of logits, labels, masks and weights: no state, no model. Shapes follow one
convention shared with the drafter:

- ``N``: number of anchor blocks in the (micro-)batch, ``K``: draft positions per block (``i = 1..K``),
  ``V``: vocabulary size.
- Student logits ``q_logits``: ``[N, K, V]``. Teacher logits ``p_logits`` (the history-aware teacher's
  :math:`p^H` in the warm-up stage, the target's own :math:`p^T` in the stable stage): ``[N, K, V]``.
- ``labels``: ``[N, K]`` long. ``valid``: ``[N, K]`` bool, ``False`` where the position runs past the sequence,
  is outside the loss mask, or belongs to a padding anchor. ``weights``: ``[K]`` float.

Losses (all per position :math:`(n, i)`, then reduced as below):

- cross-entropy :math:`\ell^{CE}_{n,i} = -\log q_{n,i}(y_{n,i})`;
- forward KL :math:`\ell^{KL}_{n,i} = \mathrm{KL}(p_{n,i} \,\|\, q_{n,i}) = \sum_v p(v) (\log p(v) - \log q(v))`;
- L1 distance :math:`\ell^{L1}_{n,i} = \| p_{n,i} - q_{n,i} \|_1 = \sum_v |p(v) - q(v)| \in [0, 2]`, twice the
  total variation distance (the paper's :math:`L_{TV}` uses the L1 form).

Reduction (the same for the three losses):

.. math::
    L = \frac{1}{Z} \sum_{(n, i)\,:\,\mathrm{valid}_{n,i}} w_i \, \ell_{n,i}, \qquad
    Z = \max(1, \texttt{num\_items\_in\_batch}) \text{ if given, else } \max(1, \#\{\mathrm{valid}\}).

``num_items_in_batch`` is the number of valid ``(n, i)`` items across *all* gradient-accumulation micro-batches
(what :class:`transformers.Trainer` passes to ``compute_loss``), so the micro-batch losses computed with it sum to
the full-batch loss. The weights are not renormalised: position 1 has weight 1 and later positions less.

Memory: ``V`` can be ~150k and ``N * K`` large, so the per-position divergences are computed ``chunk_size`` anchor
blocks at a time, in float32 (``log_softmax`` of a float32 copy of one chunk). When gradients are needed each chunk
runs under activation checkpointing, so only one chunk's ``[chunk_size, K, V]`` intermediates are alive at a time in
the forward and the backward pass; the result equals the unchunked computation. The teacher is always detached: no
gradient flows into ``p_logits``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "POSITION_WEIGHT_FORMS",
    "position_weights",
    "weighted_cross_entropy",
    "weighted_forward_kl",
    "weighted_l1",
    "weighted_l1_on_support",
]

POSITION_WEIGHT_FORMS = ("divide", "multiply")

# Anchor blocks whose full-vocabulary distributions are materialised at once. With K = 7 and V = 152k, one float32
# [8, 7, V] tensor is ~34 MB; a chunk needs a handful of those.
DEFAULT_CHUNK_SIZE = 8


# --------------------------------------------------------------------------------------------------------------------
# Position weights
# --------------------------------------------------------------------------------------------------------------------


def position_weights(
    num_positions: int,
    gamma: float = 4.0,
    form: str = "divide",
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    r"""Exponentially decaying weights of the K draft positions.

    - ``form="divide"`` (default, DFlash style): :math:`w_i = \exp(-(i - 1) / \gamma)`.
    - ``form="multiply"`` (the paper's literal formula): :math:`w_i = \exp(-(i - 1) \gamma)`; with
      :math:`\gamma = 4` positions 2..K get under 2% of position 1's weight.

    Args:
        num_positions: K, the number of draft positions (>= 1).
        gamma: decay constant, finite and > 0.
        form: ``"divide"`` or ``"multiply"``.
        device, dtype: of the returned tensor.

    Returns:
        ``[K]`` tensor with ``w_1 = 1``, decreasing.
    """
    if isinstance(num_positions, bool) or not isinstance(num_positions, int) or num_positions < 1:
        raise ValueError(f"num_positions={num_positions!r} is invalid: expected an int >= 1.")
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not math.isfinite(gamma) or gamma <= 0:
        raise ValueError(f"gamma={gamma!r} is invalid: expected a finite number > 0.")
    if form not in POSITION_WEIGHT_FORMS:
        raise ValueError(f"form={form!r} is invalid: expected one of {POSITION_WEIGHT_FORMS}.")
    offsets = torch.arange(num_positions, device=device, dtype=torch.float64)  # i - 1
    exponent = -offsets / gamma if form == "divide" else -offsets * gamma
    return torch.exp(exponent).to(dtype)


# --------------------------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------------------------


def _check_block_tensor(name: str, tensor: torch.Tensor, ndim: int) -> None:
    if not isinstance(tensor, torch.Tensor) or tensor.dim() != ndim:
        shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        raise ValueError(f"{name} must be a {ndim}-D tensor, got {shape}.")


def _check_inputs(
    q_logits: torch.Tensor,
    valid: torch.Tensor,
    weights: torch.Tensor | None = None,
    p_logits: torch.Tensor | None = None,
    labels: torch.Tensor | None = None,
) -> None:
    """Raise ``ValueError`` unless the shapes follow the ``[N, K, V]`` / ``[N, K]`` / ``[K]`` convention."""
    _check_block_tensor("q_logits", q_logits, 3)
    n, k, _ = q_logits.shape
    if p_logits is not None:
        _check_block_tensor("p_logits", p_logits, 3)
        if p_logits.shape != q_logits.shape:
            raise ValueError(
                f"p_logits shape {tuple(p_logits.shape)} must equal q_logits shape {tuple(q_logits.shape)}."
            )
    _check_block_tensor("valid", valid, 2)
    if tuple(valid.shape) != (n, k):
        raise ValueError(f"valid shape {tuple(valid.shape)} must be [N, K] = {(n, k)}.")
    if valid.dtype != torch.bool:
        raise ValueError(f"valid must be a bool tensor, got dtype {valid.dtype}.")
    if labels is not None:
        _check_block_tensor("labels", labels, 2)
        if tuple(labels.shape) != (n, k):
            raise ValueError(f"labels shape {tuple(labels.shape)} must be [N, K] = {(n, k)}.")
        if labels.dtype != torch.long:
            raise ValueError(f"labels must be a long tensor, got dtype {labels.dtype}.")
    if weights is not None:
        _check_block_tensor("weights", weights, 1)
        if weights.shape[0] != k:
            raise ValueError(f"weights shape {tuple(weights.shape)} must be [K] = ({k},).")


def _check_chunk_size(chunk_size: int | None) -> None:
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size={chunk_size!r} is invalid: expected None (no chunking) or an int >= 1.")


def _chunked(fn: Callable[..., torch.Tensor], tensors: Sequence[torch.Tensor], chunk_size: int | None) -> torch.Tensor:
    """Apply a row-wise ``fn`` (``[n, K, ...] -> [n, K]``) to ``chunk_size`` rows of N at a time.

    Under autograd every chunk is checkpointed: its ``[chunk, K, V]`` float32 intermediates are freed after the
    forward and recomputed, one chunk at a time, in the backward pass.
    """
    n = tensors[0].shape[0]
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    if chunk_size is None or n <= chunk_size:
        chunks = [tuple(tensors)]
    else:
        chunks = list(zip(*(torch.split(t, chunk_size, dim=0) for t in tensors)))
    outputs = []
    for chunk in chunks:
        if needs_grad and len(chunks) > 1:
            outputs.append(checkpoint(fn, *chunk, use_reentrant=False, preserve_rng_state=False))
        else:
            outputs.append(fn(*chunk))
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=0)


def _cross_entropy_rows(q_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``[n, K, V], [n, K] -> [n, K]``: ``-log softmax(q)[label]`` in float32."""
    n, k, v = q_logits.shape
    return F.cross_entropy(q_logits.float().reshape(n * k, v), labels.reshape(n * k), reduction="none").view(n, k)


def _forward_kl_rows(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """``[n, K, V] x2 -> [n, K]``: ``sum_v p (log p - log q)`` in float32, with ``0 log 0 = 0``."""
    log_p = p_logits.float().log_softmax(dim=-1)
    log_q = q_logits.float().log_softmax(dim=-1)
    p = log_p.exp()
    terms = torch.where(p > 0, p * (log_p - log_q), torch.zeros((), dtype=p.dtype, device=p.device))
    return terms.sum(dim=-1)


def _l1_rows(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """``[n, K, V] x2 -> [n, K]``: ``sum_v |p - q|`` in float32, in [0, 2]."""
    p = p_logits.float().softmax(dim=-1)
    q = q_logits.float().softmax(dim=-1)
    return (p - q).abs().sum(dim=-1)


def _l1_support_rows(p_log_probs: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """``[n, K, S] x2 -> [n, K]``: ``sum_v |p - q|`` over the whole vocabulary when ``q`` lives on a support S.

    ``p_log_probs`` are the full-vocabulary log-probabilities of the support's tokens. Outside S, ``q = 0``, so
    the rest of the sum is ``sum_{v not in S} p(v) = 1 - sum_S p`` (clamped at 0 against rounding).
    """
    p = p_log_probs.float().exp()
    q = q_logits.float().softmax(dim=-1)
    outside = (1.0 - p.sum(dim=-1)).clamp(min=0.0)
    return (p - q).abs().sum(dim=-1) + outside


def _weighted_divergence(
    rows: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    p: torch.Tensor,
    q_logits: torch.Tensor,
    valid: torch.Tensor,
    weights: torch.Tensor,
    num_items_in_batch: int | torch.Tensor | None,
    chunk_size: int | None,
) -> torch.Tensor:
    """Checks, then ``rows(p, q)`` per position (``p`` detached), chunked and reduced as the module describes."""
    _check_inputs(q_logits, valid, weights=weights, p_logits=p)
    _check_chunk_size(chunk_size)
    per_position = _chunked(rows, (p.detach(), q_logits), chunk_size)
    return _reduce(per_position, valid, weights, num_items_in_batch)


def _acceptance(
    rows: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    p: torch.Tensor,
    q_logits: torch.Tensor,
    valid: torch.Tensor,
    chunk_size: int | None,
) -> torch.Tensor:
    """Per-position mean of ``1 - rows(p, q) / 2`` (``rows`` an L1 distance) over the valid blocks."""
    _check_inputs(q_logits, valid, p_logits=p)
    _check_chunk_size(chunk_size)
    return _masked_mean_over_blocks(1.0 - 0.5 * _chunked(rows, (p, q_logits), chunk_size), valid)


def _normalizer(valid: torch.Tensor, num_items_in_batch: int | torch.Tensor | None) -> torch.Tensor:
    """0-dim float32 tensor: ``max(1, num_items_in_batch)`` if given, else ``max(1, valid.sum())``."""
    if num_items_in_batch is None:
        return valid.sum().to(torch.float32).clamp(min=1.0)
    if isinstance(num_items_in_batch, torch.Tensor):
        if num_items_in_batch.numel() != 1:
            raise ValueError(
                "num_items_in_batch must be an int or a 1-element tensor, "
                f"got shape {tuple(num_items_in_batch.shape)}."
            )
        total = num_items_in_batch.detach().reshape(()).to(device=valid.device, dtype=torch.float32)
    elif isinstance(num_items_in_batch, (int, float)) and not isinstance(num_items_in_batch, bool):
        total = torch.tensor(float(num_items_in_batch), device=valid.device, dtype=torch.float32)
    else:
        raise ValueError(f"num_items_in_batch={num_items_in_batch!r} is invalid: expected None, an int or a tensor.")
    return total.clamp(min=1.0)


def _reduce(
    per_position: torch.Tensor,
    valid: torch.Tensor,
    weights: torch.Tensor,
    num_items_in_batch: int | torch.Tensor | None,
) -> torch.Tensor:
    """``sum_{valid (n, i)} w_i * loss_{n,i} / Z``; invalid positions are selected out (NaN/inf there is harmless)."""
    w = weights.to(device=per_position.device, dtype=torch.float32)
    weighted = torch.where(valid, per_position * w, torch.zeros((), dtype=torch.float32, device=per_position.device))
    return weighted.sum() / _normalizer(valid, num_items_in_batch)


# --------------------------------------------------------------------------------------------------------------------
# Losses
# --------------------------------------------------------------------------------------------------------------------


def weighted_cross_entropy(
    q_logits: torch.Tensor,
    labels: torch.Tensor,
    valid: torch.Tensor,
    weights: torch.Tensor,
    num_items_in_batch: int | torch.Tensor | None = None,
    chunk_size: int | None = DEFAULT_CHUNK_SIZE,
) -> torch.Tensor:
    r"""Position-weighted token cross-entropy :math:`\frac{1}{Z}\sum_{valid} -w_i \log q_{n,i}(y_{n,i})`.

    Used alone for the history-aware teacher (stage 0) and with weight ``lambda_ce`` in the stable stage.

    Args:
        q_logits: ``[N, K, V]`` student logits.
        labels: ``[N, K]`` long; entries where ``valid`` is False are ignored (any value, e.g. -100).
        valid: ``[N, K]`` bool.
        weights: ``[K]`` position weights (see :func:`position_weights`).
        num_items_in_batch: global number of valid items across gradient-accumulation micro-batches (int or
            0-dim tensor); ``None`` normalises by this batch's valid count.
        chunk_size: anchor blocks per chunk (``None``: one chunk).

    Returns:
        0-dim float32 loss.
    """
    _check_inputs(q_logits, valid, weights=weights, labels=labels)
    _check_chunk_size(chunk_size)
    safe_labels = torch.where(valid, labels, torch.zeros_like(labels))
    per_position = _chunked(_cross_entropy_rows, (q_logits, safe_labels), chunk_size)
    return _reduce(per_position, valid, weights, num_items_in_batch)


def weighted_forward_kl(
    p_logits: torch.Tensor,
    q_logits: torch.Tensor,
    valid: torch.Tensor,
    weights: torch.Tensor,
    num_items_in_batch: int | torch.Tensor | None = None,
    chunk_size: int | None = DEFAULT_CHUNK_SIZE,
) -> torch.Tensor:
    r"""Position-weighted forward KL :math:`\frac{1}{Z}\sum_{valid} w_i \,\mathrm{KL}(p_{n,i} \| q_{n,i})`.

    The warm-up stage's loss, with ``p`` the history-aware teacher. ``p_logits`` is detached (no gradient flows
    into the teacher); terms with :math:`p(v) = 0` contribute 0.

    Args:
        p_logits: ``[N, K, V]`` teacher logits.
        q_logits: ``[N, K, V]`` student logits.
        valid: ``[N, K]`` bool.
        weights: ``[K]`` position weights.
        num_items_in_batch: see :func:`weighted_cross_entropy`.
        chunk_size: anchor blocks per chunk (``None``: one chunk).

    Returns:
        0-dim float32 loss, >= 0.
    """
    return _weighted_divergence(_forward_kl_rows, p_logits, q_logits, valid, weights, num_items_in_batch, chunk_size)


def weighted_l1(
    p_logits: torch.Tensor,
    q_logits: torch.Tensor,
    valid: torch.Tensor,
    weights: torch.Tensor,
    num_items_in_batch: int | torch.Tensor | None = None,
    chunk_size: int | None = DEFAULT_CHUNK_SIZE,
) -> torch.Tensor:
    r"""Position-weighted L1 distance :math:`\frac{1}{Z}\sum_{valid} w_i \| p_{n,i} - q_{n,i} \|_1` (the paper's TV).

    The stable stage's main term, with ``p`` the target's own distribution :math:`p^T`. Each per-position
    distance lies in [0, 2] (twice the total variation distance); ``p_logits`` is detached.

    Args:
        p_logits: ``[N, K, V]`` target logits.
        q_logits: ``[N, K, V]`` student logits.
        valid: ``[N, K]`` bool.
        weights: ``[K]`` position weights.
        num_items_in_batch: see :func:`weighted_cross_entropy`.
        chunk_size: anchor blocks per chunk (``None``: one chunk).

    Returns:
        0-dim float32 loss.
    """
    return _weighted_divergence(_l1_rows, p_logits, q_logits, valid, weights, num_items_in_batch, chunk_size)


def weighted_l1_on_support(
    p_log_probs: torch.Tensor,
    q_logits: torch.Tensor,
    valid: torch.Tensor,
    weights: torch.Tensor,
    num_items_in_batch: int | torch.Tensor | None = None,
    chunk_size: int | None = DEFAULT_CHUNK_SIZE,
) -> torch.Tensor:
    r""":func:`weighted_l1` for a student that lives on a token subset S (the draft vocabulary), computed on S only.

    With :math:`q(v) = 0` outside S, :math:`\|p - q\|_1 = \sum_{v \in S} |p(v) - q(v)| + (1 - \sum_{v \in S} p(v))`,
    so the value equals :func:`weighted_l1` over the whole vocabulary (with ``q``'s logits ``-inf`` off S), while
    every tensor is ``[N, K, |S|]`` instead of ``[N, K, V]``: ~6x less work for SmolLM2 with an 8,192-token S.

    Args:
        p_log_probs: ``[N, K, S]`` the target's *full-vocabulary* log-probabilities of the tokens of S (the
            target's logits on S minus its logsumexp over the whole vocabulary).
        q_logits: ``[N, K, S]`` student logits over S, same token order.
        valid, weights, num_items_in_batch, chunk_size: see :func:`weighted_l1`.

    Returns:
        0-dim float32 loss.
    """
    return _weighted_divergence(
        _l1_support_rows, p_log_probs, q_logits, valid, weights, num_items_in_batch, chunk_size
    )


# --------------------------------------------------------------------------------------------------------------------
# Acceptance proxies (logging only)
# --------------------------------------------------------------------------------------------------------------------


def _masked_mean_over_blocks(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``[N, K] -> [K]`` float32 mean over the valid blocks of each position; NaN where a position has none."""
    values = values.float()
    total = torch.where(valid, values, torch.zeros((), dtype=values.dtype, device=values.device)).sum(dim=0)
    count = valid.sum(dim=0).to(values.dtype)
    return torch.where(count > 0, total / count.clamp(min=1.0), torch.full_like(total, float("nan")))
