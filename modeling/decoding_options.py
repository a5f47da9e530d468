"""The decoding options of a DLite drafter: one table of names and their checks.

The drafter config holds the defaults; one `generate()` call may override them through its `GenerationConfig`, and
dlite-hf's commands through flags; all three share the checks here. No torch, no transformers (vLLM uses it too).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = [
    "DECODING_OPTIONS",
    "DEFAULT_LOOKUP_TOKENS",
    "MAX_LOOKUP_TOKENS",
    "THRESHOLD_MEANINGS",
    "check_fallback_min_match",
    "check_length_factor",
    "check_lookup_tokens",
    "check_min_match",
    "check_threshold",
]

THRESHOLD_MEANINGS = {
    "draft_confidence_threshold": "0 drafts K tokens every round, e.g. 0.1 stops where the drafts' joint probability "
    "under the drafter falls below 10%",
    "draft_skip_threshold": "0 never skips a round's drafts, e.g. 0.5 skips them when the most likely first draft's "
    "probability under the drafter is below 50%",
}

# The cap on a retrieved draft (`prompt_lookup_num_tokens`) that dlite-hf's own commands use (chosen on the tuning
# split by `dlite-hf bench replay hybrid`).
DEFAULT_LOOKUP_TOKENS = 32
MAX_LOOKUP_TOKENS = 256


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_fraction(name: str, value: object, shown: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{shown} is invalid: expected a number in [0, 1): {THRESHOLD_MEANINGS[name]}.")


def check_threshold(name: str, value: Any, where: str = "") -> None:
    """Raise `ValueError` unless `value` is a valid `name` (a key of `THRESHOLD_MEANINGS`): a number in [0, 1).
    `where` prefixes the name in the message (e.g. "DLiteConfig.")."""
    _check_fraction(name, value, f"{where}{name}={value!r}")


def check_lookup_tokens(value: object, shown: str | None = None) -> None:
    """Raise `ValueError` unless `value` is a valid cap on a retrieved draft (`prompt_lookup_num_tokens` beside a
    DLite drafter); `shown` is how the caller spells the setting (default ``prompt_lookup_num_tokens=<value>``)."""
    if not _is_int(value) or not 1 <= value <= MAX_LOOKUP_TOKENS:
        raise ValueError(
            f"{shown or f'prompt_lookup_num_tokens={value!r}'} is invalid: beside a DLite assistant_model it turns on "
            f"hybrid drafting and caps a retrieved draft; expected an int in [1, {MAX_LOOKUP_TOKENS}] "
            f"(e.g. {DEFAULT_LOOKUP_TOKENS}), or no prompt lookup for DLite drafts only."
        )


def check_min_match(value: object, shown: str) -> None:
    """Raise `ValueError` unless `value` is a valid shortest match (tokens) whose continuation a round drafts."""
    if not _is_int(value) or value < 1:
        raise ValueError(
            f"{shown} is invalid: expected an int >= 1 (the shortest matched suffix, in tokens, whose retrieved "
            "continuation a hybrid round drafts)."
        )


def check_fallback_min_match(value: object, shown: str) -> None:
    """Raise `ValueError` unless `value` is a valid fallback match length: 0 (off) or an int >= 1."""
    if not _is_int(value) or value < 0:
        raise ValueError(
            f"{shown} is invalid: expected 0 (off) or an int >= 1 (the shortest matched suffix whose retrieved "
            "continuation a hybrid round drafts when the drafter proposes nothing)."
        )


def check_length_factor(value: object, shown: str) -> None:
    """Raise `ValueError` unless `value` is a valid cap on retrieved draft tokens per matched token."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(
            f"{shown} is invalid: expected a number > 0 (retrieved draft tokens per matched token, e.g. 2.0)."
        )


# Drafter config fields one generate() call may override through its `GenerationConfig` (kept there by transformers
# as custom entries; the shared drafter's config is never changed), each with its check `(value, shown)`, where
# `shown` is how the caller spelt it, e.g. ``GenerationConfig.lookup_min_match=0`` or ``--lookup-min-match 0``.
DECODING_OPTIONS: dict[str, Callable[[object, str], None]] = {
    "draft_confidence_threshold": functools.partial(_check_fraction, "draft_confidence_threshold"),
    "draft_skip_threshold": functools.partial(_check_fraction, "draft_skip_threshold"),
    "lookup_min_match": check_min_match,
    "lookup_length_factor": check_length_factor,
    "lookup_fallback_min_match": check_fallback_min_match,
}
