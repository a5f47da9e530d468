"""The regeneration worker's request order, without an engine: prompts that share a prefix enter together."""

from __future__ import annotations

import argparse

from dlite_hf_vllm.workers.regenerate import _requests


def _args(samples=0):
    return argparse.Namespace(samples=samples, max_new_tokens=4, temperature=0.7, top_p=1.0, seed=0)


def test_requests_follow_the_prompts_token_order_so_session_turns_are_neighbours():
    job = [
        {"id": "a-turn2", "prompt_ids": [1, 5, 9, 9, 4]},
        {"id": "b", "prompt_ids": [1, 2, 3]},
        {"id": "a-turn1", "prompt_ids": [1, 5, 9]},
        {"id": "c", "prompt_ids": [0, 7]},
    ]
    assert [request_id for request_id, _, _ in _requests(job, _args())] == ["c", "b", "a-turn1", "a-turn2"]
    sampled = {request_id: params.seed for request_id, _, params in _requests(job, _args(samples=2))}
    assert next(_requests(job, _args(samples=2)))[0] == "c#0"
    # a response's seed depends on its id only, not on where the sort put it
    assert sampled == {request_id: params.seed for request_id, _, params in _requests(job[::-1], _args(samples=2))}
