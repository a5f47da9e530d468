"""`dlite-hf card`: render a drafter's model card from its checkpoint and a bench result, and check cards.

    dlite-hf card --checkpoint drafters/dlite-smollm2-135m --bench-result benchmarks/results/RUN.json \\
        --repo-id ORG/dlite-smollm2-135m --out hub_cards/dlite-smollm2-135m.md
    dlite-hf card --check hub_cards/*.md

Bench result formats accepted by ``--bench-result`` (JSON):

1. the document ``dlite-hf bench`` writes (``benchmarks/README.md``): its ``summary`` rows are used
   (``workload``, ``method``, ``prompts``, ``mean_tau``, ``tok_s``, ``speedup``, ``lossless``);
2. a plain list of rows, or ``{"rows": [...]}``, each row ``{"workload": str, "method": str, "tau": float,
   "speedup": float}`` plus optionally ``prompts`` (int), ``tok_s`` (float) and ``lossless`` (bool).

The card names the file as the source of every number in its results table, and every number there is that
file's value rounded for display (``check_card`` verifies it). Figures quoted from the paper belong in a table
labelled as the paper's (``render_model_card(..., results_are_paper=True)``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..card_check import check_card  # the checks
from ..cards import card_from_checkpoint  # the renderer (also the trainer's and hub_cards/render_paper_cards.py's)

__all__ = ["add_card_parser"]


def add_card_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `card` subcommand."""
    parser = sub.add_parser(
        "card",
        help="Render a drafter's model card from its checkpoint and a bench result (or --check cards).",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--checkpoint", help="drafter folder (config.json, model.safetensors, dlite_training.json)")
    parser.add_argument("--bench-result", default=None, help="bench result JSON (see above); its path is cited")
    parser.add_argument("--repo-id", default=None, help="Hub repository of the drafter, e.g. ORG/dlite-smollm2-135m")
    parser.add_argument("--base-model", default=None, help="Hub id of the target (default: from the config)")
    parser.add_argument("--title", default=None)
    parser.add_argument("--license", default="apache-2.0")
    parser.add_argument("--methods", default=None, help="comma-separated methods to keep (default: all rows)")
    parser.add_argument(
        "--limit", action="append", default=[], help="an extra line for the Limits section (repeatable)"
    )
    parser.add_argument("--out", default=None, help="output file (default: CHECKPOINT/README.md; '-' = stdout)")
    parser.add_argument("--check", nargs="+", metavar="CARD", help="only check these cards; exit 1 on a problem")
    parser.set_defaults(func=cmd_card)


def cmd_card(args: argparse.Namespace) -> int:
    if args.check:
        failed = 0
        for name in args.check:
            problems = check_card(Path(name).read_text(encoding="utf-8"))
            failed += bool(problems)
            print(f"{name}: " + ("ok" if not problems else "\n  " + "\n  ".join(problems)))
        return 1 if failed else 0
    if not args.checkpoint:
        raise SystemExit("dlite-hf card needs --checkpoint DIR (or --check CARD ...).")
    card = card_from_checkpoint(
        args.checkpoint,
        args.bench_result,
        repo_id=args.repo_id,
        base_model=args.base_model,
        title=args.title,
        license=args.license,
        methods=args.methods.split(",") if args.methods else None,
        extra_limits=args.limit,
    )
    problems = check_card(card)
    if problems:
        raise SystemExit("The rendered card is invalid:\n  " + "\n  ".join(problems))
    if args.out == "-":
        sys.stdout.write(card)
        return 0
    out = Path(args.out) if args.out else Path(args.checkpoint) / "README.md"
    if not args.out and out.is_symlink():  # e.g. the shipped drafter's README is a link into hub_cards/
        raise SystemExit(
            f"{out} is a link to {out.resolve()}; writing the card there would overwrite that file. Pass "
            f"--out {out.resolve()} to update it on purpose, another --out path, or --out - to print the card."
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(card, encoding="utf-8")
    print(out)
    return 0
