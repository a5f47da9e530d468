"""The `dlite-hf` command line. Each subcommand lives in its own module (`dlite_hf.commands`, `dlite_hf.bench.command`)
and imports what it needs lazily, so `dlite-hf --help` is fast."""

from __future__ import annotations

import argparse
import logging
import sys

from .commands.train import cmd_train, run_train

__all__ = ["build_parser", "main", "run_train"]


def build_parser() -> argparse.ArgumentParser:
    from .bench.command import add_bench_parser
    from .commands.assets import add_assets_parser
    from .commands.card import add_card_parser
    from .commands.compare import add_compare_parser
    from .commands.dataset import add_dataset_parser
    from .commands.draft_vocab import add_draft_vocab_parser, add_interpolate_parser
    from .commands.features import add_features_parser
    from .commands.mix import add_mix_parsers
    from .commands.regenerate import add_regenerate_parser
    from .commands.reliability import add_reliability_parser

    parser = argparse.ArgumentParser(prog="dlite-hf", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add_assets_parser(sub)
    add_compare_parser(sub)
    add_regenerate_parser(sub)
    add_bench_parser(sub)
    add_card_parser(sub)
    add_draft_vocab_parser(sub)
    add_interpolate_parser(sub)
    add_mix_parsers(sub)
    add_dataset_parser(sub)
    add_features_parser(sub)
    add_reliability_parser(sub)
    sub.add_parser(
        "train", help="Train a stage (teacher | warmup | stable); see `dlite-hf train --help`.", add_help=False
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if argv and argv[0] == "train":
        return cmd_train(argv[1:])
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
