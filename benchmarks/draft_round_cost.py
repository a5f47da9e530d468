"""Cost of one drafting round (K = 7) on SmolLM2-135M, full vocabulary vs a draft vocabulary slice.

Usage: .venv/bin/python benchmarks/draft_round_cost.py [--threads 1] [--repeats 10] [--vocab-sizes full,8192,4096]
    [--dtype float32|bfloat16] [--out FILE.json]
Prints milliseconds per `draft()` call (median of repeats) for each draft vocabulary size, with the shipped
drafter's architecture and random weights (the cost does not depend on the weights).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM

import dlite_hf
from dlite_hf.assets import fetch_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--vocab-sizes", default="full,8192,4096", help="comma-separated; full = no draft vocabulary")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    target = AutoModelForCausalLM.from_pretrained(fetch_model("smollm2-135m", progress=False), dtype=dtype).eval()
    context, anchor = torch.randn(1, 6, target.config.hidden_size, dtype=dtype), torch.tensor([5])
    result = {"threads": args.threads, "dtype": args.dtype, "repeats": args.repeats, "ms_per_round": {}}
    for size in args.vocab_sizes.split(","):
        vocab = None if size == "full" else int(size)
        config = dlite_hf.DLiteConfig.for_target(
            target.config,
            num_target_layers_tapped=6,
            hidden_size=256,
            num_hidden_layers=5,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=768,
            head_rank=128,
            draft_vocab_size=vocab,
        )
        drafter = dlite_hf.DLiteForSpeculation(config).to(dtype).eval().bind_target(target)
        for _ in range(3):
            drafter.draft(context, anchor)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            drafter.draft(context, anchor)
            times.append((time.perf_counter() - start) * 1000)
        result["ms_per_round"][size] = statistics.median(times)
        print(f"draft_vocab_size={vocab}: {statistics.median(times):.1f} ms per round (threads={args.threads})")
    if args.out:
        import json

        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
