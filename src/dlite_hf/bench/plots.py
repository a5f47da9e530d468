"""The PNG plots of a benchmark run (``<name>_<plot>.png``) and of the serving benchmark (``serve_vllm.py --report
RESULTS --plot PNG``): lines of side-by-side panels, drawn by :func:`draw_panels` (matplotlib, imported there)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .results import BenchResult, as_result
from .summary import CONTEXT_STARTS, context_rows

# each plot's panels: (the rows drawn, x, y, y label, a dashed line at 1); a line per method, or per session
PANELS = {
    "speedup_tau": (
        ("summary", "workload", "speedup", "speedup vs plain (x)", True),
        ("summary", "workload", "mean_tau", "mean tau", True),
    ),
    "drafter_ms_vs_context": (
        ("records", "prompt_tokens", "drafter_ms_per_round", "drafter ms per round", False),
        ("records", "prompt_tokens", "target_ms_per_round", "target ms per forward (verification)", False),
    ),
    "tau_vs_context": (("records", "prompt_tokens", "tau", "tau (tokens per target forward)", True),),
    "context": (  # multi-turn sessions spanning two or more context buckets only (summary.context_rows)
        ("context", "context_from", "mean_tau", "mean tau", True),
        ("context", "context_from", "decode_speedup", "decode speedup vs plain (x)", True),
    ),
    "agentic_turns": (  # multi-turn sessions only
        ("turns", "turn", "tau", "mean tau over sessions", True),
        ("sessions", "turn", "prompt_tokens", "context tokens (plain)", False),
    ),
}
XLABELS = {
    "prompt_tokens": "context tokens (prompt)",
    "turn": "turn index",
    "context_from": "context tokens (bucket start)",
}
Panel = tuple[str, str, Mapping[str, list], bool]  # x label, y label, {line: [(x, y), ...]}, a dashed line at 1


def write_plots(result: BenchResult | Mapping[str, Any], stem: Path) -> dict[str, Path]:
    """Write the PNG plots next to ``stem`` (``<stem>_<plot>.png``); returns {plot name: path}."""
    result = as_result(result)
    multi = {s.id for s in result.sessions if s.turns_available > 1}
    turns = [r for r in result.records if r.session_id in multi]
    rows = {"summary": result.summary, "records": result.records, "turns": turns}
    rows["sessions"] = [r for r in turns if r.method == "plain"]
    rows["context"] = [
        SimpleNamespace(**row.to_dict(), context_from=CONTEXT_STARTS[row.workload])
        for row in context_rows(result.records, list(result.methods))
    ]
    title = f"{result.meta.value_or('target', '')} (threads={result.meta.threads})"
    written = {}
    for name, panels in PANELS.items():
        if (name == "agentic_turns" and not turns) or (
            name == "context" and len({r.workload for r in rows["context"]}) < 2
        ):
            continue  # no multi-turn session, or too few context buckets
        drawn = []
        for source, x, y, label, one in panels:
            lines = _lines(rows[source], x, y, "session_id" if source == "sessions" else "method")
            drawn.append((XLABELS.get(x, x), label, lines, one))
        written[name] = draw_panels(stem.with_name(f"{stem.name}_{name}.png"), title, drawn)
    return written


def plot_serving(results: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """The serving benchmark's plot: each method's tokens/s over plain vLLM's by concurrency, a panel per workload."""
    rows = [SimpleNamespace(**r) for r in results if r["method"] != "plain"]
    panels = []
    for workload in sorted({r.workload for r in rows}):
        lines = _lines([r for r in rows if r.workload == workload], "concurrency", "speedup")
        panels.append((f"concurrency ({workload})", "output tokens/s vs plain vLLM", lines, True))
    return draw_panels(path, "DLite in vLLM", panels, log2=True)


def _lines(rows: Iterable[Any], x: str, y: str, by: str = "method") -> dict[str, list[tuple[Any, float]]]:
    """``{row.<by>: [(x, mean y of its rows at that x), ...]}`` over the rows with a ``y``."""
    values: dict[tuple[Any, Any], list[float]] = defaultdict(list)
    for row in rows:
        if getattr(row, y) is not None:
            values[(getattr(row, by), getattr(row, x))].append(getattr(row, y))
    lines = defaultdict(list)
    for (label, at), ys in values.items():
        lines[label].append((at, sum(ys) / len(ys)))
    return lines


def draw_panels(path: Path, title: str, panels: Sequence[Panel], log2: bool = False) -> Path:
    """Save side-by-side ``panels`` at ``path``, each line one color in every panel (``log2``: a log2 x axis)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(dict.fromkeys(label for *_, lines, _ in panels for label in lines))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    for ax, (xlabel, ylabel, lines, one) in zip(axes[0], panels):
        for label, points in lines.items():
            ax.plot(*zip(*sorted(points)), "o-", ms=4, lw=1, label=label, color=f"C{labels.index(label) % 10}")
        if one:
            ax.axhline(1.0, color="gray", lw=1, ls="--")
        if log2:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.tick_params(axis="x", labelrotation=30)
        if lines:
            ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
