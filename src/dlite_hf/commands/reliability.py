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
from .common import add_command, positive_int, set_threads


def cmd_reliability(args: argparse.Namespace) -> int:
    if args.action == "report":
        return _report(args)
    if not args.out:
        raise SystemExit("dlite-hf reliability run needs --out FILE.jsonl (the verdicts, one line a case; resumable).")
    if not 0 <= args.sampled <= 1:
        raise SystemExit(f"--sampled {args.sampled} is invalid: expected the share of sampled cases, in [0, 1].")
    set_threads(args.threads)
    from ..assets import load_drafter, open_target
    from ..reliability.suite import run_suite, suite_prompts

    dtype = resolve_dtype(args.dtype)
    target, tokenizer, _ = open_target(args.target, dtype=dtype)
    drafter = load_drafter(args.drafter, target=target)

    def progress(outcome) -> None:
        mark = "FAIL " + outcome.reason if outcome.kind == "failure" else outcome.kind
        print(f"case {outcome.index} ({outcome.workload}): {mark}", file=sys.stderr, flush=True)

    outcomes = run_suite(
        target,
        drafter,
        tokenizer,
        suite_prompts(tokenizer, args.per_workload, args.long_tokens),
        args.cases,
        args.out,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        sampled=args.sampled,
        label=args.label or f"{Path(str(args.target)).name} {dtype}",
        progress=progress,
    )
    failures = sum(outcome.kind == "failure" for outcome in outcomes)
    print(f"{len(outcomes)} cases run now, {failures} failed; all verdicts in {args.out}")
    return 1 if failures else 0


def _report(args: argparse.Namespace) -> int:
    from ..reliability.suite import report

    if not args.files:
        raise SystemExit("dlite-hf reliability report needs one or more FILE.jsonl written by `reliability run`.")
    if missing := [f for f in args.files if not Path(f).is_file()]:
        raise SystemExit(f"dlite-hf reliability report: no such file {missing[0]!r} (written by `reliability run`).")
    text = report(args.files)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    print(text)
    return 0


def add_reliability_parser(sub: argparse._SubParsersAction) -> None:
    summary = "Randomised generate() option mixes, plain against drafted (run), and their report (report)."
    rel = add_command(sub, "reliability", summary, cmd_reliability, __doc__)
    add = rel.add_argument
    add("action", choices=["run", "report"])
    add("files", nargs="*", help="report: verdict files written by run")
    add("--target", default=DEFAULT_TARGET)
    add("--drafter", default="dlite-smollm2-135m")
    add("--dtype", default="float32", choices=DTYPE_CHOICES)
    add("--cases", type=positive_int("--cases"), default=200)
    add("--seed", type=int, default=0)
    add("--max-new-tokens", type=positive_int("--max-new-tokens"), default=24, help="cases draw 1 to this many")
    add("--sampled", type=float, default=0.25, help="share of sampled cases")
    add("--per-workload", type=positive_int("--per-workload"), default=3, help="evaluation prompts per workload")
    add("--long-tokens", type=positive_int("--long-tokens"), default=1024, help="length of the long-context prompts")
    add("--label", default=None, help="the run's name in the report (default: target and dtype)")
    add("--threads", type=positive_int("--threads"), default=1)
    add("--out", default=None, help="run: verdicts JSONL (appended); report: the markdown file")
