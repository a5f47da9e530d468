"""The defaults the command line, the benchmark and the demo share: the target, its shipped drafter, the dtype.

A leaf module (it imports nothing from the package), so every front end can read it without import cycles.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "ATTENTION_CHOICES",
    "DEFAULT_ATTENTION",
    "DEFAULT_DTYPE",
    "DEFAULT_TARGET",
    "DTYPE_CHOICES",
    "check_attention",
    "check_dtype",
    "default_drafter_dir",
]

DEFAULT_TARGET = "smollm2-135m"
"""The registry name of the default target (see :data:`dlite_hf.assets.MODELS`)."""

DTYPE_CHOICES = ("float32", "bfloat16", "float16", "auto")
"""What `--dtype` accepts everywhere: a torch floating dtype, or `auto` (the checkpoint's own `config.dtype`)."""

DEFAULT_DTYPE = "bfloat16"
"""The dtype `dlite-hf compare`, `make run` and the demo serve in: the mode measured fastest end to end on the
development machine (the main benchmark in four modes, `benchmarks/results/smollm2-135m-main*.json`;
`tests/test_dtypes.py` checks that the committed results still say so, with :data:`DEFAULT_ATTENTION`). bfloat16
greedy decoding is near-tie-exact (every divergence from plain bfloat16 greedy is a float32-verified near-tie); pass
`--dtype float32` for the token-exact mode."""

ATTENTION_CHOICES = ("sdpa", "packed_gqa")
"""What `--attention` accepts: transformers' `sdpa`, or `packed_gqa` (`dlite_hf.attention`: the same SDPA kernel
with a grouped-query model's query heads packed into rows, much faster for short queries in bfloat16 on CPU)."""

DEFAULT_ATTENTION = "packed_gqa"
"""The attention `dlite-hf compare`, `make run` and the demo load the target with (measured fastest: README)."""


def _check_choice(kind: str, name: str, choices: tuple[str, ...], hint: str, shown: str) -> str:
    if name not in choices:
        raise ValueError(f"{shown}={name!r} is not a supported {kind}: expected one of {', '.join(choices)} ({hint}).")
    return name


def check_dtype(name: str, shown: str = "dtype") -> str:
    """Return `name` if it is one of :data:`DTYPE_CHOICES`; raise `ValueError` saying what was given otherwise."""
    return _check_choice("dtype", name, DTYPE_CHOICES, "auto: the checkpoint's own dtype, from its config.json", shown)


def check_attention(name: str, shown: str = "attention") -> str:
    """Return `name` if it is one of :data:`ATTENTION_CHOICES`; raise `ValueError` saying what was given otherwise."""
    return _check_choice("attention", name, ATTENTION_CHOICES, "packed_gqa: dlite_hf.attention, opt-in", shown)


def repo_root() -> Path:
    """The dlite-hf checkout this package runs from (an installed wheel's site-packages parent otherwise)."""
    return Path(__file__).resolve().parents[2]


DEFAULT_DRAFTER = "dlite-smollm2-135m"
"""The drafter the CLI and the demo use when none is given: a name of `dlite_hf.assets.registry.DRAFTERS`."""


SHIPPED_DRAFTER_NOTE = (
    "the trained SmolLM2-135M drafter ships in the dlite-hf repository as drafters/dlite-smollm2-135m (a checkout "
    "finds it; an installed wheel does not include it): pass --drafter PATH to that folder or to any drafter saved "
    "by `dlite-hf train`"
)


def default_drafter_dir() -> Path:
    """The checkout's copy of :data:`DEFAULT_DRAFTER` (see :data:`SHIPPED_DRAFTER_NOTE`); commands find it by name
    (`dlite_hf.assets.resolve_drafter`), so another copy may be used instead."""
    return repo_root() / "drafters" / DEFAULT_DRAFTER
