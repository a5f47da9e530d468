"""Decoding options per call: a `GenerationConfig` carries the drafter's options for one generate() call only."""

from __future__ import annotations

import pytest
import torch
from transformers import GenerationConfig

from dlite_hf import DraftSession
from dlite_hf.modeling.decoding_options import DECODING_OPTIONS


@pytest.fixture
def trio(fitted_pair):
    target, drafter, prompts, _, _ = fitted_pair
    return target, drafter, prompts[:1]  # a prompt the drafter was fitted on: long accepted runs


def _generate(target, drafter, prompt, **options):
    config = GenerationConfig(max_new_tokens=16, do_sample=False, **options)
    out = target.generate(prompt, generation_config=config, assistant_model=drafter)
    return out, drafter.last_generation_stats


def test_thresholds_apply_to_their_call_only(trio):
    target, drafter, prompt = trio
    assert drafter.config.draft_confidence_threshold == 0.0 and drafter.config.draft_skip_threshold == 0.0
    plain = target.generate(prompt, max_new_tokens=16, do_sample=False)
    out_k, fixed = _generate(target, drafter, prompt)
    out_stop, stopping = _generate(target, drafter, prompt, draft_confidence_threshold=0.999999)
    out_skip, skipping = _generate(target, drafter, prompt, draft_skip_threshold=0.999999)
    assert torch.equal(out_k, plain) and torch.equal(out_stop, plain) and torch.equal(out_skip, plain)
    assert fixed.drafted > fixed.rounds  # K drafts a round (fewer only where the budget ends)
    assert stopping.drafted < fixed.drafted  # rounds stopped early: a near-1 confidence bar is rarely met
    assert skipping.skipped > 0 and skipping.drafted < fixed.drafted
    assert drafter.config.draft_confidence_threshold == 0.0 and drafter.config.draft_skip_threshold == 0.0
    _, again = _generate(target, drafter, prompt)
    assert again.drafted == fixed.drafted  # nothing carried over to the next call


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("draft_confidence_threshold", 1.5, r"GenerationConfig.draft_confidence_threshold=1.5 is invalid"),
        ("draft_skip_threshold", -0.1, r"GenerationConfig.draft_skip_threshold=-0.1 is invalid"),
        ("lookup_min_match", 0, r"GenerationConfig.lookup_min_match=0 is invalid: expected an int >= 1"),
        ("lookup_length_factor", 0.0, r"GenerationConfig.lookup_length_factor=0.0 is invalid: expected a number > 0"),
    ],
)
def test_bad_per_call_options_say_what_was_given(trio, option, value, message):
    target, drafter, prompt = trio
    assert option in DECODING_OPTIONS
    with pytest.raises(ValueError, match=message):
        _generate(target, drafter, prompt, **{option: value}, prompt_lookup_num_tokens=4)


def test_a_per_call_min_match_wins_over_the_session(trio):
    target, drafter, prompt = trio
    config = {"max_new_tokens": 16, "do_sample": False, "prompt_lookup_num_tokens": 8}
    with DraftSession(min_match=1):
        target.generate(prompt, generation_config=GenerationConfig(**config), assistant_model=drafter)
        loose = drafter.last_generation_stats.lookup_rounds
        strict = GenerationConfig(**config, lookup_min_match=64)  # longer than any match here: no lookup round
        target.generate(prompt, generation_config=strict, assistant_model=drafter)
        assert drafter.last_generation_stats.lookup_rounds == 0 < loose


def test_a_misspelt_per_call_option_is_refused_not_ignored(trio):
    target, drafter, prompt = trio
    with pytest.raises(ValueError, match=r"draft_confidence_treshold, which no DLite decoding option is called"):
        _generate(target, drafter, prompt, draft_confidence_treshold=0.5)
