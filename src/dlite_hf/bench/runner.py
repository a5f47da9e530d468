"""Run methods side by side on sessions and assemble the results document (:class:`.results.BenchResult`), from
:mod:`.measure` (one generate() call), :mod:`.sessions` (the turn loop, the check against plain's output) and
:mod:`.report` (summary, table, files)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..chat_template import chat_prompt_ids
from ..data.workloads import as_session
from .measure import _Runner, environment_info
from .methods import BenchMethod, make_methods
from .report import summary_rows, write_outputs
from .results import SCHEMA_VERSION, BenchResult, Divergence, RunMeta
from .sessions import run_sessions

_WARMUP_MESSAGES = [{"role": "user", "content": "Write one sentence about the sea."}]


def run_bench(
    target: nn.Module,
    tokenizer: Any,
    methods: Mapping[str, Any] | Sequence[BenchMethod],
    workloads: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    max_new_tokens: int = 128,
    warmup: bool = True,
    progress: bool = True,
    meta: Mapping[str, Any] | None = None,
    out_dir: str | Path | None = None,
    name: str | None = None,
    plots: bool = False,
    prefix_cache: bool = False,
    repeats: int = 1,
) -> dict[str, Any]:
    """Benchmark ``methods`` on ``workloads`` with ``target``, greedy, interleaved per prompt.

    Every turn runs every method on the same input ids, in an order rotated by one method per turn; each output is
    checked against plain's, and in multi-turn sessions plain's reply is the next turn's ``assistant`` message.

    Args:
        methods: ``{name: spec}`` (:func:`.methods.make_method`) or a list of :class:`BenchMethod`; ``plain`` is
            added when missing.
        workloads: ``{label: [session or prompt dict, ...]}`` (:func:`dlite_hf.data.workloads.build_workloads`).
        warmup: run every method once on a short prompt first (not recorded).
        meta: extra entries for ``result["meta"]`` (the CLI records the exact command here).
        out_dir, name, plots: write ``<name>.json``, ``.md`` and (``plots``) the PNGs into ``out_dir``.
        prefix_cache: every method keeps its KV cache across a session's turns, cropped to the prefix the next
            prompt shares, so a turn prefills only its new tokens (``cached_prompt_tokens``).
        repeats: measure every turn this many times with every method, each from the same state, and keep the
            fastest (``wall_s_repeats`` lists them all); repeats with different outputs fail the check.

    Returns:
        The results document (``benchmarks/README.md``); ``ok`` is False when an output differed from plain greedy
        other than at a float32-verified near-tie (reduced precision, :mod:`dlite_hf.neartie`).
    """
    if max_new_tokens <= 0:
        raise ValueError(f"max_new_tokens must be positive, got {max_new_tokens}.")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(
            f"repeats={repeats!r} is invalid: expected an int >= 1 (how many times every turn is measured with "
            "every method; the fastest repeat is kept). Pass 1 to measure each turn once."
        )
    bench_methods = make_methods(methods)
    sessions = {label: [as_session(dict(s), label) for s in items] for label, items in workloads.items()}
    runner = _Runner(target, tokenizer, bench_methods, max_new_tokens, prefix_cache=prefix_cache)
    started = time.time()
    info = _meta_at_start(runner, meta, started, repeats)
    try:
        if warmup:  # first calls pay one-off costs
            warm_ids = torch.tensor([chat_prompt_ids(tokenizer, _WARMUP_MESSAGES)])
            for method in runner.methods:
                runner.generate(method, warm_ids, max_new_tokens=min(8, max_new_tokens))
        measured = run_sessions(runner, sessions, repeats, progress)
    finally:
        runner.close()
    records, workload_names = measured.records, list(sessions)
    result = BenchResult(
        schema_version=SCHEMA_VERSION,
        meta=_meta_at_end(info, started),
        methods={m.name: m.describe() for m in bench_methods},
        workloads=workload_names,
        sessions=measured.sessions,
        records=records,
        summary=summary_rows(records, [m.name for m in bench_methods], workload_names),
        mismatches=measured.mismatches,
        divergences=[Divergence.of(r) for r in records if r.near_tie is not None],
        ok=not measured.mismatches,
    )
    if out_dir is not None:
        write_outputs(result, out_dir, name, plots=plots)  # records the files in the result
    return result.to_dict()


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _meta_at_start(runner: _Runner, meta: Mapping[str, Any] | None, started: float, repeats: int) -> dict[str, Any]:
    """The run's setup as it starts: the environment, the caller's ``meta``, then the run's settings."""
    target = runner.target
    info = {**environment_info(), **dict(meta or {})}
    info.update(started_utc=_utc(started), max_new_tokens=runner.max_new_tokens)
    info.setdefault("target", getattr(target.config, "_name_or_path", "") or type(target).__name__)
    info.update(dtype=runner.dtype, near_tie_epsilon=runner.epsilon if runner.dtype != "float32" else None)
    info["attention"] = getattr(target.config, "_attn_implementation", None)
    info["prefix_cache"] = runner.prefix_cache
    info.update(repeats=repeats, method_order="rotated by one method per turn")
    return info


def _meta_at_end(info: dict[str, Any], started: float) -> RunMeta:
    finished = time.time()
    info.update(
        finished_utc=_utc(finished),
        duration_s=finished - started,
        load_average_at_end=list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    )
    return RunMeta.from_dict(info, "meta")
