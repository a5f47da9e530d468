"""Plots of the out-of-domain study (README, Training): tau against fine-tuning steps per data kind, and tau against
the drafter's milliseconds per round for each draft vocabulary size.

Input: a `benchmarks/ood_tau.py` result whose drafters are named `ARM@STEPS` (a fine-tuning run's checkpoints;
`base` is step 0 of every arm) and `vSIZE` (draft vocabularies), and a `benchmarks/draft_round_cost.py --out`
result for the milliseconds.

    .venv/bin/python benchmarks/plot_ood_study.py --tau benchmarks/results/smollm2-135m-ood-tau.json \\
        --round-cost benchmarks/results/smollm2-135m-round-cost-bf16.json --out-dir benchmarks/results
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tau", required=True)
    parser.add_argument("--round-cost", default=None)
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--name", default="smollm2-135m-ood")
    parser.add_argument("--xlabel", default="fine-tuning steps from the shipped drafter (8 rows each)")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result = json.loads(Path(args.tau).read_text())
    drafters = result["drafters"]
    base = drafters.get("base")
    arms: dict[str, list[tuple[int, dict]]] = {}
    for name, entry in drafters.items():
        if "@" in name:
            arm, steps = name.split("@")
            arms.setdefault(arm, []).append((int(steps), entry))
    out = Path(args.out_dir)
    panels = [("mean_tau_ood", "mean tau, out of domain"), ("mean_tau_in_domain", "mean tau, in domain")]
    points_all = [entry for points in arms.values() for _, entry in points]
    if points_all and all(entry.get("first_accepted_ood") is not None for entry in points_all):
        panels.append(("first_accepted_ood", "first draft accepted, out of domain"))  # summarise's share of rounds
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4))
    for axis, (key, title) in zip(axes, panels):
        for arm, points in sorted(arms.items()):
            points = sorted(points) if base is None else [(0, base), *sorted(points)]
            axis.plot([p[0] for p in points], [p[1][key] for p in points], marker="o", label=arm)
        axis.set_title(f"{title} (K every round)", fontsize=10)
        axis.set_xlabel(args.xlabel)
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("tau (tokens per target forward)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out / f"{args.name}-steps.png", dpi=110)
    print(out / f"{args.name}-steps.png")

    if args.round_cost:
        cost = json.loads(Path(args.round_cost).read_text())["ms_per_round"]
        sizes = sorted(int(n[1:]) for n in drafters if n.startswith("v") and n[1:].isdigit() and n[1:] in cost)
        if sizes:
            fig, axis = plt.subplots(figsize=(5.5, 4))
            for key, label in (("mean_tau_ood", "out of domain"), ("mean_tau_in_domain", "in domain")):
                axis.plot(
                    [cost[str(s)] for s in sizes], [drafters[f"v{s}"][key] for s in sizes], marker="o", label=label
                )
                for s in sizes:
                    axis.annotate(str(s), (cost[str(s)], drafters[f"v{s}"][key]), fontsize=8)
            axis.set_xlabel(
                f"drafter ms per round ({json.loads(Path(args.round_cost).read_text())['dtype']}, 1 thread)"
            )
            axis.set_ylabel("mean tau (K every round)")
            axis.set_title("draft vocabulary size (no retraining)")
            axis.grid(alpha=0.3)
            axis.legend()
            fig.tight_layout()
            fig.savefig(out / f"{args.name}-vocab.png", dpi=110)
            print(out / f"{args.name}-vocab.png")


if __name__ == "__main__":
    main()
