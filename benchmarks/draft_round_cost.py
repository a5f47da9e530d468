"""Cost of one drafting round (K = 7) on SmolLM2-135M, full vocabulary vs a draft vocabulary slice.

Usage: .venv/bin/python benchmarks/draft_round_cost.py [--threads 1] [--repeats 10] [--vocab-sizes full,8192,4096]
    [--drafters name=folder,...] [--own-code] [--rounds N] [--rules-on] [--dtype float32|bfloat16] [--verify-context N]
    [--out FILE.json]
Prints milliseconds per `draft()` call (median of repeats) for each draft vocabulary size, with the shipped
drafter's architecture and random weights (the cost does not depend on the weights), or, with --drafters, for each
saved drafter as it is (its width, depth, head and draft vocabulary: the capacity study's x axis). Every round
drafts all K tokens (no early stop, no skip: what tau at K every round is measured with); --rules-on sets both
thresholds to 1e-12, so each step also pays for the rules' probabilities (as the shipped adaptive rules do) without
ever stopping.
--own-code loads each --drafters folder with the modeling code it carries (as `trust_remote_code` would), not the
package's: a folder of a `git worktree` at another commit then times that commit's drafting round, in the same
process, and --rounds N interleaves N passes over the drafters (how the fused head was measured against the round
before it).
--verify-context N also times, interleaved with the rounds, the target's forward over 1 token (a plain decode
step) and over K + 1 tokens (a verification) on a cache of N positions, with the packed attention the benchmarks
use (`dlite_hf.attention`): the costs a drafter's tau must pay for (`target_ms`).
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
    parser.add_argument("--rounds", type=int, default=1, help="interleaved passes over the drafters (median of them)")
    parser.add_argument("--vocab-sizes", default="full,8192,4096", help="comma-separated; full = no draft vocabulary")
    parser.add_argument("--drafters", default=None, help="name=folder,...: time these saved drafters instead")
    parser.add_argument("--own-code", action="store_true", help="load --drafters folders with their own code")
    parser.add_argument("--rules-on", action="store_true", help="thresholds of 1e-12: computed every step, never met")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--verify-context", type=int, default=0, help="also time the target's forwards (0: no)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    if args.rounds < 1:
        raise SystemExit(f"--rounds {args.rounds}: expected a number of passes >= 1.")
    if args.verify_context < 0:
        raise SystemExit(f"--verify-context {args.verify_context}: expected a length >= 1 (0: no target timing).")
    attention = dlite_hf.attention.register() if args.verify_context else None
    target = AutoModelForCausalLM.from_pretrained(
        fetch_model("smollm2-135m", progress=False), dtype=dtype, attn_implementation=attention
    ).eval()
    anchor = torch.tensor([5])
    machine = environment_info()["machine"]
    result = {"threads": args.threads, "dtype": args.dtype, "repeats": args.repeats, "machine": machine}
    passes: dict[str, list[float]] = {}
    threshold = 1e-12 if args.rules_on else 0.0
    rules = {"confidence_threshold": threshold, "skip_threshold": threshold}
    result["rules_on"] = args.rules_on
    if args.drafters:
        items = [item.split("=", 1) for item in args.drafters.split(",") if item]
        if not all(len(item) == 2 and item[0] for item in items):
            raise SystemExit(f"--drafters {args.drafters!r}: expected name=folder,name=folder,...")
        if args.own_code:  # not AutoModel: with dlite_hf imported it resolves to the package's registered class
            from transformers.dynamic_module_utils import get_class_from_dynamic_module

            def load(folder):
                drafter_class = get_class_from_dynamic_module("modeling_dlite.DLiteForSpeculation", folder)
                return drafter_class.from_pretrained(folder)
        else:
            load = dlite_hf.DLiteForSpeculation.from_pretrained
        cases = [(name, lambda folder=folder: load(folder)) for name, folder in items]
    else:
        cases = [(size, lambda size=size: _shipped_shape(target, size)) for size in args.vocab_sizes.split(",")]
    for size, build in cases * args.rounds:
        drafter = build().to(dtype).eval().bind_target(target)
        context = torch.randn(1, len(drafter.config.target_layer_ids), target.config.hidden_size, dtype=dtype)
        for _ in range(3):
            drafter.draft(context, anchor, **rules)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            drafter.draft(context, anchor, **rules)
            times.append((time.perf_counter() - start) * 1000)
        passes.setdefault(size, []).append(statistics.median(times))
        print(f"{size}: {statistics.median(times):.1f} ms per round (threads={args.threads})")
        if args.verify_context:  # after each drafter, so target and drafter times share the machine's state
            for tokens, ms in _target_forward_ms(target, args.verify_context, drafter.config.num_draft_tokens + 1,
                                                 args.repeats).items():  # fmt: skip
                result.setdefault("target_ms", {}).setdefault(str(tokens), []).append(ms)
    result["ms_per_round"] = {name: statistics.median(values) for name, values in passes.items()}
    if args.rounds > 1:
        result["rounds"], result["ms_per_round_passes"] = args.rounds, passes
    if args.verify_context:
        result["verify_context"] = args.verify_context
        result["target_ms"] = {tokens: statistics.median(values) for tokens, values in result["target_ms"].items()}
        print(f"target forward on {args.verify_context} cached positions: {result['target_ms']} ms")
    if args.out:
        import json

        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)


@torch.no_grad()
def _target_forward_ms(target, context: int, verify_tokens: int, repeats: int) -> dict[int, float]:
    """Median ms of the target's forward over 1 and over `verify_tokens` new tokens on a cache of `context` positions
    (the cache is cropped back after each call, so every call sees the same length)."""
    from transformers import DynamicCache

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, target.config.vocab_size, (1, context + verify_tokens), generator=generator)
    cache = DynamicCache(config=target.config)
    target(input_ids=ids[:, :context], cache=cache, use_cache=True)
    medians = {}
    for tokens in (1, verify_tokens):
        new = ids[:, context : context + tokens]
        position = torch.arange(context, context + tokens).unsqueeze(0)
        times = []
        for i in range(repeats + 2):
            start = time.perf_counter()
            target(input_ids=new, cache=cache, position_ids=position, use_cache=True)
            if i >= 2:  # two warm-up calls
                times.append((time.perf_counter() - start) * 1000)
            cache.crop(-tokens)  # transformers 5.24 crops by a negative count of tokens to drop
        medians[tokens] = statistics.median(times)
    return medians


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
