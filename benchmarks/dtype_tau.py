"""Does the shipped drafter, trained on float32 features, keep its tau on bfloat16 features? Measured on one text.

The benchmark's tau in each dtype is measured on each dtype's own greedy output, which differs after a near-tie, so
it mixes two effects. This script fixes the text: plain float32 greedy replies to held-out prompts. On that text,
a greedy speculative run is replayed offline for each dtype: at every round the drafter (in that dtype) drafts K
tokens from the target's (that dtype's) teacher-forced states at the round's start, the drafts matching the text
are accepted, and the round commits them plus one token. Only the features' and the drafter's precision differ.

    .venv/bin/python benchmarks/dtype_tau.py --threads 1 --per-workload 4 --max-new-tokens 96 \\
        --out benchmarks/results/smollm2-135m-dtype-tau.json
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="smollm2-135m")
    parser.add_argument("--drafter", default=None, help="default: the shipped drafter")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--workloads", default="chat,code,math,tool")
    parser.add_argument("--per-workload", type=int, default=4, help="eval-split prompts per workload")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import torch

    from dlite_hf import DLiteForSpeculation
    from dlite_hf.assets import open_target
    from dlite_hf.bench.replay import replay_tau
    from dlite_hf.data.prompts import load_prompts
    from dlite_hf.defaults import default_drafter_dir
    from dlite_hf.rows import chat_prompt_ids
    from dlite_hf.training.features import target_features

    torch.set_num_threads(args.threads)
    drafter_dir = args.drafter or str(default_drafter_dir())
    prompts = [p for w in args.workloads.split(",") for p in load_prompts(w, "eval", limit=args.per_workload)]
    reference, tokenizer, _ = open_target(args.target, dtype="float32")
    texts = []
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([chat_prompt_ids(tokenizer, prompt["messages"])])
            out = reference.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=False)
            texts.append((prompt, ids.shape[1], out[0].tolist()))
    del reference
    result = {"target": args.target, "drafter": drafter_dir, "prompts": len(texts), "dtypes": {}}
    for dtype in args.dtypes.split(","):
        target, _, _ = open_target(args.target, dtype=dtype)
        drafter = DLiteForSpeculation.from_pretrained(drafter_dir, dtype=target.dtype).eval().bind_target(target)
        per_workload: dict[str, list[int]] = {}
        rows = []
        with torch.no_grad():
            for prompt, length, tokens in texts:
                states, _ = target_features(target, torch.tensor([tokens]), drafter.config.target_layer_ids)
                new, rounds, accepted = replay_tau(drafter, states, tokens, length)
                rows.append({"id": prompt["id"], "new_tokens": new, "rounds": rounds, "accepted": accepted})
                totals = per_workload.setdefault(prompt["workload"], [0, 0])
                totals[0] += new
                totals[1] += rounds
        new_all, rounds_all = sum(r["new_tokens"] for r in rows), sum(r["rounds"] for r in rows)
        result["dtypes"][dtype] = {
            "tau_pooled": new_all / rounds_all,
            "tau_pooled_by_workload": {w: n / r for w, (n, r) in per_workload.items()},
            "rows": rows,
        }
        print(dtype, json.dumps({k: v for k, v in result["dtypes"][dtype].items() if k != "rows"}), flush=True)
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
