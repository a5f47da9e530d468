"""The drafter's linear layers on prepacked weights (`modeling/packed_linear.py`): the same bits as `nn.Linear` in
bfloat16 inference on a CPU, repacked when a weight changes, and `nn.Linear` itself everywhere else."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from tiny_models import make_drafter, make_tiny_target
from torch import nn

from dlite_hf.modeling import packed_linear
from dlite_hf.modeling.drafting import DraftRules, draft_tokens
from dlite_hf.modeling.packed_linear import PackedLinear, PackedWeight, pack_linears

needs_packing = pytest.mark.skipif(
    not packed_linear.packing_supported(), reason="this torch or CPU has no oneDNN bfloat16 weight packing"
)


def _layer(bias: bool = True, dtype=torch.bfloat16) -> tuple[nn.Linear, PackedLinear]:
    torch.manual_seed(0)
    plain = nn.Linear(96, 160, bias=bias).to(dtype)
    holder = nn.Sequential(plain)
    pack_linears(holder)
    return plain, holder[0]


@needs_packing
@pytest.mark.parametrize("bias", [True, False])
def test_the_same_bits_as_nn_linear(bias):
    plain, packed = _layer(bias)
    assert packed.weight is plain.weight and packed.bias is plain.bias  # shared, not copied
    with torch.no_grad():
        for shape in [(1, 96), (7, 96), (14, 96), (1, 14, 96), (3, 5, 96)]:
            inputs = torch.randn(shape).to(torch.bfloat16)
            assert torch.equal(packed(inputs), plain(inputs)), shape
    assert packed._packing.packed is not None  # the packed path ran


@needs_packing
def test_a_changed_weight_is_repacked(monkeypatch):
    plain, packed = _layer()
    inputs = torch.randn(4, 96).to(torch.bfloat16)
    with torch.no_grad():
        packed(inputs)
        first = packed._packing.packed
        packed(inputs)
        assert packed._packing.packed is first  # packed once
        plain.weight.mul_(2)  # written in place (an optimizer step, load_state_dict)
        assert torch.equal(packed(inputs), plain(inputs))
        assert packed._packing.packed is not first
        plain.load_state_dict({"weight": torch.randn(160, 96), "bias": torch.randn(160)})
        assert torch.equal(packed(inputs), plain(inputs))
        packed.weight = nn.Parameter(torch.randn(160, 96).to(torch.bfloat16))  # another tensor
        assert torch.equal(packed(inputs), nn.functional.linear(inputs, packed.weight, packed.bias))
    with torch.inference_mode():  # weights made in inference mode (as an engine may load them) keep no version
        made = nn.Linear(96, 8).to(torch.bfloat16)
        holder = nn.Sequential(made)
        pack_linears(holder)
        assert torch.equal(holder[0](inputs), made(inputs))


def test_nn_linear_outside_bfloat16_inference():
    """Training (gradients flow), float32 and a float32 input: the plain product, nothing packed."""
    plain, packed = _layer()
    inputs = torch.randn(4, 96).to(torch.bfloat16)
    out = packed(inputs)  # grad enabled
    out.float().sum().backward()
    assert plain.weight.grad is not None and packed._packing.packed is None
    plain32, packed32 = _layer(dtype=torch.float32)
    with torch.no_grad():
        inputs32 = torch.randn(4, 96)
        assert torch.equal(packed32(inputs32), plain32(inputs32))
    assert packed32._packing.packed is None


def test_the_drafter_packs_its_own_linears_only():
    target = make_tiny_target("qwen3", seed=1)
    drafter = make_drafter(target, seed=1)
    linears = [m for m in drafter.modules() if isinstance(m, nn.Linear)]
    assert linears and all(type(m) is PackedLinear for m in linears)
    assert all(type(m) is nn.Linear for m in target.modules() if isinstance(m, nn.Linear))  # the target untouched
    names = {name for name, _ in drafter.named_parameters()}
    reloaded = make_drafter(target, seed=2)
    reloaded.load_state_dict(drafter.state_dict())  # nn.Linear's keys
    assert {name for name, _ in reloaded.named_parameters()} == names
    assert copy.deepcopy(drafter) is not drafter and pickle.loads(pickle.dumps(PackedWeight())).packed is None
    module = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 3)))
    pack_linears(module)
    assert [type(m) for m in module.modules() if isinstance(m, nn.Linear)] == [PackedLinear, PackedLinear]
    assert isinstance(copy.deepcopy(module)[0]._packing, PackedWeight)


@needs_packing
def test_a_bfloat16_round_drafts_what_nn_linear_drafts(monkeypatch):
    """A whole drafting round in bfloat16 (backbone and head on packed weights) equals the round with every layer's
    plain product: the same drafts and the same logits, bit for bit."""
    target = make_tiny_target("qwen3", seed=5).to(torch.bfloat16)
    drafter = make_drafter(target, seed=5).to(torch.bfloat16).bind_target(target)
    generator = torch.Generator().manual_seed(0)
    context = torch.randn(2, drafter.config.num_tapped_layers, drafter.config.target_hidden_size, generator=generator)
    anchors = torch.randint(1, drafter.config.vocab_size, (2,), generator=generator)
    k = drafter.config.num_draft_tokens
    tokens, logits = draft_tokens(drafter, context.to(torch.bfloat16), anchors, k, DraftRules())
    layer = drafter.layers[0]
    assert layer.mlp.up_proj._packing.packed is not None and layer.self_attn.q_proj._packing.packed is not None
    assert drafter._head_packing.packed is not None
    monkeypatch.setattr(packed_linear, "packing_supported", lambda: False)
    plain_tokens, plain_logits = draft_tokens(drafter, context.to(torch.bfloat16), anchors, k, DraftRules())
    assert torch.equal(tokens, plain_tokens) and torch.equal(logits, plain_logits)


def test_packing_a_target_is_checked_and_changes_no_output():
    """`dlite_hf.pack_linears(target, check=True)`: refused (saying why) where no layer would take the packed path;
    on a bfloat16 target, plain and DLite greedy outputs are those of the unpacked target."""
    import dlite_hf

    float32_target = make_tiny_target("qwen3", seed=7)
    with pytest.raises(ValueError, match=r"bfloat16 on a CPU .* got weights \['torch.float32 on cpu'\]"):
        dlite_hf.pack_linears(float32_target, check=True)
    if not packed_linear.packing_supported():
        pytest.skip("this torch or CPU has no oneDNN bfloat16 weight packing")
    target = make_tiny_target("qwen3", seed=7).to(torch.bfloat16).eval()
    drafter = make_drafter(target, seed=7).to(torch.bfloat16)
    prompt = torch.randint(1, 128, (1, 6), generator=torch.Generator().manual_seed(3))
    plain = target.generate(prompt, max_new_tokens=24, do_sample=False)
    fast = target.generate(prompt, max_new_tokens=24, do_sample=False, assistant_model=drafter)
    assert dlite_hf.pack_linears(target, check=True) is target
    assert all(type(m) is PackedLinear for m in target.modules() if isinstance(m, nn.Linear))
    assert torch.equal(target.generate(prompt, max_new_tokens=24, do_sample=False), plain)
    assert torch.equal(target.generate(prompt, max_new_tokens=24, do_sample=False, assistant_model=drafter), fast)
    assert target.lm_head._packing.packed is not None  # the packed path ran
