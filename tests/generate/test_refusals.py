"""generate() with a DLite drafter refuses what it cannot serve (wrong target, misuse, modes that would ignore
the drafter), with a message that says what was expected, what was received and how to fix it."""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_drafter, make_tiny_target, target_with_hidden, tiny_prompt

FIX_HINT = "A drafter only works with the target it was trained on: load the matching drafter"


# ---------------------------------------------------------------------------------------------------------------------
# wrong target
# ---------------------------------------------------------------------------------------------------------------------

MISMATCHES = {
    "layers": (lambda: make_tiny_target("qwen3", num_layers=6), ["6 layers", "4-layer target", "[0, 2, 3]"]),
    "hidden": (lambda: target_with_hidden(48), ["hidden size 48 (expected 64)"]),
    "vocab": (lambda: make_tiny_target("qwen3", vocab_size=100), ["100 tokens (expected 128)"]),
}


@pytest.mark.parametrize("kind", list(MISMATCHES))
def test_wrong_target_via_bind_target(tiny_pair, kind):
    _, drafter = tiny_pair
    make_other, expected = MISMATCHES[kind]
    with pytest.raises(ValueError) as raised:
        drafter.bind_target(make_other())
    message = str(raised.value)
    for piece in ["trained for tiny", "but the target 'Qwen3ForCausalLM' has", *expected, FIX_HINT, "dlite-hf train"]:
        assert piece in message, (piece, message)
    assert drafter._target_embeddings is None or drafter._target_embeddings[1].out_features == 128  # not rebound


@pytest.mark.parametrize("kind", ["layers", "hidden"])
def test_wrong_target_via_generate(tiny_pair, kind):
    _, drafter = tiny_pair
    make_other, expected = MISMATCHES[kind]
    other = make_other()
    with pytest.raises(ValueError) as raised:
        other.generate(tiny_prompt(), max_new_tokens=3, do_sample=False, assistant_model=drafter)
    message = str(raised.value)
    for piece in ["trained for tiny", *expected, FIX_HINT]:
        assert piece in message, (piece, message)


def test_wrong_vocabulary_via_generate(tiny_pair):
    _, drafter = tiny_pair
    other = make_tiny_target("qwen3", vocab_size=100)
    # transformers' own vocabulary check runs before the candidate generator and asks for two tokenizers ...
    with pytest.raises(ValueError, match="different tokenizers"):
        other.generate(tiny_prompt(100), max_new_tokens=3, do_sample=False, assistant_model=drafter)

    class Tokenizer:  # ... a user who follows that advice must then learn the real problem: the wrong target
        pass

    with pytest.raises(ValueError) as raised:
        other.generate(
            tiny_prompt(100),
            max_new_tokens=3,
            do_sample=False,
            assistant_model=drafter,
            tokenizer=Tokenizer(),
            assistant_tokenizer=Tokenizer(),
        )
    message = str(raised.value)
    assert "100 tokens (expected 128)" in message and FIX_HINT in message, message


def test_tokenizers_with_the_right_target_are_refused(tiny_pair):
    target, drafter = tiny_pair

    class Tokenizer:
        pass

    # same vocabulary: transformers refuses before the hook; either way the tokenizers are refused
    with pytest.raises(ValueError, match="omit `assistant_tokenizer`|Remove `assistant_tokenizer`"):
        target.generate(
            tiny_prompt(),
            max_new_tokens=3,
            do_sample=False,
            assistant_model=drafter,
            tokenizer=Tokenizer(),
            assistant_tokenizer=Tokenizer(),
        )


# ---------------------------------------------------------------------------------------------------------------------
# generate() misuse
# ---------------------------------------------------------------------------------------------------------------------


def test_batch_larger_than_one(tiny_pair):
    target, drafter = tiny_pair
    ids = tiny_prompt(batch=3)
    with pytest.raises(ValueError) as raised:
        target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, assistant_model=drafter)
    message = str(raised.value)
    assert "supports batch size 1" in message and "batch of 3 sequences" in message, message
    assert "once per prompt" in message, message
    assert "DLite" in message  # our message, not a generic one from transformers


def test_prompt_lookup_with_dlite_assistant_must_be_a_valid_cap(tiny_pair):
    target, drafter = (
        tiny_pair  # prompt_lookup_num_tokens beside a DLite drafter is hybrid drafting (tests/generate/test_hybrid.py)
    )
    with pytest.raises(ValueError) as raised:
        target.generate(tiny_prompt(), max_new_tokens=3, assistant_model=drafter, prompt_lookup_num_tokens=-3)
    message = str(raised.value)
    assert "prompt_lookup_num_tokens=-3" in message and "hybrid drafting" in message, message


def test_speculation_type_with_dlite_assistant(tiny_pair):
    target, drafter = tiny_pair
    with pytest.raises(ValueError, match="speculation_type='dflash'"):
        target.generate(tiny_prompt(), max_new_tokens=3, assistant_model=drafter, speculation_type="dflash")


@pytest.mark.parametrize("call", ["forward", "draft", "embed_tokens"])
def test_unbound_drafter(tiny_pair, call):
    target, _ = tiny_pair
    drafter = make_drafter(target, seed=5)  # never bound
    context = torch.zeros(2, drafter.config.num_tapped_layers, 64)
    anchors = torch.zeros(2, dtype=torch.long)
    calls = {
        "forward": lambda: drafter(context, anchors, torch.zeros(2, 7, dtype=torch.long)),
        "draft": lambda: drafter.draft(context, anchors),
        "embed_tokens": lambda: drafter.embed_tokens(anchors),
    }
    with pytest.raises(RuntimeError) as raised:
        calls[call]()
    message = str(raised.value)
    assert "not bound to a target" in message and "drafter.bind_target(target)" in message, message
    assert "assistant_model=drafter" in message


def _forward_hooks(model: torch.nn.Module) -> int:
    return sum(len(module._forward_hooks) for module in model.modules())


def test_a_generate_that_raises_leaves_no_hooks_on_the_target(tiny_pair):
    """The tapped-layer hooks are removed in a `finally`, not when the exception is garbage collected: three failed
    calls in a row, with their exceptions kept alive, leave the target with as many hooks as before."""
    from transformers import LogitsProcessor, LogitsProcessorList

    target, drafter = tiny_pair
    before = _forward_hooks(target)

    class Fails(LogitsProcessor):
        def __call__(self, input_ids, scores):
            raise RuntimeError("a user's logits processor failed")

    kept = []
    for _ in range(3):
        try:
            target.generate(
                tiny_prompt(),
                max_new_tokens=8,
                do_sample=False,
                assistant_model=drafter,
                logits_processor=LogitsProcessorList([Fails()]),
            )
        except RuntimeError as error:
            kept.append(error)  # the traceback holds the generate() frames
        assert _forward_hooks(target) == before
    assert len(kept) == 3
    target.generate(tiny_prompt(), max_new_tokens=4, do_sample=False, assistant_model=drafter)
    assert _forward_hooks(target) == before  # and after a call that succeeded


@pytest.mark.parametrize(
    "options, mode",
    [
        ({"num_beams": 2}, "beam_search"),
        ({"num_beams": 2, "do_sample": True}, "beam_sample"),
        ({"penalty_alpha": 0.6, "top_k": 4}, "contrastive_search"),
    ],
)
def test_a_mode_that_would_ignore_the_drafter_is_refused(tiny_pair, options, mode):
    target, drafter = tiny_pair
    drafter.last_generation_stats = None
    with pytest.raises(ValueError, match=f"drafts for greedy search and sampling only.*select {mode}.*num_beams=1"):
        target.generate(tiny_prompt(), max_new_tokens=4, assistant_model=drafter, **options)
    assert drafter.last_generation_stats is None  # nothing ran
    if "num_beams" in options:  # without the drafter: unchanged (contrastive search needs the Hub in transformers 5)
        assert target.generate(tiny_prompt(), max_new_tokens=4, **options).shape[1] == 9


def test_classifier_free_guidance_is_refused_by_name(tiny_pair):
    """Found by `dlite-hf reliability` (case 49 of seed 0): with guidance_scale the target runs an unconditional
    forward beside each step, and a drafted call ended in an internal error instead of a refusal."""
    target, drafter = tiny_pair
    with pytest.raises(ValueError, match=r"guidance_scale=1.5 \(classifier-free guidance\).*Leave guidance_scale"):
        target.generate(tiny_prompt(), max_new_tokens=4, assistant_model=drafter, guidance_scale=1.5)
    assert target.generate(tiny_prompt(), max_new_tokens=4, guidance_scale=1.5).shape[1] == 9  # plain runs it
    out = target.generate(tiny_prompt(), max_new_tokens=4, assistant_model=drafter, guidance_scale=1.0)
    assert out.shape[1] == 9  # 1.0 is no guidance
