"""The plugin's round on a tiny seeded drafter, without an engine: the rows it reads, its drafts against
`DLiteForSpeculation.draft` for the same states, its q, and the target modules it borrows."""

from __future__ import annotations

import pytest
import torch
from conftest import TINY_HIDDEN, TINY_VOCAB, FakeVLLMTarget, fake_vllm_config, make_tiny_drafter_folder
from dlite_hf_vllm.compat import DLiteVLLMError
from dlite_hf_vllm.proposer import DLiteProposer, StepInputs, TargetView, TemperatureScale, draft_batch, newest_rows


def test_newest_rows_reads_the_last_committed_position_of_each_request():
    # request 0: prefill of 5 rows; 1: decode with 3 drafts, 2 accepted (3 sampled); 2: partial prefill (nothing
    # sampled); 3: decode with 3 drafts, none accepted (1 sampled); 4: decode with 2 drafts, all accepted
    starts = [0, 5, 9, 20, 24, 27]
    drafts = [0, 3, 0, 3, 2]
    sampled = [[7], [1, 2, 3], [], [4], [5, 6, 7]]
    assert newest_rows(starts, drafts, sampled) == [4, 7, -1, 20, 26]
    assert newest_rows([0, 3, 4], None, [[1], [2]]) == [2, 3]  # no spec-decode metadata: every request prefilled
    with pytest.raises(RuntimeError, match="sampled 3 tokens after 1 draft"):
        newest_rows([0, 2], [1], [[1, 2, 3]])


@pytest.fixture(scope="module")
def proposer(tiny_folder):
    proposer = DLiteProposer(fake_vllm_config(tiny_folder))
    proposer.load_model(FakeVLLMTarget())
    return proposer


def _states(rows: int, layers: int, seed: int = 1) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.randn(rows, layers, TINY_HIDDEN)


def test_greedy_drafts_equal_the_drafters_own(proposer):
    drafter = proposer.drafter
    states, anchors = _states(5, 3), torch.tensor([3, 9, 27, 100, 5])
    tokens, probs = draft_batch(drafter, states, anchors, 4)
    expected, _ = drafter.draft(states, anchors, 4)
    assert probs is None and tokens == expected.tolist() and all(len(t) == 4 for t in tokens)


def test_sampled_drafts_follow_the_drafters_distribution_at_the_temperature(proposer):
    drafter = proposer.drafter
    states, anchors = _states(4, 3, seed=2), torch.tensor([1, 2, 3, 4])
    temperatures = torch.tensor([0.7, 1.0, 1.3, 0.5])
    torch.manual_seed(5)
    tokens, probs = draft_batch(drafter, states, anchors, 4, temperatures)
    torch.manual_seed(5)
    expected, logits = drafter.draft(
        states,
        anchors,
        4,
        do_sample=True,
        logits_processor=TemperatureScale(temperatures),
        prefix_ids=anchors[:, None],
    )
    assert tokens == expected.tolist()
    torch.testing.assert_close(probs, torch.softmax(logits, -1))
    # the first position's q depends on the anchor only: the drafter's own logits, divided by T
    plain = drafter.draft(
        states, anchors, 1, do_sample=True, logits_processor=lambda seen, x: x, prefix_ids=anchors[:, None]
    )
    torch.testing.assert_close(probs[:, 0], torch.softmax(plain[1][:, 0] / temperatures[:, None], -1))
    assert torch.allclose(probs.sum(-1), torch.ones(4, 4))


def test_each_request_proposes_what_it_would_alone_under_the_drafters_rules(proposer, monkeypatch):
    """With a confidence stop in the drafter's config, a batch runs until every row is unsure; each request keeps
    only its own drafts (those it would draft alone), greedy and sampled."""
    drafter = proposer.drafter
    states, anchors = _states(6, 3, seed=7), torch.tensor([5, 8, 13, 21, 34, 55])
    tokens, logits = drafter.draft(states, anchors, 4)
    joint = logits.softmax(-1).gather(-1, tokens[..., None])[..., 0].cumprod(1)
    monkeypatch.setattr(drafter.config, "draft_confidence_threshold", float(joint[:, 1].median()))
    greedy, _ = draft_batch(drafter, states, anchors, 4)
    alone = [drafter.draft(states[r : r + 1], anchors[r : r + 1], 4)[0][0].tolist() for r in range(6)]
    assert greedy == alone and len({len(d) for d in greedy}) > 1
    temperatures = torch.full((6,), 0.9)
    torch.manual_seed(3)
    sampled, probs = draft_batch(drafter, states, anchors, 4, temperatures)
    torch.manual_seed(3)
    scale = TemperatureScale(temperatures)
    batch, batch_logits = drafter.draft(
        states, anchors, 4, do_sample=True, logits_processor=scale, prefix_ids=anchors[:, None]
    )
    kept = drafter.draft_row_lengths(batch, batch_logits)
    assert sampled == [batch[r, : kept[r]].tolist() for r in range(6)]
    assert probs.shape == (6, 4, TINY_VOCAB)  # q for every drafted position (vLLM reads the first len(draft))


def test_a_mixed_batch_drafts_greedy_rows_as_alone_and_gives_them_one_hot_q(proposer):
    drafter = proposer.drafter
    states, anchors = _states(4, 3, seed=3), torch.tensor([11, 12, 13, 14])
    temperatures = torch.tensor([0.0, 0.8, 0.0, 1.2])
    tokens, probs = draft_batch(drafter, states, anchors, 4, temperatures)
    greedy, _ = drafter.draft(states[[0, 2]], anchors[[0, 2]], 4)
    assert [tokens[0], tokens[2]] == greedy.tolist()
    for row in (0, 2):
        assert probs[row].max(-1).values.tolist() == [1.0] * 4
        assert probs[row].argmax(-1).tolist() == tokens[row]
    assert probs.shape == (4, 4, TINY_VOCAB)


def test_the_proposer_reads_each_requests_row_of_the_tapped_layers(proposer):
    """The plugin's drafts for a vLLM batch equal `DLiteForSpeculation.draft` on the states of the rows it should
    read: vLLM's auxiliary state i + 1 is the output of layer i, the layer DLite taps."""
    assert proposer.aux_layers == (1, 2, 4)  # target_layer_ids [0, 1, 3], shifted by one
    torch.manual_seed(4)
    aux = [torch.randn(12, TINY_HIDDEN) for _ in proposer.aux_layers]
    starts, drafts, sampled = [0, 6, 10, 12], [0, 3, 1], [[21], [5, 6], [7, 8]]
    proposer.stage(StepInputs(aux, starts, drafts, None, ["a", "b", "c"]))
    out = proposer.propose(sampled, [8, 20, 30], None)
    rows = [5, 7, 11]
    states = torch.stack([aux[j][rows] for j in range(3)], 1)
    expected, _ = proposer.drafter.draft(states, torch.tensor([21, 6, 8]), 4)
    assert out == expected.tolist()
    assert proposer.take_probs() is None  # greedy: no q for the rejection sampler


def test_the_proposer_skips_requests_without_tokens_and_respects_max_model_len(tiny_folder):
    proposer = DLiteProposer(fake_vllm_config(tiny_folder, max_model_len=32))
    proposer.load_model(FakeVLLMTarget())
    aux = [torch.randn(8, TINY_HIDDEN) for _ in proposer.aux_layers]
    proposer.stage(StepInputs(aux, [0, 4, 8], [0, 0], torch.tensor([0.0, 0.9]), ["a", "b"]))
    out = proposer.propose([[], [3]], [10, 30], None)
    assert out[0] == [] and len(out[1]) == 2  # 32 - 30 tokens of room
    probs = proposer.take_probs()
    assert probs.shape == (2, 4, TINY_VOCAB) and probs[0].abs().sum() == 0
    # max_tokens: a request with r tokens left gets at most r - 1 drafts (the round adds the target's own token)
    proposer.stage(StepInputs(aux, [0, 4, 8], [0, 0], None, ["a", "b"], remaining=[1, 3]))
    assert [len(d) for d in proposer.propose([[3], [3]], [10, 10], None)] == [0, 2]


def test_the_proposer_follows_vllms_batch_size_schedule(proposer, monkeypatch):
    """`num_speculative_tokens_per_batch_size`: the step's scheduled draft length caps the drafts (the same core
    call with that K), and 0 turns the drafter off for the step: it is not even run."""
    torch.manual_seed(5)
    aux = [torch.randn(6, TINY_HIDDEN) for _ in proposer.aux_layers]
    states = torch.stack([aux[j][[2, 5]] for j in range(3)], 1)
    proposer.stage(StepInputs(aux, [0, 3, 6], [0, 0], None, ["a", "b"], scheduled_tokens=2))
    out = proposer.propose([[9], [4]], [8, 8], None)
    expected, _ = proposer.drafter.draft(states, torch.tensor([9, 4]), 2)
    assert out == expected.tolist() and max(len(d) for d in out) <= 2
    proposer.stage(StepInputs(aux, [0, 3, 6], [0, 0], None, ["a", "b"], scheduled_tokens=9))  # above K: K
    full, _ = proposer.drafter.draft(states, torch.tensor([9, 4]), proposer.num_tokens)
    assert proposer.propose([[9], [4]], [8, 8], None) == full.tolist()

    def refuse(*args, **kwargs):
        raise AssertionError("the drafter ran on a step scheduled with no draft tokens")

    monkeypatch.setattr(proposer.drafter, "draft", refuse)
    proposer.stage(StepInputs(aux, [0, 3, 6], [0, 0], None, ["a", "b"], scheduled_tokens=0))
    assert proposer.propose([[9], [4]], [8, 8], None) == [[], []]


def test_the_hybrid_retrieves_repeats_and_drafts_the_rest(tiny_folder):
    """prompt_lookup_max=8 beside a K=4 drafter: a request whose suffix occurred before gets what followed it
    (the core's rule: up to ceil(2.0 x match) tokens), with a one-hot q; another gets the drafter's block, as
    `DLiteForSpeculation.draft` makes it; each request's index follows its tokens and leaves with it."""
    import numpy as np

    hybrid = DLiteProposer(fake_vllm_config(tiny_folder, num_tokens=8, lookup=(8, 2)))
    hybrid.load_model(FakeVLLMTarget())
    assert hybrid.drafter_tokens == 4 and hybrid.rule.min_match == 2
    assert hybrid.rule.length_factor == hybrid.drafter.config.lookup_length_factor
    tokens = np.zeros((2, 32), dtype=np.int32)
    tokens[0, :8] = [5, 6, 7, 8, 9, 5, 6, 7]  # "5 6 7" occurred before, followed by "8 9 5 6 7"
    tokens[1, :4] = [1, 2, 3, 4]
    torch.manual_seed(6)
    aux = [torch.randn(4, TINY_HIDDEN) for _ in hybrid.aux_layers]
    hybrid.stage(StepInputs(aux, [0, 2, 4], [0, 0], None, ["a", "b"]))
    out = hybrid.propose([[7], [4]], [8, 4], tokens)
    states = torch.stack([aux[j][[3]] for j in range(3)], 1)
    expected, _ = hybrid.drafter.draft(states, torch.tensor([4]), 4)
    assert out == [[8, 9, 5, 6, 7], expected.tolist()[0]]
    # sampled: the retrieved draft's q is one-hot, the drafted one is the drafter's distribution
    hybrid.stage(StepInputs(aux, [0, 2, 4], [0, 0], torch.tensor([0.9, 0.9]), ["a", "b"]))
    out = hybrid.propose([[7], [4]], [8, 4], tokens)
    probs = hybrid.take_probs()
    assert out[0] == [8, 9, 5, 6, 7] and probs.shape == (2, 8, TINY_VOCAB)
    assert probs[0, :5].argmax(-1).tolist() == out[0] and bool((probs[0, :5].max(-1).values == 1).all())
    assert probs[0, 5:].abs().sum() == 0
    assert torch.allclose(probs[1, : len(out[1])].sum(-1), torch.ones(len(out[1])))
    # the next step: request a grew by two tokens (its index is extended, not rebuilt); b left the batch
    tokens[0, 8:10] = [8, 9]
    index_a = hybrid._indexes["a"][0]
    hybrid.stage(StepInputs(aux[:], [0, 2], [0], None, ["a"]))
    assert hybrid.propose([[9]], [10], tokens) == [[5, 6, 7, 8, 9]]
    assert hybrid._indexes["a"][0] is index_a and set(hybrid._indexes) == {"a"}
    # a new request that reuses the id "a" (the old one finished) starts an index of its own
    tokens[0, :12] = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4]
    hybrid.stage(StepInputs(aux, [0, 2], [0], None, ["a"], new_req_ids=frozenset({"a"})))
    assert hybrid.propose([[4]], [12], tokens) == [[1, 2, 3, 4]]
    assert hybrid._indexes["a"][0] is not index_a


def test_propose_without_the_runner_hook_is_a_clear_error(proposer):
    with pytest.raises(DLiteVLLMError, match="runner hook is not installed"):
        proposer.propose([[1]], [3], None)


def test_target_view_shares_the_targets_storage_and_drops_vllms_padding_rows():
    from conftest import tiny_hf_config

    target = FakeVLLMTarget(padding=64)
    view = TargetView(target, tiny_hf_config())
    assert view.get_input_embeddings().weight.data_ptr() == target.model.embed_tokens.weight.data_ptr()
    assert view.get_output_embeddings().weight.data_ptr() == target.lm_head.weight.data_ptr()
    assert view.get_output_embeddings().weight.shape == (TINY_VOCAB, TINY_HIDDEN)
    shard = FakeVLLMTarget()
    shard.lm_head = torch.nn.Linear(TINY_HIDDEN, TINY_VOCAB // 2, bias=False)  # a tensor-parallel shard
    with pytest.raises(DLiteVLLMError, match="tensor_parallel_size=1"):
        TargetView(shard, tiny_hf_config())


def test_a_drafter_with_adaptive_rules_keeps_them_in_the_engine(tmp_path):
    """The core's rules (confidence stop at draft_lengths, skip) run unchanged inside the plugin."""
    folder = make_tiny_drafter_folder(tmp_path / "rules", draft_skip_threshold=0.99, draft_confidence_threshold=0.5)
    proposer = DLiteProposer(fake_vllm_config(folder))
    proposer.load_model(FakeVLLMTarget())
    states, anchors = _states(3, 3), torch.tensor([1, 2, 3])
    tokens, _ = draft_batch(proposer.drafter, states, anchors, 4)
    expected, _ = proposer.drafter.draft(states, anchors, 4)
    assert tokens == expected.tolist() == [[], [], []]  # a random drafter is never 99% sure: every round skips
