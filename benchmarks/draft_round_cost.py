"""Cost of one drafting round (K = 7) on SmolLM2-135M, full vocabulary vs a draft vocabulary slice.

Usage: .venv/bin/python benchmarks/draft_round_cost.py [--threads 1] [--repeats 10]
Prints milliseconds per `draft()` call (median of repeats) for draft_vocab_size None, 8192 and 4096, with the
shipped drafter's architecture and random weights (the cost does not depend on the weights).
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
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = AutoModelForCausalLM.from_pretrained(fetch_model("smollm2-135m", progress=False)).eval()
    context, anchor = torch.randn(1, 6, target.config.hidden_size), torch.tensor([5])
    for vocab in (None, 8192, 4096):
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
        drafter = dlite_hf.DLiteForSpeculation(config).eval().bind_target(target)
        for _ in range(3):
            drafter.draft(context, anchor)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            drafter.draft(context, anchor)
            times.append((time.perf_counter() - start) * 1000)
        print(f"draft_vocab_size={vocab}: {statistics.median(times):.1f} ms per round (threads={args.threads})")


if __name__ == "__main__":
    main()
