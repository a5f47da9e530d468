"""The decoding options of a DLite drafter: one table of names and their checks.

The drafter config holds the defaults; one `generate()` call may override them through its `GenerationConfig`, and
dlite-hf's commands through flags; all three share the checks here. No torch, no transformers (vLLM uses it too).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

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


def _is_number(value: object, integer: bool = False) -> bool:
    """An int (or, unless `integer`, a float); never a bool."""
    return isinstance(value, int if integer else (int, float)) and not isinstance(value, bool)


def _check(valid: bool, shown: str, expected: str) -> None:
    if not valid:
        raise ValueError(f"{shown} is invalid: expected {expected}.")


def _check_fraction(name: str, value: Any, shown: str) -> None:
    _check(_is_number(value) and 0 <= value < 1, shown, f"a number in [0, 1): {THRESHOLD_MEANINGS[name]}")


def check_threshold(name: str, value: Any, where: str = "") -> None:
    """Raise `ValueError` unless `value` is a valid `name` (a key of `THRESHOLD_MEANINGS`); `where` prefixes the name
    in the message (e.g. "DLiteConfig.")."""
    _check_fraction(name, value, f"{where}{name}={value!r}")


def check_lookup_tokens(value: Any, shown: str | None = None) -> None:
    """The cap on a retrieved draft (`prompt_lookup_num_tokens` beside a DLite drafter); `shown` is how the caller
    spells the setting (default ``prompt_lookup_num_tokens=<value>``)."""
    if not _is_number(value, integer=True) or not 1 <= value <= MAX_LOOKUP_TOKENS:
        raise ValueError(
            f"{shown or f'prompt_lookup_num_tokens={value!r}'} is invalid: beside a DLite assistant_model it turns on "
            f"hybrid drafting and caps a retrieved draft; expected an int in [1, {MAX_LOOKUP_TOKENS}] "
            f"(e.g. {DEFAULT_LOOKUP_TOKENS}), or no prompt lookup for DLite drafts only."
        )


def check_min_match(value: Any, shown: str) -> None:
    expected = "an int >= 1 (the shortest matched suffix, in tokens, whose retrieved continuation a round drafts)"
    _check(_is_number(value, integer=True) and value >= 1, shown, expected)


def check_fallback_min_match(value: Any, shown: str) -> None:
    expected = "0 (off) or an int >= 1 (the shortest match drafted when the drafter proposes nothing)"
    _check(_is_number(value, integer=True) and value >= 0, shown, expected)


def check_length_factor(value: Any, shown: str) -> None:
    expected = "a number > 0 (retrieved draft tokens per matched token, e.g. 2.0)"
    _check(_is_number(value) and value > 0, shown, expected)


# Drafter config fields one generate() call may override through its `GenerationConfig` (kept there by transformers
# as custom entries; the shared drafter's config is never changed), each with its check `(value, shown)`, where
# `shown` is how the caller spelt it, e.g. ``GenerationConfig.lookup_min_match=0`` or ``--lookup-min-match 0``.
DECODING_OPTIONS: dict[str, Callable[[Any, str], None]] = {
    "draft_confidence_threshold": functools.partial(_check_fraction, "draft_confidence_threshold"),
    "draft_skip_threshold": functools.partial(_check_fraction, "draft_skip_threshold"),
    "lookup_min_match": check_min_match,
    "lookup_length_factor": check_length_factor,
    "lookup_fallback_min_match": check_fallback_min_match,
}
