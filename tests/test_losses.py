"""Analytic tests of the DLite losses and acceptance proxies."""

from __future__ import annotations

import math

import pytest
import torch

from dlite_hf.training.losses import (
    expected_acceptance_length,
    one_minus_tv,
    one_minus_tv_on_support,
    position_weights,
    top1_agreement_from_ids,
    weighted_cross_entropy,
    weighted_forward_kl,
    weighted_l1,
    weighted_l1_on_support,
)

N, K, V = 6, 4, 11


def _random_inputs(seed: int = 0, n: int = N, k: int = K, v: int = V):
    gen = torch.Generator().manual_seed(seed)
    p = torch.randn(n, k, v, generator=gen) * 2
    q = torch.randn(n, k, v, generator=gen) * 2
    labels = torch.randint(0, v, (n, k), generator=gen)
    valid = torch.rand(n, k, generator=gen) > 0.3
    valid[0, 0] = True
    valid[-1, -1] = False
    return p, q, labels, valid


def _weights(k: int = K) -> torch.Tensor:
    return position_weights(k, gamma=2.0)


def _divergence_losses():
    return [
        pytest.param(weighted_forward_kl, id="kl"),
        pytest.param(weighted_l1, id="l1"),
    ]


# ---------------------------------------------------------------------------------------------------------------------
# Position weights
# ---------------------------------------------------------------------------------------------------------------------


def test_position_weights_divide_matches_formula():
    w = position_weights(7, gamma=4.0, form="divide")
    expected = torch.tensor([math.exp(-(i - 1) / 4.0) for i in range(1, 8)])
    torch.testing.assert_close(w, expected)
    assert w.dtype == torch.float32 and w[0] == 1.0


def test_position_weights_multiply_matches_formula():
    w = position_weights(7, gamma=4.0, form="multiply")
    expected = torch.tensor([math.exp(-(i - 1) * 4.0) for i in range(1, 8)])
    torch.testing.assert_close(w, expected)
    assert w[1] < 0.02  # the literal formula nearly drops position 2


def test_position_weights_default_is_divide():
    torch.testing.assert_close(position_weights(5), position_weights(5, 4.0, "divide"))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_positions": 0}, "num_positions"),
        ({"num_positions": 3, "gamma": 0.0}, "gamma"),
        ({"num_positions": 3, "gamma": -1.0}, "gamma"),
        ({"num_positions": 3, "gamma": float("inf")}, "gamma"),
        ({"num_positions": 3, "form": "exp"}, "form"),
    ],
)
def test_position_weights_rejects_bad_args(kwargs, field):
    with pytest.raises(ValueError, match=field):
        position_weights(**kwargs)


# ---------------------------------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss_fn", _divergence_losses())
def test_identical_distributions_give_zero(loss_fn):
    p, _, _, valid = _random_inputs()
    loss = loss_fn(p, p.clone(), valid, _weights())
    assert loss.abs().item() < 1e-6


def test_identical_distributions_with_zero_probabilities_give_zero_kl():
    p = torch.randn(2, K, V)
    p[..., :3] = float("-inf")  # p(v) = 0 there: 0 * log 0 must count as 0, not NaN
    loss = weighted_forward_kl(p, p.clone(), torch.ones(2, K, dtype=torch.bool), _weights())
    assert torch.isfinite(loss) and loss.abs().item() < 1e-6


@pytest.mark.parametrize("seed", range(3))
def test_kl_nonnegative_and_l1_bounded_on_random_inputs(seed):
    p, q, _, valid = _random_inputs(seed)
    all_valid = torch.ones_like(valid)
    ones = torch.ones(K)
    assert weighted_forward_kl(p, q, valid, _weights()).item() > 0
    l1 = weighted_l1(p, q, all_valid, ones)  # mean of per-position L1 distances
    assert 0.0 < l1.item() <= 2.0
    # every single position is within bounds too
    for n in range(N):
        for i in range(K):
            one = torch.zeros_like(valid)
            one[n, i] = True
            assert weighted_forward_kl(p, q, one, ones).item() >= 0
            assert 0.0 <= weighted_l1(p, q, one, ones).item() <= 2.0 + 1e-6


def test_l1_of_disjoint_one_hot_distributions_is_two():
    p = torch.full((2, K, V), -1e4)
    q = torch.full((2, K, V), -1e4)
    p[..., 0] = 1e4
    q[..., 1] = 1e4
    loss = weighted_l1(p, q, torch.ones(2, K, dtype=torch.bool), torch.ones(K))
    assert loss.item() == pytest.approx(2.0, abs=1e-5)


def test_kl_matches_hand_computation():
    # one position, two tokens: p = (0.5, 0.5), q = (0.25, 0.75) -> KL = 0.5 ln 2 + 0.5 ln(2/3)
    p = torch.log(torch.tensor([0.5, 0.5])).view(1, 1, 2)
    q = torch.log(torch.tensor([0.25, 0.75])).view(1, 1, 2)
    loss = weighted_forward_kl(p, q, torch.ones(1, 1, dtype=torch.bool), torch.ones(1))
    assert loss.item() == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(2 / 3), rel=1e-5)
    l1 = weighted_l1(p, q, torch.ones(1, 1, dtype=torch.bool), torch.ones(1))
    assert l1.item() == pytest.approx(0.5, rel=1e-5)


def test_cross_entropy_matches_hand_computation():
    # N=1, K=2, V=3. Position 1: logits (0, 0, 0), label 2 -> ln 3. Position 2: logits (ln 1, ln 3, ln 6)
    # i.e. probabilities (0.1, 0.3, 0.6), label 1 -> -ln 0.3.
    q = torch.tensor([[[0.0, 0.0, 0.0], [0.0, math.log(3.0), math.log(6.0)]]])
    labels = torch.tensor([[2, 1]])
    valid = torch.ones(1, 2, dtype=torch.bool)
    weights = torch.tensor([1.0, 0.5])
    loss = weighted_cross_entropy(q, labels, valid, weights)
    expected = (1.0 * math.log(3.0) + 0.5 * -math.log(0.3)) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    # with an explicit normaliser
    loss = weighted_cross_entropy(q, labels, valid, weights, num_items_in_batch=4)
    assert loss.item() == pytest.approx(expected * 2 / 4, rel=1e-6)


def test_weights_scale_each_position():
    p, q, labels, _ = _random_inputs()
    valid = torch.ones(N, K, dtype=torch.bool)
    ones = torch.ones(K)
    w = torch.tensor([1.0, 0.0, 0.0, 0.0])
    per_first = weighted_cross_entropy(q[:, :1], labels[:, :1], valid[:, :1], ones[:1])
    # with weights (1, 0, 0, 0) only position 1 counts, but the normaliser still counts all N*K items
    loss = weighted_cross_entropy(q, labels, valid, w)
    assert loss.item() == pytest.approx(per_first.item() * N / (N * K), rel=1e-5)


def test_empty_valid_gives_zero_loss():
    p, q, labels, _ = _random_inputs()
    none = torch.zeros(N, K, dtype=torch.bool)
    for loss in (
        weighted_cross_entropy(q, labels, none, _weights()),
        weighted_forward_kl(p, q, none, _weights()),
        weighted_l1(p, q, none, _weights()),
    ):
        assert loss.item() == 0.0


# ---------------------------------------------------------------------------------------------------------------------
# Masking and gradients
# ---------------------------------------------------------------------------------------------------------------------


def _loss(name: str, p: torch.Tensor, q: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor, **kwargs):
    if name == "ce":
        return weighted_cross_entropy(q, labels, valid, _weights(), **kwargs)
    if name == "kl":
        return weighted_forward_kl(p, q, valid, _weights(), **kwargs)
    return weighted_l1(p, q, valid, _weights(), **kwargs)


LOSS_NAMES = ["ce", "kl", "l1"]


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_invalid_positions_contribute_nothing(name):
    p, q, labels, valid = _random_inputs()
    q = q.clone().requires_grad_(True)
    loss = _loss(name, p, q, labels, valid, chunk_size=2)
    loss.backward()
    grad = q.grad
    assert (grad[~valid] == 0).all()  # exactly zero
    assert (grad[valid].abs().sum(-1) > 0).all()  # and non-zero where valid

    # change logits, teacher and labels at invalid positions (even to garbage): the loss does not move
    p2, q2, labels2 = p.clone(), q.detach().clone(), labels.clone()
    p2[~valid] = torch.randn_like(p2[~valid]) * 10
    q2[~valid] = float("nan")
    labels2[~valid] = -100
    loss2 = _loss(name, p2, q2, labels2, valid, chunk_size=2)
    assert loss2.item() == pytest.approx(loss.item(), rel=1e-6)


@pytest.mark.parametrize("name", ["kl", "l1"])
def test_gradients_flow_into_student_only(name):
    p, q, labels, valid = _random_inputs()
    p = p.clone().requires_grad_(True)
    q = q.clone().requires_grad_(True)
    _loss(name, p, q, labels, valid).backward()
    assert p.grad is None or (p.grad == 0).all()
    assert q.grad is not None and q.grad.abs().sum() > 0


@pytest.mark.parametrize("name", LOSS_NAMES)
@pytest.mark.parametrize("chunk_size", [1, 2, 4, 5])
def test_chunked_equals_unchunked(name, chunk_size):
    p, q, labels, valid = _random_inputs(3)
    q_a = q.clone().requires_grad_(True)
    q_b = q.clone().requires_grad_(True)
    full = _loss(name, p, q_a, labels, valid, chunk_size=None)
    chunked = _loss(name, p, q_b, labels, valid, chunk_size=chunk_size)
    torch.testing.assert_close(chunked, full)
    full.backward()
    chunked.backward()
    torch.testing.assert_close(q_b.grad, q_a.grad)


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_chunking_keeps_no_full_vocabulary_activation_for_backward(name):
    # Bytes autograd keeps for the backward pass, excluding views of the input logits themselves.
    n, k, v = 16, K, 512
    p, q, labels, valid = _random_inputs(6, n=n, v=v)
    q = q.requires_grad_(True)
    input_storages = {p.untyped_storage().data_ptr(), q.untyped_storage().data_ptr()}

    def saved_bytes(chunk_size: int | None) -> int:
        storages: dict[int, int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            ptr = t.untyped_storage().data_ptr()
            if ptr not in input_storages:
                storages[ptr] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            _loss(name, p, q, labels, valid, chunk_size=chunk_size)
        return sum(storages.values())

    one_chunk = 4 * k * v * 4  # a float32 [4, K, V] tensor
    assert saved_bytes(None) >= n * k * v * 4  # unchunked: full float32 log-probs are kept
    assert saved_bytes(4) < one_chunk  # chunked: recomputed in backward, nothing vocabulary-sized is kept


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_low_precision_logits_are_reduced_in_float32(name):
    p, q, labels, valid = _random_inputs(4)
    loss32 = _loss(name, p, q, labels, valid)
    loss16 = _loss(name, p.bfloat16(), q.bfloat16(), labels, valid)
    assert loss16.dtype == torch.float32
    assert loss16.item() == pytest.approx(loss32.item(), rel=5e-2, abs=1e-3)


@pytest.mark.parametrize("name", LOSS_NAMES)
@pytest.mark.parametrize("as_tensor", [False, True])
def test_gradient_accumulation_with_global_num_items_sums_to_full_batch(name, as_tensor):
    p, q, labels, valid = _random_inputs(5)
    full = _loss(name, p, q, labels, valid)
    total = int(valid.sum())
    num_items = torch.tensor(total) if as_tensor else total
    splits = [(0, 2), (2, 3), (3, 6)]
    parts = [_loss(name, p[a:b], q[a:b], labels[a:b], valid[a:b], num_items_in_batch=num_items) for a, b in splits]
    assert sum(parts).item() == pytest.approx(full.item(), rel=1e-5)
    # without the global count, each micro-batch normalises locally and the sum is not the full-batch loss
    local = sum(_loss(name, p[a:b], q[a:b], labels[a:b], valid[a:b]) for a, b in splits)
    assert local.item() != pytest.approx(full.item(), rel=1e-3)


def test_shape_mismatch_raises():
    p, q, labels, valid = _random_inputs()
    with pytest.raises(ValueError, match="weights"):
        weighted_forward_kl(p, q, valid, torch.ones(K + 1))
    with pytest.raises(ValueError, match="p_logits"):
        weighted_l1(p[:, :, :-1], q, valid, _weights())
    with pytest.raises(ValueError, match="valid"):
        weighted_cross_entropy(q, labels, valid.long(), _weights())
    with pytest.raises(ValueError, match="chunk_size"):
        weighted_cross_entropy(q, labels, valid, _weights(), chunk_size=0)


# ---------------------------------------------------------------------------------------------------------------------
# The draft-vocabulary (support) forms: same values, computed on the support only
# ---------------------------------------------------------------------------------------------------------------------


def _on_support(p: torch.Tensor, q: torch.Tensor, support: torch.Tensor):
    """Full-vocabulary pair (q is -inf off the support) and its compact form (p's full log-probs on the support)."""
    q_full = torch.full_like(q, float("-inf"))
    q_full[..., support] = q[..., support]
    p_log_probs = p.log_softmax(dim=-1)[..., support]
    return q_full, p_log_probs, q[..., support]


@pytest.mark.parametrize("chunk_size", [None, 2])
def test_l1_on_support_equals_full_vocabulary_l1(chunk_size):
    p, q, _, valid = _random_inputs(seed=3)
    support = torch.tensor([0, 2, 3, 7, 10])
    q_full, p_log_probs, q_sub = _on_support(p, q, support)
    expected = weighted_l1(p, q_full, valid, _weights())
    got = weighted_l1_on_support(p_log_probs, q_sub, valid, _weights(), chunk_size=chunk_size)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(
        one_minus_tv_on_support(p_log_probs, q_sub, valid, chunk_size), one_minus_tv(p, q_full, valid)
    )


def test_l1_on_support_hand_example_and_bounds():
    # p = (0.5, 0.25, 0.25) over V=3, support {0, 1}, q = (0.5, 0.5) on it: |0| + |0.25| + 0.25 outside = 0.5
    p_log_probs = torch.log(torch.tensor([0.5, 0.25])).view(1, 1, 2)
    q = torch.zeros(1, 1, 2)
    valid = torch.ones(1, 1, dtype=torch.bool)
    torch.testing.assert_close(weighted_l1_on_support(p_log_probs, q, valid, torch.ones(1)), torch.tensor(0.5))
    # p entirely on the support and q = p: zero; p entirely off the support: the maximum, 2
    p_on = torch.log(torch.tensor([0.25, 0.75])).view(1, 1, 2)
    torch.testing.assert_close(weighted_l1_on_support(p_on, p_on.clone(), valid, torch.ones(1)), torch.tensor(0.0))
    p_off = torch.full((1, 1, 2), -30.0)
    torch.testing.assert_close(weighted_l1_on_support(p_off, q, valid, torch.ones(1)), torch.tensor(2.0))


def test_l1_on_support_gradient_matches_full_vocabulary():
    p, q, _, valid = _random_inputs(seed=4)
    support = torch.tensor([1, 4, 5, 6])
    q_sub = q[..., support].clone().requires_grad_(True)
    q_full = torch.full_like(q, -1e9).index_copy(-1, support, q_sub)
    weighted_l1(p, q_full, valid, _weights()).backward()
    expected = q_sub.grad.clone()
    q_sub.grad = None
    weighted_l1_on_support(p.log_softmax(-1)[..., support], q_sub, valid, _weights()).backward()
    torch.testing.assert_close(q_sub.grad, expected)


def test_top1_agreement_from_ids_matches_hand_count():
    p, q, _, valid = _random_inputs(seed=5)
    expected = ((p.argmax(-1) == q.argmax(-1)) & valid).sum(0) / valid.sum(0)  # agreeing valid blocks / valid blocks
    agreement = top1_agreement_from_ids(p.argmax(-1), q.argmax(-1), valid)
    torch.testing.assert_close(agreement, expected.float(), equal_nan=True)
    with pytest.raises(ValueError, match="must all be"):
        top1_agreement_from_ids(p.argmax(-1)[:, :1], q.argmax(-1), valid)


# ---------------------------------------------------------------------------------------------------------------------
# Acceptance proxies
# ---------------------------------------------------------------------------------------------------------------------


def test_proxies_are_one_for_identical_distributions():
    p, _, _, valid = _random_inputs()
    torch.testing.assert_close(top1_agreement_from_ids(p.argmax(-1), p.argmax(-1), valid), torch.ones(K))
    torch.testing.assert_close(one_minus_tv(p, p.clone(), valid, chunk_size=2), torch.ones(K))


def test_proxies_on_hand_example():
    # V=2, K=2, N=2. Block 0: p=(0.5,0.5) vs q=(0.25,0.75) at both positions; block 1 identical at both.
    half = torch.log(torch.tensor([0.5, 0.5]))
    skew = torch.log(torch.tensor([0.25, 0.75]))
    flip = torch.log(torch.tensor([0.75, 0.25]))
    p = torch.stack([torch.stack([flip, flip]), torch.stack([half, flip])])
    q = torch.stack([torch.stack([skew, flip]), torch.stack([half, flip])])
    valid = torch.tensor([[True, True], [True, False]])
    # position 1: block 0 disagrees (argmax 0 vs 1), block 1 agrees -> 0.5; position 2: only block 0, agrees -> 1
    torch.testing.assert_close(top1_agreement_from_ids(p.argmax(-1), q.argmax(-1), valid), torch.tensor([0.5, 1.0]))
    # position 1: block 0 has 1 - 0.5*(0.5+0.5) = 0.5, block 1 has 1 -> 0.75; position 2: 1
    torch.testing.assert_close(one_minus_tv(p, q, valid), torch.tensor([0.75, 1.0]))


def test_proxies_nan_where_no_valid_block():
    p, q, _, _ = _random_inputs()
    valid = torch.ones(N, K, dtype=torch.bool)
    valid[:, -1] = False
    agreement = top1_agreement_from_ids(p.argmax(-1), q.argmax(-1), valid)
    assert torch.isnan(agreement[-1]) and not torch.isnan(agreement[:-1]).any()
    assert math.isnan(expected_acceptance_length(agreement))


@pytest.mark.parametrize("k", [1, 4, 7])
def test_expected_acceptance_length_extremes(k):
    assert expected_acceptance_length([1.0] * k) == pytest.approx(k + 1)
    assert expected_acceptance_length([0.0] * k) == pytest.approx(1.0)
    assert expected_acceptance_length(torch.ones(k)) == pytest.approx(k + 1)


def test_expected_acceptance_length_hand_value():
    # 1 + 0.5 + 0.5*0.5 + 0.5*0.5*1.0
    assert expected_acceptance_length([0.5, 0.5, 1.0]) == pytest.approx(2.0)
    # a rejection stops the block: later rates do not count
    assert expected_acceptance_length([0.8, 0.0, 1.0, 1.0]) == pytest.approx(1.8)


@pytest.mark.parametrize("bad", [[], [1.5], [-0.1, 0.5], [[0.5]]])
def test_expected_acceptance_length_rejects_bad_rates(bad):
    with pytest.raises(ValueError, match="per_position_accept"):
        expected_acceptance_length(bad)
