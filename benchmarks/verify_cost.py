"""What a verification forward costs on this CPU: the target's forward over n new tokens on top of a cache.

A speculative round pays one target forward over the anchor plus the drafts (n = K + 1 tokens); plain decoding
pays one forward over one token. This measures both, at several cache lengths, with transformers' default SDPA
path and with `TRANSFORMERS_SDPA_FORCE_GQA=1` (which transformers reads at every attention call, so the two are
interleaved in one process), and prints a markdown table plus JSON.

    .venv/bin/python benchmarks/verify_cost.py --threads 1 --contexts 512,2048,4096 --tokens 1,2,8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="smollm2-135m")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--contexts", default="512,2048,4096", help="cache lengths (tokens)")
    parser.add_argument("--tokens", default="1,2,8", help="new tokens per forward")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default=None, help="write the JSON here")
    parser.add_argument(
        "--lm-head-rows",
        default="",
        help="also time the target's lm_head alone on this many rows each (e.g. 1,2,4,8): where a multi-token "
        "forward's extra cost comes from",
    )
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    from dlite_hf.assets import resolve_model

    torch.set_num_threads(args.threads)
    target = AutoModelForCausalLM.from_pretrained(resolve_model(args.target)).eval()
    generator = torch.Generator().manual_seed(0)
    rows = []
    with torch.no_grad():
        for context in [int(x) for x in args.contexts.split(",")]:
            prompt = torch.randint(100, 10000, (1, context), generator=generator)
            cache = DynamicCache()
            target(prompt, past_key_values=cache, use_cache=True)
            for n in [int(x) for x in args.tokens.split(",")]:
                times: dict[str, list[float]] = {"default": [], "sdpa_gqa": []}
                for _ in range(args.repeats):
                    for mode in times:  # interleaved, so background load hits both alike
                        os.environ["TRANSFORMERS_SDPA_FORCE_GQA"] = "1" if mode == "sdpa_gqa" else "0"
                        new = torch.randint(100, 10000, (1, n), generator=generator)
                        start = time.perf_counter()
                        target(new, past_key_values=cache, use_cache=True)
                        times[mode].append(1000 * (time.perf_counter() - start))
                        cache.crop(-n)
                medians = {mode: statistics.median(values) for mode, values in times.items()}
                rows.append({"context": context, "new_tokens": n, **medians})
        lm_head_rows = []
        head = target.get_output_embeddings()
        for n in [int(x) for x in args.lm_head_rows.split(",") if x]:
            hidden = torch.randn(1, n, head.in_features, generator=generator)
            head(hidden)  # warm-up
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                head(hidden)
                times.append(1000 * (time.perf_counter() - start))
            lm_head_rows.append({"rows": n, "ms": statistics.median(times)})
    os.environ.pop("TRANSFORMERS_SDPA_FORCE_GQA", None)
    print(f"target {args.target}, {args.threads} thread(s), median of {args.repeats}\n")
    print("| cache tokens | new tokens | default ms | TRANSFORMERS_SDPA_FORCE_GQA=1 ms |")
    print("|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['context']} | {row['new_tokens']} | {row['default']:.1f} | {row['sdpa_gqa']:.1f} |")
    if lm_head_rows:
        print("\n| lm_head rows | ms |\n|---:|---:|")
        for row in lm_head_rows:
            print(f"| {row['rows']} | {row['ms']:.1f} |")
    result = {"target": args.target, "threads": args.threads, "repeats": args.repeats, "rows": rows}
    if lm_head_rows:
        result["lm_head"] = lm_head_rows
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
