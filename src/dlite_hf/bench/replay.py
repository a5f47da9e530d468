"""Greedy tau offline: replay speculative decoding of a drafter over a fixed greedy text.

Greedy decoding that drafts K tokens every round commits exactly the target's greedy text, so its rounds follow from
that text and one teacher-forced target forward: tau of many drafters costs one forward per text each, not a decode.
The replay equals a real float32 ``generate(assistant_model=drafter)`` run token for token (``tests/test_replay.py``);
in reduced precision a real run's texts can differ after a near-tie, so replay float32 texts to compare drafters.

Also what the rule replays (:mod:`.replay_hybrid`, :mod:`.replay_rules`) charge a round: the target's forward over
``q`` new tokens, timed at the turn's context and interpolated between the timed sizes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Sequence
from typing import Any

HISTORY_KEYS = ("history_states", "history_valid", "history_positions")  # `DLiteForSpeculation.draft`'s keywords


def replay_tau(drafter: Any, states: Any, tokens: list[int], prompt_length: int) -> tuple[int, int, list[int]]:
    """(new tokens, target forwards, accepted drafts per verify round) of a greedy run over ``tokens`` (prompt and
    greedy continuation, from ``prompt_length`` >= 2) that drafts K every round, as ``generate`` runs it: the
    prefill commits the first new token, then each round's verify forward commits its accepted drafts plus one.

    ``drafter`` has ``DLiteForSpeculation.draft``; a history variant (``config.history_window != 0``) gets the
    states of the committed positions before each round's context, as ``generate`` gives it. ``states``: the
    target's tapped states over ``tokens``, ``[1, T, L, H_t]``.
    """
    import torch

    from ..modeling.drafting import history_inputs

    if prompt_length < 2 or prompt_length > len(tokens):
        raise ValueError(f"prompt_length must be in 2..{len(tokens)} (the text's length), got {prompt_length}.")
    if prompt_length == len(tokens):
        return 0, 0, []
    window = getattr(getattr(drafter, "config", None), "history_window", 0)
    position, forwards, accepted = prompt_length + 1, 1, []  # the prefill commits tokens[prompt_length]
    while position < len(tokens):
        history = {}
        if window:  # the committed positions before the context (position - 2), the last `window` of them
            past = states[:, max(0, position - 2 - window) if window > 0 else 0 : position - 2]
            history = dict(zip(HISTORY_KEYS, history_inputs(past, states.device)))
        drafts, _ = drafter.draft(
            states[:, position - 2],
            torch.tensor([tokens[position - 1]], device=states.device),
            confidence_threshold=0.0,
            skip_threshold=0.0,
            **history,
        )
        draft = drafts[0].tolist()[: len(tokens) - position]
        run = min(accepted_prefix(draft, tokens, position), len(tokens) - position - 1)  # and the round's own token
        accepted.append(run)
        position += run + 1
        forwards += 1
    return len(tokens) - prompt_length, forwards, accepted


def greedy_texts(target: Any, tokenizer: Any, prompts: Iterable[dict], max_new_tokens: int) -> Iterable[dict]:
    """Yield ``{"id", "workload", "prompt_length", "tokens"}``: each prompt's plain greedy continuation."""
    import torch

    from ..chat_template import chat_prompt_ids

    for prompt in prompts:
        ids = torch.tensor([chat_prompt_ids(tokenizer, prompt["messages"])], device=target.device)
        with torch.no_grad():
            out = target.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)
        yield {
            "id": prompt["id"],
            "workload": prompt["workload"],
            "prompt_length": ids.shape[1],
            "tokens": out[0].tolist(),
        }


def replay_text(drafter: Any, target: Any, text: dict) -> dict[str, Any]:
    """Replay one :func:`greedy_texts` row: ``{"id", "workload", "new_tokens", "forwards", "accepted"}``."""
    import torch

    from ..data.features.transformers import target_features

    with torch.no_grad():
        states, _ = target_features(
            target, torch.tensor([text["tokens"]], device=target.device), list(drafter.config.target_layer_ids)
        )
        new, forwards, accepted = replay_tau(drafter, states, text["tokens"], text["prompt_length"])
    return {
        "id": text["id"],
        "workload": text["workload"],
        "new_tokens": new,
        "forwards": forwards,
        "accepted": accepted,
    }


def summarise(rows: list[dict[str, Any]], out_of_domain: Iterable[str] = ()) -> dict[str, Any]:
    """Tau per workload (pooled: new tokens / target forwards) and its means over all workloads, the out-of-domain
    ones and the others; and those means of the share of verify rounds whose first draft is accepted
    (``first_accepted_*``: a round accepts draft n only after drafts 1..n-1)."""
    by: dict[str, list[int]] = {}
    for row in rows:
        totals = by.setdefault(row["workload"], [0, 0, 0, 0])
        totals[0] += row["new_tokens"]
        totals[1] += row["forwards"]
        totals[2] += sum(1 for a in row["accepted"] if a > 0)
        totals[3] += len(row["accepted"])
    tau = {w: t[0] / t[1] for w, t in by.items() if t[1]}
    first = {w: t[2] / t[3] for w, t in by.items() if t[3]}
    ood = [w for w in tau if w in set(out_of_domain)]
    ind = [w for w in tau if w not in set(out_of_domain)]

    def mean(values: dict[str, float], names: list[str]) -> float | None:
        names = [w for w in names if w in values]
        return sum(values[w] for w in names) / len(names) if names else None

    return {
        "tau_by_workload": tau,
        "mean_tau": mean(tau, list(tau)),
        "mean_tau_ood": mean(tau, ood),
        "mean_tau_in_domain": mean(tau, ind),
        "first_accepted_ood": mean(first, ood),
        "first_accepted_in_domain": mean(first, ind),
    }


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
    if q in costs:
        return costs[q]
    lower = max((s for s in costs if s < q), default=min(costs))
    upper = min((s for s in costs if s > q), default=max(costs))
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
