"""The drafting round on a draft vocabulary: its head (`draft_step`, the vocabulary's lm_head rows fused with
`out_proj`, cached until a weight changes, the training head's function up to rounding), and a round that stays on
the vocabulary's columns when no processor needs the full one (`rule_distribution`, the same choices and rules)."""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_drafter, make_tiny_target

from dlite_hf.draft_vocab import set_draft_vocab
from dlite_hf.modeling.drafting import rule_distribution


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
    set_draft_vocab(drafter, counts, size=24)
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


def test_rule_distribution_is_the_softmax_on_its_support():
    generator = torch.Generator().manual_seed(2)
    columns = torch.tensor([1, 4, 5, 9])
    logits = torch.full((3, 12), float("-inf"))
    logits[:, columns] = torch.randn(3, 4, generator=generator) * 3
    probs, support = rule_distribution(logits, columns)
    assert torch.equal(support, columns) and probs.shape == (3, 4)
    torch.testing.assert_close(probs, torch.softmax(logits, -1)[:, columns], rtol=0, atol=1e-7)
    torch.testing.assert_close(probs.sum(-1), torch.ones(3))

    logits[1, 0] = 2.0  # a processor gave a token outside the columns a chance: the whole vocabulary then
    probs, support = rule_distribution(logits, columns)
    assert support is None and probs.shape == (3, 12) and float(probs[1, 0]) > 0
    probs, support = rule_distribution(logits, None)  # a drafter without a draft vocabulary
    assert support is None and torch.equal(probs, torch.softmax(logits, -1))


@pytest.mark.parametrize("rules", [(0.0, 0.0), (0.5, 0.0), (0.0, 0.5), (0.3, 0.4)])
def test_a_round_on_the_columns_drafts_what_the_widened_round_drafts(target, rules):
    """Without processors the round stays on the columns; an identity processor makes it widen every step first.
    Both must give the same tokens, the same q and the same per-row lengths, with the rules' thresholds chosen
    between the rows' own probabilities so that rows stop at different counts."""
    drafter = make_drafter(target, seed=9, draft_vocab_size=40).bind_target(target)
    with torch.no_grad():
        drafter.norm.weight.mul_(8.0)  # spread the probabilities over a wide range
    generator = torch.Generator().manual_seed(3)
    context = torch.randn(8, drafter.config.num_tapped_layers, drafter.config.target_hidden_size, generator=generator)
    anchors = torch.randint(1, drafter.config.vocab_size, (8,), generator=generator)
    prefix = anchors[:, None]
    with torch.no_grad():
        tokens, logits = drafter.draft(context, anchors, confidence_threshold=0.0, skip_threshold=0.0)
        top = torch.softmax(logits[:, 0], -1).max(-1).values.sort().values
        between = float(top[3] + top[4]) / 2
        stop, skip = (between if rules[0] else 0.0), (between * rules[1] / 0.5 if rules[1] else 0.0)
        compact = drafter.draft(context, anchors, confidence_threshold=stop, skip_threshold=skip)
        widened = drafter.draft(
            context,
            anchors,
            confidence_threshold=stop,
            skip_threshold=skip,
            logits_processor=lambda ids, scores: scores,
            prefix_ids=prefix,
        )
        assert torch.equal(compact[0], widened[0]) and torch.equal(compact[1], widened[1])
        lengths = drafter.draft_row_lengths(*compact, confidence_threshold=stop, skip_threshold=skip)
        assert lengths == drafter.draft_row_lengths(*widened, confidence_threshold=stop, skip_threshold=skip)
    assert len(set(lengths)) > 1 or rules == (0.0, 0.0)  # the thresholds split the rows
    assert compact[1].shape[-1] == drafter.config.vocab_size
    if rules == (0.0, 0.0):
        assert torch.equal(compact[0], tokens)


def test_row_lengths_follow_the_round_when_a_processor_opens_one_step_beyond_the_columns(target):
    """A processor that gives a token outside the draft columns a chance at the second step only: the round computes
    that step's rules over the vocabulary and every other step over the columns. `row_lengths` must read each position
    back as the round did (its one check over all positions fails, so it decides position by position), and so give
    each row the count it drafts alone."""
    drafter = make_drafter(target, seed=9, draft_vocab_size=40).bind_target(target)
    with torch.no_grad():
        drafter.norm.weight.mul_(8.0)
    others = torch.isin(torch.arange(drafter.config.vocab_size), drafter.draft_columns(), invert=True)
    outside = int(others.nonzero()[0])  # a token outside the draft columns
    generator = torch.Generator().manual_seed(5)
    context = torch.randn(8, drafter.config.num_tapped_layers, drafter.config.target_hidden_size, generator=generator)
    anchors = torch.randint(1, drafter.config.vocab_size, (8,), generator=generator)

    def open_second_step(ids, scores):
        if ids.shape[1] == 2:  # the prefix (one token) and one draft: the second step
            scores = scores.clone()
            scores[:, outside] = scores.max(-1).values - 3.0
        return scores

    def run(rows, **rules):
        return drafter.draft(
            context[rows], anchors[rows], logits_processor=open_second_step, prefix_ids=anchors[rows, None], **rules
        )

    with torch.no_grad():
        tokens, logits = run(slice(None), confidence_threshold=0.0, skip_threshold=0.0)
        assert bool(torch.isfinite(logits[:, 1, outside]).all()) and bool(torch.isneginf(logits[:, 0, outside]).all())
        joint = logits.softmax(-1).gather(-1, tokens[..., None])[..., 0].cumprod(-1)
        ordered = joint[:, 2].sort().values
        rules = {"confidence_threshold": float(ordered[3] + ordered[4]) / 2, "skip_threshold": 0.0}
        tokens, logits = run(slice(None), **rules)
        kept = drafter.draft_row_lengths(tokens, logits, **rules)
        alone = [run(slice(r, r + 1), **rules)[0].shape[1] for r in range(8)]
    assert kept == alone and len(set(kept)) > 1
