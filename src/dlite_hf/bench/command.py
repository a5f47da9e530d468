"""`dlite-hf bench`: methods side by side on real workloads; JSON, a markdown table (PNG plots with --plot).

Example::

    dlite-hf bench --target smollm2-135m --drafter drafters/dlite-smollm2-135m \\
        --workloads chat,code,math,agentic,long --methods plain,prompt_lookup,dlite \\
        --max-new-tokens 128 --threads 1 --out benchmarks/results/

Its subcommands work on results afterwards (`dlite-hf bench report | goals | tables`,
:mod:`dlite_hf.bench.report`) or replay greedy decoding offline to choose drafting rules
(`dlite-hf bench replay hybrid | rules`, :mod:`dlite_hf.bench.replay`).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ..commands.common import add_command, command_flags, exit_on_error, open_target_flagged
from ..data.workloads import (
    CODING_TASKS,
    LONG_MAX_TOKENS,
    USER_PROMPTS_WORKLOAD,
    build_workloads,
    load_prompt_file,
    parse_workloads,
)
from ..defaults import DEFAULT_DRAFTER
from ..modeling import decoding_options as options
from . import replay_hybrid, replay_rules
from .arguments import DEFAULT_WORKLOADS, add_bench_arguments
from .measure import sdpa_gqa_forced
from .methods import make_method, parse_methods
from .replay import add_replay_parser
from .report import add_postprocess_parsers, markdown_table
from .results import as_result
from .runner import run_bench

# CLI flag (argparse dest) -> the drafter config field it overrides for the adaptive DLite methods
THRESHOLD_FLAGS = {"confidence_threshold": "draft_confidence_threshold", "skip_threshold": "draft_skip_threshold"}
# method -> the flag (argparse dest) that gives its checkpoint
CHECKPOINT_FLAGS = dict.fromkeys(("dlite", "dlite_fixed", "hybrid"), "drafter")
CHECKPOINT_FLAGS |= {"dlite_nohead": "drafter_nohead", "history": "drafter_history", "assisted": "assistant"}


def add_bench_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `bench` subcommand (its flags: :mod:`dlite_hf.bench.arguments`)."""
    summary = "Benchmark decoding methods side by side (tau, speedup, lossless check); JSON and a table."
    parser = add_command(sub, "bench", summary, cmd_bench, __doc__)
    add_bench_arguments(parser)
    tools = parser.add_subparsers(dest="bench_command", metavar="{report,goals,tables,replay}")
    add_postprocess_parsers(tools)
    add_replay_parser(tools, (replay_hybrid, replay_rules))


_load_target = open_target_flagged  # (model, tokenizer, folder) of a registry name or folder; a seam the tests replace


def _load_drafter(path: str, dtype: Any) -> Any:
    """A drafter checkpoint in `dtype` (the target's torch dtype); a missing or unusable one stops the command."""
    from ..assets import load_drafter

    with exit_on_error(f"--drafter {path}", OSError, ValueError):
        return load_drafter(path, dtype=dtype)


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _command_line(args: argparse.Namespace, methods: list[str], workloads: list[str]) -> str:
    """The exact, fully explicit command that reproduces this run: every flag that bears on it, with its value."""
    values = {**vars(args), "workloads": ",".join(workloads), "methods": ",".join(methods)}
    shown = ["target", "drafter", "drafter_nohead", "drafter_history", "assistant", "workloads", "prompts", "methods"]
    shown += [*THRESHOLD_FLAGS, "lookup_tokens", "lookup_min_match", "lookup_fallback_min_match"]
    shown += ["num_prompts", "max_new_tokens", *(["repeats"] if args.repeats != 1 else [])]
    shown += ["long_lengths"] if "long" in workloads else []
    if "agentic" in workloads:
        shown += ["agentic_max_tokens", "agentic_max_turns", "coding_sessions", "coding_files"]
        shown += ["coding_file_tokens", "bfcl_sessions"]
        shown += ["bfcl_category"] if args.bfcl_sessions else []
    shown += ["threads", "dtype", "attention", "pack_weights", "out", "sdpa_gqa", "name"]
    shown += ["prefix_cache", "allow_mismatch", "plot", "no_warmup"]
    return shlex.join(["dlite-hf", "bench", *command_flags(values, shown)])


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the benchmark, written to --out as <name>.json / .md / plots; exit status 1 if any greedy output
    differs from plain (unless --allow-mismatch)."""
    validated = _validate(args)  # every flag, before any model loads
    torch.set_num_threads(args.threads)
    with sdpa_gqa_forced(args.sdpa_gqa):  # the same attention for every method of the run, and only for the run
        return _run(args, *validated)


def _run(args: argparse.Namespace, methods: list[str], workloads: list[str], user_prompts, lengths: list[int]) -> int:
    """Load the models, run every method and write the result; the exit status of :func:`cmd_bench`.
    ``user_prompts``: the --prompts rows or None."""
    target, tokenizer, folder = _load_target(args.target, args.dtype, args.attention, args.pack_weights)
    specs = _bench_methods(args, methods, target, tokenizer, folder)
    sessions = _sessions(args, workloads, lengths, tokenizer, user_prompts)
    max_positions = getattr(target.config, "max_position_embeddings", None)
    longest = max([*lengths, args.agentic_max_tokens if "agentic" in workloads else 0]) + args.max_new_tokens
    if max_positions and longest > max_positions:
        print(
            f"warning: contexts up to {longest} tokens exceed the target's max_position_embeddings "
            f"({max_positions}); its outputs there are out of its trained range.",
            file=sys.stderr,
        )
    command = _command_line(args, methods, workloads)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(args.target).name if Path(args.target).exists() else args.target)
    print(f"dlite-hf bench: {command}", file=sys.stderr)
    result = run_bench(
        target,
        tokenizer,
        specs,
        sessions,
        max_new_tokens=args.max_new_tokens,
        warmup=not args.no_warmup,
        progress=not args.no_progress,
        meta={
            "command": command,
            "argv": list(sys.argv),
            "target": args.target,
            "target_folder": str(folder),
            "pack_weights": args.pack_weights,
        },
        out_dir=args.out,
        name=args.name or f"{slug}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}",
        plots=args.plot,
        prefix_cache=args.prefix_cache,
        repeats=args.repeats,
        journal=Path(args.out) / f"{args.name}.partial.jsonl" if args.name else None,  # --name: resumable
    )
    result = as_result(result)
    print(markdown_table(result))
    for kind, path in result.files.items():
        print(f"{kind}: {path}")
    if not result.ok:
        print(
            f"LOSSLESS CHECK FAILED: {len(result.mismatches)} greedy output(s) differ from plain greedy "
            f"(see 'mismatches' in {result.files['json']}).",
            file=sys.stderr,
        )
    return 0 if result.ok or args.allow_mismatch else 1


def _validate(args: argparse.Namespace) -> tuple[list[str], list[str], list[dict] | None, list[int]]:
    """(methods, workloads, the --prompts rows or None, the long workload's lengths), every flag checked."""
    if args.workloads is None:
        args.workloads = "" if args.prompts else DEFAULT_WORKLOADS
    with exit_on_error("", ValueError):
        methods = parse_methods(args.methods)
        workloads = parse_workloads(args.workloads) if args.workloads or not args.prompts else []
    with exit_on_error(f"--prompts {args.prompts}", OSError, ValueError):
        user_prompts = load_prompt_file(args.prompts) if args.prompts else None  # the --prompts rows
    _check_drafting_flags(args, methods)
    _check_checkpoints(args, methods)
    if args.agentic_max_tokens < 256:  # the counts the flags' types do not check (those check the positive ones)
        raise SystemExit(f"--agentic-max-tokens {args.agentic_max_tokens} is invalid: expected an integer >= 256.")
    if args.bfcl_sessions < 0 or args.coding_sessions < 0:
        raise SystemExit(
            f"--bfcl-sessions and --coding-sessions must be >= 0 (0 leaves them out of agentic); got "
            f"{args.bfcl_sessions} and {args.coding_sessions}."
        )
    longest = min(len(task.modules) for task in CODING_TASKS)
    if args.coding_files > longest:
        raise SystemExit(f"--coding-files {args.coding_files} is invalid: a coding session reads at most {longest}.")
    if "long" not in workloads:
        return methods, workloads, user_prompts, []
    try:
        lengths = [int(x) for x in args.long_lengths.split(",") if x.strip()]
    except ValueError as error:
        raise SystemExit(f"--long-lengths must be comma-separated integers, got {args.long_lengths!r}.") from error
    if not lengths or any(not 64 <= n <= LONG_MAX_TOKENS for n in lengths):
        raise SystemExit(
            f"--long-lengths: each length must be in 64..{LONG_MAX_TOKENS} tokens, got {args.long_lengths!r}."
        )
    return methods, workloads, user_prompts, lengths


def _check_drafting_flags(args: argparse.Namespace, methods: list[str]) -> None:
    """The thresholds' and the hybrid's flags: valid values, and a note for a hybrid flag without the hybrid."""
    hybrid_checks = {
        "lookup_tokens": options.check_lookup_tokens,
        "lookup_min_match": options.check_min_match,
        "lookup_fallback_min_match": options.check_fallback_min_match,
    }
    for flag in (*THRESHOLD_FLAGS, *hybrid_checks):
        value = getattr(args, flag)
        if value is None:
            continue
        with exit_on_error("", ValueError):
            if flag in THRESHOLD_FLAGS:
                options.check_threshold(THRESHOLD_FLAGS[flag], value, where=f"{_flag(flag)} sets ")
            else:
                hybrid_checks[flag](value, f"{_flag(flag)} {value}")
        if flag in hybrid_checks and "hybrid" not in methods:
            print(f"note: {_flag(flag)} is ignored: method hybrid is not in --methods.", file=sys.stderr)


def _check_checkpoints(args: argparse.Namespace, methods: list[str]) -> None:
    """Every method has its checkpoint flag (--drafter defaults to the shipped drafter); a note for a checkpoint
    flag no method uses."""
    if any(m in methods for m in ("dlite", "dlite_fixed", "hybrid")) and not args.drafter:
        from ..assets import AssetError, resolve_drafter

        with contextlib.suppress(AssetError):  # the shipped drafter, found by name
            args.drafter = str(resolve_drafter(DEFAULT_DRAFTER))
    missing = [
        f"method {m} needs {_flag(CHECKPOINT_FLAGS[m])} PATH"
        for m in methods
        if m in CHECKPOINT_FLAGS and not getattr(args, CHECKPOINT_FLAGS[m])
    ]
    if missing:
        raise SystemExit("; ".join(missing) + ".")
    for method, flag in CHECKPOINT_FLAGS.items():
        if getattr(args, flag) and method not in methods and flag != "drafter":
            print(f"note: {_flag(flag)} is ignored: method {method} is not in --methods.", file=sys.stderr)


def _bench_methods(args: argparse.Namespace, methods: list[str], target: Any, tokenizer: Any, folder: Any) -> list:
    """A :class:`~dlite_hf.bench.methods.BenchMethod` per method name (:func:`~.methods.make_method`), its models
    loaded (a drafter once per path) and checked against the target."""
    thresholds = {field: getattr(args, flag) for flag, field in THRESHOLD_FLAGS.items()}
    thresholds = {field: value for field, value in thresholds.items() if value is not None}
    specs, drafters = [], {}
    for name in methods:
        if name in ("plain", "prompt_lookup"):
            specs.append(make_method(name))
            continue
        if name == "assisted":
            specs.append(make_method(name, _assistant(args, tokenizer, folder), args.assistant))
            continue
        path = getattr(args, CHECKPOINT_FLAGS[name])
        if path not in drafters:  # dlite and dlite_fixed share --drafter: load it once
            drafters[path] = _load_drafter(path, target.dtype)
        overrides = dict(thresholds)
        if name == "hybrid" and args.lookup_fallback_min_match is not None:  # per call, like the thresholds
            overrides["lookup_fallback_min_match"] = args.lookup_fallback_min_match
        try:
            specs.append(make_method(name, drafters[path], path, overrides, args.lookup_tokens, args.lookup_min_match))
            drafters[path].check_target(target)
        except ValueError as error:
            raise SystemExit(f"{_flag(CHECKPOINT_FLAGS[name])} {path}: {error}") from error
    return specs


def _assistant(args: argparse.Namespace, tokenizer: Any, folder: Any) -> tuple[Any, Any]:
    """(the assistant model, its tokenizer where its vocabulary is not the target's: universal assisted decoding)."""
    assistant, assistant_tokenizer, assistant_folder = _load_target(
        args.assistant, args.dtype, args.attention, args.pack_weights
    )
    if Path(assistant_folder).resolve() == Path(folder).resolve():
        raise SystemExit("--assistant is the target itself; assisted decoding needs a different, smaller model.")
    same = len(tokenizer) == len(assistant_tokenizer) and tokenizer.get_vocab() == assistant_tokenizer.get_vocab()
    return assistant, None if same else assistant_tokenizer


def _sessions(
    args: argparse.Namespace, workloads: list[str], lengths: list[int], tokenizer: Any, user_prompts: list | None
) -> dict[str, list]:
    """The workloads' sessions (``{label: [session, ...]}``), then the --prompts rows as one more workload."""
    flags = "num_prompts agentic_max_tokens agentic_max_turns coding_sessions coding_files bfcl_sessions bfcl_category"
    settings = {flag: getattr(args, flag) for flag in flags.split()}  # build_workloads' keywords, as flags name them
    settings.update(long_lengths=lengths or (1024,), file_tokens=args.coding_file_tokens)
    with exit_on_error("", ValueError):
        sessions = build_workloads(workloads, tokenizer, **settings) if workloads else {}
    if user_prompts is not None:
        sessions[USER_PROMPTS_WORKLOAD] = user_prompts
    return sessions
