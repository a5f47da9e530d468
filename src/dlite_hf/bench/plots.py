"""The PNG plots of a benchmark run (``<name>_<plot>.png``), drawn from its typed results (matplotlib, imported
inside :func:`write_plots`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .results import BenchResult, as_result

PLOT_NAMES = ("speedup_tau", "drafter_ms_vs_context", "tau_vs_context", "agentic_turns")


def write_plots(result: BenchResult | Mapping[str, Any], stem: Path) -> dict[str, Path]:
    """Write the PNG plots next to ``stem`` (``<stem>_<plot>.png``); returns {plot name: path}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result = as_result(result)
    methods = [m for m in result.methods if m != "plain"]
    colors = {m: plt.get_cmap("tab10")(i) for i, m in enumerate(result.methods)}
    title = f"{result.meta.value_or('target', '')} (threads={result.meta.threads})"
    written = {}
    for name, draw in zip(PLOT_NAMES, (_speedup_tau, _drafter_ms_vs_context, _tau_vs_context, _agentic_turns)):
        fig = draw(plt, result, methods, colors, title)
        if fig is not None:  # None: the run has nothing to draw there
            fig.tight_layout()
            written[name] = stem.with_name(f"{stem.name}_{name}.png")
            fig.savefig(written[name], dpi=110)
    plt.close("all")
    return written


def _speedup_tau(plt: Any, result: BenchResult, methods: list[str], colors: dict, title: str) -> Any:
    """1. speedup and tau per workload per method."""
    summary = [r for r in result.summary if r.method != "plain"]
    workloads = list(dict.fromkeys(r.workload for r in result.summary))
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.4 * len(workloads) * 2), 4.2))
    width = 0.8 / max(1, len(methods))
    for ax, key, label in ((axes[0], "speedup", "speedup vs plain (x)"), (axes[1], "mean_tau", "mean tau")):
        for i, method in enumerate(methods):
            values = {r.workload: getattr(r, key) for r in summary if r.method == method}
            xs = [j + (i - (len(methods) - 1) / 2) * width for j, w in enumerate(workloads) if w in values]
            ax.bar(xs, [values[w] for w in workloads if w in values], width, label=method, color=colors[method])
        ax.axhline(1.0, color="gray", lw=1, ls="--")
        ax.set_xticks(range(len(workloads)), workloads, rotation=30, ha="right")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    return fig


def _drafter_ms_vs_context(plt: Any, result: BenchResult, methods: list[str], colors: dict, title: str) -> Any:
    """2. drafter (and target) ms per round against context length."""
    records = result.records
    timed = [m for m in methods if any(r.method == m and r.drafter_ms_per_round is not None for r in records)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for method in timed:
        mine = [r for r in records if r.method == method and r.drafter_ms_per_round is not None]
        xs, drafter, target = zip(
            *sorted((r.prompt_tokens, r.drafter_ms_per_round, r.target_ms_per_round) for r in mine)
        )
        for ax, ys in zip(axes, (drafter, target)):
            ax.plot(xs, ys, "o-", ms=3, lw=1, label=method, color=colors[method])
    plain = sorted((r.prompt_tokens, r.target_ms_per_round) for r in records if r.method == "plain")
    if plain:
        axes[1].plot(*zip(*plain), "s--", ms=3, lw=1, label="plain (1 token)", color=colors["plain"])
    axes[0].set_ylabel("drafter ms per round")
    axes[1].set_ylabel("target ms per forward (verification)")
    for ax in axes:
        ax.set_xlabel("context tokens (prompt)")
        ax.set_ylim(bottom=0)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    if not timed:
        axes[0].text(0.5, 0.5, "no method with a drafter model", ha="center", transform=axes[0].transAxes)
    fig.suptitle(title)
    return fig


def _tau_vs_context(plt: Any, result: BenchResult, methods: list[str], colors: dict, title: str) -> Any:
    """3. tau against context length, every record."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for method in methods:
        points = sorted((r.prompt_tokens, r.tau) for r in result.records if r.method == method)
        if points:
            ax.plot(*zip(*points), "o", ms=4, alpha=0.7, label=method, color=colors[method])
    ax.set_xlabel("context tokens (prompt)")
    ax.set_ylabel("tau (tokens per target forward)")
    ax.axhline(1.0, color="gray", lw=1, ls="--")
    if methods:
        ax.legend(fontsize=8)
    ax.set_title(title)
    return fig


def _agentic_turns(plt: Any, result: BenchResult, methods: list[str], colors: dict, title: str) -> Any:
    """4. agentic sessions: tau and context length against the turn index (None: no multi-turn session)."""
    from matplotlib.ticker import MaxNLocator

    multi = {s.id for s in result.sessions if s.turns_available > 1}
    turn_records = [r for r in result.records if r.session_id in multi]
    if not turn_records:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for method in methods:
        by_turn: dict[int, list[float]] = defaultdict(list)
        for r in turn_records:
            if r.method == method:
                by_turn[r.turn].append(r.tau)
        turns = sorted(by_turn)
        means = [sum(by_turn[t]) / len(by_turn[t]) for t in turns]
        axes[0].plot(turns, means, "o-", label=method, color=colors[method])
    for session in sorted(multi):
        points = sorted(
            (r.turn, r.prompt_tokens) for r in turn_records if r.session_id == session and r.method == "plain"
        )
        if points:
            axes[1].plot(*zip(*points), "o-", ms=3, lw=1, label=session)
    axes[0].set_ylabel("mean tau over sessions")
    axes[1].set_ylabel("context tokens")
    for ax in axes:
        ax.set_xlabel("turn index")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].axhline(1.0, color="gray", lw=1, ls="--")
    if methods:
        axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=6)
    fig.suptitle(f"{title}: multi-turn sessions")
    return fig
