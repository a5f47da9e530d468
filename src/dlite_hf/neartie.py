"""Losslessness in reduced precision: prove that every divergence from plain greedy decoding is a near-tie.

Both continuations are re-scored teacher-forced by a float32 copy of the target: at the first divergence both chosen
tokens, and from there every speculative token, must be within ``epsilon`` (:data:`NEAR_TIE_EPSILON`) of the float32
maximum logit, or the divergence is a bug. docs/design.md says why bfloat16 and float16 diverge at all ("Two modes,
two guarantees"; float32 is token-exact) and how epsilon was calibrated ("Epsilon, calibrated").
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn
from transformers import DynamicCache

NEAR_TIE_EPSILON = {"bfloat16": 1.75, "float16": 0.25, "float32": 0.0}
"""Logit units: how far a committed token may sit below the float32 maximum before the divergence is a bug."""


@dataclass(frozen=True)
class NearTieReport:
    """The verdict on one speculative output against plain greedy decoding (positions count new tokens).

    At the first divergence: the token each run chose (None past the end of a shorter output), their float32 logit
    difference (``divergence_margin``) and the target's top-2 margin. ``max_gap``: the largest float32 (max logit -
    committed logit) over the speculative tokens from there on, at ``worst_position``. ``reason``: why not ``ok``."""

    identical: bool
    first_divergence: int | None = None
    plain_token: int | None = None
    speculative_token: int | None = None
    divergence_margin: float | None = None
    top2_margin: float | None = None
    max_gap: float = 0.0
    worst_position: int | None = None
    epsilon: float = 0.0
    ok: bool = True
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Where two token lists first differ (the shorter one's length if one is a prefix of the other); None if equal."""
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def float32_reference(model: nn.Module) -> nn.Module:
    """A float32 copy of ``model`` (upcast, hence exact weights); the model itself when it is float32 already."""
    return model if all(p.dtype == torch.float32 for p in model.parameters()) else copy.deepcopy(model).float().eval()


def crop_to_shared_prefix(cache: Any, cached_ids: list[int], ids: list[int]) -> int:
    """Crop ``cache`` (holding ``cached_ids``) to the longest prefix they share with ``ids``; returns its length."""
    shared = first_difference(cached_ids, ids)
    shared = len(cached_ids) if shared is None else shared
    if cache.get_seq_length() > shared:
        cache.crop(shared - cache.get_seq_length())  # transformers 5.24 crops by a negative count of tokens to drop
    return shared


class ScoredContext:
    """The float32 reference with the KV cache of the context it scored last. The methods compared on one turn share
    its prompt, and a session's turns extend it, so each re-scoring prefills only the tokens no earlier one saw (a
    whole forward over a 16k-token context took 10 minutes on one core, once per divergent output)."""

    def __init__(self, reference: nn.Module):
        self.reference = reference
        self.ids: list[int] = []  # the tokens self.cache holds
        self.cache = DynamicCache(config=reference.config)

    @torch.no_grad()
    def logits(self, sequence: torch.Tensor, start: int) -> torch.Tensor:
        """The reference's logits `[T - start, V]` at positions ``start - 1 .. T - 2`` of ``sequence`` `[1, T]`."""
        ids, keep = sequence[0].tolist(), start - 1
        shared = crop_to_shared_prefix(self.cache, self.ids, ids[:keep])
        device = next(self.reference.parameters()).device
        out = self.reference(sequence[:, shared:].to(device), past_key_values=self.cache, use_cache=True)
        self.cache.crop(keep - len(ids))  # keep the context, not the continuation
        self.ids = ids[:keep]
        return out.logits[0, keep - shared : -1].float().cpu()


@torch.no_grad()
def _rescored(
    reference: nn.Module | ScoredContext, sequence: torch.Tensor, start: int, processors: Callable | None = None
) -> torch.Tensor:
    """Teacher-forced float32 logits `[n, V]` at the positions that chose ``sequence[0, start:]``, each row passed
    through ``processors`` as generate() would (on the CPU; a banned token's logit is -inf). ``reference``: the
    float32 model, or a :class:`ScoredContext` of it that reuses the context it scored before."""
    if sequence.dim() != 2 or sequence.shape[0] != 1:
        raise ValueError(f"expected one sequence of shape [1, T], got {tuple(sequence.shape)}.")
    if not 1 <= start <= sequence.shape[1]:
        raise ValueError(f"start={start} must be in 1..{sequence.shape[1]} (the prompt is at least one token).")
    context = reference if isinstance(reference, ScoredContext) else ScoredContext(reference)
    logits = context.logits(sequence, start)
    if processors is None:
        return logits
    sequence = sequence.cpu()
    return torch.cat([processors(sequence[:, : start + j], logits[j : j + 1].clone()) for j in range(len(logits))])


def _gaps(logits: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(gaps, top2)``, both ``[n]``: how far each of ``tokens`` sits below the maximum of its row of ``logits``
    (inf where a processor banned it), and the top-2 margin there."""
    top = logits.topk(2, dim=-1).values
    return top[:, 0] - logits.gather(1, tokens[:, None])[:, 0], top[:, 0] - top[:, 1]


def check_near_ties(
    reference: nn.Module | ScoredContext,
    prompt_length: int,
    plain: torch.Tensor,
    speculative: torch.Tensor,
    epsilon: float,
    processors: Callable | None = None,
) -> NearTieReport:
    """Check that ``speculative`` differs from ``plain`` (both ``[1, prompt + new]``, greedy outputs of one target)
    only through near-ties of the float32 ``reference`` (its logits through ``processors``), within ``epsilon``.
    ``reference``: the float32 model or a :class:`ScoredContext` of it."""
    if epsilon < 0:
        raise ValueError(f"epsilon={epsilon} must be >= 0 (logit units).")
    if not torch.equal(plain[:, :prompt_length].cpu(), speculative[:, :prompt_length].cpu()):
        raise ValueError("plain and speculative outputs do not start with the same prompt.")
    a, b = plain[0, prompt_length:].tolist(), speculative[0, prompt_length:].tolist()
    divergence = first_difference(a, b)
    if divergence is None:
        return NearTieReport(True, epsilon=epsilon)
    if divergence == min(len(a), len(b)):  # one output is a prefix of the other: they stopped at different points
        stopped = "plain" if len(a) < len(b) else "speculative"
        reason = (
            f"the {stopped} output stopped at new token {divergence} while the other went on (same tokens until "
            "then): a stopping difference, not a near-tie"
        )
        tokens = (a[divergence], None) if len(a) > len(b) else (None, b[divergence])  # the longer one's next token
        return NearTieReport(False, divergence, *tokens, epsilon=epsilon, ok=False, reason=reason)
    # one forward: up to the divergence both runs saw the same tokens, so the speculative sequence's logits row there
    # scores plain's token too
    logits = _rescored(reference, speculative, prompt_length, processors)
    spec_gaps, top2 = _gaps(logits, speculative[0, prompt_length:].cpu())
    row = logits[divergence]
    gap_plain, gap_spec = float(row.max() - row[a[divergence]]), float(spec_gaps[divergence])
    tail = spec_gaps[divergence:]
    worst, max_gap = int(tail.argmax()) + divergence, float(tail.max())
    reasons = []
    if max(gap_plain, gap_spec) > epsilon:
        reasons.append(
            f"at the first divergence (new token {divergence}) plain chose {a[divergence]} and the speculative run "
            f"{b[divergence]}, {gap_plain:.3f} and {gap_spec:.3f} logits below the float32 maximum: not both within "
            f"epsilon={epsilon}"
        )
    if max_gap > epsilon:
        reasons.append(
            f"the speculative run committed token {b[worst]} at new token {worst}, {max_gap:.3f} logits below the "
            f"float32 argmax of its own context (epsilon={epsilon})"
        )
    return NearTieReport(
        identical=False,
        first_divergence=divergence,
        plain_token=a[divergence],
        speculative_token=b[divergence],
        divergence_margin=abs(gap_plain - gap_spec),
        top2_margin=float(top2[divergence]),
        max_gap=max_gap,
        worst_position=worst,
        epsilon=epsilon,
        ok=not reasons,
        reason="; ".join(reasons),
    )


def epsilon_for(dtype: torch.dtype | str) -> float:
    """:data:`NEAR_TIE_EPSILON` of a torch dtype (or its name)."""
    name = str(dtype).removeprefix("torch.")
    if name not in NEAR_TIE_EPSILON:
        raise ValueError(f"no near-tie epsilon for dtype {name!r}: expected one of {', '.join(NEAR_TIE_EPSILON)}.")
    return NEAR_TIE_EPSILON[name]


class NearTieChecker:
    """The losslessness check of one target's greedy outputs: exact in float32 (:meth:`check` returns None, any
    difference is a failure), near-tie in reduced precision (a float32 copy, made on the first divergence)."""

    def __init__(self, target: nn.Module):
        self.target = target
        self.dtype = str(target.get_output_embeddings().weight.dtype).removeprefix("torch.")
        self.epsilon = epsilon_for(self.dtype)
        self._reference: ScoredContext | None = None

    @property
    def exact(self) -> bool:
        return self.dtype == "float32"

    def check(
        self, prompt_length: int, plain: torch.Tensor, other: torch.Tensor, processors: Callable | None = None
    ) -> NearTieReport | None:
        """The near-tie verdict on `other` against `plain` (`[1, prompt + new]` each); None in float32."""
        if self.exact:
            return None
        if self._reference is None:
            self._reference = ScoredContext(float32_reference(self.target))
        return check_near_ties(self._reference, prompt_length, plain, other, self.epsilon, processors)
