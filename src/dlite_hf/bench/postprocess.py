"""`dlite-hf bench report | goals | tables`: what is done with a run's results document after the run.

    dlite-hf bench report benchmarks/results/RUN.json [MORE.json ...] [--plot]
    dlite-hf bench goals benchmarks/results/RUN.json [MORE.json ...]
    dlite-hf bench tables main RUN

``report`` recomputes a document's summary rows from its stored per-prompt records with the current report code
(a change to how the summary is computed applies to committed runs without re-timing anything) and rewrites its
summary, its goals (if it had them), its markdown and, with ``--plot``, its PNG plots; records, metadata and
divergence checks are left as they were. ``goals`` adds the benchmark's performance goals
(:mod:`dlite_hf.bench.goals`); ``tables`` prints the README's speed tables (:mod:`dlite_hf.bench.tables`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["add_postprocess_parsers", "resummarize"]


def add_postprocess_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``report``, ``goals`` and ``tables`` under `dlite-hf bench`."""
    report = sub.add_parser("report", help="recompute results documents' summaries from their records")
    report.add_argument("results", nargs="+", help="NAME.json files written by `dlite-hf bench --out DIR`")
    report.add_argument("--plot", action="store_true", help="also redraw the PNG plots beside each document")
    report.set_defaults(func=cmd_report)
    goals = sub.add_parser("goals", help="add the benchmark's performance goals to results documents")
    goals.add_argument("results", nargs="+", help="NAME.json files written by `dlite-hf bench --out DIR`")
    goals.set_defaults(func=cmd_goals)
    tables = sub.add_parser("tables", help="print a README speed table from a results document")
    tables.add_argument("table", choices=("main", "ood"))
    tables.add_argument("run", help="a run name in --results (or a path to its JSON)")
    tables.add_argument("--results", default="benchmarks/results", help="the folder of the run names")
    tables.set_defaults(func=cmd_tables)


def resummarize(path: str | Path, plots: bool = False) -> list[dict]:
    """Rewrite the results document at `path` (summary, goals, markdown, and with `plots` its PNGs); returns the new
    summary rows."""
    from .goals import evaluate_goals
    from .report import summarize, write_outputs

    path = Path(path)
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SystemExit(f"{path}: not a readable results document ({error}).") from None
    if not isinstance(result, dict) or "records" not in result or "workloads" not in result:
        raise SystemExit(f"{path}: not a `dlite-hf bench` results document (it has no records or workloads).")
    result["summary"] = summarize(result["records"], list(result["methods"]), list(result["workloads"]))
    if "goals" in result:
        result["goals"] = evaluate_goals(result["summary"])
    write_outputs(result, path.parent, path.stem, plots=plots)
    return result["summary"]


def cmd_report(args: argparse.Namespace) -> int:
    for path in args.results:
        resummarize(path, plots=args.plot)
        print(f"{path}: summary recomputed")
    return 0


def cmd_goals(args: argparse.Namespace) -> int:
    from .goals import add_goals
    from .report import goals_markdown

    for path in args.results:
        print(f"{path}:", *goals_markdown(add_goals(path)), sep="\n")
    return 0


def cmd_tables(args: argparse.Namespace) -> int:
    from .tables import HEADER, load, rows

    try:
        rendered = rows(load(args.run, args.results), args.table)
    except (OSError, ValueError) as error:
        raise SystemExit(str(error)) from None
    print(HEADER)
    print("\n".join(rendered.values()))
    return 0
