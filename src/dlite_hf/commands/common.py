"""Helpers shared by the subcommands (and the demo's flags)."""

from __future__ import annotations

import argparse
import contextlib

DTYPE_HELP = (
    "the models' dtype (fastest: bfloat16 where this machine computes it natively, else float32; float32 is "
    "token-exact, in bfloat16/float16 each divergence from plain must be a float32-verified near-tie; auto: the "
    "checkpoint's own)"
)
ATTENTION_HELP = "the target's attention (packed_gqa: dlite_hf.attention, measured fastest; sdpa: transformers' own)"


def add_command(sub: argparse._SubParsersAction, name: str, help: str, func, doc: str | None = None):
    """Register the subcommand ``name`` (``help`` in the command list) to run ``func`` (None: its own subcommands
    set theirs); ``doc``, its description (a module docstring), is shown as laid out. Returns its parser."""
    parser = sub.add_parser(name, help=help, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if func is not None:
        parser.set_defaults(func=func)
    return parser


def set_threads(threads: int | None) -> None:
    """Pin torch's intra-op threads (`--threads N`); None leaves torch's default."""
    if threads is not None and threads < 1:
        raise SystemExit(f"--threads {threads} is invalid: expected a positive integer (or leave it out).")
    if threads:
        import torch

        torch.set_num_threads(threads)


@contextlib.contextmanager
def exit_on_error(prefix: str, *errors: type[Exception]):
    """Exit with "PREFIX: ERROR" (``prefix`` empty: the error's own message) when one of ``errors`` is raised inside:
    a command's message, not a traceback."""
    try:
        yield
    except errors as error:
        raise SystemExit(f"{prefix}: {error}" if prefix else str(error)) from None


def open_target_flagged(name_or_path: str, dtype: str, attention: str, pack_weights: bool = False):
    """`assets.open_target` for a command: with `--pack-weights`, a ValueError exits labelled with the flag."""
    from ..assets import open_target

    with exit_on_error("--pack-weights", ValueError) if pack_weights else contextlib.nullcontext():
        return open_target(name_or_path, dtype=dtype, attention=attention, pack_weights=pack_weights)


def command_flags(values: dict, dests: list[str]) -> list[str]:
    """Options as typed: a switch alone, a value after its flag (0 included); unset (None, False, "") left out."""
    parts: list[str] = []
    for flag, value in (("--" + dest.replace("_", "-"), values[dest]) for dest in dests):
        if value is True or (value is not None and value is not False and value != ""):
            parts += [flag] if value is True else [flag, str(value)]
    return parts


def parse_shard(text: str) -> tuple[int, int]:
    """`--shard I/N` as `(I, N)`; exits saying what is expected unless 0 <= I < N."""
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
        raise SystemExit(f"--shard {text!r} is invalid: expected I/N with 0 <= I < N, e.g. 0/2 and 1/2 (two workers).")
    return int(index), int(count)


def positive_int(flag: str, expected: str = "an integer >= 1"):
    """An argparse `type=` for counts: a value below 1 exits with "FLAG VALUE is invalid: expected EXPECTED."."""

    def parse(text: str) -> int:
        value = int(text)
        if value < 1:
            raise SystemExit(f"{flag} {value} is invalid: expected {expected}.")
        return value

    parse.__name__ = "int"  # argparse's "invalid int value: 'x'" for what is not a number
    return parse
