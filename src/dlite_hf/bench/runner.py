"""Run methods side by side on sessions, interleaved per prompt, and record what each generate() call cost.

Measurement is method-agnostic: hooks on the target's (and the assistant's) top-level forward count and time every
forward, so plain, prompt lookup, DLite and assisted decoding are measured by the same code. DLite drafters add
their own statistics (rounds, drafts, accepted tokens, drafter time) from `drafter.last_generation_stats`.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import os
import platform
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..neartie import NearTieChecker, NearTieReport, first_difference
from ..rows import chat_prompt_ids
from .methods import BenchMethod, make_methods
from .workloads import as_session

__all__ = ["SCHEMA_VERSION", "ForwardTimer", "environment_info", "run_bench"]

SCHEMA_VERSION = 3  # 2: records gained draft_calls; 3: reduced precision (meta dtype, records near_tie, divergences)
_WARMUP_MESSAGES = [{"role": "user", "content": "Write one sentence about the sea."}]
_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")


class ForwardTimer:
    """Forward pre/post hooks on one module: the number of input positions and the wall time of every forward."""

    def __init__(self, module: nn.Module):
        self.forwards: list[tuple[int, float]] = []
        self._started: float | None = None
        self._handles = [
            module.register_forward_pre_hook(self._pre, with_kwargs=True),
            module.register_forward_hook(self._post, with_kwargs=True),
        ]
        self._length = 0

    def _pre(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        inputs = kwargs.get("input_ids")
        if inputs is None and args:
            inputs = args[0]
        if inputs is None:
            inputs = kwargs.get("inputs_embeds")
        self._length = int(inputs.shape[1]) if isinstance(inputs, torch.Tensor) and inputs.dim() > 1 else 0
        self._started = time.perf_counter()

    def _post(self, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        if self._started is not None:
            self.forwards.append((self._length, time.perf_counter() - self._started))
            self._started = None

    def reset(self) -> None:
        self.forwards = []
        self._started = None

    def total_s(self) -> float:
        return sum(t for _, t in self.forwards)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def _rss_kb(field: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak_rss() -> int | None:
    """Reset the kernel's peak-RSS mark (Linux ``clear_refs`` 5); return the current RSS in kB, or None."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return None
    return _rss_kb("VmRSS")


def environment_info() -> dict[str, Any]:
    """Machine, threads and library versions, for the results file."""
    import transformers

    from .. import __version__

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_gb = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return {
        "machine": {
            "platform": platform.platform(),
            "cpu": cpu,
            "cpu_count": os.cpu_count(),
            "memory_gb": memory_gb,
            "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        },
        "threads": torch.get_num_threads(),
        "sdpa_force_gqa": os.environ.get("TRANSFORMERS_SDPA_FORCE_GQA", "0") == "1",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "dlite_hf": __version__,
    }


class _Runner:
    """State of one benchmark run: models, hooks, greedy settings."""

    def __init__(
        self,
        target: nn.Module,
        tokenizer: Any,
        methods: list[BenchMethod],
        max_new_tokens: int,
        prefix_cache: bool = False,
    ):
        self.target = target
        self.prefix_cache = prefix_cache
        self.tokenizer = tokenizer
        self.methods = methods
        self.max_new_tokens = max_new_tokens
        self.timer = ForwardTimer(target)
        self.assistant_timers = {
            m.name: ForwardTimer(m.model) for m in methods if m.kind == "assisted" and m.model is not None
        }
        pad = target.generation_config.pad_token_id
        if pad is None:
            pad = getattr(tokenizer, "pad_token_id", None)
        if pad is None:
            eos = target.generation_config.eos_token_id
            pad = eos[0] if isinstance(eos, (list, tuple)) else eos
        self.greedy = {"do_sample": False, "num_beams": 1, "max_new_tokens": max_new_tokens}
        if pad is not None:
            self.greedy["pad_token_id"] = pad
        # float32 is the token-exact mode; in reduced precision a divergence from plain must be a near-tie
        self.checker = NearTieChecker(target)
        self.dtype, self.epsilon = self.checker.dtype, self.checker.epsilon

    def near_tie(self, prompt_length: int, plain: torch.Tensor, other: torch.Tensor) -> NearTieReport | None:
        """The near-tie verdict on a divergent output in reduced precision; None in float32 (exact mode)."""
        return self.checker.check(prompt_length, plain, other)

    def close(self) -> None:
        self.timer.remove()
        for timer in self.assistant_timers.values():
            timer.remove()

    def generate(
        self,
        method: BenchMethod,
        input_ids: torch.Tensor,
        max_new_tokens: int | None = None,
        session: Any = None,
        cache: Any = None,
    ):
        kwargs = {**self.greedy, **method.generate_kwargs(self.tokenizer)}
        if cache is not None:  # the previous turn's cache, cropped to the prefix this turn shares with it
            kwargs[_cache_keyword(self.target)] = cache
        if max_new_tokens is not None:
            kwargs["max_new_tokens"] = max_new_tokens
        models = {
            k: kwargs.pop(k)
            for k in ("assistant_model", "tokenizer", "assistant_tokenizer", "past_key_values", "cache")
            if k in kwargs
        }
        config = method.generation_config(**kwargs)  # everything else: this call's decoding options
        with session if session is not None else contextlib.nullcontext():
            return self.target.generate(
                input_ids, attention_mask=torch.ones_like(input_ids), generation_config=config, **models
            )

    def measure(
        self, method: BenchMethod, input_ids: torch.Tensor, session: Any = None, cache: Any = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Run one greedy generate() (inside `session`, a hybrid method's `DraftSession`; on `cache`, a prefix of
        `input_ids` kept from the session's previous turn) and return (sequences, metrics)."""
        cached = cache.get_seq_length() if cache is not None else 0
        gc.collect()
        rss_before = _reset_peak_rss()
        self.timer.reset()
        assistant_timer = self.assistant_timers.get(method.name)
        if assistant_timer is not None:
            assistant_timer.reset()
        if method.kind == "dlite":
            method.model.last_generation_stats = None
        started = time.perf_counter()
        sequences = self.generate(method, input_ids, session=session, cache=cache)
        wall = time.perf_counter() - started
        peak = _rss_kb("VmHWM") if rss_before is not None else None

        prompt_tokens = input_ids.shape[1]
        new_tokens = int(sequences.shape[1] - prompt_tokens)
        forwards = self.timer.forwards
        target_forwards = len(forwards)
        prefill_s = forwards[0][1] if forwards else 0.0
        verify = forwards[1:]
        verify_s = sum(t for _, t in verify)
        drafter_s: float | None = None
        lookup: dict[str, Any] = {}
        if method.kind == "dlite":
            stats = method.model.last_generation_stats
            if stats is None:
                raise RuntimeError(
                    f"Method {method.name!r}: the drafter recorded no generation statistics; was it used as the "
                    "assistant_model?"
                )
            rounds, drafted, accepted = stats.rounds, stats.drafted, stats.accepted
            drafter_s = stats.drafter_time_s + stats.lookup_time_s  # all the work of proposing drafts
            if method.lookup_tokens is not None:
                lookup = {
                    "lookup_rounds": stats.lookup_rounds,
                    "lookup_drafted": stats.lookup_drafted,
                    "lookup_accepted": stats.lookup_accepted,
                    "lookup_s": stats.lookup_time_s,
                    "lookup_index_reused": stats.lookup_index_reused,
                    "lookup_fallback_rounds": stats.lookup_fallback_rounds,
                    "dlite_rounds": stats.dlite_rounds,
                    "dlite_accepted": stats.dlite_accepted,
                    "dlite_drafter_s": stats.drafter_time_s,
                }
            draft_calls = stats.rounds + stats.skipped  # a skipped round ran the drafter too (and proposed nothing)
        else:
            rounds = sum(1 for n, _ in verify if n > 1)
            draft_calls = rounds
            drafted = sum(n - 1 for n, _ in verify if n > 1)
            accepted = max(0, new_tokens - target_forwards) if method.kind != "plain" else 0
            if assistant_timer is not None:
                drafter_s = assistant_timer.total_s()
        decode_s = max(wall - prefill_s, 1e-9)
        metrics: dict[str, Any] = {
            "prompt_tokens": int(prompt_tokens),
            "cached_prompt_tokens": int(cached),
            "new_tokens": new_tokens,
            "target_forwards": target_forwards,
            "rounds": int(rounds),
            "draft_calls": int(draft_calls),
            "drafted": int(drafted),
            "accepted": int(accepted),
            "tau": new_tokens / target_forwards if target_forwards else 0.0,
            "wall_s": wall,
            "prefill_s": prefill_s,
            "decode_s": decode_s,
            "tok_s": new_tokens / wall if wall > 0 else 0.0,
            "decode_tok_s": new_tokens / decode_s,
            "target_s": prefill_s + verify_s,
            "drafter_s": drafter_s,
            "overhead_s": wall - prefill_s - verify_s - (drafter_s or 0.0),
            "target_ms_per_round": 1000 * verify_s / len(verify) if verify else None,
            "drafter_ms_per_round": 1000 * drafter_s / draft_calls if drafter_s is not None and draft_calls else None,
            "drafter_share": drafter_s / (drafter_s + verify_s) if drafter_s is not None and verify_s > 0 else None,
            "peak_rss_delta_mb": (peak - rss_before) / 1024 if peak is not None and rss_before is not None else None,
            **lookup,
        }
        return sequences, metrics


def _cache_keyword(target: nn.Module) -> str:
    """generate()'s name for a cache to start from: the model forward's (``cache`` from transformers 5.24,
    ``past_key_values`` before)."""
    import inspect

    return "cache" if "cache" in inspect.signature(type(target).forward).parameters else "past_key_values"


def _reusable_cache(runner: _Runner, kept: tuple[Any, list[int]] | None, ids: list[int]) -> Any:
    """The cache a turn starts from: the previous turn's, cropped to the longest prefix its tokens share with this
    turn's prompt (at least one prompt token is left to prefill), or a new one."""
    from transformers import DynamicCache

    if kept is not None:
        cache, cached_ids = kept
        shared = first_difference(cached_ids, ids[:-1])
        shared = len(cached_ids) if shared is None else shared
        if shared:
            excess = cache.get_seq_length() - shared
            if excess > 0:
                cache.crop(-excess)  # transformers 5.24 crops by a negative count of tokens to drop
            return cache
    return DynamicCache(config=runner.target.config)


def _iterate_turns(session: Mapping[str, Any]) -> Iterable[tuple[int, list[dict[str, str]]]]:
    limit = session.get("max_turns")
    for index, turn in enumerate(session["turns"]):
        if limit is not None and index >= limit:
            return
        yield index, turn


def _progress(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, unit="gen", dynamic_ncols=True, file=sys.stderr)


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
    plots: bool = True,
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
        out_dir: when given, write the JSON, the markdown table and the plots there (:func:`write_outputs`).
        name: file-name stem of the outputs (default ``bench-<UTC time>``).
        plots: write the PNG plots (needs matplotlib).
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
        The results document (see ``benchmarks/README.md`` for the schema); ``result["ok"]`` is False when any
        output differed from plain greedy (in float32), or differed other than through a float32-verified near-tie
        (in bfloat16 / float16, :mod:`dlite_hf.neartie`; every divergence is listed in ``result["divergences"]``).
        With ``out_dir``, ``result["files"]`` lists the files written.
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
    info = {**environment_info(), **dict(meta or {})}
    info.update(started_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)), max_new_tokens=max_new_tokens)
    info.setdefault("target", getattr(target.config, "_name_or_path", "") or type(target).__name__)
    info.update(dtype=runner.dtype, near_tie_epsilon=runner.epsilon if runner.dtype != "float32" else None)
    info["attention"] = getattr(target.config, "_attn_implementation", None)
    info["prefix_cache"] = prefix_cache
    info.update(repeats=repeats, method_order="rotated by one method per turn")
    records: list[dict[str, Any]] = []
    mismatches: list[dict[str, Any]] = []
    session_log: list[dict[str, Any]] = []
    total = sum(len(list(_iterate_turns(s))) for items in sessions.values() for s in items) * len(bench_methods)
    try:
        if warmup:
            warm_ids = torch.tensor([chat_prompt_ids(tokenizer, _WARMUP_MESSAGES)])
            for method in bench_methods:
                runner.generate(method, warm_ids, max_new_tokens=min(8, max_new_tokens))
        turns_done = 0  # turns measured so far, over every session: the method order rotates with it
        with _progress(total * repeats, progress) as bar:
            for label, items in sessions.items():
                for session in items:
                    entry = _run_session(runner, label, session, records, mismatches, bar, repeats, turns_done)
                    turns_done += entry["turns_measured"]
                    session_log.append(entry)
    finally:
        runner.close()
    finished = time.time()
    info.update(
        finished_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(finished)),
        duration_s=finished - started,
        load_average_at_end=list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    )
    from .report import summarize, write_outputs

    summary = summarize(records, [m.name for m in bench_methods], list(sessions))
    result: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "meta": info,
        "methods": {m.name: m.describe() for m in bench_methods},
        "workloads": list(sessions),
        "sessions": session_log,
        "records": records,
        "summary": summary,
        "mismatches": mismatches,
        "divergences": [
            {k: r[k] for k in ("workload", "prompt_id", "method", "first_mismatch", "new_tokens")} | r["near_tie"]
            for r in records
            if r.get("near_tie")
        ],
        "ok": not mismatches,
    }
    if out_dir is not None:
        result["files"] = {k: str(v) for k, v in write_outputs(result, out_dir, name, plots=plots).items()}
    return result


def _snapshot(cache: Any, session: Any) -> tuple[Any, Any]:
    """Copies of a turn's starting state (a method's KV cache and its `DraftSession`'s suffix index), for a repeat
    that must not change what the next repeat starts from."""
    cache_copy = copy.deepcopy(cache) if cache is not None else None
    session_copy = None
    if session is not None:
        session_copy = type(session)(min_match=session.min_match)
        session_copy.index = copy.deepcopy(session.index)
    return cache_copy, session_copy


Run = tuple[torch.Tensor, dict[str, Any]]  # one measured generate(): (sequences, metrics)


def _measure_turn(
    runner: _Runner,
    input_ids: torch.Tensor,
    order: Sequence[BenchMethod],
    starts: Mapping[str, Any],
    draft_sessions: Mapping[str, Any],
    repeats: int,
    bar: Any,
    postfix: str,
) -> dict[str, list[Run]]:
    """Every method's runs of one turn, ``repeats`` rounds of ``order``; every round but the last from copies of
    each method's starting cache and suffix index, the last on the real ones (the next turn goes on from them)."""
    runs: dict[str, list[Run]] = {m.name: [] for m in order}
    for repeat in range(repeats):
        last = repeat == repeats - 1
        for method in order:
            bar.set_postfix_str(f"{postfix} {method.name}", refresh=False)
            cache, draft_session = starts[method.name], draft_sessions[method.name]
            if not last:
                cache, draft_session = _snapshot(cache, draft_session)
            runs[method.name].append(runner.measure(method, input_ids, session=draft_session, cache=cache))
            bar.update(1)
    return runs


def _check_runs(
    runner: _Runner, method: BenchMethod, runs: list[Run], reference: torch.Tensor, prompt_length: int
) -> tuple[Run, dict[str, Any], str | None]:
    """The fastest of a method's runs of a turn, its verdict fields against plain's ``reference``, and why it
    fails the check (None when it passes): another output than plain's other than at a verified near-tie, or
    repeats that disagree with each other."""
    fastest = min(runs, key=lambda run: run[1]["wall_s"])
    unstable = [r for r, (other, _) in enumerate(runs) if not torch.equal(other, runs[-1][0])]
    sequences = fastest[0]
    difference = (
        None
        if method.name == "plain"
        else first_difference(reference[0, prompt_length:].tolist(), sequences[0, prompt_length:].tolist())
    )
    verdict = None if difference is None else runner.near_tie(prompt_length, reference, sequences)
    fields = {
        "identical_to_plain": difference is None,
        "first_mismatch": difference,
        "near_tie": verdict.to_dict() if verdict is not None else None,
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


def _run_session(
    runner: _Runner,
    label: str,
    session: Mapping[str, Any],
    records: list[dict[str, Any]],
    mismatches: list[dict[str, Any]],
    bar: Any,
    repeats: int = 1,
    rotation: int = 0,
) -> dict[str, Any]:
    """Measure every turn of one session with every method, ``repeats`` times (the fastest kept), in an order
    rotated by ``rotation`` + the turn's number; returns the session's log entry."""
    history: list[dict[str, str]] = []
    multi_turn = len(session["turns"]) > 1
    turns = list(_iterate_turns(session))
    entry: dict[str, Any] = {"workload": label, "id": session["id"], "turns_available": len(session["turns"])}
    stop = "max_turns" if len(turns) < len(session["turns"]) else "end"
    measured = 0
    context_tokens = 0
    # hybrid methods keep one DraftSession (one suffix index) across the turns of a session, as an agent would
    draft_sessions = {method.name: method.new_session() for method in runner.methods}
    # with prefix_cache, each method keeps its own KV cache across the turns, as a serving stack's prefix cache does
    caches: dict[str, tuple[Any, list[int]]] = {}
    methods = runner.methods
    for index, turn in turns:
        messages = history + list(turn)
        ids = chat_prompt_ids(runner.tokenizer, messages)
        limit = session.get("max_tokens")
        if limit is not None and len(ids) > limit:
            stop = "max_tokens"
            bar.total -= (len(turns) - index) * len(methods) * repeats
            bar.refresh()
            break
        context_tokens = len(ids)
        input_ids = torch.tensor([ids])
        prompt_id = f"{session['id']}#{index}" if multi_turn else session["id"]
        shift = (rotation + measured) % len(methods)
        order = methods[shift:] + methods[:shift]
        starts = {
            m.name: _reusable_cache(runner, caches.get(m.name), ids) if runner.prefix_cache else None for m in methods
        }
        postfix = f"{label} {prompt_id[-28:]} ctx={len(ids)}"
        runs = _measure_turn(runner, input_ids, order, starts, draft_sessions, repeats, bar, postfix)
        reference = runs["plain"][-1][0]
        for method in methods:  # records in the methods' own order, plain first
            (_, metrics), fields, reason = _check_runs(runner, method, runs[method.name], reference, len(ids))
            if starts[method.name] is not None:
                cache = starts[method.name]
                caches[method.name] = (cache, runs[method.name][-1][0][0, : cache.get_seq_length()].tolist())
            record = {
                "workload": label,
                "session_id": session["id"],
                "turn": index,
                "prompt_id": prompt_id,
                "source": session.get("source", ""),
                "method": method.name,
                **metrics,
                **fields,
            }
            if repeats > 1:
                record["wall_s_repeats"] = [run[1]["wall_s"] for run in runs[method.name]]
            records.append(record)
            if not record["lossless_ok"]:
                mismatch = {
                    k: record[k] for k in ("workload", "prompt_id", "turn", "method", "first_mismatch", "new_tokens")
                }
                mismatch["plain_new_tokens"] = int(reference.shape[1] - len(ids))
                if reason is not None:
                    mismatch["reason"] = reason
                mismatches.append(mismatch)
                why = f": {reason}" if reason is not None else ""
                bar.write(
                    f"LOSSLESS CHECK FAILED: {method.name} on {label} {prompt_id}: greedy output differs from plain "
                    f"at new token {record['first_mismatch']} ({mismatch['new_tokens']} vs "
                    f"{mismatch['plain_new_tokens']} new tokens){why}.",
                    file=sys.stderr,
                )
        measured += 1
        reply = runner.tokenizer.decode(reference[0, len(ids) :], skip_special_tokens=True).strip()
        history = messages + [{"role": "assistant", "content": reply}]
    entry.update(turns_measured=measured, stop_reason=stop, last_context_tokens=context_tokens)
    return entry
