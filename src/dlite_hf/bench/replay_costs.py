"""What the offline replays (:mod:`dlite_hf.bench.replay_hybrid`, :mod:`dlite_hf.bench.replay_rules`) charge a
round: the target's forward over ``q`` new tokens, timed at the turn's context and interpolated between the timed
block sizes, and the common prefix a round's drafts have with plain greedy's output (what it accepts)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["accepted_prefix", "context_key", "cost_at", "forward_costs", "load_models"]


def forward_costs(target: Any, context: int, sizes: Sequence[int], repeats: int = 5) -> dict[int, float]:
    """Median seconds of a target forward over q new tokens on a cache of `context` tokens, for each q of `sizes`."""
    import torch
    from transformers import DynamicCache

    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, 10000, (1, context), generator=generator)
    cache = DynamicCache()
    with torch.no_grad():
        target(prompt, past_key_values=cache, use_cache=True)
        costs = {}
        for q in sizes:
            times = []
            for _ in range(repeats):
                new = torch.randint(100, 10000, (1, q), generator=generator)
                started = time.perf_counter()
                target(new, past_key_values=cache, use_cache=True, logits_to_keep=q)
                times.append(time.perf_counter() - started)
                cache.crop(-q)
            costs[q] = statistics.median(times)
    return costs


def cost_at(costs: dict[int, float], q: int) -> float:
    """The forward cost at q new tokens: measured, or linearly interpolated between the measured sizes (scaled from
    the nearest one outside them)."""
    sizes = sorted(costs)
    if q in costs:
        return costs[q]
    lower = max(s for s in sizes if s < q) if any(s < q for s in sizes) else sizes[0]
    upper = min(s for s in sizes if s > q) if any(s > q for s in sizes) else sizes[-1]
    if upper == lower:
        return costs[lower] * q / lower
    return costs[lower] + (costs[upper] - costs[lower]) * (q - lower) / (upper - lower)


def context_key(prompt_tokens: int) -> int:
    """The context whose timed forwards price a turn of `prompt_tokens`: the nearest multiple of 512, 512..8192."""
    return min(8192, 512 * max(1, round(prompt_tokens / 512)))


def accepted_prefix(draft: Sequence[int], tokens: Sequence[int], position: int) -> int:
    """How many of `draft` greedy verification accepts at `position`: its common prefix with `tokens` there."""
    accepted = 0
    while accepted < len(draft) and draft[accepted] == tokens[position + accepted]:
        accepted += 1
    return accepted


def load_models(target: str, drafter: str, attention: str, threads: int) -> tuple[Any, Any, Any]:
    """(target in float32 with `attention`, its tokenizer, the drafter bound to it), on `threads` threads with
    grouped-query SDPA forced, as the README's benchmark runs (``--sdpa-gqa``)."""
    import os

    import torch

    from .. import DLiteForSpeculation
    from ..assets import load_target, resolve_drafter, resolve_model

    torch.set_num_threads(threads)
    os.environ["TRANSFORMERS_SDPA_FORCE_GQA"] = "1"
    model, tokenizer = load_target(resolve_model(target), dtype="float32", attention=attention)
    bound = DLiteForSpeculation.from_pretrained(resolve_drafter(drafter)).bind_target(model).eval()
    return model, tokenizer, bound
