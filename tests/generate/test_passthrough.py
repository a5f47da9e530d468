"""The generate() hook changes nothing but the DLite case: ordinary assistants, prompt lookup and transformers' own
DFlash path behave exactly as with transformers' original `_get_candidate_generator`."""

from __future__ import annotations

import inspect

import pytest
import torch
from tiny_models import make_drafter, make_tiny_target
from transformers import MuseGlimmerAssistantConfig, MuseGlimmerAssistantModel
from transformers.generation.utils import GenerationMixin

from dlite_hf import install_generate_hook
from dlite_hf.modeling.integration import _HOOKED_METHOD

install_generate_hook()  # what creating a drafter does (`import dlite_hf` alone patches nothing)
HOOKED = GenerationMixin._get_candidate_generator
ORIGINAL = HOOKED._dlite_original


def _tiny_dflash_drafter(target, seed: int = 0):
    """A seeded random DFlash drafter of the kind transformers' DFlashTokenCandidateGenerator drives (the
    `muse_glimmer_assistant` model: it reads `noise_embeds` + `context_hidden_states` and a DFlashCache)."""
    text = target.config
    config = MuseGlimmerAssistantConfig(
        hidden_size=text.hidden_size,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        block_size=4,
        mask_token_id=text.vocab_size - 1,
        target_layer_ids=[0, 2],
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
        max_position_embeddings=1024,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    torch.manual_seed(seed)
    return MuseGlimmerAssistantModel(config).eval()


def _run(monkeypatch, target, hooked: bool, ids, seed: int = 0, **kwargs):
    """generate() with the hook or with transformers' original method; returns output and generator class."""
    seen = []
    inner = HOOKED if hooked else ORIGINAL

    def spy(self, *args, **spy_kwargs):
        generator = inner(self, *args, **spy_kwargs)
        seen.append(type(generator).__name__)
        return generator

    with monkeypatch.context() as patch:
        patch.setattr(GenerationMixin, _HOOKED_METHOD, spy)
        torch.manual_seed(seed)
        out = target.generate(ids, max_new_tokens=kwargs.pop("max_new_tokens", 24), **kwargs)
    assert GenerationMixin._get_candidate_generator is HOOKED  # the session's hook is back
    return out, seen


def _prompt(length: int = 8, seed: int = 0) -> torch.Tensor:
    return torch.randint(1, 128, (1, length), generator=torch.Generator().manual_seed(seed))


def test_hook_is_installed():
    assert getattr(HOOKED, "_dlite_hook", False) and not getattr(ORIGINAL, "_dlite_hook", False)
    assert ORIGINAL.__qualname__ == "GenerationMixin._get_candidate_generator"


@pytest.mark.parametrize("do_sample", [False, True])
def test_ordinary_assistant_model(monkeypatch, target, do_sample):
    ids = _prompt(seed=1)
    plain = target.generate(ids, max_new_tokens=24, do_sample=False)
    outputs = {}
    for hooked in (True, False):
        assistant = make_tiny_target("qwen3", seed=32)  # fresh: the assistant's schedule state is mutated by a run
        outputs[hooked], seen = _run(
            monkeypatch, target, hooked, ids, seed=5, assistant_model=assistant, do_sample=do_sample
        )
        assert seen == ["AssistedCandidateGenerator"], seen
    assert torch.equal(outputs[True], outputs[False])
    if not do_sample:
        assert torch.equal(outputs[True], plain)


def test_prompt_lookup(monkeypatch, target):
    ids = torch.tensor([[5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7]])  # repeated n-grams: lookup has something to propose
    plain = target.generate(ids, max_new_tokens=24, do_sample=False)
    outputs = {}
    for hooked in (True, False):
        outputs[hooked], seen = _run(monkeypatch, target, hooked, ids, prompt_lookup_num_tokens=3, do_sample=False)
        assert seen == ["PromptLookupCandidateGenerator"], seen
    assert torch.equal(outputs[True], outputs[False])
    assert torch.equal(outputs[True], plain)


@pytest.mark.parametrize("do_sample", [False, True])
def test_transformers_dflash(monkeypatch, target, do_sample):
    drafter = _tiny_dflash_drafter(target)
    ids = _prompt(seed=2)
    plain = target.generate(ids, max_new_tokens=24, do_sample=False)
    outputs = {}
    for hooked in (True, False):
        outputs[hooked], seen = _run(
            monkeypatch,
            target,
            hooked,
            ids,
            seed=7,
            assistant_model=drafter,
            speculation_type="dflash",
            do_sample=do_sample,
        )
        assert seen == ["DFlashTokenCandidateGenerator"], seen
    assert torch.equal(outputs[True], outputs[False])
    if not do_sample:
        assert torch.equal(outputs[True], plain)


def test_dlite_is_routed_only_through_the_hook(monkeypatch, target):
    drafter = make_drafter(target, seed=33)
    ids = _prompt(seed=3)
    out, seen = _run(monkeypatch, target, True, ids, assistant_model=drafter, do_sample=False)
    assert seen == ["DLiteCandidateGenerator"]
    assert torch.equal(out, target.generate(ids, max_new_tokens=24, do_sample=False))
    # without the hook transformers would treat the drafter as an ordinary assistant model and fail
    with pytest.raises((AttributeError, TypeError, ValueError, RuntimeError)):  # no generation_config, no LM
        _run(monkeypatch, target, False, ids, assistant_model=drafter, do_sample=False)


def test_install_generate_hook_is_idempotent(monkeypatch):
    install_generate_hook()
    install_generate_hook()
    assert GenerationMixin._get_candidate_generator is HOOKED
    assert HOOKED._dlite_original is ORIGINAL and not getattr(ORIGINAL, "_dlite_hook", False)

    # from a clean transformers: one install wraps once, further installs (any copy of the code) do nothing
    monkeypatch.setattr(GenerationMixin, _HOOKED_METHOD, ORIGINAL)
    install_generate_hook()
    fresh = GenerationMixin._get_candidate_generator
    assert fresh is not ORIGINAL and fresh._dlite_hook and fresh._dlite_original is ORIGINAL
    install_generate_hook()
    import dlite_hf.modeling.modeling_dlite  # noqa: F401 - importing the model code installs it too

    assert GenerationMixin._get_candidate_generator is fresh


@pytest.mark.parametrize("method", ["dlite", "hybrid"])
def test_assisted_decoding_on_a_prefilled_cache_equals_a_fresh_call(fitted_pair, method):
    """A multi-turn prefix cache: `generate(full_ids, past_key_values=cache)` with the previous turn in the cache.
    transformers' assisted loop would run its first forward over all of `full_ids` on top of the cache; the wrapper
    keeps only the uncached tokens there (as plain decoding's prefill does), for calls with a DLite assistant."""
    from transformers import DynamicCache

    target, drafter, prompts, _, _ = fitted_pair
    kwargs = {
        "dlite": {"assistant_model": drafter},
        "hybrid": {"assistant_model": drafter, "prompt_lookup_num_tokens": 16},
    }[method]
    greedy = {"do_sample": False, "max_new_tokens": 16}
    first = prompts[:1]
    cache = DynamicCache(config=target.config)
    # generate()'s spelling: `cache` from transformers 5.24 (the forward's name), `past_key_values` before
    key = "cache" if "cache" in inspect.signature(type(target).forward).parameters else "past_key_values"
    turn1 = target.generate(first, attention_mask=torch.ones_like(first), **{key: cache}, **greedy, **kwargs)
    assert cache.get_seq_length() == turn1.shape[1] - 1
    turn2_ids = torch.cat([turn1, turn1[:, -12:], prompts[1:2, :6]], dim=1)  # a reply, then a repeat: lookup pays
    fresh = target.generate(turn2_ids, attention_mask=torch.ones_like(turn2_ids), **greedy, **kwargs)
    reused = target.generate(turn2_ids, attention_mask=torch.ones_like(turn2_ids), **{key: cache}, **greedy, **kwargs)
    assert torch.equal(fresh, reused)
    assert cache.get_seq_length() == reused.shape[1] - 1  # the prefix was not processed twice
    assert "prepare_inputs_for_generation" not in target.__dict__  # the shadow lives for the call only
    plain = target.generate(turn2_ids, attention_mask=torch.ones_like(turn2_ids), **greedy)
    assert torch.equal(plain, reused)


def test_a_cache_as_long_as_the_input_is_refused_with_what_to_pass(fitted_pair):
    """Only the new tokens as input_ids on a pre-filled cache: a clear error, not a forward over the wrong ids."""
    from transformers import DynamicCache

    target, drafter, prompts, _, _ = fitted_pair
    key = "cache" if "cache" in inspect.signature(type(target).forward).parameters else "past_key_values"
    cache = DynamicCache(config=target.config)
    ids = prompts[:1]
    turn1 = target.generate(ids, **{key: cache}, do_sample=False, max_new_tokens=8, assistant_model=drafter)
    new_only = turn1[:, -3:]
    with pytest.raises(ValueError, match=r"input_ids of 3 tokens and a cache that already holds 13: .*whole sequence"):
        target.generate(new_only, **{key: cache}, do_sample=False, max_new_tokens=4, assistant_model=drafter)
    assert "prepare_inputs_for_generation" not in target.__dict__  # removed although the call raised
