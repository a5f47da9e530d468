"""A benchmark run's summary rows, from its records: one per workload x method (and ``all``), and, over the turns
of multi-turn sessions, one per context-length bucket x method (:func:`context_rows`: tau and speedup against the
context an agent's session has grown to, the paper's Figure 1(b)). Speedups compare a method with plain decoding
on the same prompts (the same turns) of the same run."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from .results import Record, SummaryRow, as_parts

ALL_WORKLOADS = "all"
# the context-length buckets of `context_rows` (tokens): [0, 2k), [2k, 4k), [4k, 8k), [8k, 12k), [12k, 16k], > 16k
CONTEXT_EDGES = (2048, 4096, 8192, 12288, 16384)
CONTEXT_STARTS = {  # label -> the first token count of the bucket
    "ctx <2k": 0,
    **{f"ctx {a // 1024}k-{b // 1024}k": a for a, b in zip(CONTEXT_EDGES, CONTEXT_EDGES[1:])},
    "ctx >16k": CONTEXT_EDGES[-1] + 1,
}


def _sum(rows: Sequence[Record], key: str) -> float:
    return float(sum(getattr(r, key) for r in rows if getattr(r, key) is not None))


def _summary_row(workload: str, method: str, rows: list[Record], plain: list[Record]) -> SummaryRow:
    """Aggregate the records of one method on one workload; speedups against plain on the same prompts."""
    wall, decode = _sum(rows, "wall_s"), _sum(rows, "decode_s")
    new_tokens, forwards = _sum(rows, "new_tokens"), _sum(rows, "target_forwards")
    timed = [r for r in rows if r.drafter_s is not None]
    drafter_s, draft_calls = _sum(timed, "drafter_s"), _sum(timed, "draft_calls")
    verify_s = _sum(rows, "target_s") - _sum(rows, "prefill_s")
    verify_forwards = forwards - len(rows)
    keys = {r.prompt_id for r in rows}
    paired = [r for r in plain if r.prompt_id in keys]
    plain_wall, plain_decode = _sum(paired, "wall_s"), _sum(paired, "decode_s")
    plain_tokens = _sum(paired, "new_tokens")
    # speedup = tokens/s over plain's tokens/s on the same prompts: the wall-time ratio when the outputs are the
    # same (float32), and still a throughput when a near-tie divergence (bfloat16) changes an output's length
    plain_tok_s = plain_tokens / plain_wall if plain_wall else 0.0
    plain_decode_tok_s = plain_tokens / plain_decode if plain_decode else 0.0
    mismatches = sum(1 for r in rows if not r.identical_to_plain)
    failures = sum(1 for r in rows if not r.value_or("lossless_ok", r.identical_to_plain))
    rss = [r.peak_rss_delta_mb for r in rows if r.peak_rss_delta_mb is not None]
    drafted = _sum(rows, "drafted")
    return SummaryRow(
        workload=workload,
        method=method,
        prompts=len(rows),
        mean_prompt_tokens=_sum(rows, "prompt_tokens") / len(rows),
        new_tokens=int(new_tokens),
        target_forwards=int(forwards),
        wall_s=wall,
        prefill_s=_sum(rows, "prefill_s"),
        tok_s=new_tokens / wall if wall else 0.0,
        mean_tau=sum(r.tau for r in rows) / len(rows),
        tau_pooled=new_tokens / forwards if forwards else 0.0,
        speedup=new_tokens / wall / plain_tok_s if wall and plain_tok_s else 0.0,
        decode_speedup=new_tokens / decode / plain_decode_tok_s if decode and plain_decode_tok_s else 0.0,
        wall_ratio=plain_wall / wall if wall else 0.0,
        acceptance_rate=_sum(rows, "accepted") / drafted if drafted else None,
        drafter_ms_per_round=1000 * drafter_s / draft_calls if timed and draft_calls else None,
        target_ms_per_round=1000 * verify_s / verify_forwards if verify_forwards > 0 else None,
        drafter_share=drafter_s / (drafter_s + verify_s) if timed and verify_s > 0 else None,
        rounds=int(_sum(rows, "rounds")),
        peak_rss_delta_mb_max=max(rss) if rss else None,
        mismatches=mismatches,
        exact_match_rate=1 - mismatches / len(rows),
        near_ties=mismatches - failures,
        lossless_failures=failures,
        lossless=failures == 0,
    )


def summary_rows(records: Sequence[Record], methods: Sequence[str], workloads: Sequence[str]) -> list[SummaryRow]:
    """One row per (workload, method) that has records, then one ``all`` row per method over every workload."""
    groups: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for record in records:
        groups[(record.workload, record.method)].append(record)
        groups[(ALL_WORKLOADS, record.method)].append(record)
    labels = [*workloads, ALL_WORKLOADS] if len(workloads) > 1 else list(workloads)
    return [
        _summary_row(workload, method, groups[(workload, method)], groups.get((workload, "plain"), []))
        for workload in labels
        for method in methods
        if groups.get((workload, method))
    ]


def summarize(
    records: Sequence[Record | Mapping[str, Any]], methods: Sequence[str], workloads: Sequence[str]
) -> list[dict[str, Any]]:
    """:func:`summary_rows` as JSON rows (the document's ``summary``); records may be typed or JSON."""
    return [row.to_dict() for row in summary_rows(as_parts(records, Record, "records"), methods, workloads)]


def context_bucket(tokens: int) -> str:
    """The label of the context bucket that holds ``tokens`` (``"ctx <2k"``, ``"ctx 12k-16k"``, ``"ctx >16k"``);
    16,384 itself falls in ``12k-16k``."""
    return max((start, label) for label, start in CONTEXT_STARTS.items() if tokens >= start)[1]


def context_rows(records: Sequence[Record | Mapping[str, Any]], methods: Sequence[str]) -> list[SummaryRow]:
    """Summary rows of the multi-turn sessions' turns grouped by the context they were generated at (the turn's
    prompt tokens), one per bucket x method, in bucket order; a row's ``workload`` is its bucket's label."""
    typed = as_parts(records, Record, "records")
    turns_of: dict[str | None, set[int | None]] = defaultdict(set)
    for record in typed:
        turns_of[record.session_id].add(record.turn)
    multi = [r for r in typed if r.session_id is not None and len(turns_of[r.session_id]) > 1]
    groups: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for record in multi:
        groups[(context_bucket(record.prompt_tokens or 0), record.method)].append(record)
    return [
        _summary_row(label, method, groups[(label, method)], groups.get((label, "plain"), []))
        for label in CONTEXT_STARTS
        for method in methods
        if groups.get((label, method))
    ]
