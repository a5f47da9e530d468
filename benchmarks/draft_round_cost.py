"""Cost of one drafting round (K = 7) on SmolLM2-135M, full vocabulary vs a draft vocabulary slice.

Usage: .venv/bin/python benchmarks/draft_round_cost.py [--threads 1] [--repeats 10] [--vocab-sizes full,8192,4096]
    [--drafters name=folder,...] [--dtype float32|bfloat16] [--out FILE.json]
Prints milliseconds per `draft()` call (median of repeats) for each draft vocabulary size, with the shipped
drafter's architecture and random weights (the cost does not depend on the weights), or, with --drafters, for each
saved drafter as it is (its width, depth, head and draft vocabulary: the capacity study's x axis). Every round
drafts all K tokens (no early stop, no skip: what tau at K every round is measured with).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM

import dlite_hf
from dlite_hf.assets import fetch_model
from dlite_hf.bench.measure import environment_info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--vocab-sizes", default="full,8192,4096", help="comma-separated; full = no draft vocabulary")
    parser.add_argument("--drafters", default=None, help="name=folder,...: time these saved drafters instead")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    target = AutoModelForCausalLM.from_pretrained(fetch_model("smollm2-135m", progress=False), dtype=dtype).eval()
    anchor = torch.tensor([5])
    machine = environment_info()["machine"]
    result = {"threads": args.threads, "dtype": args.dtype, "repeats": args.repeats, "machine": machine}
    result["ms_per_round"] = {}
    if args.drafters:
        items = [item.split("=", 1) for item in args.drafters.split(",") if item]
        if not all(len(item) == 2 and item[0] for item in items):
            raise SystemExit(f"--drafters {args.drafters!r}: expected name=folder,name=folder,...")
        cases = [
            (name, lambda folder=folder: dlite_hf.DLiteForSpeculation.from_pretrained(folder))
            for name, folder in items
        ]
    else:
        cases = [(size, lambda size=size: _shipped_shape(target, size)) for size in args.vocab_sizes.split(",")]
    for size, build in cases:
        drafter = build().to(dtype).eval().bind_target(target)
        context = torch.randn(1, len(drafter.config.target_layer_ids), target.config.hidden_size, dtype=dtype)
        for _ in range(3):
            drafter.draft(context, anchor, confidence_threshold=0.0, skip_threshold=0.0)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            drafter.draft(context, anchor, confidence_threshold=0.0, skip_threshold=0.0)
            times.append((time.perf_counter() - start) * 1000)
        result["ms_per_round"][size] = statistics.median(times)
        print(f"{size}: {statistics.median(times):.1f} ms per round (threads={args.threads})")
    if args.out:
        import json

        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)


def _shipped_shape(target, size: str):
    """The shipped architecture with random weights and a draft vocabulary of `size` ids ("full": none)."""
    config = dlite_hf.DLiteConfig.for_target(
        target.config,
        num_target_layers_tapped=6,
        hidden_size=256,
        num_hidden_layers=5,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=768,
        head_rank=128,
        draft_vocab_size=None if size == "full" else int(size),
    )
    return dlite_hf.DLiteForSpeculation(config)


if __name__ == "__main__":
    main()
