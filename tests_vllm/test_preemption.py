"""Preemption (issue 45, part 2): a KV cache too small for the batch makes vLLM preempt running requests and
recompute them later. With the DLite drafter and with the hybrid, the float32 greedy answers stay those of the
engine without speculation (which has room for every request)."""

from __future__ import annotations

import math

import pytest
from conftest import Engine

pytestmark = pytest.mark.engine

MAX_NEW = 96
MAX_MODEL_LEN = 2048
CPU_BLOCK = 128  # the KV block of vLLM's CPU backend, in tokens


def _preemptions(llm) -> float:
    return sum(m.value for m in llm.get_metrics() if m.name == "vllm:num_preemptions")


@pytest.fixture(scope="module")
def plain_answers(real_prompts):
    from vllm import SamplingParams

    prompts = [row["prompt_ids"] for row in real_prompts["prompts"]]
    greedy = SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True)
    with Engine("float32", dlite=False, max_num_seqs=16, max_model_len=MAX_MODEL_LEN) as engine:
        return prompts, greedy, engine.generate(prompts, greedy)


# the hybrid verifies retrieved drafts of up to prompt_lookup_max tokens, so vLLM's K is that
@pytest.mark.parametrize(
    ("num_tokens", "spec"),
    [(7, None), (16, {"prompt_lookup_max": 16, "prompt_lookup_min": 2})],
    ids=["dlite", "hybrid"],
)
def test_preempted_requests_keep_the_plain_greedy_answers(plain_answers, num_tokens, spec):
    prompts, greedy, expected = plain_answers
    total = sum(len(ids) + MAX_NEW for ids in prompts)
    # one block above what a single request of the longest length needs (vLLM keeps one null block back), far
    # below what all requests in flight need: every request is served, and running ones must be preempted
    blocks = math.ceil(MAX_MODEL_LEN / CPU_BLOCK) + 1
    assert blocks * CPU_BLOCK < total / 2, f"{blocks} blocks hold {total} tokens: the prompts are too short"
    with Engine(
        "float32",
        dlite=True,
        num_tokens=num_tokens,
        spec=spec,
        max_num_seqs=16,
        max_model_len=MAX_MODEL_LEN,
        num_gpu_blocks_override=blocks,
    ) as engine:
        answers = engine.generate(prompts, greedy)
        preempted = _preemptions(engine.llm)
    assert preempted > 0, f"no request was preempted with {blocks} KV blocks: the test no longer tests preemption"
    assert answers == expected
