"""Greedy tau offline: replay speculative decoding of a drafter over a fixed greedy text.

Greedy speculative decoding that drafts K tokens every round commits exactly the target's greedy text, so its
rounds are fully determined by that text: at each round the drafter drafts from the target's states at the
round's start, the drafts that match the text are accepted, and the round commits them plus one token. With the
text and one teacher-forced target forward, every round of a drafter can be replayed without generating: tau of
many drafters (a capacity study, training checkpoints) costs one target forward per text each, not a decode.

The replay equals a real float32 run of ``generate(assistant_model=drafter)`` with K drafts every round
(``tests/test_replay.py`` checks it token for token on a tiny model); in reduced precision the texts and states of
a real run can differ after a near-tie, so replay in float32 texts (:func:`greedy_texts` default) to compare
drafters.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["greedy_texts", "replay_tau", "replay_text", "summarise"]

HISTORY_KEYS = ("history_states", "history_valid", "history_positions")  # `DLiteForSpeculation.draft`'s keywords


def replay_tau(drafter: Any, states: Any, tokens: list[int], prompt_length: int) -> tuple[int, int, list[int]]:
    """(new tokens, target forwards, accepted drafts per verify round) of a greedy run over ``tokens`` that drafts
    K every round, exactly as ``generate`` runs it: the prefill forward commits the first new token, then each
    round drafts after the last committed token and its verify forward commits the accepted drafts plus one.

    Args:
        drafter: a bound ``DLiteForSpeculation``, or anything with its ``draft`` method. A history variant
            (``config.history_window != 0``: the teacher, a sliding window) gets the states of the committed
            positions before each round's context, the last ``history_window`` of them, as ``generate`` gives it.
        states: the target's tapped states over ``tokens``, ``[1, T, L, H_t]``.
        tokens: prompt followed by the target's greedy continuation.
        prompt_length: where the continuation starts (>= 2).
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
        run = 0
        for draft, actual in zip(drafts[0].tolist(), tokens[position:]):
            if draft != actual:
                break
            run += 1
        run = min(run, len(tokens) - position - 1)  # the round's own token must exist too
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
    """Tau per workload (pooled: new tokens / target forwards), the mean over workloads, and the means over the
    out-of-domain workloads and over the others; and the same means of the share of verify rounds whose first draft
    is accepted (``first_accepted_*``: what bounds tau when it is low, since a round accepts draft n only after
    drafts 1..n-1)."""
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
