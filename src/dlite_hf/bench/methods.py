"""The decoding methods a benchmark compares, each one set of `target.generate()` arguments.

==================  ==============================================================================================
``plain``           greedy decoding, one target forward per token: the reference for speed and for losslessness
``prompt_lookup``   transformers' prompt lookup decoding (``prompt_lookup_num_tokens=7``)
``dlite``           a history-free DLite drafter as ``assistant_model``, drafting as its config says
``dlite_fixed``     the same drafter drafting K tokens every round (both thresholds 0, the paper's decoding)
``hybrid``          the DLite drafter plus a suffix index of the session (one ``DraftSession`` across its turns)
``dlite_nohead``    the no-sequential-head ablation (``use_sequential_head=False``, DFlash-like)
``history``         a history-aware checkpoint (``history_window != 0``), as EAGLE / DSpark-style drafters
``assisted``        assisted decoding with a small assistant LM (universal when the vocabularies differ)
==================  ==============================================================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from torch import nn
from transformers import GenerationConfig

from ..modeling.candidate_generators import options_for_call
from ..modeling.decoding_options import DECODING_OPTIONS, DEFAULT_LOOKUP_TOKENS
from ..modeling.suffix_index import DraftSession

METHOD_CHOICES = ("plain", "prompt_lookup", "dlite", "dlite_fixed", "hybrid", "dlite_nohead", "history", "assisted")
DLITE_METHODS = ("dlite", "dlite_fixed", "hybrid", "dlite_nohead", "history")
# dlite_fixed: K drafts every round, never skipped nor stopped early (the paper's decoding)
FIXED_K_OVERRIDES: dict[str, Any] = {"draft_confidence_threshold": 0.0, "draft_skip_threshold": 0.0}
PROMPT_LOOKUP_TOKENS = 7  # K of DLite, so both methods verify blocks of the same size
HYBRID_LOOKUP_TOKENS = DEFAULT_LOOKUP_TOKENS  # the hybrid's cap on a retrieved draft
# the drafter config fields a results document records
DESCRIBED_FIELDS = (
    "history_window use_sequential_head num_draft_tokens target_layer_ids hidden_size num_hidden_layers head_rank "
    "draft_confidence_threshold draft_skip_threshold draft_lengths draft_vocab_size"
).split()


def weights_sha256(checkpoint: str | None) -> str | None:
    """sha256 of a checkpoint folder's `model.safetensors` (which weights a table was measured with), or None."""
    if checkpoint is None:
        return None
    from ..assets import sha256_file

    path = Path(checkpoint) / "model.safetensors"
    return sha256_file(path) if path.is_file() else None


@dataclass
class BenchMethod:
    """One method of a benchmark run."""

    name: str  # the label in the results (one of METHOD_CHOICES for the CLI; any string from Python)
    kind: str  # plain, prompt_lookup, dlite (any DLite checkpoint) or assisted
    model: nn.Module | None = None  # the drafter (dlite) or the assistant language model (assisted)
    assistant_tokenizer: Any = None  # assisted across vocabularies only: the assistant's tokenizer
    checkpoint: str | None = None  # where the model came from (recorded in the results)
    # dlite only: decoding options (DECODING_OPTIONS) passed per call in the GenerationConfig, so one drafter object
    # serves several methods; validated here
    drafter_overrides: dict[str, Any] = field(default_factory=dict)
    lookup_tokens: int | None = None  # hybrid only: the cap on a retrieved draft (prompt_lookup_num_tokens)
    lookup_min_match: int | None = None  # hybrid only: its sessions' DraftSession(min_match=...); None: the drafter's

    def new_session(self) -> Any:
        """A fresh `DraftSession` for one benchmark session (hybrid methods), or None."""
        return None if self.lookup_tokens is None else DraftSession(min_match=self.lookup_min_match)

    def __post_init__(self) -> None:
        if not self.drafter_overrides:
            return
        config = getattr(self.model, "config", None)
        if self.kind != "dlite" or config is None:
            raise ValueError(f"Method {self.name!r}: drafter_overrides apply to DLite drafters only.")
        unknown = sorted(set(self.drafter_overrides) - set(DECODING_OPTIONS))
        if unknown:
            raise ValueError(
                f"Method {self.name!r}: drafter_overrides names {unknown}, which a generate() call cannot set; "
                f"expected some of {', '.join(DECODING_OPTIONS)}."
            )
        options_for_call(SimpleNamespace(**self.drafter_overrides), config)  # validated now, not mid-run

    def generation_config(self, **settings: Any) -> GenerationConfig:
        """The `GenerationConfig` of one generate() call: `settings` plus :attr:`drafter_overrides` (the drafter's
        shared config is never changed)."""
        return GenerationConfig(**settings, **self.drafter_overrides)

    def generate_kwargs(self, tokenizer: Any) -> dict[str, Any]:
        """Arguments of `target.generate()` for this method (besides the inputs and the greedy settings)."""
        kwargs: dict[str, Any] = {}
        if self.kind == "prompt_lookup":
            kwargs["prompt_lookup_num_tokens"] = PROMPT_LOOKUP_TOKENS
        elif self.kind in ("dlite", "assisted"):
            kwargs["assistant_model"] = self.model
            if self.lookup_tokens is not None:
                kwargs["prompt_lookup_num_tokens"] = self.lookup_tokens
            if self.assistant_tokenizer is not None:
                kwargs.update(tokenizer=tokenizer, assistant_tokenizer=self.assistant_tokenizer)
        return kwargs

    def describe(self) -> dict[str, Any]:
        """JSON-ready description (the model's config summary, not its weights)."""
        info: dict[str, Any] = {"kind": self.kind, "checkpoint": self.checkpoint}
        if self.kind == "prompt_lookup":
            info["prompt_lookup_num_tokens"] = PROMPT_LOOKUP_TOKENS
        config = getattr(self.model, "config", None)
        if config is not None and self.kind == "dlite":
            info["drafter"] = {key: getattr(config, key, None) for key in DESCRIBED_FIELDS} | self.drafter_overrides
            if self.lookup_tokens is not None:
                min_match = self.lookup_min_match
                info["hybrid"] = {
                    "prompt_lookup_num_tokens": self.lookup_tokens,
                    "lookup_min_match": getattr(config, "lookup_min_match", None) if min_match is None else min_match,
                    "lookup_length_factor": getattr(config, "lookup_length_factor", None),
                    "lookup_fallback_min_match": self.drafter_overrides.get(
                        "lookup_fallback_min_match", getattr(config, "lookup_fallback_min_match", 0)
                    ),
                    "session_per_benchmark_session": True,
                }
            info["drafter"]["parameters"] = sum(p.numel() for p in self.model.parameters())
            info["drafter"]["weights_sha256"] = weights_sha256(self.checkpoint)
        elif config is not None:
            info["assistant"] = {
                "name_or_path": getattr(config, "_name_or_path", ""),
                "model_type": getattr(config, "model_type", ""),
                "parameters": sum(p.numel() for p in self.model.parameters()),
                "universal": self.assistant_tokenizer is not None,
            }
        return info


def parse_methods(spec: str | Iterable[str]) -> list[str]:
    """Split and validate a method list; ``plain`` is always run first (it is the reference)."""
    names = [m.strip() for m in (spec.split(",") if isinstance(spec, str) else spec) if m.strip()]
    if not names:
        raise ValueError(f"No method given ({spec!r}); allowed: {', '.join(METHOD_CHOICES)}.")
    unknown = [m for m in names if m not in METHOD_CHOICES]
    if unknown:
        raise ValueError(f"Unknown method(s) {', '.join(unknown)}; allowed: {', '.join(METHOD_CHOICES)}.")
    return ["plain", *dict.fromkeys(m for m in names if m != "plain")]


def check_drafter_kind(name: str, drafter: nn.Module, where: str = "") -> None:
    """Raise `ValueError` when a DLite checkpoint does not fit the method it was given for."""
    history = getattr(drafter.config, "history_window", 0)
    head = getattr(drafter.config, "use_sequential_head", True)
    source = f" ({where})" if where else ""
    if name == "history" and history == 0:
        raise ValueError(
            f"Method `history` needs a history-aware checkpoint (history_window != 0, e.g. the stage-0 teacher); "
            f"the drafter{source} has history_window=0. Pass it as --drafter (or --drafter-nohead) instead."
        )
    if name in ("dlite", "dlite_fixed", "hybrid", "dlite_nohead") and history != 0:
        raise ValueError(
            f"Method `{name}` needs a history-free drafter (history_window=0); the drafter{source} has "
            f"history_window={history}. Pass it as --drafter-history to benchmark it as the history-based drafter."
        )
    if name in ("dlite", "dlite_fixed", "hybrid") and not head:
        raise ValueError(
            f"The drafter{source} has no sequential head (use_sequential_head=False, the ablation). Pass it as "
            "--drafter-nohead, and a drafter with the head as --drafter."
        )
    if name == "dlite_nohead" and head:
        raise ValueError(
            f"Method `dlite_nohead` needs a checkpoint trained with use_sequential_head=False; the drafter{source} "
            "has the sequential head. Train the ablation with `dlite-hf train ... --no_sequential_head`."
        )


def make_method(
    name: str,
    spec: Any = None,
    checkpoint: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    lookup_tokens: int | None = None,
    lookup_min_match: int | None = None,
) -> BenchMethod:
    """A method from its name and ``spec``: a :class:`BenchMethod` (returned as is), None (``plain``,
    ``prompt_lookup``), a DLite drafter, or an assistant model or ``(model, assistant_tokenizer)`` (``assisted``).
    DLite methods take per-call ``overrides`` (``dlite_fixed``: K every round), the hybrid its lookup settings."""
    if isinstance(spec, BenchMethod):
        return spec
    if name in ("plain", "prompt_lookup"):
        if spec is not None:
            raise ValueError(f"Method `{name}` takes no model; got {type(spec).__name__}.")
        return BenchMethod(name, name)
    if name in DLITE_METHODS:
        if spec is None or not hasattr(spec, "get_candidate_generator"):
            raise ValueError(f"Method `{name}` needs a DLite drafter (DLiteForSpeculation); got {spec!r}.")
        check_drafter_kind(name, spec, where=checkpoint or "")
        overrides = dict(FIXED_K_OVERRIDES) if name == "dlite_fixed" else dict(overrides or {})
        lookup = {}
        if name == "hybrid":
            lookup = {"lookup_tokens": lookup_tokens or HYBRID_LOOKUP_TOKENS, "lookup_min_match": lookup_min_match}
        return BenchMethod(name, "dlite", spec, checkpoint=checkpoint, drafter_overrides=overrides, **lookup)
    if name == "assisted":
        model, assistant_tokenizer = spec if isinstance(spec, tuple) else (spec, None)
        if model is None:
            raise ValueError("Method `assisted` needs an assistant model (or a (model, tokenizer) pair).")
        return BenchMethod(name, "assisted", model, assistant_tokenizer, checkpoint=checkpoint)
    raise ValueError(
        f"Unknown method {name!r}; allowed: {', '.join(METHOD_CHOICES)} (or pass a BenchMethod for a custom one)."
    )


def make_methods(methods: Mapping[str, Any] | Iterable[BenchMethod]) -> list[BenchMethod]:
    """Normalise a ``{name: spec}`` mapping or a list of :class:`BenchMethod`; ``plain`` first, added if missing."""
    pairs = methods.items() if isinstance(methods, Mapping) else ((m.name, m) for m in methods)
    items = [make_method(n, s) for n, s in pairs]
    names = [m.name for m in items]
    if len(set(names)) != len(names):
        raise ValueError(f"Duplicate method names: {names}.")
    plain = next((m for m in items if m.kind == "plain" and m.name == "plain"), None)
    return [plain or BenchMethod("plain", "plain"), *(m for m in items if m is not plain)]
