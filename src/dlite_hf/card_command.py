"""`dlite-hf card` (placeholder wiring; the command is being written)."""

from __future__ import annotations

import argparse


def add_card_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("card", help="Render a model card (not implemented yet).")
    parser.set_defaults(func=_not_ready)


def _not_ready(args: argparse.Namespace) -> int:
    raise SystemExit("dlite-hf card is not implemented yet.")
