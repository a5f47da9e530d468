"""Helpers shared by the subcommands."""

from __future__ import annotations


def set_threads(threads: int | None) -> None:
    """Pin torch's intra-op threads (`--threads N`); None leaves torch's default."""
    if threads is not None and threads < 1:
        raise SystemExit(f"--threads {threads} is invalid: expected a positive integer (or leave it out).")
    if threads:
        import torch

        torch.set_num_threads(threads)


def parse_shard(text: str) -> tuple[int, int]:
    """`--shard I/N` as `(I, N)`; exits saying what is expected unless 0 <= I < N."""
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
        raise SystemExit(f"--shard {text!r} is invalid: expected I/N with 0 <= I < N, e.g. 0/2 and 1/2 (two workers).")
    return int(index), int(count)


def positive_int(flag: str, expected: str = "an integer >= 1"):
    """An argparse `type=` for counts: refuses a value below 1 with "FLAG VALUE is invalid: expected EXPECTED."
    (a SystemExit carrying the message, as the commands' other refusals), before anything loads."""

    def parse(text: str) -> int:
        value = int(text)
        if value < 1:
            raise SystemExit(f"{flag} {value} is invalid: expected {expected}.")
        return value

    parse.__name__ = "int"  # argparse's "invalid int value: 'x'" for what is not a number
    return parse
