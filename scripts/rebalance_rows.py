"""Rebalance training rows across domains by repeating rows: each domain's share of response tokens becomes
proportional to ``tokens ** power`` (temperature sampling over domains, as multilingual and multi-task mixes do), and
no row is dropped (the largest domain is repeated once, the others more).

    .venv/bin/python scripts/rebalance_rows.py --rows ~/.cache/dlite-hf/work/rows/cached.jsonl --power 0.5 \\
        --out ~/.cache/dlite-hf/work/rows/rebalanced.jsonl

A row's domain is its ``workload``. Repeats are whole rows (multiplier m: floor(m) copies and one more with
probability frac(m), seeded), so a feature cache filled for the rows serves the rebalanced file too.
`--order-after DONE` orders instead (`balanced_order`)."""

from __future__ import annotations

import argparse
import random
from collections import Counter

from dlite_hf.jsonl import read_jsonl, write_jsonl


def multipliers(tokens: dict[str, int], power: float) -> dict[str, float]:
    """Per-domain repeat factor giving shares proportional to ``tokens ** power``, the smallest factor being 1."""
    if not tokens or any(t <= 0 for t in tokens.values()):
        raise ValueError(f"every domain needs response tokens > 0, got {tokens}.")
    if not 0 <= power <= 1:
        raise ValueError(f"power must be in [0, 1] (1: as is, 0: equal shares), got {power}.")
    raw = {w: t**power / t for w, t in tokens.items()}  # target share / current share, up to one constant
    low = min(raw.values())
    return {w: r / low for w, r in raw.items()}


def domain_tokens(rows: list[dict]) -> Counter:
    """Response tokens per domain (a row's ``workload``)."""
    tokens = Counter()
    for row in rows:
        tokens[row["workload"]] += sum(row["loss_mask"])
    return tokens


def rebalance(rows: list[dict], power: float, seed: int = 0) -> list[dict]:
    tokens = domain_tokens(rows)
    factor = multipliers(dict(tokens), power)
    generator = random.Random(seed)
    out = []
    for row in rows:
        m = factor[row["workload"]]
        copies = int(m) + (generator.random() < m - int(m))
        out += [row] * copies
    generator.shuffle(out)
    return out


def balanced_order(rows: list[dict], power: float, done: list[dict] = ()) -> list[dict]:
    """`rows` once each, ordered so that every prefix's response tokens, added to those of `done` (rows already
    served, e.g. already in a feature cache), split across domains as ``tokens ** power`` of the whole: a feature pass
    over the result that is stopped at any point has filled the cache as evenly as the domains allow. Within a domain
    the rows keep their order."""
    used = domain_tokens(done)
    total = used.copy()
    total.update(domain_tokens(rows))  # update, not +: a domain of 0 tokens stays, to be refused below
    if any(t <= 0 for t in total.values()):
        raise ValueError(f"every domain needs response tokens > 0, got {dict(total)}.")
    share = {w: t**power for w, t in total.items()}
    keyed = []
    for index, row in enumerate(rows):
        domain = row["workload"]
        keyed.append((used[domain] / share[domain], index, row))  # where this row's domain is, measured in its share
        used[domain] += sum(row["loss_mask"])
    return [row for _, _, row in sorted(keyed, key=lambda item: item[:2])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--power", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--order-after",
        metavar="DONE",
        help="instead of repeating rows: the rows not in DONE (a rows file) once each, every prefix balanced with it",
    )
    args = parser.parse_args()
    rows = read_jsonl(args.rows)
    missing = [i for i, row in enumerate(rows) if "workload" not in row or "loss_mask" not in row]
    if missing:
        raise SystemExit(
            f"--rows {args.rows}: rows {missing[:5]} have no workload/loss_mask (rows of dlite-hf regenerate)."
        )
    if args.order_after is not None:
        done = read_jsonl(args.order_after)
        done_ids = {row["id"] for row in done}
        out = balanced_order([row for row in rows if row["id"] not in done_ids], args.power, done)
        write_jsonl(out, args.out)
        _order_table(done, out, args.power)
        return
    out = rebalance(rows, args.power, args.seed)
    write_jsonl(out, args.out)
    before, after = domain_tokens(rows), domain_tokens(out)
    print("| domain | response tokens | share | share after | repeats |\n|---|---:|---:|---:|---:|")
    for domain, count in before.most_common():
        print(
            f"| {domain} | {count:,} | {count / sum(before.values()):.1%} | {after[domain] / sum(after.values()):.1%} "
            f"| {after[domain] / count:.2f} |"
        )
    print(f"{len(rows)} rows -> {len(out)} ({sum(after.values()):,} response tokens)")


def _order_table(done: list[dict], out: list[dict], power: float) -> None:
    """Per domain: the tokens already served, those the ordered file adds, and the shares once all are served."""
    served, added = domain_tokens(done), domain_tokens(out)
    whole = served + added
    weight = {w: t**power for w, t in whole.items()}
    print(f"| domain | done | to add | share of all | tokens^{power} share |\n|---|---:|---:|---:|---:|")
    for domain, count in whole.most_common():
        print(
            f"| {domain} | {served[domain]:,} | {added[domain]:,} | {count / sum(whole.values()):.1%} "
            f"| {weight[domain] / sum(weight.values()):.1%} |"
        )
    print(f"{len(done)} rows done, {len(out)} ordered ({sum(added.values()):,} response tokens)")


if __name__ == "__main__":
    main()
