"""Plots of the capacity study (issue 27, part 5): held-out tau against training tokens and against drafter ms per
round, in domain and out of domain, one line per drafter shape.

Input: a `benchmarks/ood_tau.py` result whose drafters are named `ARM@STEP` (checkpoints of one run; `ARM` alone is
its final save) plus any reference drafters (plotted as points on the cost axis only), a
`benchmarks/draft_round_cost.py --drafters` result naming the same ARMs (and references), and the training rows
(response tokens per row, to turn steps into tokens seen).

    .venv/bin/python benchmarks/plot_capacity.py --tau benchmarks/results/smollm2-135m-capacity.json \\
        --round-cost benchmarks/results/smollm2-135m-capacity-round-cost-bf16.json --rows ROWS --batch-size 8 \\
        --steps w256=500,w576=500 --out-dir benchmarks/results
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def response_tokens_per_row(path: Path) -> tuple[float, int]:
    """Mean response tokens per training row, and the response tokens of the distinct rows (a rebalanced file
    repeats rows: scripts/rebalance_rows.py)."""
    from dlite_hf.rows import read_jsonl

    rows = read_jsonl(path)
    if not rows:
        raise SystemExit(f"--rows {path}: no rows.")
    distinct = {row.get("id", i): sum(row["loss_mask"]) for i, row in enumerate(rows)}
    return sum(sum(row["loss_mask"]) for row in rows) / len(rows), sum(distinct.values())


def predicted_speedup(tau: float, draft_ms: float, target_ms: dict[str, float]) -> float:
    """Tokens/s over plain's, from measured costs: a round commits `tau` tokens for one drafter round plus one
    verification forward (the largest timed block, K + 1 tokens), where plain pays one 1-token forward a token.
    generate()'s bookkeeping is left out, so it is an upper bound that ranks drafters of different cost."""
    verify = max(target_ms, key=int)
    return tau * target_ms["1"] / (target_ms[verify] + draft_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tau", required=True, type=Path)
    parser.add_argument("--round-cost", type=Path, default=None, help="draft_round_cost.py result (else no cost plot)")
    parser.add_argument("--rows", required=True, type=Path, help="the training rows (JSONL)")
    parser.add_argument("--batch-size", type=int, default=8, help="rows per optimizer step")
    parser.add_argument("--steps", required=True, help="ARM=final_step,...: the step of each arm's final save")
    parser.add_argument("--out-dir", required=True, type=Path)
    parser.add_argument("--name", default="smollm2-135m-capacity")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drafters = json.loads(args.tau.read_text())["drafters"]
    final = {arm: int(step) for arm, step in (item.split("=") for item in args.steps.split(",") if item)}
    per_row, distinct = response_tokens_per_row(args.rows)
    per_step = per_row * args.batch_size
    curves: dict[str, list[tuple[float, float, float]]] = {}
    for name, entry in drafters.items():
        arm, _, step = name.partition("@")
        if arm not in final:
            continue
        tokens = (int(step) if step else final[arm]) * per_step
        curves.setdefault(arm, []).append((tokens, entry["mean_tau_in_domain"], entry["mean_tau_ood"]))
    if not curves:
        raise SystemExit(f"--tau {args.tau}: no drafter named after an arm of --steps {args.steps}.")
    args.out_dir.mkdir(parents=True, exist_ok=True)

    references = {name: entry for name, entry in drafters.items() if name.partition("@")[0] not in final}
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    panels = ((axes[0], 1, "mean_tau_in_domain", "in domain (12 workloads)"),
              (axes[1], 2, "mean_tau_ood", "out of domain (3)"))  # fmt: skip
    for ax, column, key, title in panels:
        for arm, points in sorted(curves.items()):
            points.sort()
            ax.plot([p[0] / 1e6 for p in points], [p[column] for p in points], marker="o", label=arm)
        for name, entry in references.items():  # drafters trained otherwise: a level to compare with
            ax.axhline(entry[key], linestyle="--", color="grey", linewidth=1)
            ax.annotate(name, (0, entry[key]), xycoords=("axes fraction", "data"), fontsize=7, va="bottom")
        ax.set_title(title)
        ax.set_xlabel(f"response tokens seen (M; {distinct / 1e6:.2f}M distinct)")
    axes[0].set_ylabel("greedy tau, K every round")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(args.out_dir / f"{args.name}-tokens.png", dpi=120)
    if args.round_cost is None:
        print(f"wrote {args.out_dir / (args.name + '-tokens.png')}")
        return
    round_cost = json.loads(args.round_cost.read_text())
    cost = round_cost["ms_per_round"]

    fig, ax = plt.subplots(figsize=(6, 4))
    timed = [name for name in drafters if "@" not in name and name in cost]  # final saves with a round cost
    for index, name in enumerate(timed):  # one colour a drafter: o in domain, x out of domain
        ms, entry, colour = cost[name], drafters[name], f"C{index}"
        ax.scatter([ms], [entry["mean_tau_in_domain"]], marker="o", color=colour, label=name)
        ax.scatter([ms], [entry["mean_tau_ood"]], marker="x", color=colour)
        for key in ("mean_tau_in_domain", "mean_tau_ood"):
            ax.annotate(name, (ms, entry[key]), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_title("o: in domain, x: out of domain", fontsize=9)
    ax.set_xlabel(f"drafter ms per round ({round_cost['dtype']}, 1 thread)")
    ax.set_ylabel("greedy tau, K every round")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out_dir / f"{args.name}-cost.png", dpi=120)
    print(f"wrote {args.out_dir / (args.name + '-tokens.png')} and {args.out_dir / (args.name + '-cost.png')}")
    if "target_ms" in round_cost:
        print(f"predicted speedup over plain at K every round, {round_cost['verify_context']} cached positions:")
        for name in timed:
            ood, ind = (predicted_speedup(drafters[name][key], cost[name], round_cost["target_ms"])
                        for key in ("mean_tau_ood", "mean_tau_in_domain"))  # fmt: skip
            print(f"  {name}: {ood:.2f}x out of domain, {ind:.2f}x in domain")


if __name__ == "__main__":
    main()
