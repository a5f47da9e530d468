"""The generate() integration's guard against a changed transformers: parameters read by name, a changed method
left alone with a warning, transformers' own self-drafting not pre-empted."""

from __future__ import annotations

import pytest
import torch
from tiny_models import tiny_prompt
from transformers.generation.utils import GenerationMixin

from dlite_hf.modeling import integration
from dlite_hf.modeling.integration import install_generate_hook


def _hook_problem(method):
    return integration._signature_problem(method, integration._REQUIRED_PARAMETERS[integration._HOOKED_METHOD])


# ---------------------------------------------------------------------------------------------------------------------
# the generate() hook's guard against a changed transformers
# ---------------------------------------------------------------------------------------------------------------------


def test_hook_reads_parameters_by_name():
    original = GenerationMixin._get_candidate_generator._dlite_original
    assert _hook_problem(original) is None  # the installed transformers
    assert _hook_problem(GenerationMixin._get_candidate_generator) is None  # the wrapper keeps the signature

    def changed(self, generation_config, input_ids, inputs_tensor, logits_processor, model_kwargs, assistant_model):
        return None

    problem = _hook_problem(changed)
    assert "no parameter target_tokenizer, assistant_tokenizer" in problem and "(it has self, " in problem

    def reordered_with_a_new_option(
        self,
        input_ids,
        generation_config,
        logits_processor,
        model_kwargs,
        assistant_model=None,
        target_tokenizer=None,
        assistant_tokenizer=None,
        inputs_tensor=None,
        new_option=None,
    ):
        return None

    assert _hook_problem(reordered_with_a_new_option) is None  # other parameters may come, go and move


def test_a_changed_method_is_left_alone_with_a_warning(monkeypatch, tiny_pair):
    target, _ = tiny_pair

    def changed(self, generation_config, input_ids, logits_processor, model_kwargs, assistant_model=None):
        return None

    monkeypatch.setattr(GenerationMixin, integration._HOOKED_METHOD, changed)
    with pytest.warns(RuntimeWarning, match="cannot route generate") as caught:
        assert install_generate_hook() is False
    assert "Every other generation mode works unchanged" in str(caught[0].message)
    assert GenerationMixin._get_candidate_generator is changed  # nothing was wrapped
    ids = tiny_prompt()
    assert target.generate(ids, max_new_tokens=3, do_sample=False).shape[1] == ids.shape[1] + 3  # plain still works


def test_a_new_optional_parameter_keeps_dlite_working(monkeypatch, tiny_pair):
    target, drafter = tiny_pair
    original = GenerationMixin._get_candidate_generator._dlite_original

    def newer(
        self,
        generation_config,
        input_ids,
        inputs_tensor,
        logits_processor,
        model_kwargs,
        assistant_model=None,
        target_tokenizer=None,
        assistant_tokenizer=None,
        new_option=None,
    ):
        return original(
            self,
            generation_config,
            input_ids,
            inputs_tensor,
            logits_processor,
            model_kwargs,
            assistant_model=assistant_model,
            target_tokenizer=target_tokenizer,
            assistant_tokenizer=assistant_tokenizer,
        )

    monkeypatch.setattr(GenerationMixin, integration._HOOKED_METHOD, newer)
    assert install_generate_hook() is True and GenerationMixin._get_candidate_generator._dlite_original is newer
    ids = tiny_prompt()
    plain = target.generate(ids, max_new_tokens=6, do_sample=False)
    assert torch.equal(target.generate(ids, max_new_tokens=6, do_sample=False, assistant_model=drafter), plain)
    assert drafter.last_generation_stats.rounds > 0  # the DLite generator ran
    lookup = target.generate(ids, max_new_tokens=6, do_sample=False, prompt_lookup_num_tokens=3)
    assert torch.equal(lookup, plain)  # transformers' own prompt lookup still goes through the original


@pytest.mark.parametrize("option", [{"assistant_early_exit": 2}, {"use_mtp": True}])
def test_transformers_own_self_drafting_is_not_pre_empted(tiny_pair, option):
    target, drafter = tiny_pair
    with pytest.raises(ValueError) as raised:
        target.generate(tiny_prompt(), max_new_tokens=3, assistant_model=drafter, **option)
    message = str(raised.value)
    assert f"{next(iter(option))}=" in message and "Pass one of them" in message, message
