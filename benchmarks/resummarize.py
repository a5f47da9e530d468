"""Recompute a `dlite-hf bench` run's summary rows from its stored per-prompt records, with the current report code.

A results document keeps every prompt's record, so a change to how the summary is computed (e.g. speedup as a
tokens/s ratio rather than a wall-time ratio) can be applied to committed runs without re-timing anything::

    python benchmarks/resummarize.py benchmarks/results/smollm2-135m-main-bf16-packed.json [MORE.json ...]

rewrites each document's ``summary`` (and its goals, if it had them: `benchmarks/goals.py`), its markdown and its
plots in place. Records, metadata and divergence checks are left as they were.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from goals import evaluate_goals  # noqa: E402  (benchmarks/goals.py, beside this script)


def resummarize(path: str | Path) -> dict:
    """Rewrite the results document at `path` (summary, goals, markdown, plots); returns the new summary rows."""
    from dlite_hf.bench.report import summarize, write_outputs

    path = Path(path)
    result = json.loads(path.read_text(encoding="utf-8"))
    if "records" not in result or "workloads" not in result:
        raise ValueError(f"{path}: not a `dlite-hf bench` results document (it has no records or workloads)")
    result["summary"] = summarize(result["records"], list(result["methods"]), list(result["workloads"]))
    if "goals" in result:
        result["goals"] = evaluate_goals(result["summary"])
    plots = any(key.startswith("plot_") for key in result.get("files", {}))
    write_outputs(result, path.parent, path.stem, plots=plots)
    return result["summary"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="+", help="results documents (JSON) written by `dlite-hf bench`")
    for path in parser.parse_args(argv).results:
        resummarize(path)
        print(f"{path}: summary recomputed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
