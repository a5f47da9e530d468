"""Random SamplingParams, plain engine against the DLite plugin and vLLM's ngram (a seeded subset of the long runs
of `random_params.py`): every case identical, refused alike, or sampled and within its promises; no engine dies."""

from __future__ import annotations

import pytest
from conftest import TARGET, Engine
from random_params import FAMILIES, PASSING, WHOLE_PREFILL, draw_cases, judge, run_all

CASES, SEED = 64, 1


def test_the_judge_fails_what_it_must():
    case = {"kw": {"max_tokens": 4, "temperature": 0.0, "allowed_token_ids": [1, 2]}}
    ok = {"outputs": [[1, 2]], "finish": ["length"], "logprobs": [None], "prompt_logprobs": None}
    assert judge(case, ok, ok, ok, 5, 10) == ("identical", "")
    other = {**ok, "outputs": [[1, 1]]}
    assert judge(case, ok, other, ok, 5, 10)[0] == "failure"
    outside = {**ok, "outputs": [[1, 3]]}
    assert judge(case, ok, {**outside, "finish": ["stop"]}, ok, 5, 10)[0] == "failure"  # 3 differs from plain's 2
    assert "outside allowed_token_ids" in judge(case, ok, outside, ok, 5, 10)[1]
    assert judge(case, outside, outside, ok, 5, 10)[0] == "vllm_alike"  # broken the same way without speculation
    refused = {"error": "ValueError: min_p is not supported with speculative decoding"}
    assert judge(case, ok, refused, refused, 5, 10)[0] == "refused_like_ngram"
    assert judge(case, ok, refused, ok, 5, 10)[0] == "failure"
    assert judge(case, refused, refused, ok, 5, 10)[0] == "refused_alike"
    assert judge(case, refused, ok, ok, 5, 10)[0] == "failure"


def test_cases_cover_every_family():
    prompts = [{"prompt_ids": [1, 2, 3]}] * 4
    cases = draw_cases(400, 0, prompts, list(range(10, 60)))
    assert {f for c in cases for f in c["families"]} == set(FAMILIES)
    assert draw_cases(5, 3, prompts, [1, 2]) == draw_cases(5, 3, prompts, [1, 2])


@pytest.mark.engine
def test_random_sampling_params_against_the_engine_without_speculation(real_prompts):
    from transformers import AutoConfig

    prompts = real_prompts["prompts"]
    common = sorted({t for p in prompts for t in p["prompt_ids"]})
    cases = draw_cases(CASES, SEED, prompts, common, max_tokens=16)

    def make_engine(kind):
        if kind == "ngram":
            spec = {"method": "ngram", "num_speculative_tokens": 7, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
            return Engine("float32", dlite=False, **WHOLE_PREFILL, speculative_config=spec)
        return Engine("float32", dlite=kind == "dlite", **WHOLE_PREFILL)

    records = run_all(make_engine, prompts, cases, "vllm float32 dlite", AutoConfig.from_pretrained(TARGET).vocab_size)
    failures = [(r["index"], r["reason"]) for r in records if r["kind"] not in PASSING]
    assert not failures, failures
    kinds = {r["kind"] for r in records}
    assert {"identical", "sampled_ok"} <= kinds
