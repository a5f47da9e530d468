"""Run methods side by side on sessions and assemble the results document (:class:`.results.BenchResult`), from
:mod:`.measure` (one generate() call) and :mod:`.report` (summary, table, files).

The session loop measures every turn of every session with every method, interleaved, ``repeats`` times (the fastest
kept), each output checked against plain's as soon as the turn has run. In multi-turn sessions plain's reply is
appended as an ``assistant`` message before the next turn; hybrid methods keep one suffix index per session, and with
``prefix_cache`` every method keeps its own KV cache across the turns.
"""

from __future__ import annotations

import copy
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm
from transformers import DynamicCache

from ..chat_template import chat_prompt_ids
from ..data.workloads import as_session
from ..neartie import crop_to_shared_prefix, first_difference
from .journal import Journal
from .measure import _Runner, environment_info
from .methods import BenchMethod, make_methods
from .report import write_outputs
from .results import SCHEMA_VERSION, BenchResult, Divergence, Mismatch, NearTie, Record, RunMeta, SessionLog
from .summary import summary_rows

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
    journal: str | Path | None = None,
) -> dict[str, Any]:
    """Benchmark ``methods`` on ``workloads`` with ``target``, greedy, interleaved per prompt (the module docstring
    says how), and return the results document (``benchmarks/README.md``; ``ok`` False: an output differed from
    plain greedy other than at a float32-verified near-tie, :mod:`dlite_hf.neartie`).

    ``methods``: ``{name: spec}`` (:func:`.methods.make_method`) or :class:`BenchMethod` s, ``plain`` added when
    missing; ``workloads``: ``{label: [session or prompt, ...]}`` (:func:`dlite_hf.data.workloads.build_workloads`);
    ``warmup``: every method runs once on a short prompt first, unrecorded; ``meta``: extra ``meta`` entries (the
    CLI's command); ``out_dir``, ``name``, ``plots``: the files written; ``prefix_cache``: each method keeps its KV
    cache across a session's turns (``cached_prompt_tokens``); ``repeats``: every turn measured this many times with
    every method from the same state, the fastest kept (``wall_s_repeats``), repeats with different outputs failing;
    ``journal``: a file that keeps every finished session (:mod:`.journal`), so the same call goes on after a kill.
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
    methods_info = {m.name: m.describe() for m in bench_methods}
    kept = None
    if journal is not None:
        run = {key: info.get(key) for key in ("command", "max_new_tokens", "dtype", "attention", "prefix_cache")}
        ids = {label: [s["id"] for s in items] for label, items in sessions.items()}
        kept = Journal(journal, {**run, "repeats": repeats, "methods": methods_info, "sessions": ids})
    try:
        if warmup:  # first calls pay one-off costs
            warm_ids = torch.tensor([chat_prompt_ids(tokenizer, _WARMUP_MESSAGES)])
            for method in runner.methods:
                runner.generate(method, warm_ids, max_new_tokens=min(8, max_new_tokens))
        measured = run_sessions(runner, sessions, repeats, progress, kept)
    finally:
        runner.close()
    records, workload_names, finished = measured.records, list(sessions), time.time()
    info.update(finished_utc=_utc(finished), duration_s=finished - started)
    info["load_average_at_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    if kept is not None and kept.reused:
        info["resumed_sessions"] = kept.reused
    result = BenchResult(
        schema_version=SCHEMA_VERSION,
        meta=RunMeta.from_dict(info, "meta"),
        methods=methods_info,
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
    if kept is not None:
        kept.remove()
    return result.to_dict()


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _meta_at_start(runner: _Runner, meta: Mapping[str, Any] | None, started: float, repeats: int) -> dict[str, Any]:
    """The run's setup as it starts: the environment, the caller's ``meta``, then the run's settings."""
    target = runner.target
    info = {**environment_info(), **dict(meta or {})}
    info.update(started_utc=_utc(started), max_new_tokens=runner.max_new_tokens)
    info.setdefault("target", getattr(target.config, "_name_or_path", "") or type(target).__name__)
    checker = runner.checker
    info.update(dtype=checker.dtype, near_tie_epsilon=checker.epsilon if checker.dtype != "float32" else None)
    info.update(attention=getattr(target.config, "_attn_implementation", None), prefix_cache=runner.prefix_cache)
    info.update(repeats=repeats, method_order="rotated by one method per turn")
    return info


Run = tuple[torch.Tensor, dict[str, Any]]  # one measured generate(): (sequences, metrics)


@dataclass
class Measured:
    """What the session loop measured: the records (in run order), the lossless failures, one log per session."""

    records: list[Record] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)
    sessions: list[SessionLog] = field(default_factory=list)


@dataclass(frozen=True)
class _Turn:
    """One turn of a session, templated: where it comes from and its prompt's token ids."""

    label: str
    session: Mapping[str, Any]
    index: int
    prompt_id: str
    ids: list[int]


def run_sessions(
    runner: _Runner,
    sessions: Mapping[str, Sequence[Mapping[str, Any]]],
    repeats: int,
    progress: bool,
    journal: Journal | None = None,
) -> Measured:
    """Measure every session of every workload; the method order rotates by one per turn over the whole run. With a
    ``journal``, sessions an earlier invocation finished are read from it, and each one measured is appended."""
    total = sum(len(_turns(s)) for items in sessions.values() for s in items) * len(runner.methods) * repeats
    measured = Measured()
    turns_done = 0
    with tqdm(total=total, disable=not progress, unit="gen", dynamic_ncols=True, file=sys.stderr) as bar:
        for label, items in sessions.items():
            for session in items:
                earlier = journal.take(label, session["id"]) if journal is not None else None
                if earlier is not None:  # finished by an earlier invocation of the same run
                    entry, records, mismatches = earlier
                    measured.records += records
                    measured.mismatches += mismatches
                    bar.update(len(_turns(session)) * len(runner.methods) * repeats)
                else:
                    first = (len(measured.records), len(measured.mismatches))
                    entry = _run_session(runner, label, session, measured, bar, repeats, turns_done)
                    if journal is not None:
                        parts = (measured.records[first[0] :], measured.mismatches[first[1] :])
                        journal.append(label, session["id"], (entry, *parts))
                turns_done += entry.turns_measured
                measured.sessions.append(entry)
    return measured


def _turns(session: Mapping[str, Any]) -> list:
    return session["turns"][: session.get("max_turns")]


def _run_session(
    runner: _Runner, label: str, session: Mapping[str, Any], measured: Measured, bar: Any, repeats: int, rotation: int
) -> SessionLog:
    """Measure every turn of one session with every method, in an order rotated by ``rotation`` + the turn's
    number; returns the session's log entry."""
    history: list[dict[str, str]] = []
    turns = _turns(session)
    stop = "max_turns" if len(turns) < len(session["turns"]) else "end"
    done = context_tokens = 0
    # hybrid methods keep one DraftSession (one suffix index) across the turns of a session, as an agent would
    draft_sessions = {method.name: method.new_session() for method in runner.methods}
    caches: dict[str, tuple[Any, list[int]]] = {}  # with prefix_cache: each method's own KV cache across the turns
    for index, messages in enumerate(turns):
        messages = history + list(messages)
        ids = chat_prompt_ids(runner.tokenizer, messages)
        if session.get("max_tokens") is not None and len(ids) > session["max_tokens"]:
            stop = "max_tokens"
            bar.total -= (len(turns) - index) * len(runner.methods) * repeats
            bar.refresh()
            break
        context_tokens = len(ids)
        prompt_id = f"{session['id']}#{index}" if len(session["turns"]) > 1 else session["id"]
        turn = _Turn(label, session, index, prompt_id, ids)
        reference = _run_turn(runner, turn, rotation + done, draft_sessions, caches, measured, bar, repeats)
        done += 1
        reply = runner.tokenizer.decode(reference[0, len(ids) :], skip_special_tokens=True).strip()
        history = messages + [{"role": "assistant", "content": reply}]
    return SessionLog(
        workload=label,
        id=session["id"],
        turns_available=len(session["turns"]),
        turns_measured=done,
        stop_reason=stop,
        last_context_tokens=context_tokens,
    )


def _run_turn(
    runner: _Runner,
    turn: _Turn,
    rotation: int,
    draft_sessions: Mapping[str, Any],
    caches: dict[str, tuple[Any, list[int]]],
    measured: Measured,
    bar: Any,
    repeats: int,
) -> torch.Tensor:
    """Measure one turn with every method (in an order rotated by ``rotation``, ``repeats`` rounds), record every
    method's fastest run and check it against plain's; returns plain's output (its reply feeds the next turn). The
    last round runs on the real caches and suffix indexes: the next turn goes on from them."""
    methods = runner.methods
    shift = rotation % len(methods)
    order = methods[shift:] + methods[:shift]
    starts = {m.name: _starting_cache(runner, m, caches.get(m.name), turn.ids) for m in methods}
    input_ids, postfix = torch.tensor([turn.ids]), f"{turn.label} {turn.prompt_id[-28:]} ctx={len(turn.ids)}"
    runs: dict[str, list[Run]] = {m.name: [] for m in methods}
    for repeat in range(repeats):  # every round but the last from copies of each method's cache and suffix index
        for method in order:
            bar.set_postfix_str(f"{postfix} {method.name}", refresh=False)
            cache, draft_session = starts[method.name], draft_sessions[method.name]
            if repeat < repeats - 1:  # a copy: this repeat must not change what the next one starts from
                cache = copy.deepcopy(cache)
                if draft_session is not None:
                    index, draft_session = draft_session.index, type(draft_session)(min_match=draft_session.min_match)
                    draft_session.index = copy.deepcopy(index)
            runs[method.name].append(runner.measure(method, input_ids, session=draft_session, cache=cache))
            bar.update(1)
    reference = runs["plain"][-1][0]
    for method in methods:  # records in the methods' own order, plain first
        (_, metrics), fields, reason = _check_runs(runner, method, runs[method.name], reference, len(turn.ids))
        if starts[method.name] is not None:
            cache = starts[method.name]
            caches[method.name] = (cache, runs[method.name][-1][0][0, : cache.get_seq_length()].tolist())
        record = Record(
            workload=turn.label,
            session_id=turn.session["id"],
            turn=turn.index,
            prompt_id=turn.prompt_id,
            source=turn.session.get("source", ""),
            method=method.name,
            **metrics,
            **fields,
            wall_s_repeats=[run[1]["wall_s"] for run in runs[method.name]] if repeats > 1 else None,
        )
        measured.records.append(record)
        if not record.lossless_ok:
            measured.mismatches.append(_report_mismatch(record, int(reference.shape[1] - len(turn.ids)), reason, bar))
    return reference


def _check_runs(
    runner: _Runner, method: BenchMethod, runs: list[Run], reference: torch.Tensor, prompt_length: int
) -> tuple[Run, dict[str, Any], str | None]:
    """The fastest of a method's runs of a turn, its verdict fields against plain's ``reference``, and why it
    fails the check (None when it passes): another output than plain's other than at a verified near-tie, or
    repeats that disagree with each other."""
    fastest = min(runs, key=lambda run: run[1]["wall_s"])
    unstable = [r for r, (other, _) in enumerate(runs) if not torch.equal(other, runs[-1][0])]
    sequences = fastest[0]
    plain_tokens, tokens = (output[0, prompt_length:].tolist() for output in (reference, sequences))
    difference = None if method.name == "plain" else first_difference(plain_tokens, tokens)
    verdict = None if difference is None else runner.checker.check(prompt_length, reference, sequences)
    fields = {
        "identical_to_plain": difference is None,
        "first_mismatch": difference,
        "near_tie": NearTie(**verdict.to_dict()) if verdict is not None else None,
        "lossless_ok": not unstable and (difference is None or (verdict is not None and verdict.ok)),
    }
    reason = None
    if unstable:
        reason = (
            f"repeats {unstable} of {len(runs)} gave another output than the last repeat: greedy decoding from the "
            "same state must repeat exactly"
        )
    elif verdict is not None and not verdict.ok:
        reason = verdict.reason
    return fastest, fields, reason


def _report_mismatch(record: Record, plain_new_tokens: int, reason: str | None, bar: Any) -> Mismatch:
    """The lossless failure of ``record``, said on stderr (through the progress bar) as soon as it is found."""
    where = {key: getattr(record, key) for key in ("workload", "prompt_id", "turn", "method", "first_mismatch")}
    why = f": {reason}" if reason is not None else ""
    bar.write(
        f"LOSSLESS CHECK FAILED: {record.method} on {record.workload} {record.prompt_id}: greedy output differs from "
        f"plain at new token {record.first_mismatch} ({record.new_tokens} vs {plain_new_tokens} new tokens){why}.",
        file=sys.stderr,
    )
    return Mismatch(**where, new_tokens=record.new_tokens, plain_new_tokens=plain_new_tokens, reason=reason)


def _starting_cache(runner: _Runner, method: BenchMethod, kept: tuple[Any, list[int]] | None, ids: list[int]) -> Any:
    """The cache a turn starts from with ``prefix_cache`` (else None): the previous turn's, cropped to the longest
    prefix its tokens share with this turn's prompt (at least one prompt token is left to prefill), or a new one.
    Plain and DLite calls only: transformers' own assisted loop (prompt lookup, an assistant model) runs its first
    forward over the whole prompt on a pre-filled cache, so those (left as upstream) prefill each turn afresh."""
    if not runner.prefix_cache or method.kind not in ("plain", "dlite"):
        return None
    if kept is not None and crop_to_shared_prefix(*kept, ids[:-1]):
        return kept[0]
    return DynamicCache(config=runner.target.config)
