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
import os
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from ..data.workloads import LONG_MAX_TOKENS, parse_workloads
from . import replay_hybrid, replay_rules
from .arguments import DEFAULT_WORKLOADS, add_bench_arguments
from .methods import parse_methods
from .replay import add_replay_parser
from .report import add_postprocess_parsers
from .results import as_result

# CLI flag (argparse dest) -> the drafter config field it overrides for the adaptive DLite methods
THRESHOLD_FLAGS = {"confidence_threshold": "draft_confidence_threshold", "skip_threshold": "draft_skip_threshold"}
# method -> the flag (argparse dest) that gives its checkpoint
CHECKPOINT_FLAGS = {
    "dlite": "drafter",
    "dlite_fixed": "drafter",
    "hybrid": "drafter",
    "dlite_nohead": "drafter_nohead",
    "history": "drafter_history",
    "assisted": "assistant",
}


def add_bench_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `bench` subcommand (its flags: :mod:`dlite_hf.bench.arguments`)."""
    parser = sub.add_parser(
        "bench",
        help="Benchmark decoding methods side by side (tau, speedup, lossless check); JSON and a table.",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bench_arguments(parser)
    parser.set_defaults(func=cmd_bench)
    tools = parser.add_subparsers(dest="bench_command", metavar="{report,goals,tables,replay}")
    add_postprocess_parsers(tools)
    add_replay_parser(tools, (replay_hybrid, replay_rules))


def _load_target(name_or_path: str, dtype: str, attention: str) -> tuple[Any, Any, Path]:
    """(model, tokenizer, folder) of a registry name or local folder (a seam the tests replace)."""
    from ..assets import open_target

    return open_target(name_or_path, dtype=dtype, attention=attention)


def _load_drafter(path: str, dtype: Any) -> Any:
    """A drafter checkpoint in `dtype` (the target's torch dtype); a missing or unusable one stops the command."""
    from ..assets import load_drafter

    try:
        return load_drafter(path, dtype=dtype)
    except (OSError, ValueError) as error:
        raise SystemExit(f"--drafter {path}: {error}") from None


def _parse_lengths(text: str) -> list[int]:
    try:
        lengths = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as error:
        raise SystemExit(f"--long-lengths must be comma-separated integers, got {text!r}.") from error
    bad = [n for n in lengths if not 64 <= n <= LONG_MAX_TOKENS]
    if not lengths or bad:
        raise SystemExit(f"--long-lengths: each length must be in 64..{LONG_MAX_TOKENS} tokens, got {text!r}.")
    return lengths


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _command_line(args: argparse.Namespace, methods: list[str], workloads: list[str]) -> str:
    """The exact, fully explicit command that reproduces this run."""
    parts = ["dlite-hf", "bench", "--target", args.target]
    for flag in ("drafter", "drafter_nohead", "drafter_history", "assistant"):
        if getattr(args, flag):
            parts += [_flag(flag), getattr(args, flag)]
    if workloads:
        parts += ["--workloads", ",".join(workloads)]
    if args.prompts:
        parts += ["--prompts", args.prompts]
    parts += ["--methods", ",".join(methods)]
    for flag in (*THRESHOLD_FLAGS, "lookup_tokens", "lookup_min_match", "lookup_fallback_min_match"):
        if getattr(args, flag) is not None:
            parts += [_flag(flag), str(getattr(args, flag))]
    parts += ["--num-prompts", str(args.num_prompts), "--max-new-tokens", str(args.max_new_tokens)]
    if args.repeats != 1:
        parts += ["--repeats", str(args.repeats)]
    if "long" in workloads:
        parts += ["--long-lengths", args.long_lengths]
    if "agentic" in workloads:
        parts += ["--agentic-max-tokens", str(args.agentic_max_tokens)]
        parts += ["--agentic-max-turns", str(args.agentic_max_turns), "--coding-sessions", str(args.coding_sessions)]
        parts += ["--bfcl-sessions", str(args.bfcl_sessions)]
        if args.bfcl_sessions:
            parts += ["--bfcl-category", args.bfcl_category]
    parts += ["--threads", str(args.threads), "--dtype", args.dtype, "--attention", args.attention, "--out", args.out]
    if args.sdpa_gqa:
        parts.append("--sdpa-gqa")
    if args.name:
        parts += ["--name", args.name]
    parts += [_flag(flag) for flag in ("prefix_cache", "allow_mismatch", "plot", "no_warmup") if getattr(args, flag)]
    return shlex.join(parts)


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the benchmark, written to --out as <name>.json / .md / plots; exit status 1 if any greedy output
    differs from plain (unless --allow-mismatch)."""
    methods, workloads, user_prompts, lengths = _validate(args)  # every flag, before any model loads
    import torch

    from .report import markdown_table
    from .runner import run_bench

    torch.set_num_threads(args.threads)
    if args.sdpa_gqa:  # read by transformers at every attention call; the same for every method of the run
        os.environ["TRANSFORMERS_SDPA_FORCE_GQA"] = "1"
    target, tokenizer, folder = _load_target(args.target, args.dtype, args.attention)
    specs = _bench_methods(args, methods, target, tokenizer, folder)
    sessions = _sessions(args, workloads, lengths, tokenizer, user_prompts)
    _warn_past_trained_range(args, target, workloads, lengths)
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
        meta={"command": command, "argv": list(sys.argv), "target": args.target, "target_folder": str(folder)},
        out_dir=args.out,
        name=args.name or f"{slug}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}",
        plots=args.plot,
        prefix_cache=args.prefix_cache,
        repeats=args.repeats,
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
        return 0 if args.allow_mismatch else 1
    return 0


def _validate(args: argparse.Namespace) -> tuple[list[str], list[str], list[dict] | None, list[int]]:
    """(methods, workloads, the --prompts rows or None, the long workload's lengths), every flag checked."""
    if args.workloads is None:
        args.workloads = "" if args.prompts else DEFAULT_WORKLOADS
    try:
        methods = parse_methods(args.methods)
        workloads = parse_workloads(args.workloads) if args.workloads or not args.prompts else []
    except ValueError as error:
        raise SystemExit(str(error)) from error
    user_prompts = None  # the --prompts rows
    if args.prompts:
        from ..data.workloads import load_prompt_file

        try:
            user_prompts = load_prompt_file(args.prompts)
        except (OSError, ValueError) as error:
            raise SystemExit(f"--prompts {args.prompts}: {error}") from None
    _check_drafting_flags(args, methods)
    _check_checkpoints(args, methods)
    _check_counts(args)
    lengths = _parse_lengths(args.long_lengths) if "long" in workloads else []
    return methods, workloads, user_prompts, lengths


def _check_drafting_flags(args: argparse.Namespace, methods: list[str]) -> None:
    """The thresholds' and the hybrid's flags: valid values, and a note for a hybrid flag without the hybrid."""
    from ..modeling import decoding_options as options

    hybrid_checks = {
        "lookup_tokens": options.check_lookup_tokens,
        "lookup_min_match": options.check_min_match,
        "lookup_fallback_min_match": options.check_fallback_min_match,
    }
    for flag in (*THRESHOLD_FLAGS, *hybrid_checks):
        value = getattr(args, flag)
        if value is None:
            continue
        try:
            if flag in THRESHOLD_FLAGS:
                options.check_threshold(THRESHOLD_FLAGS[flag], value, where=f"{_flag(flag)} sets ")
            else:
                hybrid_checks[flag](value, f"{_flag(flag)} {value}")
        except ValueError as error:
            raise SystemExit(str(error)) from None
        if flag in hybrid_checks and "hybrid" not in methods:
            print(f"note: {_flag(flag)} is ignored: method hybrid is not in --methods.", file=sys.stderr)


def _check_checkpoints(args: argparse.Namespace, methods: list[str]) -> None:
    """Every method has its checkpoint flag (--drafter defaults to the shipped drafter); a note for a checkpoint
    flag no method uses."""
    if any(m in methods for m in ("dlite", "dlite_fixed", "hybrid")) and not args.drafter:
        from ..assets import AssetError, resolve_drafter
        from ..defaults import DEFAULT_DRAFTER

        try:  # the shipped drafter, found by name
            args.drafter = str(resolve_drafter(DEFAULT_DRAFTER))
        except AssetError:
            pass
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


def _check_counts(args: argparse.Namespace) -> None:
    """The counts the flags' types do not check (those check the positive ones)."""
    if args.agentic_max_tokens < 256:
        raise SystemExit(f"--agentic-max-tokens {args.agentic_max_tokens} is invalid: expected an integer >= 256.")
    if args.bfcl_sessions < 0 or args.coding_sessions < 0:
        raise SystemExit(
            f"--bfcl-sessions and --coding-sessions must be >= 0 (0 leaves them out of agentic); got "
            f"{args.bfcl_sessions} and {args.coding_sessions}."
        )


def _bench_methods(args: argparse.Namespace, methods: list[str], target: Any, tokenizer: Any, folder: Any) -> list:
    """A :class:`~dlite_hf.bench.methods.BenchMethod` per method name, its models loaded (a drafter once)."""
    from .methods import BenchMethod

    specs: list[BenchMethod] = []
    drafters: dict[str, Any] = {}
    for name in methods:
        if name in ("plain", "prompt_lookup"):
            specs.append(BenchMethod(name, name))
        elif name == "assisted":
            specs.append(_assisted_method(args, tokenizer, folder))
        else:
            specs.append(_dlite_method(args, name, target, drafters))
    return specs


def _assisted_method(args: argparse.Namespace, tokenizer: Any, folder: Any) -> Any:
    from .methods import BenchMethod

    assistant, assistant_tokenizer, assistant_folder = _load_target(args.assistant, args.dtype, args.attention)
    if Path(assistant_folder).resolve() == Path(folder).resolve():
        raise SystemExit("--assistant is the target itself; assisted decoding needs a different, smaller model.")
    same = len(tokenizer) == len(assistant_tokenizer) and tokenizer.get_vocab() == assistant_tokenizer.get_vocab()
    universal = None if same else assistant_tokenizer
    return BenchMethod("assisted", "assisted", assistant, universal, checkpoint=args.assistant)


def _dlite_method(args: argparse.Namespace, name: str, target: Any, drafters: dict[str, Any]) -> Any:
    """A DLite method: its drafter (loaded once per path into ``drafters``), checked against the target, with the
    per-call settings of the flags."""
    from .methods import HYBRID_LOOKUP_TOKENS, BenchMethod, check_drafter_kind, dlite_overrides

    path = getattr(args, CHECKPOINT_FLAGS[name])
    if path not in drafters:  # dlite and dlite_fixed share --drafter: load it once
        drafters[path] = _load_drafter(path, target.dtype)
    drafter = drafters[path]
    try:
        check_drafter_kind(name, drafter, where=path)
        drafter.check_target(target)
    except ValueError as error:
        raise SystemExit(f"{_flag(CHECKPOINT_FLAGS[name])} {path}: {error}") from error
    thresholds = {field: getattr(args, flag) for flag, field in THRESHOLD_FLAGS.items()}
    overrides = dlite_overrides(name, {field: value for field, value in thresholds.items() if value is not None})
    hybrid = {}
    if name == "hybrid":
        hybrid = {
            "lookup_tokens": args.lookup_tokens or HYBRID_LOOKUP_TOKENS,
            "lookup_min_match": args.lookup_min_match,
        }
        if args.lookup_fallback_min_match is not None:  # per call, like the thresholds
            overrides["lookup_fallback_min_match"] = args.lookup_fallback_min_match
    return BenchMethod(name, "dlite", drafter, checkpoint=path, drafter_overrides=overrides, **hybrid)


def _sessions(
    args: argparse.Namespace, workloads: list[str], lengths: list[int], tokenizer: Any, user_prompts: list | None
) -> dict[str, list]:
    """The workloads' sessions (``{label: [session, ...]}``), then the --prompts rows as one more workload."""
    from ..data.workloads import build_workloads

    flags = "num_prompts agentic_max_tokens agentic_max_turns coding_sessions bfcl_sessions bfcl_category".split()
    settings = {flag: getattr(args, flag) for flag in flags}  # build_workloads' keywords, as the flags name them
    settings["long_lengths"] = lengths or (1024,)
    try:
        sessions = build_workloads(workloads, tokenizer, **settings) if workloads else {}
    except ValueError as error:
        raise SystemExit(str(error)) from error
    if user_prompts is not None:
        from ..data.workloads import USER_PROMPTS_WORKLOAD

        sessions[USER_PROMPTS_WORKLOAD] = user_prompts
    return sessions


def _warn_past_trained_range(args: argparse.Namespace, target: Any, workloads: list[str], lengths: list[int]) -> None:
    max_positions = getattr(target.config, "max_position_embeddings", None)
    longest = max([*lengths, args.agentic_max_tokens if "agentic" in workloads else 0]) + args.max_new_tokens
    if max_positions and longest > max_positions:
        print(
            f"warning: contexts up to {longest} tokens exceed the target's max_position_embeddings "
            f"({max_positions}); its outputs there are out of its trained range.",
            file=sys.stderr,
        )
