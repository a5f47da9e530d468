"""The engine-neutral drafting core: one speculation round's decisions, for every engine that runs DLite.

In: the tapped target states of the newest position and the anchor token; out: the drafts and their q (the
processed logits each was drawn from), under the adaptive rules, or a retrieved continuation (the hybrid). Called by
`generate()`, the vLLM plugin and `dlite-hf bench replay`. The drafter is anything with DLite's block interface
(`encode_block`, `head`, `draft_step`, `draft_columns`, `expand_draft_logits`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .decoding_options import check_threshold


def history_inputs(past: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(history_states, history_valid, history_positions)` of one round for a history drafter: the tapped states
    `[1, W, L, H_t]` of the committed positions before the round's context (already cut to its window), all valid,
    at local positions -W..-1; with no past position yet, one masked dummy row."""
    span = past.shape[1]
    states = past if span else past.new_zeros(1, 1, *past.shape[2:])
    valid = torch.full((1, max(span, 1)), span > 0, dtype=torch.bool, device=device)
    return states.to(device), valid, -torch.arange(max(span, 1), 0, -1, device=device)[None]


@dataclass(frozen=True)
class DraftRules:
    """The adaptive rules of one drafter round: stop once every row's joint probability of its drafts is below
    `confidence_threshold`, at one of `draft_lengths` (None: any); propose nothing when, in every row, the most likely
    first draft's probability is below `skip_threshold` (0: never, for both thresholds)."""

    confidence_threshold: float = 0.0
    skip_threshold: float = 0.0
    draft_lengths: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        check_threshold("draft_confidence_threshold", self.confidence_threshold)
        check_threshold("draft_skip_threshold", self.skip_threshold)

    @classmethod
    def from_config(
        cls, config: Any, confidence_threshold: float | None = None, skip_threshold: float | None = None
    ) -> DraftRules:
        """The rules of a drafter config, with per-call overrides where given (None: the config's)."""
        lengths = None if config.draft_lengths is None else tuple(config.draft_lengths)
        confidence = config.draft_confidence_threshold if confidence_threshold is None else confidence_threshold
        return cls(confidence, config.draft_skip_threshold if skip_threshold is None else skip_threshold, lengths)


def rule_distribution(logits: torch.Tensor, columns: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The probabilities a round's rules and samples use: `softmax(logits)` `[..., V]`, or over the draft columns alone
    (`[..., C]`, and the columns returned) when every other logit is -inf: the same distribution, less work.
    `draft_tokens` and `row_lengths` both call it, so a row's rules see the same bits in a round and read back."""
    if columns is not None:
        kept = logits.index_select(-1, columns)
        if int((~torch.isneginf(logits)).sum()) == int((~torch.isneginf(kept)).sum()):
            return torch.softmax(kept, dim=-1), columns
    return torch.softmax(logits, dim=-1), None


@torch.no_grad()
def draft_tokens(
    drafter: Any,
    context_states: torch.Tensor,
    anchor_ids: torch.Tensor,
    num_tokens: int,
    rules: DraftRules,
    do_sample: bool = False,
    logits_processor: Any = None,
    prefix_ids: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    history: Sequence[torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One drafter round: `tokens` `[N, n]` after each anchor and their processed `logits` `[N, n, V]` (q),
    `0 <= n <= num_tokens`; `n = 0` only through the skip rule. `history`: `encode_block`'s `history_*`, or None.

    Each position is the argmax (greedy) or a sample of the *processed* logits (`logits_processor` given `prefix_ids`
    plus the drafts so far). The rules keep speculative sampling exact: the confidence stop after draft n reads only
    drafts 1..n, the skip the first position's top probability before anything is drawn. Without processors a round
    stays on the draft vocabulary's columns (sorted ids: the same choices) and widens its logits to V on return.
    """
    threshold, skip, lengths = rules.confidence_threshold, rules.skip_threshold, rules.draft_lengths
    block = drafter.encode_block(context_states, anchor_ids, *(history or ()))
    state = drafter.head.init_state(block[:, 0]) if drafter.head is not None else None
    columns = drafter.draft_columns()
    columns = columns.to(block.device) if columns is not None else None
    compact = columns is not None and logits_processor is None  # stay on the columns, widen on return
    need_probs = do_sample or threshold > 0 or skip > 0
    prev = anchor_ids
    tokens, all_logits = [], []
    confidence = None  # [N] joint probability of the drafts so far
    unsure = False  # every row's confidence has fallen below the threshold: stop at the next allowed length
    for i in range(num_tokens):
        logits, state = drafter.draft_step(block[:, i], prev, state)
        support = columns if compact else None  # what an index into `probs` (and greedy's into `logits`) names
        if not compact:
            logits = drafter.expand_draft_logits(logits)
            if logits_processor is not None:
                seen = torch.cat([prefix_ids, *[t[:, None] for t in tokens]], dim=1) if tokens else prefix_ids
                logits = logits_processor(seen, logits)
        probs = None
        if need_probs and compact:  # the columns' own logits: rule_distribution's first case, without its check
            probs = torch.softmax(logits, dim=-1)
        elif need_probs:
            probs, support = rule_distribution(logits, columns)
        if i == 0 and skip > 0 and bool((probs.max(dim=-1).values < skip).all()):  # q alone, nothing drawn yet
            empty = logits.new_empty(logits.shape[0], 0, logits.shape[-1])
            empty = drafter.expand_draft_logits(empty) if compact else empty
            return anchor_ids.new_empty(anchor_ids.shape[0], 0), empty
        if do_sample:
            pick = torch.multinomial(probs, 1, generator=generator).squeeze(1)  # an index into the support
            prev = support[pick] if support is not None else pick
        else:
            choice = logits.argmax(dim=-1)  # an index into `logits`: a column when compact, else a token id
            prev = columns[choice] if compact else choice
            pick = choice if compact or support is None else torch.searchsorted(support, prev)
        if need_probs:
            chosen = probs.gather(-1, pick[:, None])[:, 0]
            confidence = chosen if confidence is None else confidence * chosen
        tokens.append(prev)
        all_logits.append(logits)
        unsure = unsure or (threshold > 0 and bool((confidence < threshold).all()))
        if unsure and (lengths is None or len(tokens) in lengths):
            break
    logits = torch.stack(all_logits, 1)
    return torch.stack(tokens, 1), drafter.expand_draft_logits(logits) if compact else logits


def row_lengths(
    tokens: torch.Tensor, logits: torch.Tensor, rules: DraftRules, columns: torch.Tensor | None = None
) -> list[int]:
    """Each row's draft count under `rules` had it been drafted alone, from a batched round's `draft_tokens` output
    (`columns`: the drafter's `draft_columns()`, so probabilities are computed as the round computed them).

    A batched round stops only once every row is unsure; rows are drafted independently, so a row's own stop is read
    off its logits (exact for sampling too: the rules read only drafts already drawn)."""
    rows, n = tokens.shape
    if n == 0 or (rules.confidence_threshold <= 0 and rules.skip_threshold <= 0):
        return [n] * rows
    chosen, first_top = rule_probabilities(tokens, logits, columns)
    return lengths_under_rules(chosen, first_top, rules)


def rule_probabilities(
    tokens: torch.Tensor, logits: torch.Tensor, columns: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """What the rules of a round read: each draft's probability `[N, n]` and each row's top first-position
    probability `[N]`, computed as the round computed them (`rule_distribution`). `n >= 1`."""
    n = tokens.shape[1]
    columns = columns.to(logits.device) if columns is not None else None
    all_probs, all_support = rule_distribution(logits, columns)
    per_position = columns is not None and all_support is None  # a processor opened other tokens somewhere
    chosen, first_top = [], None
    for position in range(n):  # as the round did: one decision per position over the batch
        if per_position:
            probs, support = rule_distribution(logits[:, position], columns)
        else:
            probs, support = all_probs[:, position], all_support
        drafted = tokens[:, position].contiguous()
        index = drafted if support is None else torch.searchsorted(support, drafted)
        chosen.append(probs.gather(-1, index[:, None])[:, 0])
        if position == 0:
            first_top = probs.max(dim=-1).values
    return torch.stack(chosen, 1), first_top


def lengths_under_rules(chosen: torch.Tensor, first_top: torch.Tensor, rules: DraftRules) -> list[int]:
    """Where each row's round stops under `rules`, from what `rule_probabilities` reads: 0 when the skip rule holds,
    else the first allowed length at or after the draft whose joint probability fell below `confidence_threshold`
    (n when none did or none is allowed): the decisions `draft_tokens` makes while drafting."""
    rows, n = chosen.shape
    threshold, skip, lengths = rules.confidence_threshold, rules.skip_threshold, rules.draft_lengths
    joint = chosen.cumprod(dim=1)  # [N, n], the round's running product
    skipped = (first_top < skip).tolist() if skip > 0 else [False] * rows
    unsure = (joint < threshold) if threshold > 0 else torch.zeros_like(joint, dtype=torch.bool)
    # the draft count at which each row became unsure (n + 1: never)
    first = torch.where(unsure.any(dim=1), unsure.int().argmax(dim=1) + 1, n + 1).tolist()
    out = []
    for row_skipped, start in zip(skipped, first):
        allowed = [c for c in (range(start, n + 1) if lengths is None else lengths) if start <= c <= n]
        out.append(0 if row_skipped else min(allowed, default=n))
    return out


@dataclass(frozen=True)
class HybridRule:
    """The hybrid's choice between a retrieved continuation and the drafter: the drafter config's `lookup_*`
    (`DLiteConfig` documents them)."""

    min_match: int
    length_factor: float
    fallback_min_match: int = 0

    def retrieved(self, match: Any) -> list[int]:
        """The draft of a suffix-index match (`length`, `continuation`): empty if nothing followed it."""
        return list(match.continuation[: max(1, math.ceil(self.length_factor * match.length))])


@dataclass
class Proposal:
    """What one round proposes: `source` "lookup" (`tokens` a list of ids, q one-hot: `q` None; `fallback`: because
    the drafter proposed nothing), "dlite" (the drafter's `[N, n]` tokens and their logits `q`; empty: it skipped)
    or None (nothing tried: no budget)."""

    source: str | None
    tokens: Any
    q: Any = None
    fallback: bool = False


def select_proposal(
    match: Any | None, rule: HybridRule | None, draft: Callable[[], tuple[Any, Any]] | None
) -> Proposal:
    """The hybrid selection rule of one round, from its suffix-index `match` (None: none asked), the `rule` (None:
    DLite alone) and `draft`, which runs the drafter's round and returns `(tokens, q)` (None: no budget)."""
    if match is not None and rule is not None and match.length >= rule.min_match and match.continuation:
        return Proposal("lookup", rule.retrieved(match))
    if draft is None:
        return Proposal(None, [])
    tokens, q = draft()
    drafted = tokens.shape[-1] if hasattr(tokens, "shape") else len(tokens)  # `[N, n]` drafts, or a list of ids
    fallback = rule.fallback_min_match if rule is not None else 0
    if not drafted and match is not None and fallback and match.length >= fallback and match.continuation:
        return Proposal("lookup", rule.retrieved(match), fallback=True)  # a short match, not a one-token step
    return Proposal("dlite", tokens, q)
