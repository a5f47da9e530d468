"""The drafting round's head (`draft_step`): the draft vocabulary's lm_head rows fused with `out_proj`, cached until a
weight changes, and the same function as the training head (`head_step`) up to rounding."""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_drafter, make_tiny_target


@pytest.fixture(scope="module")
def target():
    return make_tiny_target("qwen3", seed=11)


def _inputs(drafter, rows: int = 5):
    generator = torch.Generator().manual_seed(4)
    shape = (rows, drafter.config.num_tapped_layers, drafter.config.target_hidden_size)
    context = torch.randn(*shape, generator=generator)
    anchors = torch.randint(1, drafter.config.vocab_size, (rows,), generator=generator)
    block = drafter.encode_block(context, anchors)
    state = drafter.head.init_state(block[:, 0]) if drafter.head is not None else None
    return block[:, 0], anchors, state


def _check_step_matches_training_head(drafter) -> None:
    block, prev, state = _inputs(drafter)
    with torch.no_grad():
        scores, new_state = drafter.draft_step(block, prev, state)
        restrict = drafter.draft_columns() is not None
        expected, _, expected_state = drafter.head_step(block, prev, state, restrict=restrict, compact=restrict)
    columns = drafter.draft_columns()
    assert scores.dtype == torch.float32
    assert scores.shape == (block.shape[0], drafter.config.vocab_size if columns is None else len(columns))
    torch.testing.assert_close(scores, expected, rtol=1e-5, atol=1e-5)
    if state is not None:
        torch.testing.assert_close(new_state, expected_state)
    widened = drafter.expand_draft_logits(scores)
    assert widened.shape == (block.shape[0], drafter.config.vocab_size)
    if columns is not None:
        assert torch.equal(widened[:, columns], scores)
        outside = torch.ones(drafter.config.vocab_size, dtype=torch.bool)
        outside[columns] = False
        assert bool(torch.isneginf(widened[:, outside]).all())


@pytest.mark.parametrize(
    "overrides",
    [
        {"draft_vocab_size": 40},  # out_proj a Linear (32 -> the target's 64), a draft vocabulary
        {},  # the full vocabulary
        {"draft_vocab_size": 40, "use_sequential_head": False},  # the pure parallel ablation
        {"draft_vocab_size": 40, "hidden_size": 64},  # out_proj the identity (the drafter as wide as the target)
    ],
)
def test_draft_step_is_the_training_heads_function(target, overrides):
    drafter = make_drafter(target, seed=5, **overrides).bind_target(target)
    if "hidden_size" in overrides:
        assert isinstance(drafter.out_proj, torch.nn.Identity)
    else:
        assert isinstance(drafter.out_proj, torch.nn.Linear)
    _check_step_matches_training_head(drafter)


def test_the_fused_head_follows_every_change_of_its_weights(target):
    """The fused matrix is cached; a stale one would draft from old weights after an optimizer step, a reload, a new
    draft vocabulary or a new target. Each change below is followed by the same check against `head_step`."""
    drafter = make_drafter(target, seed=6, draft_vocab_size=40).bind_target(target)
    _check_step_matches_training_head(drafter)
    first = drafter._inference_head()[0]
    assert drafter._inference_head()[0] is first  # cached: built once while nothing changes

    with torch.no_grad():  # an in-place update, as an optimizer step makes
        drafter.out_proj.weight.mul_(1.7)
    _check_step_matches_training_head(drafter)

    optimizer = torch.optim.SGD(drafter.parameters(), lr=0.5)  # a real step
    block, prev, state = _inputs(drafter)
    drafter.head_step(block, prev, state, restrict=True, compact=True)[0].square().sum().backward()
    optimizer.step()
    _check_step_matches_training_head(drafter)

    drafter.load_state_dict(make_drafter(target, seed=7, draft_vocab_size=40).state_dict())
    _check_step_matches_training_head(drafter)

    counts = torch.arange(drafter.config.vocab_size, 0, -1).float()  # a different draft vocabulary
    drafter.set_draft_vocab(counts, size=24)
    _check_step_matches_training_head(drafter)

    other = make_tiny_target("qwen3", seed=12)  # a new target: other lm_head rows
    drafter.bind_target(other)
    _check_step_matches_training_head(drafter)

    drafter.to(torch.float64)
    assert drafter._inference_head()[0].dtype == other.lm_head.weight.dtype


def test_a_greedy_round_drafts_the_argmax_of_its_widened_logits(target):
    """Without processors the round picks the argmax among the draft vocabulary's columns; it must be the token the
    widened logits it returns put first (ties to the lowest id, as `argmax` over V does)."""
    drafter = make_drafter(target, seed=8, draft_vocab_size=40).bind_target(target)
    block, anchors, _ = _inputs(drafter, rows=6)
    context = torch.randn(6, drafter.config.num_tapped_layers, drafter.config.target_hidden_size)
    tokens, logits = drafter.draft(context, anchors, confidence_threshold=0.0, skip_threshold=0.0)
    assert tokens.shape == (6, drafter.config.num_draft_tokens)
    assert torch.equal(tokens, logits.argmax(-1))
    assert bool(torch.isin(tokens, drafter.draft_columns()).all())
