"""`dlite-hf reliability`: randomised option mixes for generate(), plain against drafted, and their report.

    dlite-hf reliability run --target smollm2-135m --drafter dlite-smollm2-135m --dtype float32 --cases 1000 \\
        --out ~/.cache/dlite-hf/work/reliability/smollm2-fp32.jsonl
    dlite-hf reliability report FILE [FILE ...] --out docs/reliability-generate.md

`run` appends one verdict a case and resumes after a kill; it exits 1 when a case failed. See
`dlite_hf.reliability` for what a case is and when it passes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..defaults import DEFAULT_TARGET, DTYPE_CHOICES, resolve_dtype
from .common import set_threads


def cmd_reliability(args: argparse.Namespace) -> int:
    if args.action == "report":
        return _report(args)
    if not args.out:
        raise SystemExit("dlite-hf reliability run needs --out FILE.jsonl (the verdicts, one line a case; resumable).")
    for name in ("cases", "max_new_tokens", "per_workload", "long_tokens"):
        if getattr(args, name) < 1:
            flag = "--" + name.replace("_", "-")
            raise SystemExit(f"{flag} {getattr(args, name)} is invalid: expected a positive number.")
    if not 0 <= args.sampled <= 1:
        raise SystemExit(f"--sampled {args.sampled} is invalid: expected the share of sampled cases, in [0, 1].")
    set_threads(args.threads)
    from ..assets import load_drafter, open_target
    from ..reliability.suite import run_suite, suite_prompts

    dtype = resolve_dtype(args.dtype)
    target, tokenizer, _ = open_target(args.target, dtype=dtype)
    drafter = load_drafter(args.drafter, target=target)
    prompts = suite_prompts(tokenizer, args.per_workload, args.long_tokens)
    label = args.label or f"{Path(str(args.target)).name} {dtype}"

    def progress(outcome) -> None:
        mark = "FAIL " + outcome.reason if outcome.kind == "failure" else outcome.kind
        print(f"case {outcome.index} ({outcome.workload}): {mark}", file=sys.stderr, flush=True)

    outcomes = run_suite(
        target,
        drafter,
        tokenizer,
        prompts,
        args.cases,
        args.out,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        sampled=args.sampled,
        label=label,
        progress=progress,
    )
    failures = sum(outcome.kind == "failure" for outcome in outcomes)
    print(f"{len(outcomes)} cases run now, {failures} failed; all verdicts in {args.out}")
    return 1 if failures else 0


def _report(args: argparse.Namespace) -> int:
    from ..reliability.suite import report

    if not args.files:
        raise SystemExit("dlite-hf reliability report needs one or more FILE.jsonl written by `reliability run`.")
    missing = [f for f in args.files if not Path(f).is_file()]
    if missing:
        raise SystemExit(f"dlite-hf reliability report: no such file {missing[0]!r} (written by `reliability run`).")
    text = report(args.files)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    print(text)
    return 0


def add_reliability_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `reliability` subcommand."""
    rel = sub.add_parser(
        "reliability",
        help="Randomised generate() option mixes, plain against drafted (run), and their report (report).",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rel.add_argument("action", choices=["run", "report"])
    rel.add_argument("files", nargs="*", help="report: verdict files written by run")
    rel.add_argument("--target", default=DEFAULT_TARGET)
    rel.add_argument("--drafter", default="dlite-smollm2-135m")
    rel.add_argument("--dtype", default="float32", choices=DTYPE_CHOICES)
    rel.add_argument("--cases", type=int, default=200)
    rel.add_argument("--seed", type=int, default=0)
    rel.add_argument("--max-new-tokens", type=int, default=24, help="the longest case (cases draw 1 to this)")
    rel.add_argument("--sampled", type=float, default=0.25, help="share of sampled cases")
    rel.add_argument("--per-workload", type=int, default=3, help="evaluation prompts per workload")
    rel.add_argument("--long-tokens", type=int, default=1024, help="length of the long-context prompts")
    rel.add_argument("--label", default=None, help="the run's name in the report (default: target and dtype)")
    rel.add_argument("--threads", type=int, default=1)
    rel.add_argument("--out", default=None, help="run: verdicts JSONL (appended); report: the markdown file")
    rel.set_defaults(func=cmd_reliability)
