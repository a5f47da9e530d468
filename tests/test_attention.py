"""`dlite_hf.attention`: the packed grouped-query SDPA computes what transformers' `sdpa` computes."""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_drafter, make_tiny_target

from dlite_hf import attention
from dlite_hf.defaults import check_attention


@pytest.fixture
def sdpa_and_packed():
    sdpa = make_tiny_target("qwen3", seed=5)  # 4 query heads over 2 key/value heads
    packed = make_tiny_target("qwen3", seed=5)
    attention.use_packed_gqa_attention(packed)
    assert packed.config._attn_implementation == attention.PACKED_GQA_SDPA
    return sdpa, packed


def test_logits_match_sdpa_for_decode_verification_and_prefill(sdpa_and_packed, monkeypatch):
    from transformers.integrations import sdpa_attention

    delegated = []
    honest = sdpa_attention.sdpa_attention_forward
    monkeypatch.setattr(
        sdpa_attention, "sdpa_attention_forward", lambda *a, **k: delegated.append(1) or honest(*a, **k)
    )
    sdpa, packed = sdpa_and_packed
    prompt = torch.randint(1, 128, (1, 40), generator=torch.Generator().manual_seed(0))
    for model in sdpa_and_packed:
        assert model.model.layers[0].self_attn.num_key_value_groups == 2
    with torch.no_grad():
        outputs = [model(prompt, use_cache=True) for model in sdpa_and_packed]
        torch.testing.assert_close(outputs[1].logits, outputs[0].logits, rtol=1e-5, atol=1e-5)  # prefill (q = 40)
        for q in (1, 3, 8):  # a decode step and verification blocks on top of the cache
            new = torch.randint(1, 128, (1, q), generator=torch.Generator().manual_seed(q))
            steps = [model(new, past_key_values=out.past_key_values) for model, out in zip(sdpa_and_packed, outputs)]
            torch.testing.assert_close(steps[1].logits, steps[0].logits, rtol=1e-5, atol=1e-5)
            for out in outputs:
                out.past_key_values.crop(-q)
    assert not delegated  # the short queries (and this 40-token prefill) took the packed path


def test_left_padded_batches_match_sdpa(sdpa_and_packed):
    ids = torch.tensor([[0, 0, 5, 9, 11, 13], [3, 4, 5, 6, 7, 8]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    outs = [m.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False) for m in sdpa_and_packed]
    assert torch.equal(outs[0], outs[1])


def test_greedy_speculation_with_packed_attention_is_token_exact(sdpa_and_packed):
    _, packed = sdpa_and_packed
    drafter = make_drafter(packed, seed=5)
    prompt = torch.tensor([[3, 5, 7, 9, 3, 5, 7, 9, 11]])
    plain = packed.generate(prompt, max_new_tokens=20, do_sample=False)
    for extra in ({}, {"prompt_lookup_num_tokens": 8}):
        fast = packed.generate(prompt, max_new_tokens=20, do_sample=False, assistant_model=drafter, **extra)
        assert torch.equal(fast, plain)
        assert drafter.last_generation_stats.rounds > 0


def test_models_without_grouped_query_attention_use_sdpa_unchanged():
    calls = []
    from transformers.integrations import sdpa_attention

    honest = sdpa_attention.sdpa_attention_forward
    model = make_tiny_target("llama", seed=1)
    model.config.num_key_value_heads = model.config.num_attention_heads  # not used after init: rebuild instead
    dense = type(model)(model.config).eval()
    attention.use_packed_gqa_attention(dense)
    try:
        sdpa_attention.sdpa_attention_forward = lambda *a, **k: calls.append(1) or honest(*a, **k)
        dense(torch.tensor([[1, 2, 3]]))
    finally:
        sdpa_attention.sdpa_attention_forward = honest
    assert len(calls) == dense.config.num_hidden_layers  # every layer delegated to transformers' sdpa


def test_unknown_attention_names_are_refused():
    with pytest.raises(ValueError, match=r"attention='flash' is not a supported attention: expected one of sdpa"):
        check_attention("flash")


def test_real_smollm2_packed_attention_equals_sdpa(smollm2_dir):
    """On the real SmolLM2-135M (9 query heads over 3 key/value heads), float32: the same logits and the same greedy
    tokens with either attention, and the hybrid stays token-exact under the packed one."""
    from dlite_hf import DLiteForSpeculation
    from dlite_hf.assets import load_target
    from dlite_hf.defaults import default_drafter_dir

    sdpa, tokenizer = load_target(smollm2_dir, attention="sdpa")
    packed, _ = load_target(smollm2_dir, attention="packed_gqa")
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "List three uses of a paperclip."}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(packed(ids).logits, sdpa(ids).logits, rtol=1e-4, atol=1e-4)
    plain = sdpa.generate(ids, max_new_tokens=32, do_sample=False)
    assert torch.equal(packed.generate(ids, max_new_tokens=32, do_sample=False), plain)
    drafter = DLiteForSpeculation.from_pretrained(default_drafter_dir()).eval()
    hybrid = {"assistant_model": drafter, "prompt_lookup_num_tokens": 32}
    fast = packed.generate(ids, max_new_tokens=32, do_sample=False, **hybrid)
    assert torch.equal(fast, plain) and drafter.last_generation_stats.rounds > 0
