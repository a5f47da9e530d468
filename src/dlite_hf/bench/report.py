"""Summaries, the markdown table, the PNG plots and the files of a benchmark run."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["PLOT_NAMES", "markdown_table", "summarize", "write_outputs", "write_plots"]

ALL_WORKLOADS = "all"
PLOT_NAMES = ("speedup_tau", "drafter_ms_vs_context", "tau_vs_context", "agentic_turns")


def _sum(rows: Sequence[Mapping[str, Any]], key: str) -> float:
    return float(sum(r[key] for r in rows if r.get(key) is not None))


def _summary_row(workload: str, method: str, rows: list[dict[str, Any]], plain: list[dict[str, Any]]) -> dict:
    """Aggregate the records of one method on one workload; speedups against plain on the same prompts."""
    wall, decode = _sum(rows, "wall_s"), _sum(rows, "decode_s")
    new_tokens, forwards = _sum(rows, "new_tokens"), _sum(rows, "target_forwards")
    rounds = _sum(rows, "rounds")
    timed = [r for r in rows if r.get("drafter_s") is not None]
    drafter_s = _sum(timed, "drafter_s")
    verify_s = _sum(rows, "target_s") - _sum(rows, "prefill_s")
    verify_forwards = forwards - len(rows)
    keys = {r["prompt_id"] for r in rows}
    paired = [r for r in plain if r["prompt_id"] in keys]
    plain_wall, plain_decode = _sum(paired, "wall_s"), _sum(paired, "decode_s")
    plain_tokens = _sum(paired, "new_tokens")
    # speedup = tokens/s over plain's tokens/s on the same prompts: the wall-time ratio when the outputs are the
    # same (float32), and still a throughput when a near-tie divergence (bfloat16) changes an output's length
    plain_tok_s = plain_tokens / plain_wall if plain_wall else 0.0
    plain_decode_tok_s = plain_tokens / plain_decode if plain_decode else 0.0
    mismatches = sum(1 for r in rows if not r["identical_to_plain"])
    failures = sum(1 for r in rows if not r.get("lossless_ok", r["identical_to_plain"]))
    rss = [r["peak_rss_delta_mb"] for r in rows if r.get("peak_rss_delta_mb") is not None]
    return {
        "workload": workload,
        "method": method,
        "prompts": len(rows),
        "mean_prompt_tokens": _sum(rows, "prompt_tokens") / len(rows),
        "new_tokens": int(new_tokens),
        "target_forwards": int(forwards),
        "wall_s": wall,
        "prefill_s": _sum(rows, "prefill_s"),
        "tok_s": new_tokens / wall if wall else 0.0,
        "mean_tau": sum(r["tau"] for r in rows) / len(rows),
        "tau_pooled": new_tokens / forwards if forwards else 0.0,
        "speedup": new_tokens / wall / plain_tok_s if wall and plain_tok_s else 0.0,
        "decode_speedup": new_tokens / decode / plain_decode_tok_s if decode and plain_decode_tok_s else 0.0,
        "wall_ratio": plain_wall / wall if wall else 0.0,
        "acceptance_rate": _sum(rows, "accepted") / _sum(rows, "drafted") if _sum(rows, "drafted") else None,
        "drafter_ms_per_round": (
            1000 * drafter_s / _sum(timed, "draft_calls") if timed and _sum(timed, "draft_calls") else None
        ),
        "target_ms_per_round": 1000 * verify_s / verify_forwards if verify_forwards > 0 else None,
        "drafter_share": drafter_s / (drafter_s + verify_s) if timed and verify_s > 0 else None,
        "rounds": int(rounds),
        "peak_rss_delta_mb_max": max(rss) if rss else None,
        "mismatches": mismatches,
        "exact_match_rate": 1 - mismatches / len(rows),
        "near_ties": mismatches - failures,
        "lossless_failures": failures,
        "lossless": failures == 0,
    }


def summarize(records: Sequence[dict[str, Any]], methods: Sequence[str], workloads: Sequence[str]) -> list[dict]:
    """One row per (workload, method) that has records, then one ``all`` row per method over every workload."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        groups[(record["workload"], record["method"])].append(record)
        groups[(ALL_WORKLOADS, record["method"])].append(record)
    rows = []
    labels = [*workloads, ALL_WORKLOADS] if len(workloads) > 1 else list(workloads)
    for workload in labels:
        plain = groups.get((workload, "plain"), [])
        for method in methods:
            if groups.get((workload, method)):
                rows.append(_summary_row(workload, method, groups[(workload, method)], plain))
    return rows


def _fmt(value: Any, spec: str = ".2f", none: str = "-") -> str:
    return none if value is None else format(value, spec)


def _lossless_cell(row: Mapping[str, Any]) -> str:
    failures = row.get("lossless_failures", row["mismatches"])
    if failures:
        return f"**NO ({failures}/{row['prompts']})**"
    if row["method"] == "plain" or not row["mismatches"]:
        return "yes"
    return f"near-ties ({row['mismatches']}/{row['prompts']} differ)"


def markdown_table(result: Mapping[str, Any]) -> str:
    """The run as markdown: setup lines, then one row per workload x method."""
    meta = result["meta"]
    machine = meta.get("machine", {})
    lines = [
        f"# Benchmark: {meta.get('target', '?')}",
        "",
        f"- command: `{meta.get('command', '(Python API)')}`",
        f"- machine: {machine.get('cpu', '?')}, {machine.get('cpu_count', '?')} CPUs, "
        f"{machine.get('memory_gb', '?')} GB; load average at start {machine.get('load_average_at_start')}",
        f"- dtype {meta.get('dtype', 'float32')}"
        + (
            f" (near-tie-exact: a divergence from plain passes only if float32 re-scoring shows a top-2 margin "
            f"below epsilon = {meta['near_tie_epsilon']} logits, `dlite_hf.neartie`)"
            if meta.get("near_tie_epsilon")
            else " (token-exact)"
        ),
        f"- attention {meta.get('attention', 'sdpa')}"
        + (
            "; prefix cache across the turns of a session (each method keeps its KV cache: a turn prefills only its "
            "new tokens)"
            if meta.get("prefix_cache")
            else ""
        ),
        f"- threads {meta.get('threads')}, SDPA GQA forced (TRANSFORMERS_SDPA_FORCE_GQA) "
        f"{'yes' if meta.get('sdpa_force_gqa') else 'no'}, torch {meta.get('torch')}, "
        f"transformers {meta.get('transformers')}, "
        f"dlite-hf {meta.get('dlite_hf')}, python {meta.get('python')}",
        f"- greedy, max_new_tokens {meta.get('max_new_tokens')}; started {meta.get('started_utc')}, "
        f"took {_fmt(meta.get('duration_s'), '.0f')} s"
        + (
            f"; every turn measured {meta['repeats']} times with every method (interleaved, each from the same "
            "state), the fastest repeat kept; method order rotated by one per turn"
            if meta.get("repeats", 1) > 1
            else ""
        ),
        "- speedup = the method's tokens/s / plain's, over the same prompts in this run (prefill included; with"
        " identical outputs, plain's wall time / the method's); decode speedup excludes the prefill forward;"
        " tau = new tokens / target forwards (plain = 1);"
        " drafter ms/round = drafting time / drafting calls (rounds the drafter ran, skipped ones included)",
        "",
        "| workload | method | prompts | prompt tokens | mean tau | tok/s | speedup | decode speedup "
        "| drafter ms/round | target ms/round | drafter share | lossless |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in result["summary"]:
        lossless = _lossless_cell(row)
        lines.append(
            f"| {row['workload']} | {row['method']} | {row['prompts']} | {row['mean_prompt_tokens']:.0f} "
            f"| {row['mean_tau']:.2f} | {row['tok_s']:.2f} | {row['speedup']:.2f}x | {row['decode_speedup']:.2f}x "
            f"| {_fmt(row['drafter_ms_per_round'], '.1f')} | {_fmt(row['target_ms_per_round'], '.1f')} "
            f"| {_fmt(row['drafter_share'], '.0%')} | {lossless} |"
        )
    if result.get("mismatches"):
        lines += ["", f"**{len(result['mismatches'])} greedy output(s) differ from plain:**", ""]
        lines += [
            f"- {m['method']} on {m['workload']} {m['prompt_id']}: first difference at new token {m['first_mismatch']}"
            for m in result["mismatches"]
        ]
    if result.get("divergences"):
        count = len(result["divergences"])
        lines += ["", f"{count} output(s) diverge from plain; each divergence re-scored in float32:", ""]
        lines += ["| method | workload | prompt | first divergence | top-2 margin | max gap after | ok |"]
        lines += ["|---|---|---|---:|---:|---:|---|"]
        lines += [
            f"| {d['method']} | {d['workload']} | {d['prompt_id']} | {d['first_mismatch']} "
            f"| {_fmt(d['top2_margin'], '.3f')} | {_fmt(d['max_gap'], '.3f')} | {'yes' if d['ok'] else '**NO**'} |"
            for d in result["divergences"]
        ]
    if result.get("goals"):
        lines += ["", "Performance goals (from this run's rows; `benchmarks/goals.py`):", ""]
        lines += goals_markdown(result["goals"])
    agentic = [s for s in result.get("sessions", []) if s["turns_measured"] > 1]
    if agentic:
        lines += ["", "Multi-turn sessions:", "", "| session | turns measured | last context tokens | stopped by |"]
        lines.append("|---|---:|---:|---|")
        lines += [
            f"| {s['id']} | {s['turns_measured']}/{s['turns_available']} | {s['last_context_tokens']} "
            f"| {s['stop_reason']} |"
            for s in agentic
        ]
    return "\n".join(lines) + "\n"


def write_plots(result: Mapping[str, Any], stem: Path) -> dict[str, Path]:
    """Write the PNG plots next to ``stem`` (``<stem>_<plot>.png``); returns {plot name: path}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    records = result["records"]
    methods = [m for m in result["methods"] if m != "plain"]
    colors = {m: plt.get_cmap("tab10")(i) for i, m in enumerate(result["methods"])}
    written: dict[str, Path] = {}
    title = f"{result['meta'].get('target', '')} (threads={result['meta'].get('threads')})"

    # 1. speedup and tau per workload per method
    summary = [r for r in result["summary"] if r["method"] != "plain"]
    workloads = list(dict.fromkeys(r["workload"] for r in result["summary"]))
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.4 * len(workloads) * 2), 4.2))
    width = 0.8 / max(1, len(methods))
    for ax, key, label in ((axes[0], "speedup", "speedup vs plain (x)"), (axes[1], "mean_tau", "mean tau")):
        for i, method in enumerate(methods):
            values = {r["workload"]: r[key] for r in summary if r["method"] == method}
            xs = [j + (i - (len(methods) - 1) / 2) * width for j, w in enumerate(workloads) if w in values]
            ax.bar(xs, [values[w] for w in workloads if w in values], width, label=method, color=colors[method])
        ax.axhline(1.0, color="gray", lw=1, ls="--")
        ax.set_xticks(range(len(workloads)), workloads, rotation=30, ha="right")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    written["speedup_tau"] = _save(fig, stem, "speedup_tau")

    # 2. drafter (and target) ms per round against context length
    timed = [m for m in methods if any(r["method"] == m and r["drafter_ms_per_round"] is not None for r in records)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for method in timed:
        points = sorted(
            (r["prompt_tokens"], r["drafter_ms_per_round"], r["target_ms_per_round"])
            for r in records
            if r["method"] == method and r["drafter_ms_per_round"] is not None
        )
        xs = [p[0] for p in points]
        axes[0].plot(xs, [p[1] for p in points], "o-", ms=3, lw=1, label=method, color=colors[method])
        axes[1].plot(xs, [p[2] for p in points], "o-", ms=3, lw=1, label=method, color=colors[method])
    plain = sorted((r["prompt_tokens"], r["target_ms_per_round"]) for r in records if r["method"] == "plain")
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
    fig.tight_layout()
    written["drafter_ms_vs_context"] = _save(fig, stem, "drafter_ms_vs_context")

    # 3. tau against context length, every record
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for method in methods:
        points = sorted((r["prompt_tokens"], r["tau"]) for r in records if r["method"] == method)
        if points:
            ax.plot(*zip(*points), "o", ms=4, alpha=0.7, label=method, color=colors[method])
    ax.set_xlabel("context tokens (prompt)")
    ax.set_ylabel("tau (tokens per target forward)")
    ax.axhline(1.0, color="gray", lw=1, ls="--")
    if methods:
        ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    written["tau_vs_context"] = _save(fig, stem, "tau_vs_context")

    # 4. agentic sessions: tau and context length against the turn index
    multi = {s["id"] for s in result.get("sessions", []) if s["turns_available"] > 1}
    turn_records = [r for r in records if r["session_id"] in multi]
    if turn_records:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
        for method in methods:
            by_turn: dict[int, list[float]] = defaultdict(list)
            for r in turn_records:
                if r["method"] == method:
                    by_turn[r["turn"]].append(r["tau"])
            turns = sorted(by_turn)
            axes[0].plot(turns, [sum(by_turn[t]) / len(by_turn[t]) for t in turns], "o-", label=method,
                         color=colors[method])  # fmt: skip
        for session in sorted(multi):
            points = sorted((r["turn"], r["prompt_tokens"]) for r in turn_records if r["session_id"] == session
                            and r["method"] == "plain")  # fmt: skip
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
        fig.tight_layout()
        written["agentic_turns"] = _save(fig, stem, "agentic_turns")
    plt.close("all")
    return written


def _save(fig: Any, stem: Path, name: str) -> Path:
    path = stem.with_name(f"{stem.name}_{name}.png")
    fig.savefig(path, dpi=110)
    return path


def write_outputs(
    result: dict[str, Any], out_dir: str | Path, name: str | None = None, plots: bool = True
) -> dict[str, Path]:
    """Write ``<name>.json``, ``<name>.md`` and ``<name>_<plot>.png`` into ``out_dir``; returns {kind: path}."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = name or "bench-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    stem = out / name
    files: dict[str, Path] = {"json": out / f"{name}.json", "markdown": out / f"{name}.md"}
    if plots:
        files.update({f"plot_{k}": v for k, v in write_plots(result, stem).items()})
    result["files"] = {k: str(v) for k, v in files.items()}
    files["markdown"].write_text(markdown_table(result), encoding="utf-8")
    files["json"].write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return files


def goals_markdown(goals: Sequence[Mapping[str, Any]]) -> list[str]:
    """Markdown lines: one table row per goal (``{"goal", "met", "measured"}``, as `benchmarks/goals.py` adds)."""
    verdict = {True: "met", False: "**not met**", None: "not measured"}
    lines = ["| goal | result | measured |", "|---|---|---|"]
    lines += [f"| {g['goal']} | {verdict[g['met']]} | {g['measured']} |" for g in goals]
    return lines
