"""`dlite-hf bench` (placeholder wiring; the benchmark is being written)."""

from __future__ import annotations

import argparse


def add_bench_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bench", help="Benchmark methods side by side (not implemented yet).")
    parser.set_defaults(func=_not_ready)


def _not_ready(args: argparse.Namespace) -> int:
    raise SystemExit("dlite-hf bench is not implemented yet.")
