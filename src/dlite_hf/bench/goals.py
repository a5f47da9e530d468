"""The benchmark issues' performance goals, checked on one `dlite-hf bench` run's summary rows (methods measured
side by side): met, not met, or not measured (``met = None``, saying what the run lacks).
``dlite-hf bench goals RESULTS.json ...`` (:func:`dlite_hf.bench.report.cmd_goals`) adds them to each document.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .results import SummaryRow, as_parts

GENERAL_WORKLOADS = ("chat", "code", "math", "tool")
SPEEDUP_WORKLOADS = ("chat", "code", "math")  # DLite's speedup must beat prompt lookup's on these
MAX_AGENTIC_TAU_DROP = 0.25  # agentic tau within 25% of general tau
MAX_DRAFTER_MS_SPREAD = 0.15  # drafter ms per round varies by less than 15% across context lengths
HYBRID_AGENTIC_FACTOR = 1.25  # the hybrid's agentic speedup is at least 1.25x prompt lookup's
MAX_LONG_SESSION_TAU_DROP = 0.15  # issue 43: tau at 12k-16k of session context within 15% of its tau under 2k
SHORT_CONTEXT, LONG_CONTEXT = "ctx <2k", "ctx 12k-16k"  # buckets of dlite_hf.bench.summary.context_rows


Rows = dict[tuple[str, str], SummaryRow]


def _goal(name: str, met: bool | None, measured: str) -> dict[str, Any]:
    return {"goal": name, "met": met, "measured": measured}


def _speedup_goal(rows: Rows, workload: str, strict: bool, method: str, peer: str) -> dict[str, Any]:
    name = f"{workload}: {method} speedup {'>' if strict else '>='} {peer} speedup"
    mine, theirs = rows.get((workload, method)), rows.get((workload, peer))
    if mine is None or theirs is None:
        return _goal(name, None, f"not measured (run workload {workload} with methods {method},{peer})")
    a, b = mine.speedup, theirs.speedup
    met = a > b if strict else a >= b
    return _goal(name, met, f"{a:.2f}x vs {b:.2f}x (tau {mine.mean_tau:.2f} vs {theirs.mean_tau:.2f})")


def _tau_drop(rows: Rows, method: str) -> tuple[float, float, float] | None:
    """(mean tau over the general workloads, agentic tau, the relative drop), or None when not measured."""
    taus = [rows[(w, method)].mean_tau for w in GENERAL_WORKLOADS if (w, method) in rows]
    agentic = rows.get(("agentic", method))
    if not taus or agentic is None:
        return None
    general = sum(taus) / len(taus)
    return general, agentic.mean_tau, 1.0 - agentic.mean_tau / general


def _agentic_tau_goal(rows: Rows, method: str, history: str) -> dict[str, Any]:
    name = (
        f"agentic: {method} tau within {MAX_AGENTIC_TAU_DROP:.0%} of its general tau, "
        f"and {history}'s tau falls further"
    )
    mine = _tau_drop(rows, method)
    if mine is None:
        return _goal(name, None, f"not measured (run agentic and a general workload with {method})")
    general, agentic, drop = mine
    text = f"{method}: general {general:.2f} -> agentic {agentic:.2f} ({-drop:+.0%})"
    met = drop <= MAX_AGENTIC_TAU_DROP
    theirs = _tau_drop(rows, history)
    if theirs is None:
        return _goal(name, None if met else False, text + f"; {history} not measured")
    text += f"; {history}: general {theirs[0]:.2f} -> agentic {theirs[1]:.2f} ({-theirs[2]:+.0%})"
    return _goal(name, met and theirs[2] > drop, text)


def _long_ms(rows: Rows, method: str) -> list[tuple[int, float]]:
    """(context length, drafter ms per round) of `method`'s long-N rows that have a drafter time, by length."""
    points = {
        int(workload[5:]): row.drafter_ms_per_round
        for (workload, name), row in rows.items()
        if name == method and workload.startswith("long-") and workload[5:].isdigit() and row.drafter_ms_per_round
    }
    return sorted(points.items())


def _drafter_ms_goal(rows: Rows, method: str, history: str) -> dict[str, Any]:
    name = f"long context: {method} drafter ms per round varies < {MAX_DRAFTER_MS_SPREAD:.0%} across lengths"
    points = _long_ms(rows, method)
    if len(points) < 2:
        return _goal(name, None, f"not measured (run the long workload at two or more lengths with {method})")
    values = [v for _, v in points]
    spread = (max(values) - min(values)) / min(values)
    text = ", ".join(f"{n}: {v:.1f} ms" for n, v in points) + f" (spread {spread:.0%})"
    others = _long_ms(rows, history)
    if others:
        text += f"; {history}: " + ", ".join(f"{n}: {v:.1f} ms" for n, v in others)
    return _goal(name, spread < MAX_DRAFTER_MS_SPREAD, text)


def _long_session_goal(rows: Rows, method: str) -> dict[str, Any] | None:
    """``method``'s tau at 12k-16k tokens of session context against its tau under 2k (None: no such buckets)."""
    short, long = rows.get((SHORT_CONTEXT, method)), rows.get((LONG_CONTEXT, method))
    if short is None or long is None:
        return None
    drop = 1.0 - long.mean_tau / short.mean_tau
    name = f"long sessions: {method} tau at 12k-16k context within {MAX_LONG_SESSION_TAU_DROP:.0%} of its tau under 2k"
    measured = f"{short.mean_tau:.2f} ({short.prompts} turns) -> {long.mean_tau:.2f} ({long.prompts} turns)"
    return _goal(name, drop <= MAX_LONG_SESSION_TAU_DROP, f"{measured}, {-drop:+.0%}")


def _hybrid_goals(rows: Rows, hybrid: str, method: str, peer: str) -> list[dict[str, Any]]:
    """The hybrid issue's goals, for every workload of the run that has the hybrid."""
    goals = []
    workloads = list(dict.fromkeys(w for (w, m) in rows if m == hybrid and w != "all"))
    for workload in workloads:
        name = f"{workload}: {hybrid} tau >= the best of {peer} and {method}"
        mine, others = rows[(workload, hybrid)], [rows.get((workload, m)) for m in (peer, method)]
        if any(o is None for o in others):
            goals.append(_goal(name, None, f"not measured (run workload {workload} with {peer},{method})"))
            continue
        best = max(o.mean_tau for o in others)
        goals.append(_goal(name, mine.mean_tau >= best, f"{mine.mean_tau:.2f} vs {best:.2f}"))
    for workload in (w for w in workloads if w.startswith("agentic")):
        name = f"{workload}: {hybrid} speedup >= {HYBRID_AGENTIC_FACTOR}x {peer}'s"
        theirs = rows.get((workload, peer))
        if theirs is None:
            goals.append(_goal(name, None, f"not measured (run workload {workload} with {peer})"))
            continue
        a, b = rows[(workload, hybrid)].speedup, theirs.speedup
        goals.append(_goal(name, a >= HYBRID_AGENTIC_FACTOR * b, f"{a:.2f}x vs {b:.2f}x ({a / b:.2f} of it)"))
    goals += [_speedup_goal(rows, w, False, hybrid, method) for w in SPEEDUP_WORKLOADS if (w, hybrid) in rows]
    return goals


def evaluate_goals(
    summary: Sequence[SummaryRow | Mapping[str, Any]], context: Sequence[SummaryRow] = ()
) -> list[dict[str, Any]]:
    """The performance goals, one ``{"goal", "met", "measured"}`` dict each, checked on one run's summary rows (the
    hybrid's only when the run has it; the long-session one only with ``context`` rows that measure it:
    :func:`~.summary.context_rows`)."""
    rows = {(r.workload, r.method): r for r in as_parts(summary, SummaryRow, "summary")}
    by_context = {(r.workload, r.method): r for r in context}
    goals = [_speedup_goal(rows, w, True, "dlite", "prompt_lookup") for w in SPEEDUP_WORKLOADS]
    goals.append(_speedup_goal(rows, "agentic", False, "dlite", "prompt_lookup"))
    goals.append(_agentic_tau_goal(rows, "dlite", "history"))
    goals.append(_drafter_ms_goal(rows, "dlite", "history"))
    fixed_goal = _drafter_ms_goal(rows, "dlite_fixed", "history")  # fixed K: the drafting cost against context alone
    if fixed_goal["met"] is not None:  # only runs with the fixed-K method at two or more lengths
        goals.append(fixed_goal)
    goals += [goal for goal in (_long_session_goal(by_context, m) for m in ("dlite", "hybrid")) if goal is not None]
    return goals + _hybrid_goals(rows, "hybrid", "dlite", "prompt_lookup")
