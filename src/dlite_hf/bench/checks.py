"""Checking a method's outputs of one turn against plain greedy's: the fastest repeat, its verdict fields, and
the lossless failure (a :class:`~dlite_hf.bench.results.Mismatch`) when it fails."""

from __future__ import annotations

import sys
from typing import Any

import torch

from ..neartie import first_difference
from .measure import _Runner
from .methods import BenchMethod
from .results import Mismatch, NearTie, Record

__all__ = ["Run", "check_runs", "report_mismatch"]

Run = tuple[torch.Tensor, dict[str, Any]]  # one measured generate(): (sequences, metrics)


def check_runs(
    runner: _Runner, method: BenchMethod, runs: list[Run], reference: torch.Tensor, prompt_length: int
) -> tuple[Run, dict[str, Any], str | None]:
    """The fastest of a method's runs of a turn, its verdict fields against plain's ``reference``, and why it
    fails the check (None when it passes): another output than plain's other than at a verified near-tie, or
    repeats that disagree with each other."""
    fastest = min(runs, key=lambda run: run[1]["wall_s"])
    unstable = [r for r, (other, _) in enumerate(runs) if not torch.equal(other, runs[-1][0])]
    sequences = fastest[0]
    difference = (
        None
        if method.name == "plain"
        else first_difference(reference[0, prompt_length:].tolist(), sequences[0, prompt_length:].tolist())
    )
    verdict = None if difference is None else runner.near_tie(prompt_length, reference, sequences)
    fields = {
        "identical_to_plain": difference is None,
        "first_mismatch": difference,
        "near_tie": NearTie(**verdict.to_dict()) if verdict is not None else None,
        "lossless_ok": not unstable and (difference is None or (verdict is not None and verdict.ok)),
    }
    reason = None
    if unstable:
        reason = (
            f"repeats {unstable} of {len(runs)} gave another output than the last repeat: greedy decoding from the "
            "same state must repeat exactly"
        )
    elif verdict is not None and not verdict.ok:
        reason = verdict.reason
    return fastest, fields, reason


def report_mismatch(record: Record, plain_new_tokens: int, reason: str | None, bar: Any) -> Mismatch:
    """The lossless failure of ``record``, said on stderr (through the progress bar) as soon as it is found."""
    mismatch = Mismatch(
        workload=record.workload,
        prompt_id=record.prompt_id,
        turn=record.turn,
        method=record.method,
        first_mismatch=record.first_mismatch,
        new_tokens=record.new_tokens,
        plain_new_tokens=plain_new_tokens,
        reason=reason,
    )
    why = f": {reason}" if reason is not None else ""
    bar.write(
        f"LOSSLESS CHECK FAILED: {record.method} on {record.workload} {record.prompt_id}: greedy output differs from "
        f"plain at new token {record.first_mismatch} ({mismatch.new_tokens} vs {mismatch.plain_new_tokens} new "
        f"tokens){why}.",
        file=sys.stderr,
    )
    return mismatch
