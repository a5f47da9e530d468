"""`dlite-hf bench replay hybrid | rules`: choose a drafting rule by replaying greedy decoding offline.

Greedy decoding's rounds are fixed by plain greedy's output, so one plain run and one teacher-forced forward per
turn let every rule of a grid be replayed with this machine's measured forward costs, in seconds instead of a
benchmark run per rule. ``hybrid`` compares the hybrid's selection rules on a tuning split
(:mod:`dlite_hf.bench.replay_hybrid`); ``rules`` compares the adaptive-drafting thresholds on prompts no drafter
saw (:mod:`dlite_hf.bench.replay_rules`). ``--replay-data FILE`` keeps what a replay needs: written when missing,
read (no model loaded) when present, so a second run compares rules again in seconds::

    dlite-hf bench replay hybrid --replay-data runs/hybrid-replay.json \\
        --out benchmarks/results/smollm2-135m-hybrid-rules.json
    dlite-hf bench replay rules --exclude data/mix/prompts.jsonl --domains reasoning:16,manpages:16 \\
        --max-new-tokens 128 --replay-data ~/.cache/dlite-hf/work/rules.json \\
        --out benchmarks/results/smollm2-135m-rules-avx2.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import time
from pathlib import Path
from typing import Any

from ..defaults import DEFAULT_DRAFTER, DEFAULT_TARGET


def add_replay_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``replay`` (with its kinds ``hybrid`` and ``rules``) under `dlite-hf bench`."""
    parser = sub.add_parser(
        "replay",
        help="replay greedy decoding offline to compare drafting rules",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    kinds = parser.add_subparsers(dest="replay_kind", required=True, metavar="{hybrid,rules}")
    hybrid = kinds.add_parser("hybrid", help="the hybrid's selection rules, on the tuning split")
    _common_arguments(hybrid, max_new_tokens=96)
    hybrid.add_argument("--num-prompts", type=int, default=3, help="prompts per workload, agentic sessions")
    hybrid.add_argument("--max-tokens", type=int, default=6144, help="agentic sessions stop past this context")
    hybrid.add_argument("--max-turns", type=int, default=4, help="turns per agentic session")
    hybrid.add_argument(
        "--cost-dtype",
        default=None,
        choices=("float32", "bfloat16"),
        help="re-measure the forward costs in this dtype (and --cost-attention); the replayed texts stay float32",
    )
    hybrid.add_argument("--cost-attention", default="sdpa", choices=("sdpa", "packed_gqa"))
    hybrid.set_defaults(func=run_hybrid, replay_flags=_flags(hybrid))
    rules = kinds.add_parser("rules", help="the adaptive-drafting thresholds, on prompts no drafter saw")
    _common_arguments(rules, max_new_tokens=128)
    rules.add_argument("--exclude", default="data/mix/prompts.jsonl", help="comma-separated prompt JSONL files")
    rules.add_argument("--domains", default="reasoning:16,manpages:16", help="DOMAIN:N, comma-separated")
    rules.add_argument("--max-prompt-tokens", type=int, default=1024)
    rules.add_argument("--seed", type=int, default=0)
    rules.add_argument("--attention", default="packed_gqa", choices=("sdpa", "packed_gqa"))
    rules.add_argument("--grid", default=None, help="CONFIDENCE:SKIP[:LENGTHS] points, comma-separated")
    rules.set_defaults(func=run_rules, replay_flags=_flags(rules))


def _flags(parser: argparse.ArgumentParser) -> tuple[str, ...]:
    return tuple(action.dest for action in parser._actions if action.dest != "help")


def _common_arguments(parser: argparse.ArgumentParser, max_new_tokens: int) -> None:
    parser.add_argument("--target", default=DEFAULT_TARGET)
    parser.add_argument("--drafter", default=DEFAULT_DRAFTER, help="a drafter folder or name")
    parser.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--replay-data",
        type=Path,
        default=None,
        help="JSON of what the replay needs (plain runs, drafts, forward costs): written when missing, read (no "
        "model loaded) when present",
    )
    parser.add_argument("--out", type=Path, required=True, help="the result JSON")


def _command(args: argparse.Namespace) -> str:
    """The fully explicit command of this replay: its kind and every flag of that kind, with its value."""
    parts = ["dlite-hf", "bench", "replay", args.replay_kind]
    for key in args.replay_flags:
        if getattr(args, key) is not None:
            parts += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    return shlex.join(parts)


def _replay_data(args: argparse.Namespace, keys: tuple[str, ...], collect: Any) -> dict[str, Any]:
    """What the replay needs: read from --replay-data when it is there (no model loaded), which must hold `keys`;
    else ``collect(args)`` (loading the models), written to --replay-data when given."""
    path = args.replay_data.expanduser() if args.replay_data is not None else None
    if path is None or not path.is_file():
        data = collect(args)
        if path is not None:
            _write_json(path, data)
        return data
    try:
        data = json.loads(path.read_text())
    except ValueError as error:
        raise SystemExit(f"--replay-data {args.replay_data}: not JSON ({error}).") from None
    missing = [key for key in keys if not isinstance(data, dict) or key not in data]
    if missing:
        raise SystemExit(
            f"--replay-data {args.replay_data}: no {', '.join(missing)}; expected the replay data this kind of "
            "replay writes (another kind's, or another file?)."
        )
    return data


def _write_json(path: Path, document: dict[str, Any], indent: int | None = None) -> None:
    """Write `document` through a temporary file (a kill leaves the old file or the new one)."""
    path = path.expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(document, indent=indent) + ("\n" if indent else ""))
    temporary.replace(path)


def _costs(tables: dict) -> dict[int, dict[int, float]]:
    """Forward cost tables as read from JSON (string keys) or as measured."""
    return {int(c): {int(q): t for q, t in table.items()} for c, table in tables.items()}


def _check_counts(args: argparse.Namespace) -> None:
    if args.max_new_tokens < 2 or args.threads < 1:
        raise SystemExit(
            f"--max-new-tokens must be >= 2 and --threads >= 1; got {args.max_new_tokens}, {args.threads}."
        )


def _ms(tables: dict[int, dict[int, float]]) -> dict[str, dict[str, float]]:
    return {str(c): {str(q): 1000 * s for q, s in table.items()} for c, table in tables.items()}


def _cost_lines(tables: dict[int, dict[int, float]]) -> str:
    return "; ".join(f"{c}: " + ", ".join(f"q={q} {1000 * s:.1f}" for q, s in t.items()) for c, t in tables.items())


def run_hybrid(args: argparse.Namespace) -> int:
    """Replay the hybrid's rule grid on the tuning split; print the best rules and write `--out`."""
    from . import replay_hybrid as H

    _check_counts(args)
    if min(args.num_prompts, args.max_turns) < 1 or args.max_tokens < 256:
        raise SystemExit("--num-prompts and --max-turns must be >= 1 and --max-tokens >= 256.")
    started = time.time()
    data = _replay_data(args, ("sessions", "forward_s", "drafter_s"), H.collect)
    sessions = {k: [[H.HybridTurn.from_json(t) for t in ts] for ts in v] for k, v in data["sessions"].items()}
    tables, drafter_s = _costs(data["forward_s"]), data["drafter_s"]
    if args.cost_dtype is not None:
        tables = _remeasure_costs(args, sorted(tables), H.COST_SIZES)
    results = H.rule_rows(sessions, tables, drafter_s, args.max_new_tokens)
    labels = [*sessions, "all"]
    print(f"drafter {1000 * drafter_s:.1f} ms/call; forward costs (ms) by context:")
    print(*(f"  {_cost_lines({c: table})}" for c, table in tables.items()), sep="\n")
    print("| rule | " + " | ".join(labels) + " |")
    for row in [*results[:15], next(r for r in results if r["rule"]["min_match"] is None)]:
        cells = " | ".join(f"{row[lb]['tau']:.2f} / {row[lb]['speedup_est']:.2f}x" for lb in labels)
        print(f"| {H.rule_label(row['rule'])} | {cells}")
    cost_mode = f"{args.cost_dtype or 'float32'}, {args.cost_attention if args.cost_dtype else 'sdpa'}"
    document = {
        "command": _command(args),
        "split": "tuning (train split prompts, tuning coding session)",
        "cost_mode": cost_mode,
        "threads": args.threads,
        "drafter_ms_per_call": 1000 * drafter_s,
        "forward_ms": _ms(tables),
        "turns": {label: sum(len(s) for s in ss) for label, ss in sessions.items()},
        "duration_s": time.time() - started,
        "rules": results,
    }
    _write_json(args.out, document, indent=1)
    return 0


def _remeasure_costs(args: argparse.Namespace, contexts: list[int], sizes: list[int]) -> dict[int, dict[int, float]]:
    """The forward cost tables again, with the target in `--cost-dtype` and `--cost-attention`."""
    import torch

    from ..assets import load_target, resolve_model
    from .replay import forward_costs

    torch.set_num_threads(args.threads)
    target, _ = load_target(resolve_model(args.target), dtype=args.cost_dtype, attention=args.cost_attention)
    return {c: forward_costs(target, c, sizes) for c in contexts}


def run_rules(args: argparse.Namespace) -> int:
    """Replay the adaptive rules' grid on unseen prompts; print the best rules and write `--out`."""
    from . import replay_rules as R
    from .measure import environment_info

    grid = R.parse_grid(args.grid if args.grid is not None else R.DEFAULT_GRID)
    _check_counts(args)
    started = time.time()
    data = _replay_data(args, ("turns", "forward_s", "drafter_skip_s", "drafter_step_s"), R.collect)
    turns = [R.RulesTurn.from_json(t) for t in data["turns"]]
    costs, skip_s, step_s = _costs(data["forward_s"]), data["drafter_skip_s"], data["drafter_step_s"]
    results = R.rule_rows(turns, grid, costs, skip_s, step_s)
    ranked = sorted(results, key=lambda r: -r["all"]["speedup_est"])
    domains = sorted({t.domain for t in turns})
    labels = [*domains, "all"]
    print(
        f"drafter: {1000 * skip_s:.2f} ms a skipped round, {1000 * step_s:.2f} ms a further step; forward ms by "
        f"context: {_cost_lines(costs)}"
    )
    print("| rule | " + " | ".join(f"{lb} tau / speedup" for lb in labels) + " |")
    for row in [*ranked[:10], *results[:2]]:
        cells = " | ".join(f"{row[lb]['tau']:.2f} / {row[lb]['speedup_est']:.3f}x" for lb in labels)
        print(f"| {row['name']} | {cells} |")
    document = {
        "command": _command(args),
        "environment": environment_info(),
        "threads": args.threads,
        "prompts": {d: [t.prompt_id for t in turns if t.domain == d] for d in domains},
        "decoded_tokens": sum(len(t.plain) - 1 for t in turns),
        "drafter_ms": {"skipped_round": 1000 * skip_s, "further_step": 1000 * step_s},
        "forward_ms": _ms(costs),
        "duration_s": time.time() - started,
        "shipped": results[1],
        "k_every_round": results[0],
        "best": ranked[0],
        "rules": ranked,
    }
    _write_json(args.out, document, indent=1)
    return 0
