"""generate(assistant_model=<DLite drafter>): the candidate generator and the one hook that routes to it.

The target's verification forward itself provides the drafter's input: forward hooks on the tapped decoder
layers keep only the rows the drafter can need (the last position of the prefill, the at most K + 1 rows of a
verification forward), so the drafter adds no target forward and its memory does not grow with the context.
History variants (`history_window != 0`, the teacher and sliding-window ablations) keep the states of every
accepted position instead, as a history-modelling drafter must.

Hybrid drafting (`prompt_lookup_num_tokens=N` beside the drafter) adds a suffix index of the context
(`suffix_index.py`): a round whose context suffix occurred before, at least `lookup_min_match` tokens long, drafts
what followed it there (at most N tokens, and `lookup_length_factor` per matched token); every other round asks the
drafter. A retrieved draft is
deterministic, so it is verified as a proposal with q = one-hot: no candidate logits, and transformers compares
the target's own choice (greedy) or sample (sampling) with it, which is exact speculative sampling for a one-hot q.
"""

from __future__ import annotations

import functools
import inspect
import math
import threading
import time
import warnings
import weakref
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn
from transformers.generation.candidate_generator import CandidateGenerator

from .configuration_dlite import check_threshold
from .suffix_index import (
    DraftSession,
    check_fallback_min_match,
    check_length_factor,
    check_lookup_tokens,
    check_min_match,
)

DECODING_OPTIONS = (
    "draft_confidence_threshold",
    "draft_skip_threshold",
    "lookup_min_match",
    "lookup_length_factor",
    "lookup_fallback_min_match",
)
"""Drafter config fields a single generate() call may override, through its `GenerationConfig`:
`target.generate(ids, generation_config=GenerationConfig(draft_confidence_threshold=0.5, ...), assistant_model=d)`.
The shared drafter's config is never changed (transformers carries such custom entries on the call's config)."""


def decoding_options(generation_config: Any, config: Any) -> dict[str, Any]:
    """The :data:`DECODING_OPTIONS` of one call: the call's `generation_config` value where set, else the drafter
    config's. A value set per call is validated here, with its origin in the message."""
    misspelt = sorted(
        key for key in vars(generation_config) if key.startswith(("draft_", "lookup_")) and key not in DECODING_OPTIONS
    )
    if misspelt:  # a custom GenerationConfig entry is kept whatever its name: an unknown one would be ignored
        raise ValueError(
            f"GenerationConfig has {', '.join(misspelt)}, which no DLite decoding option is called; expected some of "
            f"{', '.join(DECODING_OPTIONS)}."
        )
    options = {}
    for name in DECODING_OPTIONS:
        value = getattr(generation_config, name, None)
        if value is None:
            options[name] = getattr(config, name)
            continue
        shown = f"GenerationConfig.{name}={value!r}"
        if name.endswith("_threshold"):
            check_threshold(name, value, where="GenerationConfig.")
        elif name == "lookup_min_match":
            check_min_match(value, shown)
        elif name == "lookup_fallback_min_match":
            check_fallback_min_match(value, shown)
        else:
            check_length_factor(value, shown)
        options[name] = value
    return options


# The private method of transformers the hook wraps, and the parameters it must have (by name; others may come and
# go, and their order does not matter): what the hook reads, and what a DLite candidate generator needs.
_HOOKED_METHOD = "_get_candidate_generator"
_DECODING_METHOD = "_assisted_decoding"  # wrapped too: hook removal in a `finally`, a pre-filled cache (optional)
_LIVE_RECORDERS = "_dlite_live_recorders"  # target attribute: {thread id: [TappedStateRecorder]} of running calls
_REQUIRED_PARAMETERS = (
    "generation_config",
    "input_ids",
    "logits_processor",
    "model_kwargs",
    "assistant_model",
    "target_tokenizer",
    "assistant_tokenizer",
)


def find_decoder_layers(model: nn.Module, num_layers: int) -> nn.ModuleList:
    """The `nn.ModuleList` of the target's decoder layers (works through PEFT and multimodal wrappers)."""
    candidates = []
    getter = getattr(model, "get_decoder", None)
    if callable(getter):
        try:
            decoder = getter()
        except (AttributeError, NotImplementedError, ValueError):
            decoder = None
        if isinstance(getattr(decoder, "layers", None), nn.ModuleList):
            candidates.append(decoder.layers)
    candidates += [m for name, m in model.named_modules() if name.endswith("layers") and isinstance(m, nn.ModuleList)]
    for layers in candidates:
        if len(layers) == num_layers:
            return layers
    raise ValueError(
        f"Could not find the {num_layers} decoder layers of {type(model).__name__} (looked for an nn.ModuleList "
        "named `layers`). DLite reads hidden states from the target's decoder layers; this architecture is not "
        "supported yet."
    )


class TappedStateRecorder:
    """Forward hooks on the tapped target layers that keep only the rows the drafter can use.

    `rows_to_keep` > 0 keeps, of a forward over `n` positions, all rows if `n <= rows_to_keep` (a verification
    forward) and otherwise only the last row (a prefill); `rows_to_keep` = 0 keeps every row (history variants).
    Only forwards run on the thread that created the recorder are recorded, so concurrent generations on other
    threads cannot corrupt each other's states.
    """

    def __init__(self, layers: nn.ModuleList, layer_ids: list[int], rows_to_keep: int):
        self.layer_ids = list(layer_ids)
        self.rows_to_keep = rows_to_keep
        self.thread = threading.get_ident()
        self.states: dict[int, torch.Tensor] = {}
        self.offset = 0  # index, in the last forward, of the first kept row
        self.forward_rows = 0
        self._handles = [
            layers[i].register_forward_hook(functools.partial(self._hook, position))
            for position, i in enumerate(self.layer_ids)
        ]

    def _hook(self, position: int, module: nn.Module, args: Any, output: Any) -> None:
        if threading.get_ident() != self.thread:
            return
        hidden = output[0] if isinstance(output, (tuple, list)) else output
        rows = hidden.shape[1]
        if self.rows_to_keep and rows > self.rows_to_keep:
            kept = hidden[:, -1:].detach().clone()  # clone: a view would keep the whole prefill tensor alive
            offset = rows - 1
        else:
            kept, offset = hidden.detach(), 0
        self.states[position] = kept
        self.offset, self.forward_rows = offset, rows

    def rows(self, start: int, stop: int) -> torch.Tensor:
        """Rows `[start, stop)` of the last forward as `[B, stop - start, L, H_t]`."""
        if len(self.states) != len(self.layer_ids):
            raise RuntimeError(
                "The target's forward did not run through its tapped layers (no hidden states were recorded); "
                "DLite needs the target's decoder layers to run on this thread."
            )
        if start < self.offset or stop > self.offset + self.states[0].shape[1]:
            raise RuntimeError(f"Internal error: rows [{start}, {stop}) of the last target forward were not kept.")
        return torch.stack(
            [self.states[p][:, start - self.offset : stop - self.offset] for p in range(len(self.states))], 2
        )

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.states = {}


@dataclass
class DLiteGenerationStats:
    """Statistics of one `generate()` call with a DLite drafter, read from `drafter.last_generation_stats`.

    `drafter.last_generation_stats` is the call that started last on any thread (the usual streamer pattern runs
    `generate()` on a worker thread and reads it on the main one). Concurrent calls sharing a drafter each get
    their own through a `DraftSession` per call (`session.last_generation_stats`, set by every call made inside
    that session, hybrid or DLite alone).

    Attributes:
        new_tokens: tokens committed by the call.
        target_forwards: target forwards, the prefill included (so plain decoding would need `new_tokens`).
        rounds: draft-and-verify rounds (target forwards that verified a non-empty draft).
        drafted / accepted: draft tokens proposed / accepted by the target over all rounds.
        tokens_per_forward: tokens committed by each target forward, in order (the demo highlights these).
        drafter_time_s / target_time_s: wall time spent drafting / in the target's forwards and acceptance.
        skipped: forwards after a drafting attempt that proposed nothing (`draft_skip_threshold`, or a stop string
            completed by the first draft): plain one-token steps.
        lookup_rounds / lookup_drafted / lookup_accepted: hybrid drafting: the rounds that drafted the retrieved
            continuation, its tokens and the accepted ones (included in `rounds`, `drafted`, `accepted`); the
            drafter's share is the difference (`dlite_rounds`, ...).
        lookup_time_s: hybrid drafting: wall time spent indexing tokens and querying the suffix index (not in
            `drafter_time_s`, which counts the drafter's own work).
        lookup_index_reused: hybrid drafting with a `DraftSession`: prompt tokens already indexed by an earlier
            call of the session (not indexed again).
        lookup_fallback_rounds: hybrid drafting with `lookup_fallback_min_match`: the lookup rounds (counted in
            `lookup_rounds`) that drafted a short match because the drafter proposed nothing.
    """

    new_tokens: int = 0
    target_forwards: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    tokens_per_forward: list[int] = field(default_factory=list)
    drafter_time_s: float = 0.0
    target_time_s: float = 0.0
    skipped: int = 0
    lookup_rounds: int = 0
    lookup_drafted: int = 0
    lookup_accepted: int = 0
    lookup_time_s: float = 0.0
    lookup_index_reused: int = 0
    lookup_fallback_rounds: int = 0

    @property
    def dlite_rounds(self) -> int:
        return self.rounds - self.lookup_rounds

    @property
    def none_rounds(self) -> int:
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
        return {
            **asdict(self),
            "tau": self.tau,
            "acceptance_rate": self.acceptance_rate,
            "dlite_rounds": self.dlite_rounds,
            "none_rounds": self.none_rounds,
            "dlite_drafted": self.dlite_drafted,
            "dlite_accepted": self.dlite_accepted,
        }


class DLiteCandidateGenerator(CandidateGenerator):
    """Drafts K tokens per round from the target's latest hidden states; no KV cache, no history.

    Uses transformers' model-outputs protocol (`requires_model_outputs`) to know whether a round is the prefill
    and how many drafts were accepted; the hidden states come from hooks on the verification forward itself.
    """

    requires_model_outputs: bool = True
    model_kwargs_overrides: dict[str, Any] = {}  # nothing extra: no output_hidden_states for every position

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
        if input_ids.shape[0] != 1:
            raise ValueError(
                f"DLite speculative decoding through `generate(assistant_model=...)` supports batch size 1, got a "
                f"batch of {input_ids.shape[0]} sequences. transformers' assisted generation is single-sequence; "
                "batched speculative decoding needs a separate loop that dlite-hf does not provide yet (README, "
                "Limits). Call generate() once per prompt."
            )
        lookup_tokens = generation_config.prompt_lookup_num_tokens
        if lookup_tokens is not None:
            check_lookup_tokens(lookup_tokens)
        for option in ("assistant_early_exit", "use_mtp"):
            if getattr(generation_config, option, None) not in (None, False):
                raise ValueError(
                    f"generate() got a DLite assistant_model and {option}={getattr(generation_config, option)!r}; "
                    f"{option} is another speculative method (the target drafts for itself). Pass one of them."
                )
        if getattr(generation_config, "speculation_type", None) not in (None, "dlite"):
            raise ValueError(
                f"generate() got a DLite assistant_model with speculation_type={generation_config.speculation_type!r}"
                "; DLite drafters are used without speculation_type (or with speculation_type=None)."
            )
        # A vocabulary mismatch makes transformers ask for `tokenizer`/`assistant_tokenizer`; check the pair first so
        # the user who follows that advice learns the real problem (wrong target) instead of "remove the tokenizer".
        drafter.check_target(target)
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
        stop_strings = generation_config.stop_strings
        self.stop_strings = [stop_strings] if isinstance(stop_strings, str) else list(stop_strings or [])
        self.tokenizer = kwargs.get("target_tokenizer")
        if self.stop_strings and self.tokenizer is None:
            raise ValueError("stop_strings need the target's tokenizer: pass tokenizer=... to generate().")
        drafter.bind_target(target)
        self.drafter = drafter
        self.device = drafter.device
        requested = generation_config.num_assistant_tokens
        if requested is not None and int(requested) < 1:
            raise ValueError(f"num_assistant_tokens={requested} is invalid: expected >= 1 (it can only lower K).")
        k = int(config.num_draft_tokens)
        self.num_tokens = k if requested is None else min(k, int(requested))
        self.max_length = generation_config.max_length
        self.do_sample = bool(generation_config.do_sample)
        self.logits_processor = logits_processor if logits_processor is not None and len(logits_processor) else None
        self.history_window = config.history_window
        self.options = decoding_options(generation_config, config)
        # hybrid drafting: the session's suffix index (a fresh one per call outside `with DraftSession():`)
        self.lookup_tokens = lookup_tokens
        self.session: DraftSession | None = None
        active = DraftSession.current()  # its statistics are this call's, hybrid or not
        if lookup_tokens is not None:
            self.session = active or DraftSession()
            # precedence: this call's GenerationConfig, then the session's, then the drafter config's
            per_call = getattr(generation_config, "lookup_min_match", None) is not None
            self.min_match = int(
                self.options["lookup_min_match"]
                if per_call or self.session.min_match is None
                else self.session.min_match
            )
            self.length_factor = float(self.options["lookup_length_factor"])
        layers = find_decoder_layers(target, config.num_target_layers)
        rows = 0 if self.history_window != 0 else max(config.num_draft_tokens, lookup_tokens or 0) + 1
        self.recorder = TappedStateRecorder(layers, config.target_layer_ids, rows_to_keep=rows)
        # the hooks leave when the call ends, also when it raises (install_generate_hook's `_assisted_decoding`
        # wrapper), and at the latest with the generator
        target.__dict__.setdefault(_LIVE_RECORDERS, {}).setdefault(threading.get_ident(), []).append(self.recorder)
        weakref.finalize(self, self.recorder.remove)
        self.history: torch.Tensor | None = None  # [1, T, L, H_t] accepted states, history variants only
        self.is_prefill = True
        self.stats = DLiteGenerationStats()
        drafter.last_generation_stats = self.stats
        if active is not None:
            active.last_generation_stats = self.stats
        self._prompt_length = input_ids.shape[1]
        self._forward_started = 0.0
        self._drafted_now = 0
        self._source_now: str | None = None  # "lookup" or "dlite": who drafted the block being verified

    def _context_row(self, n_last_matches: int) -> int:
        # After the prefill the last prompt position predicted the anchor; after a verification forward over
        # [anchor_prev, d_1..d_k], row n (the last accepted position) predicted the new anchor.
        return self.recorder.forward_rows - 1 if self.is_prefill else n_last_matches

    def get_candidates(
        self,
        input_ids: torch.LongTensor,
        model_kwargs: dict[str, Any] | None = None,
        model_outputs: Any = None,
        is_first_iteration: bool = False,
        n_last_matches: int = 0,
        **kwargs: Any,
    ) -> tuple[torch.LongTensor, torch.Tensor | None]:
        if is_first_iteration:  # let the loop run the plain prefill; its hooks give the first context
            if self.session is not None:
                started = time.perf_counter()
                self.stats.lookup_index_reused = self.session.index.start_stream(input_ids[0].tolist())
                self.stats.lookup_time_s += time.perf_counter() - started
            self._forward_started = time.perf_counter()
            self._drafted_now = 0
            self._source_now = None
            return input_ids, None
        started = time.perf_counter()
        row = self._context_row(int(n_last_matches))
        if self.history_window != 0:  # history variants keep every accepted row, whichever source drafts
            accepted = self.recorder.rows(0, row + 1)
            self.history = accepted if self.history is None else torch.cat([self.history, accepted], 1)
        self.is_prefill = False
        self._drafted_now = 0
        self._source_now = None

        budget = self.max_length - input_ids.shape[1] - 1
        tokens = logits = match = None
        if self.session is not None and budget > 0:
            match = self.session.index.lookup(min(self.lookup_tokens, budget))
            if match.length >= self.min_match and match.continuation:
                tokens = self._retrieved(match, input_ids)
            looked_up = time.perf_counter()
            self.stats.lookup_time_s += looked_up - started
            started = looked_up
        if tokens is None and min(self.num_tokens, budget) > 0:
            tokens, logits = self._draft(input_ids, row, min(self.num_tokens, budget))
            self._source_now = "dlite"
            self.stats.drafter_time_s += time.perf_counter() - started
            fallback = self.options["lookup_fallback_min_match"]
            if not tokens.shape[1] and match is not None and fallback and match.length >= fallback:
                retrieved = self._retrieved(match, input_ids)  # the drafter skipped: a short match, not a 1-token step
                if retrieved is not None:
                    tokens, logits = retrieved, None
                    self.stats.lookup_fallback_rounds += 1
        if tokens is not None and self.stop_strings and tokens.shape[1]:
            tokens, logits = self._cut_at_stop_string(input_ids, tokens, logits)
        if tokens is None or tokens.shape[1] == 0:  # nothing to propose: a plain one-token step
            if tokens is not None:  # skipped (draft_skip_threshold) or cut before the first draft
                self.stats.skipped += 1
            self._source_now = None
            self._forward_started = time.perf_counter()
            return input_ids, None
        self._drafted_now = tokens.shape[1]
        candidate_ids = torch.cat([input_ids, tokens.to(input_ids.device)], dim=1)
        self._forward_started = time.perf_counter()
        return candidate_ids, logits

    def _retrieved(self, match: Any, input_ids: torch.Tensor) -> torch.Tensor | None:
        """The retrieved draft of a suffix-index match (at most `lookup_length_factor` tokens per matched token, at
        least 1), marking the round as a lookup round; None if the match has no continuation."""
        if not match.continuation:
            return None
        length = max(1, math.ceil(self.length_factor * match.length))
        self._source_now = "lookup"
        return torch.tensor([match.continuation[:length]], dtype=input_ids.dtype, device=input_ids.device)

    def _draft(self, input_ids: torch.Tensor, row: int, budget: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The drafter's round: up to `budget` tokens after the anchor `input_ids[:, -1]`."""
        history = None
        if self.history_window != 0:
            context = self.history[:, -1]
            past = self.history[:, :-1]
            if self.history_window > 0:
                past = past[:, -self.history_window :]
            if past.shape[1] > 0:
                span = past.shape[1]
                history = (
                    past.to(self.device),
                    torch.ones(1, span, dtype=torch.bool, device=self.device),
                    -torch.arange(span, 0, -1, device=self.device)[None],
                )
            else:  # no past position yet: a one-position dummy, masked
                dims = context.shape[1:]
                history = (
                    context.new_zeros(1, 1, *dims),
                    torch.zeros(1, 1, dtype=torch.bool, device=self.device),
                    -torch.ones(1, 1, dtype=torch.long, device=self.device),
                )
        else:
            context = self.recorder.rows(row, row + 1)[:, 0]
        history_kwargs = (
            dict(zip(("history_states", "history_valid", "history_positions"), history)) if history else {}
        )
        return self.drafter.draft(
            context.to(self.device),
            input_ids[:, -1].to(self.device),
            num_tokens=budget,
            do_sample=self.do_sample,
            logits_processor=self.logits_processor,
            confidence_threshold=self.options["draft_confidence_threshold"],
            skip_threshold=self.options["draft_skip_threshold"],
            prefix_ids=input_ids.to(self.device),
            **history_kwargs,
        )

    def _cut_at_stop_string(
        self, input_ids: torch.Tensor, tokens: torch.Tensor, logits: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Drop the drafts from the first one that completes a stop string on.

        transformers stops on stop strings only after a round, so a stop string completed inside an accepted block
        would let the rest of the block through; plain decoding would have stopped right there. Keeping drafts
        only up to the token before it means a stop string can complete only at the round's last committed token
        (the target's own bonus token), exactly where plain decoding stops.
        """
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
        if self._drafted_now:
            stats.rounds += 1
            stats.drafted += self._drafted_now
            stats.accepted += int(num_matches)
            if self._source_now == "lookup":
                stats.lookup_rounds += 1
                stats.lookup_drafted += self._drafted_now
                stats.lookup_accepted += int(num_matches)
        if self.session is not None and committed > 0:  # index what this forward committed
            started = time.perf_counter()
            self.session.index.append(input_ids[0, -committed:].tolist())
            stats.lookup_time_s += time.perf_counter() - started


def _hook_problem(method: Any) -> str | None:
    """Why `method` cannot be wrapped (a parameter the hook reads is gone), or None if it can."""
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError) as error:
        return f"its signature cannot be read ({error})"
    missing = [name for name in _REQUIRED_PARAMETERS if name not in parameters]
    if missing:
        return f"it has no parameter {', '.join(missing)} (it has {', '.join(parameters)})"
    return None


def install_generate_hook() -> bool:
    """Route `generate(assistant_model=m)` to `m.get_candidate_generator(...)` when `m` provides one.

    Idempotent (also across the package copy and a trust_remote_code copy of this file): every other case runs
    transformers' original `_get_candidate_generator` unchanged. The wrapper dispatches on the assistant's
    capability (a `get_candidate_generator` method) and reads the parameters it needs by name, so a transformers
    release that adds, removes or reorders other parameters keeps working. If the method is gone or lost one of
    those parameters, nothing is wrapped: a warning says so, every other generation mode is untouched, and
    `generate(assistant_model=<DLite drafter>)` raises transformers' own error for an unknown assistant.
    Returns whether the hook is installed.
    """
    from transformers.generation.utils import GenerationMixin

    original = getattr(GenerationMixin, _HOOKED_METHOD, None)
    if getattr(original, "_dlite_hook", False):
        return True
    problem = "it does not exist" if original is None else _hook_problem(original)
    if problem is not None:
        import transformers

        warnings.warn(
            f"dlite-hf cannot route generate(assistant_model=<DLite drafter>) on transformers "
            f"{transformers.__version__}: GenerationMixin.{_HOOKED_METHOD} changed ({problem}). Every other "
            "generation mode works unchanged; for DLite drafting install a tested transformers (constraints.txt) "
            "or a newer dlite-hf.",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    signature = inspect.signature(original)

    @functools.wraps(original)
    def _get_candidate_generator(self, *args, **kwargs):
        assistant = None
        try:
            arguments = signature.bind(self, *args, **kwargs).arguments
            assistant = arguments.get("assistant_model")
        except TypeError:  # not a call this wrapper understands: transformers decides
            arguments = {}
        factory = getattr(assistant, "get_candidate_generator", None)
        if assistant is not None and callable(factory):
            return factory(
                target=self,
                generation_config=arguments["generation_config"],
                input_ids=arguments["input_ids"],
                logits_processor=arguments.get("logits_processor"),
                model_kwargs=arguments.get("model_kwargs"),
                target_tokenizer=arguments.get("target_tokenizer"),
                assistant_tokenizer=arguments.get("assistant_tokenizer"),
            )
        return original(self, *args, **kwargs)

    _get_candidate_generator._dlite_hook = True
    _get_candidate_generator._dlite_original = original
    setattr(GenerationMixin, _HOOKED_METHOD, _get_candidate_generator)
    _install_assisted_wrapper(GenerationMixin)
    _install_mode_check()
    return True


def _install_assisted_wrapper(mixin: type) -> None:
    """Wrap `_assisted_decoding` so that a call's forward hooks are removed when it ends, also when it raises
    (otherwise they stay on the target while the exception is alive). If the method is gone, the generator's
    finalizer still removes them, later.

    The wrapper also makes a pre-filled cache work (`generate(full_ids, past_key_values=cache)` where the cache
    holds a prefix of `full_ids`: the previous turn of a conversation). Plain decoding then runs its prefill over
    the uncached tokens only; transformers' assisted loop runs its first forward over all of `full_ids` on top of
    the cache, which duplicates the prefix (wrong output, for prompt lookup as for any assistant). During such a
    call, and only then, the target's `prepare_inputs_for_generation` is shadowed on the instance so that the first
    iteration keeps the uncached tokens, as `_prefill` does; the shadow is removed when the call ends."""
    original = getattr(mixin, _DECODING_METHOD, None)
    if original is None or getattr(original, "_dlite_hook", False):
        return

    @functools.wraps(original)
    def _assisted_decoding(self, *args, **kwargs):
        shadowed = _slice_first_forward_to_uncached(self, kwargs)
        try:
            return original(self, *args, **kwargs)
        finally:
            if shadowed:
                del self.prepare_inputs_for_generation
            live = self.__dict__.get(_LIVE_RECORDERS)
            for recorder in live.pop(threading.get_ident(), []) if live else []:
                recorder.remove()

    _assisted_decoding._dlite_hook = True
    _assisted_decoding._dlite_original = original
    setattr(mixin, _DECODING_METHOD, _assisted_decoding)


def _slice_first_forward_to_uncached(model: Any, model_kwargs: dict[str, Any]) -> bool:
    """If this assisted call starts on a cache that already holds `past` tokens, shadow the instance's
    `prepare_inputs_for_generation` so that the first iteration's forward covers only the tokens after them.
    Returns whether it did (the caller removes the shadow)."""
    cache = model_kwargs.get("cache", model_kwargs.get("past_key_values"))
    get_length = getattr(cache, "get_seq_length", None)
    past = get_length() if callable(get_length) else 0
    if not past or "prepare_inputs_for_generation" in model.__dict__:
        return False
    prepare = model.prepare_inputs_for_generation

    def prepare_inputs_for_generation(input_ids, *args, **kwargs):
        first = kwargs.get("is_first_iteration") and kwargs.get("next_sequence_length") is None and not args
        if first:  # the full ids (the candidate generators need them) on the cache
            if input_ids.shape[1] <= past:
                raise ValueError(
                    f"generate() got input_ids of {input_ids.shape[1]} tokens and a cache that already holds {past}: "
                    "assisted decoding needs the whole sequence as input_ids (the cached prefix, then at least one "
                    "new token). Pass the full ids, or crop the cache to a prefix of them (cache.crop(-n))."
                )
            kwargs["next_sequence_length"] = input_ids.shape[1] - past
        return prepare(input_ids, *args, **kwargs)

    model.prepare_inputs_for_generation = prepare_inputs_for_generation
    return True


def _install_mode_check() -> None:
    """Refuse a DLite assistant in a generation mode that would ignore it (beam search, contrastive search,
    constrained decoding): transformers only warns and decodes without it (public `get_generation_mode`)."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import GenerationMode

    original = GenerationConfig.get_generation_mode
    if getattr(original, "_dlite_hook", False):
        return

    @functools.wraps(original)
    def get_generation_mode(self, assistant_model=None, *args, **kwargs):
        mode = original(self, assistant_model, *args, **kwargs)
        drafter = callable(getattr(assistant_model, "get_candidate_generator", None))
        if drafter and mode != GenerationMode.ASSISTED_GENERATION:
            raise ValueError(
                f"A DLite drafter drafts for greedy search and sampling only, but this call's settings select "
                f"{getattr(mode, 'value', mode)} (num_beams={self.num_beams}, penalty_alpha={self.penalty_alpha}, "
                f"constraints={'set' if self.constraints is not None else None}); transformers would run it "
                "without the drafter. Use num_beams=1 (greedy or do_sample=True), or leave out assistant_model."
            )
        return mode

    get_generation_mode._dlite_hook = True
    get_generation_mode._dlite_original = original
    GenerationConfig.get_generation_mode = get_generation_mode
