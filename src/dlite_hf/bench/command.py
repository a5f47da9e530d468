"""`dlite-hf bench`: methods side by side on real workloads; JSON, a markdown table and PNG plots.

Example::

    dlite-hf bench --target smollm2-135m --drafter drafters/dlite-smollm2-135m \\
        --workloads chat,code,math,agentic,long --methods plain,prompt_lookup,dlite \\
        --max-new-tokens 128 --threads 1 --out benchmarks/results/
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

from ..defaults import ATTENTION_CHOICES, DTYPE_CHOICES
from .bfcl import BFCL_CATEGORIES
from .methods import METHOD_CHOICES, parse_methods
from .workloads import LONG_MAX_TOKENS, WORKLOAD_CHOICES, parse_workloads

DEFAULT_WORKLOADS = "chat,code,math,tool,agentic,long,legal,clinical"  # the last three: out of domain
DEFAULT_METHODS = "plain,prompt_lookup,dlite"
# CLI flag (argparse dest) -> the drafter config field it overrides for the adaptive DLite methods
THRESHOLD_FLAGS = {"confidence_threshold": "draft_confidence_threshold", "skip_threshold": "draft_skip_threshold"}
# method -> the flag that gives its checkpoint
CHECKPOINT_FLAGS = {
    "dlite": "--drafter",
    "dlite_fixed": "--drafter",
    "hybrid": "--drafter",
    "dlite_nohead": "--drafter-nohead",
    "history": "--drafter-history",
    "assisted": "--assistant",
}


def add_bench_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `bench` subcommand."""
    parser = sub.add_parser(
        "bench",
        help="Benchmark decoding methods side by side (tau, speedup, lossless check); JSON, table, plots.",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--target", default="smollm2-135m", help="target: a local folder, Hub id or registry name")
    parser.add_argument(
        "--drafter",
        default=None,
        help="methods dlite, dlite_fixed, hybrid: a drafter folder, Hub id or name (default: dlite-smollm2-135m)",
    )
    parser.add_argument("--drafter-nohead", default=None, help="method dlite_nohead: a no-sequential-head drafter")
    parser.add_argument("--drafter-history", default=None, help="method history: a history-aware checkpoint")
    parser.add_argument(
        "--assistant", default=None, help="method assisted: a small assistant LM (registry name or folder)"
    )
    parser.add_argument(
        "--confidence-threshold",
        type=float,
        default=None,
        help="draft_confidence_threshold of methods dlite, dlite_nohead and history (default: each checkpoint's "
        "config; dlite_fixed always uses 0, K drafts per round)",
    )
    parser.add_argument(
        "--skip-threshold",
        type=float,
        default=None,
        help="draft_skip_threshold of methods dlite, dlite_nohead and history (default: each checkpoint's config; "
        "dlite_fixed always uses 0, never skips)",
    )
    parser.add_argument(
        "--lookup-tokens",
        type=int,
        default=None,
        help="method hybrid: the cap on a retrieved draft, prompt_lookup_num_tokens (default 16)",
    )
    parser.add_argument(
        "--lookup-min-match",
        type=int,
        default=None,
        help="method hybrid: draft the retrieved continuation when the matched suffix has at least this many "
        "tokens (default: the drafter's lookup_min_match)",
    )
    parser.add_argument(
        "--lookup-fallback-min-match",
        type=int,
        default=None,
        help="method hybrid: when the drafter proposes nothing, draft the retrieved continuation of a match of at "
        "least this many tokens (0: off; default: the drafter's lookup_fallback_min_match)",
    )
    parser.add_argument(
        "--workloads",
        default=None,
        help=f"comma-separated, from: {', '.join(WORKLOAD_CHOICES)} (default {DEFAULT_WORKLOADS}; with --prompts: "
        "none unless given)",
    )
    parser.add_argument(
        "--prompts",
        default=None,
        help="your own prompts as one more workload, 'prompts': a JSONL file, one row per prompt with `messages` "
        "(the chat format) and optionally `id`; every row is measured",
    )
    parser.add_argument(
        "--methods", default=DEFAULT_METHODS, help=f"comma-separated, from: {', '.join(METHOD_CHOICES)}"
    )
    parser.add_argument(
        "--num-prompts", type=int, default=4, help="prompts per workload (per long length; ToolTalk sessions)"
    )
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="measure every turn this many times with every method (interleaved, each from the same state) and keep "
        "the fastest repeat: timing noise on a shared machine only adds time",
    )
    parser.add_argument(
        "--long-lengths", default="1024,4096", help=f"prompt lengths of the long workload (<= {LONG_MAX_TOKENS})"
    )
    parser.add_argument(
        "--agentic-max-tokens", type=int, default=8192, help="agentic sessions stop when the context passes this"
    )
    parser.add_argument("--agentic-max-turns", type=int, default=8, help="turns measured per agentic session")
    parser.add_argument("--coding-sessions", type=int, default=1, help="coding sessions (stdlib files) in agentic")
    parser.add_argument(
        "--prefix-cache",
        action="store_true",
        help="multi-turn sessions: every method keeps its KV cache from one turn to the next (cropped to the prefix "
        "the next prompt shares), so a turn prefills only its new tokens, as a serving stack with prefix caching does",
    )
    parser.add_argument(
        "--bfcl-sessions", type=int, default=1, help="BFCL multi-turn sessions (executable tool backends) in agentic"
    )
    parser.add_argument(
        "--bfcl-category",
        default="multi_turn_base",
        choices=BFCL_CATEGORIES,
        help="BFCL multi-turn category (long_context: large scenarios, long tool results)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for the whole run")
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=DTYPE_CHOICES,
        help="every model's dtype (the drafters and the assistant follow the target). float32: outputs must be "
        "token-identical to plain; bfloat16/float16: each divergence must be a float32-verified near-tie "
        "(dlite_hf.neartie); auto: the checkpoint's dtype",
    )
    parser.add_argument(
        "--attention",
        default="sdpa",
        choices=ATTENTION_CHOICES,
        help="the target's (and the assistant's) attention, the same for every method: sdpa (transformers' default) "
        "or packed_gqa (dlite_hf.attention: grouped-query heads packed into rows, faster for short queries on CPU)",
    )
    parser.add_argument(
        "--sdpa-gqa",
        action="store_true",
        help="set TRANSFORMERS_SDPA_FORCE_GQA=1 for every method: on CPU, transformers otherwise copies the KV cache "
        "to repeat grouped-query heads in every multi-token (verification) forward, a cost that grows with context",
    )
    parser.add_argument("--out", default="benchmarks/results/", help="output folder")
    parser.add_argument("--name", default=None, help="file-name stem (default: <target>-<UTC time>)")
    parser.add_argument(
        "--allow-mismatch", action="store_true", help="exit 0 even if a greedy output differs from plain"
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up generation per method")
    parser.set_defaults(func=cmd_bench)


# ----------------------------------------------------------------------------------------------- loading
def _load_target(name_or_path: str, dtype: str = "float32", attention: str = "sdpa") -> tuple[Any, Any, Path]:
    """(model, tokenizer, folder) of a registry name or local folder, in `dtype`, with `attention` (monkeypatched by
    the tests)."""
    from ..assets import open_target

    return open_target(name_or_path, dtype=dtype, attention=attention)


def _load_drafter(path: str, dtype: Any) -> Any:
    """A drafter checkpoint in `dtype` (the target's torch dtype); a missing or unusable one stops the command."""
    from ..assets import load_drafter

    try:
        return load_drafter(path, dtype=dtype)
    except (OSError, ValueError) as error:
        raise SystemExit(f"--drafter {path}: {error}") from None


def _threshold_overrides(args: argparse.Namespace) -> dict[str, float]:
    """The drafter config fields --confidence-threshold / --skip-threshold set (unset flags: the checkpoint's)."""
    return {field: getattr(args, flag) for flag, field in THRESHOLD_FLAGS.items() if getattr(args, flag) is not None}


def _default_drafter() -> str | None:
    """The shipped drafter's folder (:data:`~dlite_hf.defaults.DEFAULT_DRAFTER`, found by name), or None."""
    from ..assets import AssetError, resolve_drafter
    from ..defaults import DEFAULT_DRAFTER

    try:
        return str(resolve_drafter(DEFAULT_DRAFTER))
    except AssetError:
        return None


def _same_vocabulary(a: Any, b: Any) -> bool:
    return len(a) == len(b) and a.get_vocab() == b.get_vocab()


def _parse_lengths(text: str) -> list[int]:
    try:
        lengths = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as error:
        raise SystemExit(f"--long-lengths must be comma-separated integers, got {text!r}.") from error
    bad = [n for n in lengths if not 64 <= n <= LONG_MAX_TOKENS]
    if not lengths or bad:
        raise SystemExit(f"--long-lengths: each length must be in 64..{LONG_MAX_TOKENS} tokens, got {text!r}.")
    return lengths


def _command_line(args: argparse.Namespace, methods: list[str], workloads: list[str]) -> str:
    """The exact, fully explicit command that reproduces this run."""
    parts = ["dlite-hf", "bench", "--target", args.target]
    for flag in ("drafter", "drafter_nohead", "drafter_history", "assistant"):
        if getattr(args, flag):
            parts += ["--" + flag.replace("_", "-"), getattr(args, flag)]
    if workloads:
        parts += ["--workloads", ",".join(workloads)]
    if args.prompts:
        parts += ["--prompts", args.prompts]
    parts += ["--methods", ",".join(methods)]
    for flag in (*THRESHOLD_FLAGS, "lookup_tokens", "lookup_min_match", "lookup_fallback_min_match"):
        if getattr(args, flag) is not None:
            parts += ["--" + flag.replace("_", "-"), str(getattr(args, flag))]
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
    switches = ("prefix-cache", "allow-mismatch", "no-plots", "no-warmup")
    parts += [f"--{flag}" for flag in switches if getattr(args, flag.replace("-", "_"))]
    return shlex.join(parts)


# ----------------------------------------------------------------------------------------------- command
def cmd_bench(args: argparse.Namespace) -> int:
    """Run the benchmark; exit status 1 if any greedy output differs from plain (unless --allow-mismatch)."""
    if args.workloads is None:
        args.workloads = "" if args.prompts else DEFAULT_WORKLOADS
    try:
        methods = parse_methods(args.methods)
        workloads = parse_workloads(args.workloads) if args.workloads or not args.prompts else []
    except ValueError as error:
        raise SystemExit(str(error)) from error
    user_prompts = None
    if args.prompts:
        from ..prompts import load_prompt_file

        try:
            user_prompts = load_prompt_file(args.prompts)
        except (OSError, ValueError) as error:
            raise SystemExit(f"--prompts {args.prompts}: {error}") from None
    from ..modeling.options import check_threshold

    for flag, field in THRESHOLD_FLAGS.items():  # before any model loads
        if getattr(args, flag) is not None:
            try:
                check_threshold(field, getattr(args, flag), where=f"--{flag.replace('_', '-')} sets ")
            except ValueError as error:
                raise SystemExit(str(error)) from error
    from ..modeling.options import check_fallback_min_match, check_lookup_tokens, check_min_match

    for flag, check in (
        ("lookup_tokens", check_lookup_tokens),
        ("lookup_min_match", check_min_match),
        ("lookup_fallback_min_match", check_fallback_min_match),
    ):
        value = getattr(args, flag)
        if value is None:
            continue
        try:
            check(value, f"--{flag.replace('_', '-')} {value}")
        except ValueError as error:
            raise SystemExit(str(error)) from None
        if "hybrid" not in methods:
            print(f"note: --{flag.replace('_', '-')} is ignored: method hybrid is not in --methods.", file=sys.stderr)
    if any(m in methods for m in ("dlite", "dlite_fixed", "hybrid")) and not args.drafter:
        args.drafter = _default_drafter()
    missing = [f"method {m} needs {CHECKPOINT_FLAGS[m]} PATH" for m in methods if m in CHECKPOINT_FLAGS
               and not getattr(args, CHECKPOINT_FLAGS[m][2:].replace("-", "_"))]  # fmt: skip
    if missing:
        raise SystemExit("; ".join(missing) + ".")
    for method, flag in CHECKPOINT_FLAGS.items():
        if getattr(args, flag[2:].replace("-", "_")) and method not in methods and flag != "--drafter":
            print(f"note: {flag} is ignored: method {method} is not in --methods.", file=sys.stderr)
    if args.num_prompts < 1 or args.max_new_tokens < 1 or args.threads < 1:
        raise SystemExit("--num-prompts, --max-new-tokens and --threads must be positive.")
    if args.repeats < 1:
        raise SystemExit(f"--repeats {args.repeats} is invalid: expected >= 1 (1 measures every turn once).")
    if args.agentic_max_turns < 1 or args.agentic_max_tokens < 256:
        raise SystemExit("--agentic-max-turns must be >= 1 and --agentic-max-tokens >= 256.")
    if args.bfcl_sessions < 0 or args.coding_sessions < 0:
        raise SystemExit(
            f"--bfcl-sessions and --coding-sessions must be >= 0 (0 leaves them out of agentic); got "
            f"{args.bfcl_sessions} and {args.coding_sessions}."
        )
    lengths = _parse_lengths(args.long_lengths) if "long" in workloads else []

    import torch

    from .methods import HYBRID_LOOKUP_TOKENS, BenchMethod, check_drafter_kind, dlite_overrides
    from .runner import run_bench
    from .workloads import build_workloads

    torch.set_num_threads(args.threads)
    if args.sdpa_gqa:  # read by transformers at every attention call; the same for every method of the run
        os.environ["TRANSFORMERS_SDPA_FORCE_GQA"] = "1"
    target, tokenizer, folder = _load_target(args.target, args.dtype, args.attention)
    specs: list[BenchMethod] = []
    drafters: dict[str, Any] = {}
    for name in methods:
        if name in ("plain", "prompt_lookup"):
            specs.append(BenchMethod(name, name))
        elif name == "assisted":
            assistant, assistant_tokenizer, assistant_folder = _load_target(args.assistant, args.dtype, args.attention)
            if Path(assistant_folder).resolve() == Path(folder).resolve():
                raise SystemExit(
                    "--assistant is the target itself; assisted decoding needs a different, smaller model."
                )
            universal = None if _same_vocabulary(tokenizer, assistant_tokenizer) else assistant_tokenizer
            specs.append(BenchMethod(name, "assisted", assistant, universal, checkpoint=args.assistant))
        else:
            path = getattr(args, CHECKPOINT_FLAGS[name][2:].replace("-", "_"))
            if path not in drafters:  # dlite and dlite_fixed share --drafter: load it once
                drafters[path] = _load_drafter(path, target.dtype)
            drafter = drafters[path]
            try:
                check_drafter_kind(name, drafter, where=path)
                drafter.check_target(target)
            except ValueError as error:
                raise SystemExit(f"{CHECKPOINT_FLAGS[name]} {path}: {error}") from error
            overrides = dlite_overrides(name, _threshold_overrides(args))
            hybrid = {}
            if name == "hybrid":
                hybrid = {
                    "lookup_tokens": args.lookup_tokens or HYBRID_LOOKUP_TOKENS,
                    "lookup_min_match": args.lookup_min_match,
                }
                if args.lookup_fallback_min_match is not None:  # per call, like the thresholds
                    overrides["lookup_fallback_min_match"] = args.lookup_fallback_min_match
            specs.append(BenchMethod(name, "dlite", drafter, checkpoint=path, drafter_overrides=overrides, **hybrid))
    try:
        sessions = (
            {}
            if not workloads
            else build_workloads(
                workloads,
                tokenizer,
                num_prompts=args.num_prompts,
                long_lengths=lengths or (1024,),
                agentic_max_tokens=args.agentic_max_tokens,
                agentic_max_turns=args.agentic_max_turns,
                coding_sessions=args.coding_sessions,
                bfcl_sessions=args.bfcl_sessions,
                bfcl_category=args.bfcl_category,
            )
        )
    except ValueError as error:
        raise SystemExit(str(error)) from error
    if user_prompts is not None:
        from ..prompts import USER_PROMPTS_WORKLOAD

        sessions[USER_PROMPTS_WORKLOAD] = user_prompts
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
    name = args.name or f"{slug}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
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
        name=name,
        plots=not args.no_plots,
        prefix_cache=args.prefix_cache,
        repeats=args.repeats,
    )
    from .report import markdown_table

    print(markdown_table(result))
    for kind, path in result["files"].items():
        print(f"{kind}: {path}")
    if not result["ok"]:
        print(
            f"LOSSLESS CHECK FAILED: {len(result['mismatches'])} greedy output(s) differ from plain greedy "
            f"(see 'mismatches' in {result['files']['json']}).",
            file=sys.stderr,
        )
        return 0 if args.allow_mismatch else 1
    return 0
