"""Run methods side by side on sessions, interleaved per prompt, and record what each generate() call cost: the
results document (:class:`~dlite_hf.bench.results.BenchResult`, returned as its JSON form).

The jobs, one module each: :mod:`.measure` (one generate() call: forward hooks, memory, metrics), :mod:`.checks`
(an output against plain's), :mod:`.sessions` (the turn loop), :mod:`.report` (summary, table, files).
"""

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
from .measure import ForwardTimer, _Runner, environment_info
from .methods import BenchMethod, make_methods
from .report import summary_rows, write_outputs
from .results import SCHEMA_VERSION, BenchResult, Divergence, RunMeta
from .sessions import Measured, run_sessions

__all__ = ["SCHEMA_VERSION", "ForwardTimer", "environment_info", "run_bench"]

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

    For every turn of every session, every method runs on the same input ids, one after the other; the order
    rotates by one method from turn to turn, so no method always runs first (after another turn's work) or last.
    Each output is compared with plain's (``identical_to_plain``) and any difference is printed to stderr as soon
    as the turn's methods have run. In multi-turn sessions plain's reply is appended as an ``assistant`` message
    before the next turn.

    Args:
        target: the target causal LM (batch size 1, as transformers' assisted generation).
        tokenizer: its tokenizer (with a chat template).
        methods: ``{name: spec}`` (see :func:`dlite_hf.bench.methods.make_method`: ``{"plain": None,
            "prompt_lookup": None, "dlite": drafter, "history": teacher, "assisted": (model, tokenizer)}``) or a
            list of :class:`BenchMethod`. ``plain`` is added when missing.
        workloads: ``{label: [session or prompt dict, ...]}`` (see :mod:`dlite_hf.bench.workloads`).
        max_new_tokens: new tokens per generation (fewer when the target emits EOS).
        warmup: run every method once on a short prompt before measuring (not recorded).
        progress: show a tqdm progress bar on stderr.
        meta: extra entries for ``result["meta"]`` (the CLI records the exact command here).
        out_dir: when given, write the JSON and the markdown table there (:func:`write_outputs`).
        name: file-name stem of the outputs (default ``bench-<UTC time>``).
        plots: also write the PNG plots (needs matplotlib).
        prefix_cache: in multi-turn sessions every method keeps its KV cache from one turn to the next, cropped to
            the prefix the next prompt shares with it, so a turn prefills only its new tokens (as a serving stack
            with prefix caching does); each record's ``cached_prompt_tokens`` says how many were reused. Off: every
            turn prefills its whole context.
        repeats: measure every turn this many times with every method (the rounds interleaved: all methods once,
            then all again), each repeat from the same state (the turn's cache and suffix index are copied), and
            keep the fastest repeat's metrics (timing noise on a shared machine only adds time); each record's
            ``wall_s_repeats`` lists every repeat's wall time. The repeats' outputs must be identical (greedy
            decoding is deterministic); a repeat that differs is reported as a failed check.

    Returns:
        The results document (see ``benchmarks/README.md`` for the schema; :func:`dlite_hf.bench.results.as_result`
        reads it typed); ``result["ok"]`` is False when any output differed from plain greedy (in float32), or
        differed other than through a float32-verified near-tie (in bfloat16 / float16, :mod:`dlite_hf.neartie`;
        every divergence is listed in ``result["divergences"]``). With ``out_dir``, ``result["files"]`` lists the
        files written.
    """
    _check_arguments(max_new_tokens, repeats)
    bench_methods = make_methods(methods)
    sessions = {label: [as_session(dict(s), label) for s in items] for label, items in workloads.items()}
    runner = _Runner(target, tokenizer, bench_methods, max_new_tokens, prefix_cache=prefix_cache)
    started = time.time()
    info = _meta_at_start(runner, meta, started, repeats)
    try:
        if warmup:
            _warm_up(runner)
        measured = run_sessions(runner, sessions, repeats, progress)
    finally:
        runner.close()
    result = _document(_meta_at_end(info, started), bench_methods, list(sessions), measured)
    if out_dir is not None:
        write_outputs(result, out_dir, name, plots=plots)  # records the files in the result
    return result.to_dict()


def _check_arguments(max_new_tokens: int, repeats: int) -> None:
    if max_new_tokens <= 0:
        raise ValueError(f"max_new_tokens must be positive, got {max_new_tokens}.")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(
            f"repeats={repeats!r} is invalid: expected an int >= 1 (how many times every turn is measured with "
            "every method; the fastest repeat is kept). Pass 1 to measure each turn once."
        )


def _warm_up(runner: _Runner) -> None:
    """Every method once on a short prompt (not recorded): first calls pay one-off costs."""
    warm_ids = torch.tensor([chat_prompt_ids(runner.tokenizer, _WARMUP_MESSAGES)])
    for method in runner.methods:
        runner.generate(method, warm_ids, max_new_tokens=min(8, runner.max_new_tokens))


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _meta_at_start(runner: _Runner, meta: Mapping[str, Any] | None, started: float, repeats: int) -> dict[str, Any]:
    """The run's setup as it starts (the machine's load average included): the environment, the caller's
    ``meta``, then the run's settings."""
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


def _document(meta: RunMeta, methods: list[BenchMethod], workloads: list[str], measured: Measured) -> BenchResult:
    """The results document of a run: its setup, what was measured, the summary rows and the checks."""
    records = measured.records
    return BenchResult(
        schema_version=SCHEMA_VERSION,
        meta=meta,
        methods={m.name: m.describe() for m in methods},
        workloads=workloads,
        sessions=measured.sessions,
        records=records,
        summary=summary_rows(records, [m.name for m in methods], workloads),
        mismatches=measured.mismatches,
        divergences=[Divergence.of(r) for r in records if r.near_tie is not None],
        ok=not measured.mismatches,
    )
