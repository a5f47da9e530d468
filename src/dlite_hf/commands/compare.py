"""`dlite-hf compare`: plain greedy vs DLite side by side on real prompts (tokens/s, tau, lossless)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..bench.methods import FIXED_K_OVERRIDES, BenchMethod
from ..bench.results import Record, as_result
from ..bench.runner import run_bench
from ..bench.summary import ALL_WORKLOADS
from ..data.workloads import load_prompt_file
from ..defaults import (
    ATTENTION_CHOICES,
    DEFAULT_ATTENTION,
    DEFAULT_DRAFTER,
    DEFAULT_DTYPE,
    DEFAULT_TARGET,
    DTYPE_CHOICES,
)
from ..modeling.decoding_options import DEFAULT_LOOKUP_TOKENS, check_lookup_tokens
from .common import ATTENTION_HELP, DTYPE_HELP, add_command, exit_on_error, positive_int, set_threads


def cmd_compare(args: argparse.Namespace) -> int:
    """Plain greedy vs DLite on a few real prompts, measured by :func:`dlite_hf.bench.run_bench`, a row per prompt.
    Exit status 1 if an output differs from plain (other than, in reduced precision, at a near-tie)."""
    import torch

    workloads = _workloads(args)  # the flags and prompts are checked before any model loads
    set_threads(args.threads)
    target, tokenizer, method, decoding, drafter = _load_method(args)
    print(
        f"target={args.target} drafter={drafter} decoding={decoding} attention={args.attention} "
        f"threads={torch.get_num_threads()} max_new_tokens={args.max_new_tokens}"
    )
    meta = {"command": "dlite-hf compare", "decoding": decoding, "drafter": str(drafter)}
    methods = [BenchMethod("plain", "plain"), method]
    result = as_result(
        run_bench(target, tokenizer, methods, workloads, max_new_tokens=args.max_new_tokens, progress=False, meta=meta)
    )
    print(f"dtype={result.meta.dtype} ({'token-exact' if result.meta.near_tie_epsilon is None else 'near-tie-exact'})")
    plain_runs = {(r.workload, r.prompt_id): r for r in result.records if r.method == "plain"}
    rows = [_prompt_row(r, plain_runs[r.workload, r.prompt_id]) for r in result.records if r.method != "plain"]
    by_key = result.rows_by_key()  # the run's summary rows (dlite_hf.bench.report): overall, and per workload
    overall = ALL_WORKLOADS if len(workloads) > 1 else next(iter(workloads))
    plain_all, mine = by_key[(overall, "plain")], by_key[(overall, method.name)]
    summary = {
        "decoding": decoding,
        "prompts": len(rows),
        "plain_tok_s": plain_all.tok_s,
        "dlite_tok_s": mine.tok_s,
        "mean_tau": mine.mean_tau,
        "mean_tau_by_workload": {w: by_key[(w, method.name)].mean_tau for w in workloads},
        "speedup": mine.speedup,
        "dtype": result.meta.dtype,
        "attention": args.attention,
        "all_identical": mine.mismatches == 0,
        "exact_match_rate": mine.exact_match_rate,
        "lossless_ok": result.ok,
    }
    print(json.dumps(summary, indent=2))
    if args.out:
        Path(args.out).write_text(
            json.dumps({"summary": summary, "rows": rows, "meta": result.meta.to_dict()}, indent=2)
        )
    return 0 if summary["lossless_ok"] else 1


def _workloads(args: argparse.Namespace) -> dict[str, list[dict]]:
    """Check --lookup-tokens, then ``{workload: [prompt, ...]}`` from --prompts or the eval split of --workloads."""
    from ..data.domains import eval_prompts

    if args.lookup_tokens:  # 0: DLite drafts only
        try:
            check_lookup_tokens(args.lookup_tokens, shown=f"--lookup-tokens {args.lookup_tokens}")
        except ValueError as error:
            raise SystemExit(f"{error} (--lookup-tokens 0: DLite drafts only)") from None
    workloads: dict[str, list[dict]] = {}
    if args.prompts:
        with exit_on_error(f"--prompts {args.prompts}", OSError, ValueError):
            user_prompts = load_prompt_file(args.prompts)
        for prompt in user_prompts[: args.num_prompts]:
            workloads.setdefault(prompt["workload"], []).append(prompt)
    else:
        with exit_on_error(f"--workloads {args.workloads}", ValueError):
            for workload in args.workloads.split(","):
                workloads[workload] = eval_prompts(workload, limit=args.num_prompts or 2)
    return workloads


def _load_method(args: argparse.Namespace) -> tuple[Any, Any, Any, str, Path]:
    """(target, tokenizer, the bench method, the decoding in words, the drafter's folder); drafter found first."""
    from ..assets import AssetError, load_drafter, open_target, resolve_drafter  # here: tests stub open_target

    with exit_on_error(f"--drafter {args.drafter or DEFAULT_DRAFTER}", AssetError):
        drafter_dir = resolve_drafter(args.drafter or DEFAULT_DRAFTER)
    target, tokenizer, _ = open_target(args.target, dtype=args.dtype, attention=args.attention)
    with exit_on_error(f"--drafter {drafter_dir}", OSError, ValueError):
        drafter = load_drafter(drafter_dir, target)
    lookup = args.lookup_tokens or None  # 0: DLite drafts only
    decoding = f"hybrid (prompt_lookup_num_tokens={lookup})" if lookup else "DLite"
    if args.fixed_k:  # per call (the drafter's config is not changed): tau as the drafter gives it
        decoding += ", K drafts every round"
    overrides = dict(FIXED_K_OVERRIDES) if args.fixed_k else {}
    name = "hybrid" if lookup else "dlite"
    method = BenchMethod(
        name, "dlite", model=drafter, checkpoint=str(drafter_dir), drafter_overrides=overrides, lookup_tokens=lookup
    )
    return target, tokenizer, method, decoding, drafter_dir


def _prompt_row(record: Record, plain: Record) -> dict[str, Any]:
    """One prompt's row of the --out file, printed as it is built."""
    verdict = record.near_tie
    row = {
        "workload": record.workload,
        "id": record.prompt_id,
        "prompt_tokens": record.prompt_tokens,
        "new_tokens": record.new_tokens,
        "plain_tok_s": plain.tok_s,
        "dlite_tok_s": record.tok_s,
        "tau": record.tau,
        "speedup": record.tok_s / plain.tok_s if plain.tok_s else 0.0,  # as the bench's: tokens/s
        "identical": record.identical_to_plain,
        "near_tie": verdict.to_dict() if verdict is not None else None,
        "lossless_ok": record.lossless_ok,
    }
    print(
        f"{row['id']:<28} prompt {row['prompt_tokens']:>5}  new {row['new_tokens']:>4}  plain "
        f"{row['plain_tok_s']:6.2f} tok/s  dlite {row['dlite_tok_s']:6.2f} tok/s  tau {row['tau']:.2f}  "
        f"speedup {row['speedup']:.2f}x  identical={row['identical']}"
        + (f" (near-tie at new token {record.first_mismatch}: {verdict.ok})" if verdict is not None else "")
    )
    return row


def add_compare_parser(sub: argparse._SubParsersAction) -> None:
    compare = add_command(sub, "compare", "Side by side: plain greedy vs DLite on real prompts.", cmd_compare)
    add = compare.add_argument
    add("--target", default=DEFAULT_TARGET)
    add(
        "--drafter", help=f"a drafter folder, Hub id or name (default {DEFAULT_DRAFTER}: ./drafters or the checkout's)"
    )
    add("--workloads", default="chat,code,math")
    add(
        "--num-prompts", type=positive_int("--num-prompts"), help="eval prompts a workload (default 2; --prompts: all)"
    )
    add("--prompts", help="your own prompts instead of --workloads: a JSONL file of `messages` (and `id`) rows")
    add("--max-new-tokens", type=positive_int("--max-new-tokens"), default=96)
    add("--threads", type=positive_int("--threads"), default=1)
    add("--dtype", default=DEFAULT_DTYPE, choices=DTYPE_CHOICES, help=f"{DTYPE_HELP}; default %(default)s")
    add(
        "--attention",
        default=DEFAULT_ATTENTION,
        choices=ATTENTION_CHOICES,
        help=f"{ATTENTION_HELP}; default %(default)s",
    )
    add(
        "--lookup-tokens",
        type=int,
        default=DEFAULT_LOOKUP_TOKENS,
        help="hybrid drafting: at most this many drafted tokens a round retrieved from the context (default "
        "%(default)s, measured fastest: README); 0 = DLite drafts only",
    )
    add("--fixed-k", action="store_true", help="K drafts every round (adaptive drafting off): the drafter's own tau")
    add("--out", help="write the rows and summary as JSON here")
