"""The README's speed tables, rendered from a committed bench result (`dlite-hf bench tables main|ood RUN`): the
header and one row per workload, plain's tokens/s then `mean tau / speedup` per method, the fastest in bold
(`tests/test_readme_figures.py` checks the README against it).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .results import BenchResult, as_result, load_result

RESULTS = Path("benchmarks") / "results"  # where `dlite-hf bench` writes by default (--out)
METHODS = ("prompt_lookup", "dlite", "dlite_fixed", "hybrid")
HEADER = (
    "| workload | plain tok/s | prompt lookup | DLite (shipped) | DLite, K every round | **hybrid** |\n"
    "|---|---:|---:|---:|---:|---:|"
)
# README label of each workload (a `{n}` is the row's prompt count)
LABELS: dict[str, dict[str, str]] = {
    "main": {
        "chat": "chat (MT-bench)",
        "code": "code (HumanEval)",
        "math": "math (ASDiv)",
        "tool": "tool (BFCL)",
        "agentic": "agentic (ToolTalk, coding session; {n} turns)",
        "long-1024": "long 1k (essays)",
        "long-4096": "long 4k",
        "all": "all ({n})",
    },
    "ood": {
        "legal": "legal (MultiLexSum)",
        "clinical": "clinical (MTS-Dialog)",
        "long-1024": "long 1k (essays; this run)",
        "all": "all ({n})",
    },
}


def load(run: str, results: str | Path = RESULTS) -> BenchResult:
    """A result document by run name (`RESULTS/RUN.json`) or path, typed and checked."""
    path = Path(run) if run.endswith(".json") else Path(results) / f"{run}.json"  # names may hold dots (qwen2.5-...)
    if not path.is_file():
        raise FileNotFoundError(f"No bench result {path}: pass a run name from {results}/ or a JSON path.")
    return load_result(path)


def rows(result: BenchResult | Mapping[str, Any], table: str) -> dict[str, str]:
    """`{workload: README row}` of `table` ("main" or "ood") for the workloads the run measured."""
    if table not in LABELS:
        raise ValueError(f"table={table!r}: expected one of {sorted(LABELS)}.")
    summary = as_result(result).rows_by_key()
    measured = {method for _, method in summary}
    missing = [m for m in METHODS if m not in measured]
    if missing:
        raise ValueError(f"The run has no {', '.join(missing)} rows; the README tables compare {', '.join(METHODS)}.")
    out = {}
    for workload, label in LABELS[table].items():
        if (workload, "plain") not in summary:
            continue
        methods = [summary[(workload, m)] for m in METHODS]
        fastest = max(range(len(methods)), key=lambda index: methods[index].speedup)
        cells = [
            f"{s.mean_tau:.2f} / " + (f"**{s.speedup:.2f}x**" if index == fastest else f"{s.speedup:.2f}x")
            for index, s in enumerate(methods)
        ]
        plain = summary[(workload, "plain")]
        out[workload] = f"| {label.format(n=plain.prompts)} | {plain.tok_s:.2f} | " + " | ".join(cells) + " |"
    return out
