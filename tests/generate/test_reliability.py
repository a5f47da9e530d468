"""Randomised generate() option mixes (dlite_hf.reliability): the drawing, the verdict, and seeded runs on a tiny
fitted pair and on the real SmolLM2 target with the shipped drafter (the long runs: `dlite-hf reliability run`)."""

from __future__ import annotations

import json
import random

import pytest
import torch

from dlite_hf.reliability.cases import FAMILIES, Case, Context, draw_case
from dlite_hf.reliability.suite import report, run_suite, suite_prompts
from dlite_hf.reliability.verdict import PASSING, _violations, classify, run_case

CTX = Context(vocab_size=128, eos_ids=(0,), common_ids=tuple(range(1, 20)), stop_texts=())


def test_cases_are_seeded_and_every_family_is_drawn():
    first = [draw_case(random.Random(3), CTX, i).describe() for i in range(5)]
    again = [draw_case(random.Random(3), CTX, i).describe() for i in range(5)]
    assert first == again
    rng = random.Random(0)
    cases = [draw_case(rng, CTX, i) for i in range(600)]
    drawn = {f for c in cases for f in c.families}
    assert drawn == (set(FAMILIES) - {"stop_strings"}) | {"sampling"}  # no stop texts in this context
    assert all(1 <= c.generation["max_new_tokens"] <= 24 for c in cases)
    assert any(c.generation["max_new_tokens"] == 1 for c in cases)
    json.dumps([c.describe() for c in cases])  # every case can be written to the verdict file


def test_classify_passes_alike_refusals_and_named_ones_and_fails_the_rest():
    case = Case(0, ["hybrid"], {"max_new_tokens": 4}, {"lookup_min_match": 0})
    out = torch.zeros(1, 3)
    assert classify(case, ValueError("x"), ValueError("y"))[0] == "refused_alike"
    assert classify(case, out, ValueError("lookup_min_match=0 is invalid"))[0] == "refused_named"
    kind, reason = classify(case, out, ValueError("something else"))
    assert kind == "failure" and "the drafted call raised ValueError" in reason
    assert classify(case, out, IndexError("lookup_min_match"))[0] == "failure"  # a crash, not a refusal
    kind, reason = classify(case, ValueError("bad"), out)
    assert kind == "failure" and "ran where plain raised" in reason
    assert classify(case, out, out) == ("", "")


def test_violations_catch_each_broken_promise():
    case = Case(0, generation={"max_new_tokens": 3, "suppress_tokens": [7], "no_repeat_ngram_size": 2})
    ok = torch.tensor([[1, 2, 3, 4, 5]])
    assert _violations(case, 2, ok, None, 128) == []
    assert "suppressed" in _violations(case, 2, torch.tensor([[1, 2, 7, 4, 5]]), None, 128)[0]
    assert "repeats a 2-gram" in _violations(case, 2, torch.tensor([[1, 2, 3, 1, 2]]), None, 128)[0]
    assert "4 new tokens" in _violations(case, 1, ok, None, 128)[0]
    assert "outside the vocabulary" in _violations(case, 2, torch.tensor([[1, 2, 3, 4, 500]]), None, 128)[0]


def _tiny_cases(fitted_pair, count, seed, corrupt=False):
    target, drafter, prompts, _, _ = fitted_pair
    if corrupt:  # the drafted call's last token is changed: the verdict must see it
        generate = target.generate

        def broken(*args, **kwargs):
            out = generate(*args, **kwargs)
            if kwargs.get("assistant_model") is not None:
                sequences = (out if isinstance(out, torch.Tensor) else out.sequences).clone()
                sequences[0, -1] = (sequences[0, -1] + 1) % 128
                if isinstance(out, torch.Tensor):
                    return sequences
                out.sequences = sequences
            return out

        target.generate = broken
    rng = random.Random(seed)
    try:
        return [
            run_case(target, drafter, None, prompts[i % 8 : i % 8 + 1], draw_case(rng, CTX, i, max_new_tokens=16))
            for i in range(count)
        ]
    finally:
        target.__dict__.pop("generate", None)


def test_tiny_pair_random_cases_are_lossless(fitted_pair):
    outcomes = _tiny_cases(fitted_pair, 40, seed=11)
    failed = [(o.index, o.reason) for o in outcomes if not o.passed]
    assert not failed, failed
    kinds = {o.kind for o in outcomes}
    assert {"identical", "sampled_ok"} <= kinds


def test_a_corrupted_drafted_output_fails_its_case(fitted_pair):
    outcomes = _tiny_cases(fitted_pair, 12, seed=5, corrupt=True)
    greedy = [o for o in outcomes if o.kind not in ("refused_alike", "refused_named", "sampled_ok")]
    assert greedy and all(o.kind == "failure" for o in greedy)
    assert any("differ at new token" in o.reason for o in greedy)


@pytest.mark.parametrize(("dtype", "cases"), [("float32", 24), ("bfloat16", 10)])
def test_real_target_random_cases_are_lossless_and_resume(smollm2_dir, tmp_path, dtype, cases):
    from dlite_hf.assets import load_drafter, open_target

    target, tokenizer, _ = open_target(str(smollm2_dir), dtype=dtype)
    drafter = load_drafter("dlite-smollm2-135m", target=target)
    prompts = suite_prompts(tokenizer, per_workload=1, long_tokens=512)
    assert {w for w, _ in prompts} == {"chat", "code", "math", "tool", "agentic", "long", "raw", "one_token"}
    out = tmp_path / "verdicts.jsonl"
    outcomes = run_suite(target, drafter, tokenizer, prompts, cases, out, seed=7, max_new_tokens=16, label=dtype)
    failed = [(o.index, o.reason) for o in outcomes if not o.passed]
    assert not failed, failed
    assert sum(o.kind in ("identical", "near_tie") for o in outcomes) >= cases // 3
    assert run_suite(target, drafter, tokenizer, prompts, cases, out, seed=7, max_new_tokens=16) == []  # resumed
    out.write_bytes(out.read_bytes()[:-20])  # a kill in the middle of the last write tears its record
    rerun = run_suite(target, drafter, tokenizer, prompts, cases, out, seed=7, max_new_tokens=16, label=dtype)
    assert [o.index for o in rerun] == [cases - 1]  # only the torn case runs again, on a line of its own
    text = report([out])
    assert f"{cases} cases" in text and "0 failures" in text
    header = next(line for line in text.splitlines() if line.startswith("| |"))
    assert set(PASSING) <= set(header.replace("|", " ").split())  # the tables name every verdict


def test_a_forced_eos_at_the_last_position_is_not_a_broken_ban():
    """Found by the long run (seed 0, case 176): transformers forces EOS at the last position over every ban."""
    case = Case(0, generation={"max_new_tokens": 3, "no_repeat_ngram_size": 1, "forced_eos_token_id": 2})
    assert _violations(case, 2, torch.tensor([[2, 5, 6, 7, 2]]), None, 128) == []
    assert "repeats a 1-gram" in _violations(case, 2, torch.tensor([[2, 5, 6, 6, 2]]), None, 128)[0]


def _processed_gaps(target, case, seq, start):
    """How far each committed token of ``seq`` sits below the float32 maximum of the case's processed logits."""
    from dlite_hf.neartie import _gaps, _rescored
    from dlite_hf.reliability.verdict import _processors

    return _gaps(_rescored(target, seq, start, _processors(target, case, start)), seq[0, start:].cpu())[0]


def test_processed_gaps_are_zero_on_the_targets_own_processed_greedy_output(fitted_pair):
    """The bfloat16 check re-scores with the case's logits processors: on a float32 target's own greedy output under
    those processors, every committed token is the processed maximum (gap 0), and a changed token is not."""
    target, _, prompts, _, _ = fitted_pair
    generation = {
        "max_new_tokens": 8,
        "do_sample": False,
        "repetition_penalty": 1.8,
        "no_repeat_ngram_size": 2,
        "sequence_bias": {(5,): -4.0},
        "min_new_tokens": 3,
    }
    case = Case(0, generation=generation)
    prompt = prompts[:1]
    out = target.generate(prompt, attention_mask=torch.ones_like(prompt), **generation)
    gaps = _processed_gaps(target, case, out, prompt.shape[1])
    assert gaps.shape == (out.shape[1] - prompt.shape[1],) and torch.all(gaps == 0)
    changed = out.clone()
    changed[0, -1] = (changed[0, -1] + 1) % 128
    assert _processed_gaps(target, case, changed, prompt.shape[1])[-1] > 0


def test_processed_gaps_force_eos_where_generate_does(fitted_pair):
    """Found by the long run (bfloat16 seed 1, case 362): the re-scoring must put the forced EOS at the call's last
    position (max_length from max_new_tokens, as generate() sets it), or the EOS both calls ended on looks 26 logits
    off and a near-tie earlier in the output is called a failure."""
    target, _, prompts, _, _ = fitted_pair
    generation = {"max_new_tokens": 6, "do_sample": False, "forced_eos_token_id": 2}
    prompt = prompts[:1]
    out = target.generate(prompt, attention_mask=torch.ones_like(prompt), **generation)
    assert out.shape[1] == prompt.shape[1] + 6 and out[0, -1] == 2
    assert torch.all(_processed_gaps(target, Case(0, generation=generation), out, prompt.shape[1]) == 0)


def test_a_one_token_limit_draws_one_token_cases_and_zero_is_refused():
    rng = random.Random(0)
    assert all(draw_case(rng, CTX, i, max_new_tokens=1).generation["max_new_tokens"] == 1 for i in range(20))
    with pytest.raises(ValueError, match="max_new_tokens=0: expected"):
        draw_case(rng, CTX, 0, max_new_tokens=0)
