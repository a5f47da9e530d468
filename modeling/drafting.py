"""The engine-neutral drafting core: one speculation round's decisions, for every engine that runs DLite.

In: the tapped target states of the newest position and the anchor token (the newest committed token). Out: the
draft tokens and their q (the processed logits each one was drawn from). Between them sit the rules that decide how
many tokens a round proposes, and, for hybrid drafting, whether the round drafts with the drafter at all:

* :class:`DraftRules` and :func:`draft_tokens`: the drafter's adaptive round (stop early below a joint confidence,
  skip a round whose most likely first draft is unsure); :func:`row_lengths`: where each row of a batched round
  would have stopped had it been drafted alone (an engine that verifies each request's own draft length, as vLLM
  does, proposes that many), through :func:`rule_probabilities` and :func:`lengths_under_rules`, which the rules'
  replay (`dlite-hf bench replay rules`) calls too;
* :class:`HybridRule` and :func:`select_proposal`: the choice between a continuation retrieved from the suffix index
  and the drafter's round (and the fallback to a short retrieved match when the drafter proposes nothing).

transformers' `generate()` (`candidate_generators.py`), the vLLM plugin (`vllm_plugin/`) and the hybrid simulator
(`dlite-hf bench replay hybrid`) all call these. Nothing here imports `transformers.generation` or vLLM; the drafter
is anything with DLite's block interface (`encode_block`, `head`, `draft_step`, `draft_columns`,
`expand_draft_logits`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from .decoding_options import check_threshold

__all__ = [
    "BlockDrafter", "DraftRules", "HybridRule", "Proposal", "draft_tokens", "history_inputs", "lengths_under_rules",
    "row_lengths", "rule_distribution", "rule_probabilities", "select_proposal",
]  # fmt: skip


class BlockDrafter(Protocol):
    """What the core needs of a drafter (`DLiteForSpeculation` is one)."""

    head: Any

    def encode_block(self, context_states: torch.Tensor, anchor_ids: torch.Tensor, *history: Any) -> torch.Tensor:
        """`[N, K, H]` backbone outputs of the K draft positions."""

    def draft_step(self, block: torch.Tensor, prev_ids: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """One step of the sequential head: `(float32 logits [N, C] over draft_columns(), new state)`."""

    def draft_columns(self) -> torch.Tensor | None:
        """`[C]` the token id of each logits column (the draft vocabulary), or None: the whole vocabulary."""

    def expand_draft_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """`[..., C]` column logits -> `[..., V]`, -inf outside the draft vocabulary."""


def history_inputs(past: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(history_states, history_valid, history_positions)` of one round for a history drafter: the tapped states
    `[1, W, L, H_t]` of the committed positions before the round's context (already cut to its window), all valid,
    at local positions -W..-1; with no past position yet, one masked dummy row."""
    span = past.shape[1]
    if span == 0:
        return (
            past.new_zeros(1, 1, *past.shape[2:]).to(device),
            torch.zeros(1, 1, dtype=torch.bool, device=device),
            -torch.ones(1, 1, dtype=torch.long, device=device),
        )
    return (
        past.to(device),
        torch.ones(1, span, dtype=torch.bool, device=device),
        -torch.arange(span, 0, -1, device=device)[None],
    )


@dataclass(frozen=True)
class DraftRules:
    """The adaptive rules of one drafter round.

    Attributes:
        confidence_threshold: stop once every row's joint probability of its drafts is below this (0: never).
        skip_threshold: propose nothing when, in every row, the most likely first draft's probability is below
            this (0: never).
        draft_lengths: the draft counts a confidence stop may end at (None: any).
    """

    confidence_threshold: float = 0.0
    skip_threshold: float = 0.0
    draft_lengths: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        check_threshold("draft_confidence_threshold", self.confidence_threshold, where="DraftRules: ")
        check_threshold("draft_skip_threshold", self.skip_threshold, where="DraftRules: ")

    @classmethod
    def from_config(
        cls, config: Any, confidence_threshold: float | None = None, skip_threshold: float | None = None
    ) -> DraftRules:
        """The rules of a drafter config, with per-call overrides where given (None: the config's)."""
        lengths = config.draft_lengths
        return cls(
            confidence_threshold=(
                config.draft_confidence_threshold if confidence_threshold is None else confidence_threshold
            ),
            skip_threshold=config.draft_skip_threshold if skip_threshold is None else skip_threshold,
            draft_lengths=None if lengths is None else tuple(lengths),
        )


def rule_distribution(logits: torch.Tensor, columns: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The probabilities a round's rules and samples use: `softmax(logits)` `[..., V]`, or over the draft columns alone
    (`[..., C]`, and the columns returned) when every other token's logit is -inf, as the drafter's own logits are:
    the same distribution (those tokens have probability exactly 0) at a fraction of the work. `draft_tokens` and
    `row_lengths` both call it, so a row's rules see the same bits in a round and when its length is read back."""
    if columns is not None:
        kept = logits.index_select(-1, columns)
        if int((~torch.isneginf(logits)).sum()) == int((~torch.isneginf(kept)).sum()):
            return torch.softmax(kept, dim=-1), columns
    return torch.softmax(logits, dim=-1), None


@torch.no_grad()
def draft_tokens(
    drafter: BlockDrafter,
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
    """One drafter round: up to `num_tokens` tokens after each anchor, with their processed logits.

    Each position is chosen from the *processed* logits (`logits_processor` given the committed prefix
    `prefix_ids` plus the tokens drafted so far): argmax when greedy, a sample otherwise, and those logits are
    returned as q. The rules keep speculative sampling exact: the confidence stop after draft n looks only at
    drafts 1..n, already drawn and proposed; the skip looks at the first position's top probability before
    anything is drawn (a skip on the *sampled* first draft would bias q; `tests/generate/test_sampling.py`).

    A drafter with a draft vocabulary scores its C columns only (`draft_step`). Without processors a round stays on
    them (argmax, softmax and sampling over C entries, not V) and widens its logits to V (-inf elsewhere) once, on
    return; processors read token ids, so with them each step is widened first. Either way the rules' probabilities
    come from `rule_distribution`, which `row_lengths` calls too. The choices are those over V: the columns are sorted
    ids, so an argmax tie goes to the lowest id either way, and tokens outside the columns have probability 0.

    Args:
        history: `(history_states, history_valid, history_positions)` for history-modelling drafters, else None.

    Returns:
        `tokens` `[N, n]` and `logits` `[N, n, V]`, `0 <= n <= num_tokens`; `n = 0` only through the skip rule.
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
    """Each row's draft count under `rules` had it been drafted alone, from a batched round's output.

    A batched round (`draft_tokens` over N rows) stops only once every row is unsure, so a row may carry drafts past
    its own stop. Rows are drafted independently, so a row's first n drafts in the batch are its drafts alone, and
    its own rule is read off its logits here (`rule_probabilities`, then `lengths_under_rules`). A batch of one gives
    `[tokens.shape[1]]`. Both rules look only at drafts already drawn, so truncating a sampled row keeps speculative
    sampling exact, as in `draft_tokens`.

    Args:
        tokens: `[N, n]` drafts; logits: `[N, n, V]` the processed logits they were drawn from (both as
            `draft_tokens` returns them).
        columns: the drafter's draft columns (`draft_columns()`), so each position's probabilities are computed as
            the round computed them.
    """
    rows, n = tokens.shape
    if n == 0 or (rules.confidence_threshold <= 0 and rules.skip_threshold <= 0):
        return [n] * rows
    chosen, first_top = rule_probabilities(tokens, logits, columns)
    return lengths_under_rules(chosen, first_top, rules)


def rule_probabilities(
    tokens: torch.Tensor, logits: torch.Tensor, columns: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """What the rules of a round read: each draft's probability `[N, n]` and each row's top first-position
    probability `[N]`, computed as the round computed them (`rule_distribution`: once over all positions when every
    one is on the columns, as in a round without processors, else position by position). `n >= 1`."""
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
    """Where each row's round stops under `rules`, from what `rule_probabilities` reads (`[N, n]` and `[N]`): 0 when
    the skip rule holds (the first position's top probability below `skip_threshold`), else the first allowed length
    at or after the draft whose joint probability fell below `confidence_threshold` (n when none did or none is
    allowed). The same decisions as `draft_tokens` makes while drafting; `dlite-hf bench replay rules` replays
    rules with it."""
    rows, n = chosen.shape
    threshold, skip, lengths = rules.confidence_threshold, rules.skip_threshold, rules.draft_lengths
    joint = chosen.cumprod(dim=1)  # [N, n], the round's running product
    skipped = (first_top < skip).tolist() if skip > 0 else [False] * rows
    unsure = (joint < threshold) if threshold > 0 else torch.zeros_like(joint, dtype=torch.bool)
    # the draft count at which each row became unsure (n + 1: never)
    first = torch.where(unsure.any(dim=1), unsure.int().argmax(dim=1) + 1, n + 1).tolist()
    out = []
    for row in range(rows):
        if skipped[row]:
            out.append(0)
        elif first[row] > n:
            out.append(n)
        else:
            allowed = [c for c in (range(first[row], n + 1) if lengths is None else lengths) if first[row] <= c <= n]
            out.append(min(allowed) if allowed else n)
    return out


@dataclass(frozen=True)
class HybridRule:
    """The hybrid's choice between a retrieved continuation and the drafter (the drafter config's `lookup_*`).

    Attributes:
        min_match: a round whose context suffix occurred before, at least this many tokens long, drafts what
            followed it there.
        length_factor: at most this many retrieved tokens per matched token (at least 1).
        fallback_min_match: a round whose drafter proposes nothing drafts a retrieved match of at least this many
            tokens instead of a plain one-token step (0: off).
    """

    min_match: int
    length_factor: float
    fallback_min_match: int = 0

    def retrieved(self, match: Any) -> list[int]:
        """The draft of a suffix-index match (`length`, `continuation`): empty if nothing followed it."""
        if not match.continuation:
            return []
        return list(match.continuation[: max(1, math.ceil(self.length_factor * match.length))])


@dataclass
class Proposal:
    """What one round proposes for verification.

    Attributes:
        source: "lookup" (retrieved: q is one-hot, verified as a deterministic proposal), "dlite" (the drafter's
            round, possibly empty: it skipped) or None (nothing was tried: no budget).
        tokens: the draft tokens (a list of ids for a retrieved draft; the drafter's own `[N, n]` tensor).
        q: the drafter's processed logits `[N, n, V]`; None for a retrieved draft.
        fallback: a retrieved draft proposed because the drafter proposed nothing.
    """

    source: str | None
    tokens: Any
    q: Any = None
    fallback: bool = False

    def __len__(self) -> int:
        shape = getattr(self.tokens, "shape", None)
        return int(shape[-1]) if shape is not None else len(self.tokens)


def select_proposal(
    match: Any | None,
    rule: HybridRule | None,
    draft: Callable[[], tuple[Any, Any]] | None,
) -> Proposal:
    """The hybrid selection rule of one round.

    Args:
        match: this round's suffix-index answer (`length`, `continuation`), None when no index was asked.
        rule: the hybrid rule (None: DLite alone).
        draft: runs the drafter's round and returns `(tokens, q)`; None when the round has no budget for it.
    """
    if match is not None and rule is not None and match.length >= rule.min_match and match.continuation:
        return Proposal("lookup", rule.retrieved(match))
    if draft is None:
        return Proposal(None, [])
    tokens, q = draft()
    proposal = Proposal("dlite", tokens, q)
    fallback = rule.fallback_min_match if rule is not None else 0
    if not len(proposal) and match is not None and fallback and match.length >= fallback and match.continuation:
        return Proposal("lookup", rule.retrieved(match), fallback=True)  # a short match, not a one-token step
    return proposal
