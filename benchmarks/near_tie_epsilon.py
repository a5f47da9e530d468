"""Where `dlite_hf.neartie.NEAR_TIE_EPSILON` comes from: how far reduced-precision logits sit from float32 ones.

For each dtype, plain greedy decoding runs on train-split prompts (disjoint from every benchmark prompt). Its
logits are compared, token by token over the top 5 float32 tokens of every position, with a teacher-forced
float32 re-scoring by the same weights upcast (`dlite_hf.neartie.float32_reference`), for two kernel shapes:
the 1-token decode forwards themselves (`output_logits`) and one teacher-forced forward over the whole sequence
(a many-row GEMM, like a verification block). A wrong greedy pick needs two logits off in opposite directions, so
the stated epsilon is twice the largest error seen, rounded up to a multiple of 0.25.

    .venv/bin/python benchmarks/near_tie_epsilon.py --threads 1 --per-workload 6 \\
        --out benchmarks/results/smollm2-135m-near-tie-epsilon.json
"""

from __future__ import annotations

import argparse
import json
import math


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="smollm2-135m")
    parser.add_argument("--dtypes", default="bfloat16,float16")
    parser.add_argument("--workloads", default="chat,code,math,tool")
    parser.add_argument("--per-workload", type=int, default=6, help="train-split prompts per workload")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import torch

    from dlite_hf.assets import open_target
    from dlite_hf.data.prompts import load_prompts
    from dlite_hf.neartie import NEAR_TIE_EPSILON, float32_reference
    from dlite_hf.rows import chat_prompt_ids

    torch.set_num_threads(args.threads)
    prompts = [p for w in args.workloads.split(",") for p in load_prompts(w, "train", limit=args.per_workload)]
    result = {"target": args.target, "threads": args.threads, "prompts": len(prompts), "dtypes": {}}
    for dtype in args.dtypes.split(","):
        model, tokenizer, _ = open_target(args.target, dtype=dtype)
        reference = float32_reference(model)
        errors = {"decode": [], "block": []}
        positions = 0
        with torch.no_grad():
            for prompt in prompts:
                ids = torch.tensor([chat_prompt_ids(tokenizer, prompt["messages"])])
                out = model.generate(
                    ids,
                    do_sample=False,
                    max_new_tokens=args.max_new_tokens,
                    output_logits=True,
                    return_dict_in_generate=True,
                )
                sequence, n = out.sequences, ids.shape[1]
                exact = reference(sequence).logits[0, n - 1 : -1].float()
                top = exact.topk(5, dim=-1).indices
                decode = torch.cat([step.float() for step in out.logits], 0)[: exact.shape[0]]
                block = model(sequence).logits[0, n - 1 : -1].float()
                for kind, logits in (("decode", decode), ("block", block)):
                    errors[kind].append((logits.gather(1, top) - exact.gather(1, top)).abs().max(-1).values)
                positions += exact.shape[0]
        stats = {}
        for kind, rows in errors.items():
            values = torch.cat(rows)
            stats[kind] = {
                "max": float(values.max()),
                "q99": float(torch.quantile(values, 0.99)),
                "median": float(values.median()),
            }
        largest = max(s["max"] for s in stats.values())
        proposed = math.ceil(2 * largest / 0.25) * 0.25
        result["dtypes"][dtype] = {
            "positions": positions,
            "top5_abs_logit_error": stats,
            "proposed_epsilon": proposed,
            "stated_epsilon": NEAR_TIE_EPSILON.get(dtype),
        }
        print(f"{dtype}: {positions} positions, {json.dumps(stats)}; proposed epsilon {proposed}, stated "
              f"{NEAR_TIE_EPSILON.get(dtype)}", flush=True)  # fmt: skip
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
