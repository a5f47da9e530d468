"""`dlite-hf compare`: plain greedy vs DLite side by side on real prompts (tokens/s, tau, lossless)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..defaults import (
    ATTENTION_CHOICES,
    DEFAULT_ATTENTION,
    DEFAULT_DTYPE,
    DEFAULT_TARGET,
    DTYPE_CHOICES,
    SHIPPED_DRAFTER_NOTE,
    default_drafter_dir,
)
from ..modeling.suffix_index import DEFAULT_LOOKUP_TOKENS as HYBRID_LOOKUP_TOKENS
from ..modeling.suffix_index import check_lookup_tokens
from .common import set_threads


def cmd_compare(args: argparse.Namespace) -> int:
    """Plain greedy vs DLite on a few real prompts of the default target: tokens/s, tau, identical (or, in reduced
    precision, a near-tie)? Exit status 1 if an output differs from plain otherwise."""
    import copy
    import time

    import torch

    from ..assets import load_drafter, open_target
    from ..broad_mix import eval_prompts
    from ..neartie import NearTieChecker
    from ..prompts import load_prompt_file
    from ..rows import chat_prompt_ids

    for flag in ("num_prompts", "max_new_tokens"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise SystemExit(
                f"--{flag.replace('_', '-')} {getattr(args, flag)} is invalid: expected a positive integer."
            )
    if args.lookup_tokens:  # 0: DLite drafts only
        try:
            check_lookup_tokens(args.lookup_tokens, shown=f"--lookup-tokens {args.lookup_tokens}")
        except ValueError as error:
            raise SystemExit(f"{error} (--lookup-tokens 0: DLite drafts only)") from None
    user_prompts = None
    if args.prompts:  # checked before any model loads
        try:
            user_prompts = load_prompt_file(args.prompts)
        except (OSError, ValueError) as error:
            raise SystemExit(f"--prompts {args.prompts}: {error}") from None
    prompts = []
    if user_prompts is not None:  # the user's own prompts: all of them unless --num-prompts caps them
        prompts = [(p["workload"], p) for p in user_prompts][: args.num_prompts]
    else:  # a workload of dlite_hf.prompts or a prompt domain of the broad mix (its eval split); checked here
        try:
            for workload in args.workloads.split(","):
                prompts += [(workload, p) for p in eval_prompts(workload, limit=args.num_prompts or 2)]
        except ValueError as error:
            raise SystemExit(f"--workloads {args.workloads}: {error}") from None
    set_threads(args.threads)
    drafter_dir = Path(args.drafter) if args.drafter else default_drafter_dir()
    if not drafter_dir.exists():
        what = (
            f"; {SHIPPED_DRAFTER_NOTE}"
            if not args.drafter
            else ". Pass --drafter PATH (a folder saved by dlite-hf train)"
        )
        raise SystemExit(f"No drafter at {drafter_dir}{what}.")
    target, tokenizer, _ = open_target(args.target, dtype=args.dtype, attention=args.attention)
    try:
        drafter = load_drafter(drafter_dir, target)
    except (OSError, ValueError) as error:
        raise SystemExit(f"--drafter {drafter_dir}: {error}") from None
    checker = NearTieChecker(target)
    dtype = checker.dtype
    rows = []
    decoding = f"hybrid (prompt_lookup_num_tokens={args.lookup_tokens})" if args.lookup_tokens else "DLite"
    extra = {"prompt_lookup_num_tokens": args.lookup_tokens} if args.lookup_tokens else {}
    # per call (the drafter's config is not changed): --fixed-k drafts K tokens every round (tau as the model gives it)
    fixed = {"draft_confidence_threshold": 0.0, "draft_skip_threshold": 0.0} if args.fixed_k else {}
    fast_config = copy.deepcopy(target.generation_config)  # the target's own settings (eos, pad), then this call's
    fast_config.update(max_new_tokens=args.max_new_tokens, do_sample=False)
    for name, value in fixed.items():
        setattr(fast_config, name, value)
    if args.fixed_k:
        decoding += ", K drafts every round"
    print(
        f"target={args.target} drafter={drafter_dir} decoding={decoding} dtype={dtype} "
        f"({'token-exact' if checker.exact else 'near-tie-exact'}) attention={args.attention} "
        f"threads={torch.get_num_threads()} "
        f"max_new_tokens={args.max_new_tokens}"
    )
    for workload, prompt in prompts:
        ids = torch.tensor([chat_prompt_ids(tokenizer, prompt["messages"])])
        start = time.perf_counter()
        plain = target.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=False)
        plain_s = time.perf_counter() - start
        start = time.perf_counter()
        fast = target.generate(ids, generation_config=fast_config, assistant_model=drafter, **extra)
        dlite_s = time.perf_counter() - start
        stats = drafter.last_generation_stats
        n_plain, n_fast = plain.shape[1] - ids.shape[1], fast.shape[1] - ids.shape[1]
        identical = bool(torch.equal(plain, fast))
        verdict = None if identical else checker.check(ids.shape[1], plain, fast)
        row = {
            "workload": workload,
            "id": prompt["id"],
            "prompt_tokens": ids.shape[1],
            "new_tokens": n_fast,
            "plain_tok_s": n_plain / plain_s,
            "dlite_tok_s": n_fast / dlite_s,
            "tau": stats.tau,
            "speedup": plain_s / dlite_s * (n_fast / max(n_plain, 1)),
            "identical": identical,
            "near_tie": verdict.to_dict() if verdict is not None else None,
            "lossless_ok": identical or (verdict is not None and verdict.ok),
        }
        rows.append(row)
        print(
            f"{row['id']:<28} prompt {row['prompt_tokens']:>5}  new {n_fast:>4}  plain {row['plain_tok_s']:6.2f} tok/s"
            f"  dlite {row['dlite_tok_s']:6.2f} tok/s  tau {row['tau']:.2f}  speedup {row['speedup']:.2f}x"
            f"  identical={row['identical']}"
            + (f" (near-tie at new token {verdict.first_divergence}: {verdict.ok})" if verdict is not None else "")
        )
        if verdict is not None and not verdict.ok:
            print(f"LOSSLESS CHECK FAILED: {verdict.reason}", file=sys.stderr)
    total_plain = sum(r["new_tokens"] / r["plain_tok_s"] for r in rows)
    total_dlite = sum(r["new_tokens"] / r["dlite_tok_s"] for r in rows)
    tokens = sum(r["new_tokens"] for r in rows)
    summary = {
        "decoding": decoding,
        "prompts": len(rows),
        "plain_tok_s": tokens / total_plain,
        "dlite_tok_s": tokens / total_dlite,
        "mean_tau": sum(r["tau"] for r in rows) / len(rows),
        "mean_tau_by_workload": {
            w: sum(r["tau"] for r in rows if r["workload"] == w) / sum(r["workload"] == w for r in rows)
            for w in dict.fromkeys(r["workload"] for r in rows)
        },
        "speedup": total_plain / total_dlite,
        "dtype": dtype,
        "attention": args.attention,
        "all_identical": all(r["identical"] for r in rows),
        "exact_match_rate": sum(r["identical"] for r in rows) / len(rows),
        "lossless_ok": all(r["lossless_ok"] for r in rows),
    }
    print(json.dumps(summary, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=2))
    return 0 if summary["lossless_ok"] else 1


def add_compare_parser(sub: argparse._SubParsersAction) -> None:
    """Register the subcommand."""
    compare = sub.add_parser("compare", help="Side by side: plain greedy vs DLite on real prompts.")
    compare.add_argument("--target", default=DEFAULT_TARGET)
    compare.add_argument("--drafter", default=None, help="drafter folder (default: the shipped one)")
    compare.add_argument("--workloads", default="chat,code,math")
    compare.add_argument(
        "--num-prompts", type=int, default=None, help="eval prompts per workload (default 2; with --prompts: all)"
    )
    compare.add_argument(
        "--prompts",
        default=None,
        help="your own prompts instead of --workloads: a JSONL file, one row per prompt with `messages` (the chat "
        "format) and optionally `id`",
    )
    compare.add_argument("--max-new-tokens", type=int, default=96)
    compare.add_argument("--threads", type=int, default=1)
    compare.add_argument(
        "--dtype",
        default=DEFAULT_DTYPE,
        choices=DTYPE_CHOICES,
        help=f"both models' dtype (default {DEFAULT_DTYPE}, measured fastest here: README, Results). float32 is "
        "token-exact; in bfloat16/float16 each divergence from plain must be a float32-verified near-tie",
    )
    compare.add_argument(
        "--attention",
        default=DEFAULT_ATTENTION,
        choices=ATTENTION_CHOICES,
        help=f"the target's attention (default {DEFAULT_ATTENTION}: dlite_hf.attention, measured fastest here; "
        "sdpa: transformers' own)",
    )
    compare.add_argument(
        "--lookup-tokens",
        type=int,
        default=HYBRID_LOOKUP_TOKENS,
        help="hybrid drafting: DLite plus drafts retrieved from the context, at most this many a round (default "
        f"{HYBRID_LOOKUP_TOKENS}, the decoding measured fastest: README); 0 = DLite drafts only",
    )
    compare.add_argument(
        "--fixed-k",
        action="store_true",
        help="draft K tokens every round (adaptive drafting off, per call): tau as the drafter gives it",
    )
    compare.add_argument("--out", default=None, help="write the rows and summary as JSON here")
    compare.set_defaults(func=cmd_compare)
