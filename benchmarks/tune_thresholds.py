"""Sweep a drafter's adaptive-drafting thresholds on prompts that are neither evaluation prompts nor training data.

`draft_confidence_threshold` stops a round's drafting where the drafter's joint confidence falls below it;
`draft_skip_threshold` proposes nothing when the first draft's probability is below it (a plain one-token step);
`draft_lengths` lists the draft counts an early stop may end at.
Both are lossless; what they change is speed, and the best values depend on the hardware (what a multi-token
verification forward costs against a one-token step) and on the drafter's calibration. This runs plain, prompt
lookup and the drafter at every (confidence, skip[, lengths]) point of the grid on the same prompts, interleaved, with
`dlite_hf.bench.run_bench` (greedy; every output is checked against plain), and writes the JSON and markdown table.

Prompts come from the train split of each workload (never the evaluation sample) minus every prompt in the
`--exclude` prompt files (the drafter's training prompts), so the drafter has not seen them:

    .venv/bin/python benchmarks/tune_thresholds.py --drafter drafters/dlite-smollm2-135m \\
        --exclude runs/smollm2/prompts.jsonl,runs/smollm2/prompts2.jsonl,runs/smollm2/prompts3.jsonl \\
        --grid 0:0,0.1:0,0.1:0.5,0.1:0.5:3+7,0.3:0.5:3+7 --threads 1 --name smollm2-135m-thresholds
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path


def parse_grid(spec: str) -> list[dict[str, object]]:
    """``"c:s,c:s:3+7"`` -> drafter overrides: confidence and skip thresholds in [0, 1), optional draft lengths."""
    grid = []
    for item in spec.split(","):
        parts = item.split(":")
        if len(parts) not in (2, 3):
            raise SystemExit(f"--grid items are CONFIDENCE:SKIP[:LENGTHS] (e.g. 0.1:0.5:3+7); got {item!r}.")
        confidence, skip = float(parts[0]), float(parts[1])
        if not (0.0 <= confidence < 1.0 and 0.0 <= skip < 1.0):
            raise SystemExit(f"--grid thresholds must be in [0, 1); got {item!r}.")
        lengths = [int(n) for n in parts[2].split("+")] if len(parts) == 3 else None
        grid.append({"draft_confidence_threshold": confidence, "draft_skip_threshold": skip, "draft_lengths": lengths})
    return grid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="smollm2-135m")
    parser.add_argument("--drafter", default="drafters/dlite-smollm2-135m")
    parser.add_argument("--exclude", default="", help="comma-separated prompt JSONL files to leave out (training)")
    parser.add_argument("--workloads", default="chat:3,code:2,math:2,tool:2", help="WORKLOAD:N, comma-separated")
    parser.add_argument(
        "--grid", default="0:0,0.1:0,0.1:0.5,0.1:0.5:3+7,0.3:0.5:3+7", help="CONFIDENCE:SKIP[:LENGTHS] points"
    )
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--seed", type=int, default=0, help="which unseen train-split prompts are drawn")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--name", default="thresholds")
    args = parser.parse_args()
    grid = parse_grid(args.grid)

    import torch

    from dlite_hf import DLiteForSpeculation
    from dlite_hf.assets import open_target
    from dlite_hf.bench.methods import BenchMethod
    from dlite_hf.bench.report import markdown_table
    from dlite_hf.bench.runner import run_bench
    from dlite_hf.data import prompts as P

    torch.set_num_threads(args.threads)
    os.environ["TRANSFORMERS_SDPA_FORCE_GQA"] = "1"  # as the README's benchmark runs (--sdpa-gqa)
    excluded: set[str] = set()
    for path in filter(None, args.exclude.split(",")):
        excluded |= {json.loads(line)["id"] for line in Path(path).read_text().splitlines() if line.strip()}
    rng = random.Random(args.seed)
    sessions = {}
    for item in args.workloads.split(","):
        workload, count = item.split(":")
        unseen = [p for p in P.load_prompts(workload, "train") if p["id"] not in excluded]
        if len(unseen) < int(count):
            print(f"note: {workload}: only {len(unseen)} train-split prompts outside --exclude; using those")
        if unseen:
            picked = rng.sample(unseen, min(int(count), len(unseen)))
            sessions[workload] = [{"id": p["id"], "messages": p["messages"]} for p in picked]
    if not sessions:
        raise SystemExit("No unseen train-split prompts left in any workload; pass fewer --exclude files.")

    target, tokenizer, _ = open_target(args.target)
    drafter = DLiteForSpeculation.from_pretrained(args.drafter).eval()
    methods = [BenchMethod("plain", "plain"), BenchMethod("prompt_lookup", "prompt_lookup")]
    for overrides in grid:
        label = "c={draft_confidence_threshold} s={draft_skip_threshold}".format(**overrides)
        if overrides["draft_lengths"]:
            label += " n=" + "+".join(str(n) for n in overrides["draft_lengths"])
        methods.append(BenchMethod(f"dlite {label}", "dlite", drafter, drafter_overrides=overrides))
    result = run_bench(
        target,
        tokenizer,
        methods,
        sessions,
        max_new_tokens=args.max_new_tokens,
        progress=False,
        meta={
            "command": "benchmarks/tune_thresholds.py "
            + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
            "drafter": args.drafter,
            "excluded_prompt_files": args.exclude,
        },
        out_dir=args.out,
        name=args.name,
        plots=False,
    )
    print(markdown_table(result))
    if not result["ok"]:
        raise SystemExit("LOSSLESS CHECK FAILED: see 'mismatches' in the JSON.")


if __name__ == "__main__":
    main()
