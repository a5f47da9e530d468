"""generate(assistant_model=<DLite drafter>): transformers' candidate generators for DLite.

:class:`DLiteCandidateGenerator` drafts every round from the target's latest hidden states, read by hooks on the
verification forward itself (`tapping.py`). :class:`HybridCandidateGenerator` (`prompt_lookup_num_tokens=N`) adds the
suffix index (`suffix_index.py`): a retrieved draft is deterministic, so it is verified with q = one-hot (no candidate
logits), which is exact speculative sampling for that q. The round's decisions are the core's (`drafting.py`); the
routing of `generate()` here is `integration.py`'s. :class:`DLiteGenerationStats` is what a call reports.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn
from transformers.generation.candidate_generator import CandidateGenerator

from .decoding_options import DECODING_OPTIONS, check_lookup_tokens
from .drafting import DraftRules, HybridRule, Proposal, draft_tokens, history_inputs, select_proposal
from .suffix_index import DraftSession
from .tapping import TappedStateRecorder, find_decoder_layers, track_recorder


@dataclass
class DLiteGenerationStats:
    """Statistics of one `generate()` call with a DLite drafter: `drafter.last_generation_stats` (the call that
    started last on any thread), or `session.last_generation_stats` of the `DraftSession` it ran in. The `lookup_*`
    fields count hybrid drafting's retrieved drafts, which are included in `rounds`, `drafted` and `accepted`."""

    new_tokens: int = 0  # tokens committed by the call
    target_forwards: int = 0  # the prefill included (plain decoding would need `new_tokens`)
    rounds: int = 0  # target forwards that verified a non-empty draft
    drafted: int = 0  # draft tokens proposed over all rounds
    accepted: int = 0  # draft tokens accepted by the target
    tokens_per_forward: list[int] = field(default_factory=list)  # tokens each target forward committed, in order
    drafted_per_forward: list[int] = field(default_factory=list)  # drafts each forward verified (0: a plain step)
    drafter_time_s: float = 0.0  # wall time spent drafting (the drafter's own work)
    target_time_s: float = 0.0  # wall time in the target's forwards and acceptance
    skipped: int = 0  # forwards after a drafting attempt that proposed nothing (skip rule, or a stop string)
    lookup_rounds: int = 0  # rounds that drafted a retrieved continuation
    lookup_drafted: int = 0
    lookup_accepted: int = 0
    lookup_time_s: float = 0.0  # wall time spent indexing tokens and querying the suffix index
    lookup_index_reused: int = 0  # prompt tokens already indexed by an earlier call of the `DraftSession`
    lookup_fallback_rounds: int = 0  # lookup rounds that drafted a short match because the drafter proposed nothing

    @property
    def dlite_rounds(self) -> int:
        return self.rounds - self.lookup_rounds

    @property
    def undrafted_forwards(self) -> int:
        """Forwards after the prefill that verified no draft (plain one-token steps: skipped, or no budget)."""
        return max(0, self.target_forwards - 1 - self.rounds)

    @property
    def dlite_drafted(self) -> int:
        return self.drafted - self.lookup_drafted

    @property
    def dlite_accepted(self) -> int:
        return self.accepted - self.lookup_accepted

    @property
    def tau(self) -> float:
        """Acceptance length: tokens committed per target forward (1.0 for plain decoding)."""
        return self.new_tokens / self.target_forwards if self.target_forwards else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def to_dict(self) -> dict[str, Any]:
        derived = ("tau", "acceptance_rate", "dlite_rounds", "undrafted_forwards", "dlite_drafted", "dlite_accepted")
        return {**asdict(self), **{name: getattr(self, name) for name in derived}}


def options_for_call(generation_config: Any, config: Any) -> dict[str, Any]:
    """The :data:`~.decoding_options.DECODING_OPTIONS` of one call: the call's `generation_config` value (validated
    here) where set, else the drafter config's."""
    misspelt = sorted(
        key for key in vars(generation_config) if key.startswith(("draft_", "lookup_")) and key not in DECODING_OPTIONS
    )
    if misspelt:  # a custom GenerationConfig entry is kept whatever its name: an unknown one would be ignored
        raise ValueError(
            f"GenerationConfig has {', '.join(misspelt)}, which no DLite decoding option is called; expected some of "
            f"{', '.join(DECODING_OPTIONS)}."
        )
    options = {}
    for name, check in DECODING_OPTIONS.items():
        value = getattr(generation_config, name, None)
        if value is not None:
            check(value, f"GenerationConfig.{name}={value!r}")
        options[name] = getattr(config, name) if value is None else value
    return options


class LatestState:
    """History-free context: the tapped states of the newest position only."""

    def __init__(self, recorder: TappedStateRecorder):
        self.recorder, self.row = recorder, 0

    def observe(self, row: int) -> None:
        """After a target forward: `row` of it predicted the new anchor."""
        self.row = row

    def draft_inputs(self, device: torch.device) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
        return self.recorder.rows(self.row, self.row + 1)[:, 0].to(device), None


class AcceptedHistory:
    """History variants: the states of every accepted position (`window` > 0 keeps the last `window` of them)."""

    def __init__(self, recorder: TappedStateRecorder, window: int):
        self.recorder, self.window = recorder, window
        self.states: torch.Tensor | None = None  # [1, T, L, H_t]

    def observe(self, row: int) -> None:
        accepted = self.recorder.rows(0, row + 1)
        self.states = accepted if self.states is None else torch.cat([self.states, accepted], 1)

    def draft_inputs(self, device: torch.device) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        context, past = self.states[:, -1], self.states[:, :-1]
        if self.window > 0:
            past = past[:, -self.window :]
        return context.to(device), history_inputs(past, device)


def _check_call(drafter: nn.Module, target: nn.Module, generation_config: Any, input_ids: torch.Tensor, kwargs):
    """Refuse the settings a DLite assistant cannot serve, each with what to do instead; bind the drafter to the
    target (`bind_target` checks the pair)."""
    if input_ids.shape[0] != 1:
        raise ValueError(
            f"DLite speculative decoding through `generate(assistant_model=...)` supports batch size 1, got a "
            f"batch of {input_ids.shape[0]} sequences. transformers' assisted generation is single-sequence; "
            "batched speculative decoding is vLLM's (README, Serving with vLLM). Call generate() once per prompt."
        )
    for option, allowed in (("assistant_early_exit", False), ("use_mtp", False), ("speculation_type", "dlite")):
        value = getattr(generation_config, option, None)
        if value not in (None, allowed):
            raise ValueError(
                f"generate() got a DLite assistant_model and {option}={value!r}, which selects another speculative "
                "method (the target drafting for itself, or another drafter). Pass one of them."
            )
    # A vocabulary mismatch makes transformers ask for `tokenizer`/`assistant_tokenizer`; check the pair first so
    # the user who follows that advice learns the real problem (wrong target) instead of "remove the tokenizer".
    drafter.bind_target(target)
    target_dtype = target.get_output_embeddings().weight.dtype
    if drafter.dtype != target_dtype:
        raise ValueError(
            f"The DLite drafter is in {drafter.dtype} but the target is in {target_dtype}. The drafter runs in "
            "the target's dtype (a float32 drafter beside a reduced-precision target only drafts slower): load "
            f"it with `from_pretrained(..., dtype={target_dtype})`, or call `drafter.to({target_dtype})`."
        )
    if kwargs.get("assistant_tokenizer") is not None:
        raise ValueError(
            "generate() got `assistant_tokenizer` with a DLite assistant_model. DLite drafts in the target's own "
            "vocabulary (it borrows the target's lm_head); universal assisted decoding across tokenizers does "
            "not apply. Remove `assistant_tokenizer`."
        )
    requested = generation_config.num_assistant_tokens
    if requested is not None and int(requested) < 1:
        raise ValueError(f"num_assistant_tokens={requested} is invalid: expected >= 1 (it can only lower K).")


class DLiteCandidateGenerator(CandidateGenerator):
    """Drafts K tokens per round from the target's latest hidden states (hooks on the verification forward); the
    model-outputs protocol (`requires_model_outputs`) says whether a round is the prefill and how many were accepted.
    """

    requires_model_outputs: bool = True
    model_kwargs_overrides: dict[str, Any] = {}  # nothing extra: no output_hidden_states for every position
    lookup_tokens = 0  # the longest retrieved draft a round may verify (the hybrid's)

    def __init__(
        self,
        drafter: nn.Module,
        target: nn.Module,
        generation_config: Any,
        input_ids: torch.LongTensor,
        logits_processor: Any = None,
        model_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ):
        config = drafter.config
        _check_call(drafter, target, generation_config, input_ids, kwargs)
        stop_strings = generation_config.stop_strings
        self.stop_strings = [stop_strings] if isinstance(stop_strings, str) else list(stop_strings or [])
        self.tokenizer = kwargs.get("target_tokenizer")
        if self.stop_strings and self.tokenizer is None:
            raise ValueError("stop_strings need the target's tokenizer: pass tokenizer=... to generate().")
        self.drafter, self.device = drafter, drafter.device
        requested = generation_config.num_assistant_tokens
        k = int(config.num_draft_tokens)
        self.num_tokens = k if requested is None else min(k, int(requested))
        self.max_length = generation_config.max_length
        self.do_sample = bool(generation_config.do_sample)
        self.logits_processor = logits_processor if logits_processor is not None and len(logits_processor) else None
        self.options = options_for_call(generation_config, config)  # validated here, once per call
        self.rules = DraftRules.from_config(
            config, self.options["draft_confidence_threshold"], self.options["draft_skip_threshold"]
        )
        layers = find_decoder_layers(target, config.num_target_layers)
        history = config.history_window != 0
        rows = 0 if history else max(config.num_draft_tokens, self.lookup_tokens) + 1
        self.recorder = TappedStateRecorder(layers, config.target_layer_ids, rows_to_keep=rows)
        self.context = AcceptedHistory(self.recorder, config.history_window) if history else LatestState(self.recorder)
        # the hooks leave when the call ends, also when it raises (integration.py), at the latest with the generator
        track_recorder(target, self.recorder)
        weakref.finalize(self, self.recorder.remove)
        self.is_prefill = True
        self.stats = DLiteGenerationStats()
        drafter.last_generation_stats = self.stats
        active = DraftSession.current()  # its statistics are this call's, hybrid or not
        if active is not None:
            active.last_generation_stats = self.stats
        self._prompt_length = input_ids.shape[1]
        self._forward_started = 0.0
        self._drafted_now = 0
        self._source_now: str | None = None  # "lookup" or "dlite": who drafted the block being verified

    def _start(self, input_ids: torch.LongTensor) -> None:
        """Before the prefill."""

    def _propose(self, input_ids: torch.LongTensor, budget: int) -> Proposal:
        """This round's proposal, at most `budget` (>= 1) tokens."""
        return Proposal("dlite", *self._draft(input_ids, budget))

    def _committed(self, tokens: list[int]) -> None:
        """After a target forward committed `tokens`."""

    def _draft(self, input_ids: torch.Tensor, budget: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The drafter's round: up to `min(K, budget)` tokens after the anchor `input_ids[:, -1]`."""
        started = time.perf_counter()
        context, history = self.context.draft_inputs(self.device)
        result = draft_tokens(
            self.drafter,
            context,
            input_ids[:, -1].to(self.device),
            min(self.num_tokens, budget),
            self.rules,
            do_sample=self.do_sample,
            logits_processor=self.logits_processor,
            prefix_ids=input_ids.to(self.device),
            history=history,
        )
        self.stats.drafter_time_s += time.perf_counter() - started
        return result

    def get_candidates(
        self,
        input_ids: torch.LongTensor,
        model_kwargs: dict[str, Any] | None = None,
        model_outputs: Any = None,
        is_first_iteration: bool = False,
        n_last_matches: int = 0,
        **kwargs: Any,
    ) -> tuple[torch.LongTensor, torch.Tensor | None]:
        self._drafted_now = 0
        self._source_now = None
        if is_first_iteration:  # let the loop run the plain prefill; its hooks give the first context
            self._start(input_ids)
            self._forward_started = time.perf_counter()
            return input_ids, None
        # the row that predicted the new anchor: the prefill's last; of a verification forward over
        # [anchor_prev, d_1..d_k], row n (the last accepted position)
        self.context.observe(self.recorder.forward_rows - 1 if self.is_prefill else int(n_last_matches))
        self.is_prefill = False
        budget = self.max_length - input_ids.shape[1] - 1
        proposal = self._propose(input_ids, budget) if budget > 0 else Proposal(None, [])
        tokens, logits = proposal.tokens, proposal.q
        if proposal.source == "lookup":
            tokens = torch.tensor([tokens], dtype=input_ids.dtype, device=input_ids.device)
        if proposal.source is not None and self.stop_strings and tokens.shape[1]:
            tokens, logits = self._cut_at_stop_string(input_ids, tokens, logits)
        if proposal.source is None or tokens.shape[1] == 0:  # nothing to propose: a plain one-token step
            if proposal.source is not None:  # skipped (draft_skip_threshold) or cut before the first draft
                self.stats.skipped += 1
            self._forward_started = time.perf_counter()
            return input_ids, None
        self._source_now = proposal.source
        self._drafted_now = tokens.shape[1]
        candidate_ids = torch.cat([input_ids, tokens.to(input_ids.device)], dim=1)
        self._forward_started = time.perf_counter()
        return candidate_ids, logits

    def _cut_at_stop_string(
        self, input_ids: torch.Tensor, tokens: torch.Tensor, logits: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Drop the drafts from the first one that completes a stop string on: transformers checks stop strings only
        after a round, so one may then complete only at the round's last (bonus) token, where plain decoding stops."""
        tail = input_ids[0, -16:].tolist()
        base = self.tokenizer.decode(tail)
        drafted = tokens[0].tolist()
        for m in range(1, len(drafted) + 1):
            text = self.tokenizer.decode(tail + drafted[:m])
            for stop in self.stop_strings:
                if text.find(stop, max(0, len(base) - len(stop) + 1)) != -1:
                    return tokens[:, : m - 1], None if logits is None else logits[:, : m - 1]
        return tokens, logits

    def update_candidate_strategy(self, input_ids: torch.LongTensor, scores: torch.Tensor, num_matches: int):
        """Called after each target forward: book-keeping only (K is fixed)."""
        stats = self.stats
        stats.target_time_s += time.perf_counter() - self._forward_started
        committed = input_ids.shape[1] - self._prompt_length - stats.new_tokens
        stats.new_tokens += committed
        stats.target_forwards += 1
        stats.tokens_per_forward.append(int(committed))
        stats.drafted_per_forward.append(int(self._drafted_now))
        if self._drafted_now:
            stats.rounds += 1
            stats.drafted += self._drafted_now
            stats.accepted += int(num_matches)
            if self._source_now == "lookup":
                stats.lookup_rounds += 1
                stats.lookup_drafted += self._drafted_now
                stats.lookup_accepted += int(num_matches)
        if committed > 0:
            self._committed(input_ids[0, -committed:].tolist())


class HybridCandidateGenerator(DLiteCandidateGenerator):
    """DLite plus a suffix index of the context (the active :class:`DraftSession`'s, else one per call):
    :func:`~.drafting.select_proposal` picks each round's source."""

    def __init__(self, drafter: nn.Module, target: nn.Module, generation_config: Any, *args: Any, **kwargs: Any):
        lookup_tokens = generation_config.prompt_lookup_num_tokens
        check_lookup_tokens(lookup_tokens)
        self.lookup_tokens = int(lookup_tokens)
        super().__init__(drafter, target, generation_config, *args, **kwargs)
        self.session = DraftSession.current() or DraftSession()
        # precedence: this call's GenerationConfig, then the session's, then the drafter config's
        min_match = self.options["lookup_min_match"]
        if getattr(generation_config, "lookup_min_match", None) is None and self.session.min_match is not None:
            min_match = self.session.min_match
        self.rule = HybridRule(
            min_match=int(min_match),
            length_factor=float(self.options["lookup_length_factor"]),
            fallback_min_match=int(self.options["lookup_fallback_min_match"]),
        )

    def _start(self, input_ids: torch.LongTensor) -> None:
        started = time.perf_counter()
        self.stats.lookup_index_reused = self.session.index.start_stream(input_ids[0].tolist())
        self.stats.lookup_time_s += time.perf_counter() - started

    def _propose(self, input_ids: torch.LongTensor, budget: int) -> Proposal:
        started = time.perf_counter()
        match = self.session.index.lookup(min(self.lookup_tokens, budget))
        self.stats.lookup_time_s += time.perf_counter() - started
        proposal = select_proposal(match, self.rule, lambda: self._draft(input_ids, budget))
        if proposal.fallback:
            self.stats.lookup_fallback_rounds += 1
        return proposal

    def _committed(self, tokens: list[int]) -> None:  # index what this forward committed
        started = time.perf_counter()
        self.session.index.append(tokens)
        self.stats.lookup_time_s += time.perf_counter() - started
