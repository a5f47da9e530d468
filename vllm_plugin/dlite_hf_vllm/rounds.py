"""One DLite round for a vLLM batch, in plain torch: which rows of the target's forward the drafter reads, and
the drafter's call (`drafter.draft`: the engine-neutral core's `draft_tokens`, which `generate()` runs too).

Nothing here imports vLLM, so the tests can check it against `DLiteForSpeculation` directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["TemperatureScale", "draft_batch", "newest_rows"]

GREEDY_EPS = 1e-5  # vLLM's _SAMPLING_EPS: a request at or below this temperature is greedy


def newest_rows(
    query_start_loc: Sequence[int], num_draft_tokens: Sequence[int] | None, sampled: Sequence[Sequence[int]]
) -> list[int]:
    """For each request, the row of the last target forward that holds its newest committed position: the one
    whose logits gave the anchor (the last sampled token). -1 where the request sampled nothing (a partial
    prefill chunk, a discarded request).

    A request scheduled `q` rows `[s, s + q)` with `d` draft tokens sampled `len(sampled)` tokens: the accepted
    drafts plus the target's own token. Its last `d + 1 - len(sampled)` rows held rejected drafts, so the newest
    committed position is row `s + q - 1 - (d + 1 - len(sampled))`. A prefill (`d = 0`, one token sampled) reads
    its last prompt row.
    """
    rows = []
    for i, tokens in enumerate(sampled):
        if not tokens:
            rows.append(-1)
            continue
        drafts = int(num_draft_tokens[i]) if num_draft_tokens is not None else 0
        rejected = drafts + 1 - len(tokens)
        if not 0 <= rejected <= drafts:
            raise RuntimeError(
                f"Internal error: request {i} sampled {len(tokens)} tokens after {drafts} draft tokens."
            )
        rows.append(int(query_start_loc[i + 1]) - 1 - rejected)
    return rows


class TemperatureScale:
    """The logits processor of sampled drafting: each row's logits divided by its request's temperature, so q is
    the drafter's distribution at that temperature (any q keeps speculative sampling exact; a q nearer the
    target's is accepted more often)."""

    def __init__(self, temperatures: torch.Tensor):
        self.temperatures = temperatures

    def __call__(self, seen: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        return logits / self.temperatures.to(logits.dtype)[:, None]


def draft_batch(
    drafter: Any,
    states: torch.Tensor,
    anchors: torch.Tensor,
    num_tokens: int,
    temperatures: torch.Tensor | None = None,
) -> tuple[list[list[int]], torch.Tensor | None]:
    """Draft up to `num_tokens` tokens for each row with `drafter.draft` (the shared core and its rules).

    Greedy rows (no `temperatures`, or a temperature <= GREEDY_EPS) draft the argmax, in one call; sampled rows
    draw from `softmax(logits / T)`, in another. Each row then keeps the drafts the core's rules (stop, skip) give it
    alone (`drafter.draft_row_lengths`): vLLM verifies each request's own draft, so a request in a batch proposes
    what it would alone, and no request pays for drafts only its neighbours were sure of.

    Returns:
        the draft token lists (one per row; empty where the core skipped the round) and, when some row sampled,
        `q` `[N, num_tokens, V]` float32 (the probabilities each sampled draft was drawn from; one-hot rows for
        greedy ones, zeros past a row's drafts), else None.
    """
    rows = states.shape[0]
    drafts: list[list[int]] = [[] for _ in range(rows)]
    greedy = torch.ones(rows, dtype=torch.bool) if temperatures is None else temperatures.cpu() <= GREEDY_EPS
    probs = None
    if bool(greedy.any()):
        index = greedy.nonzero().flatten()
        tokens, logits = drafter.draft(states[index], anchors[index], num_tokens)
        kept = drafter.draft_row_lengths(tokens, logits)
        for row, ids, length in zip(index.tolist(), tokens.tolist(), kept):
            drafts[row] = ids[:length]
    if not bool(greedy.all()):
        index = (~greedy).nonzero().flatten()
        chosen = anchors[index]
        tokens, logits = drafter.draft(
            states[index],
            chosen,
            num_tokens,
            do_sample=True,
            logits_processor=TemperatureScale(temperatures[index.to(temperatures.device)]),
            prefix_ids=chosen[:, None],
        )
        vocab = logits.shape[-1]
        probs = torch.zeros(rows, num_tokens, vocab, dtype=torch.float32, device=logits.device)
        if tokens.shape[1]:
            probs[index.to(logits.device), : tokens.shape[1]] = torch.softmax(logits.float(), dim=-1)
        kept = drafter.draft_row_lengths(tokens, logits)
        for row, ids, length in zip(index.tolist(), tokens.tolist(), kept):
            drafts[row] = ids[:length]
        # rows vLLM verifies by argmax: q unused there, one-hot at each draft (one scatter for the batch)
        hot = [
            (row, position, token)
            for row in greedy.nonzero().flatten().tolist()
            for position, token in enumerate(drafts[row])
        ]
        if hot:
            row_ids, positions, token_ids = torch.tensor(hot, device=probs.device).unbind(1)
            probs[row_ids, positions, token_ids] = 1.0
    return drafts, probs
