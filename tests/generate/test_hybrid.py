"""Hybrid drafting: DLite drafts plus a suffix index of the session (`prompt_lookup_num_tokens=N` beside the
drafter). Greedy output stays identical to plain, the rule picks the source it says, sessions reuse their index."""

from __future__ import annotations

import pytest
import torch

from dlite_hf import DraftSession


def _repetitive_prompt(seed: int, length: int = 24) -> torch.Tensor:
    """A prompt that repeats a random phrase, so the index has something to retrieve."""
    phrase = torch.randint(1, 128, (1, 6), generator=torch.Generator().manual_seed(seed))
    noise = torch.randint(1, 128, (1, 5), generator=torch.Generator().manual_seed(seed + 100))
    return torch.cat([phrase, noise, phrase, noise[:, :2], phrase], 1)[:, :length]


def _hybrid(target, drafter, ids, lookup=8, **kwargs):
    return target.generate(ids, do_sample=False, assistant_model=drafter, prompt_lookup_num_tokens=lookup, **kwargs)


@pytest.mark.parametrize("lookup", [1, 4, 16])
@pytest.mark.parametrize("min_match", [1, 2, 5])
def test_greedy_is_identical_to_plain_and_stats_add_up(tiny_pair, lookup, min_match):
    target, drafter = tiny_pair
    used_lookup = 0
    for seed, max_new in [(0, 1), (1, 7), (2, 19), (3, 40)]:  # max_new_tokens falls inside blocks too
        ids = _repetitive_prompt(seed)
        plain = target.generate(ids, do_sample=False, max_new_tokens=max_new)
        with DraftSession(min_match=min_match) as session:
            hybrid = _hybrid(target, drafter, ids, lookup=lookup, max_new_tokens=max_new)
        assert torch.equal(plain, hybrid), (seed, max_new)
        stats = drafter.last_generation_stats
        assert session.last_generation_stats is stats
        assert stats.new_tokens == max_new
        assert stats.rounds == stats.lookup_rounds + stats.dlite_rounds
        assert stats.target_forwards == 1 + stats.rounds + stats.undrafted_forwards  # the prefill, then one per round
        assert stats.accepted == stats.lookup_accepted + stats.dlite_accepted
        assert stats.lookup_drafted <= lookup * stats.lookup_rounds
        assert stats.lookup_time_s > 0
        used_lookup += stats.lookup_rounds
    assert used_lookup > 0  # the repeated phrase was retrieved


def test_the_rule_follows_the_match_length(tiny_pair, monkeypatch):
    target, drafter = tiny_pair
    ids = _repetitive_prompt(4)
    with DraftSession(min_match=10_000):  # never long enough: the drafter's rounds only, as without lookup
        never = _hybrid(target, drafter, ids, max_new_tokens=24)
    never_stats = drafter.last_generation_stats
    dlite = target.generate(ids, do_sample=False, assistant_model=drafter, max_new_tokens=24)
    assert torch.equal(never, dlite)
    assert never_stats.lookup_rounds == 0
    assert never_stats.tokens_per_forward == drafter.last_generation_stats.tokens_per_forward

    # min_match=1: every round whose last token occurred before drafts what followed it; record the rule's inputs
    from dlite_hf.modeling.suffix_index import SuffixIndex

    seen = []
    original = SuffixIndex.lookup

    def recording(self, max_tokens):
        match = original(self, max_tokens)
        seen.append(match)
        return match

    monkeypatch.setattr(SuffixIndex, "lookup", recording)
    with DraftSession(min_match=1):
        always = _hybrid(target, drafter, ids, max_new_tokens=24)
    stats = drafter.last_generation_stats
    assert torch.equal(always, dlite)
    assert stats.lookup_rounds == sum(1 for m in seen if m.length >= 1 and m.continuation)
    assert stats.dlite_rounds + stats.skipped == sum(1 for m in seen if not (m.length >= 1 and m.continuation))

    # a retrieved draft has at most lookup_length_factor tokens per matched token (and at least one)
    import math

    monkeypatch.setattr(drafter.config, "lookup_length_factor", 0.5)
    seen.clear()
    with DraftSession(min_match=1):
        halved = _hybrid(target, drafter, ids, lookup=32, max_new_tokens=24)
    stats = drafter.last_generation_stats
    assert torch.equal(halved, dlite)
    used = [m for m in seen if m.length >= 1 and m.continuation]
    assert used and stats.lookup_drafted == sum(min(len(m.continuation), math.ceil(0.5 * m.length)) for m in used)

    # the drafter's config gives the default when the session does not
    monkeypatch.setattr(drafter.config, "lookup_min_match", 10_000)
    seen.clear()
    _hybrid(target, drafter, ids, max_new_tokens=24)
    assert seen and drafter.last_generation_stats.lookup_rounds == 0


def test_a_session_reuses_the_previous_turn_and_stays_lossless(tiny_pair):
    target, drafter = tiny_pair
    turn1 = _repetitive_prompt(7)
    session = DraftSession(min_match=2)
    with session:
        out1 = _hybrid(target, drafter, turn1, max_new_tokens=20)
        assert drafter.last_generation_stats.lookup_index_reused == 0
        indexed = len(session.index)
        assert indexed == out1.shape[1]  # the prompt and every committed token
        turn2 = torch.cat([out1, _repetitive_prompt(8, length=10)], 1)  # the chat so far, then a new message
        out2 = _hybrid(target, drafter, turn2, max_new_tokens=20)
        stats2 = drafter.last_generation_stats
    assert stats2.lookup_index_reused == out1.shape[1]  # turn 1's tokens were not indexed again
    assert len(session.index) == indexed + (out2.shape[1] - out1.shape[1])
    assert torch.equal(out2, target.generate(turn2, do_sample=False, max_new_tokens=20))

    # repeating turn 1 in the session retrieves turn 1's reply: the whole reply is proposed and accepted
    with session:
        again = _hybrid(target, drafter, turn1, lookup=32, max_new_tokens=20)
    stats = drafter.last_generation_stats
    assert torch.equal(again, out1)
    assert stats.lookup_accepted >= 18 and stats.target_forwards <= 3


def test_eos_inside_a_retrieved_block(fitted_pair):
    target, drafter, prompts, _, _ = fitted_pair
    checked = 0
    for row in range(2):
        ids = prompts[row : row + 1]
        plain = target.generate(ids, do_sample=False, max_new_tokens=30)
        continuation = plain[0, ids.shape[1] :].tolist()
        for position in range(3, len(continuation)):
            eos = continuation[position]
            if eos in continuation[:position]:
                continue
            expected = target.generate(ids, do_sample=False, max_new_tokens=30, eos_token_id=eos)
            assert expected.shape[1] == ids.shape[1] + position + 1
            # a session that already saw the whole reply proposes it past the EOS in one block
            session = DraftSession(min_match=1)
            with session:
                session.index.start_stream(plain[0].tolist())
                hybrid = _hybrid(target, drafter, ids, lookup=32, max_new_tokens=30, eos_token_id=eos)
            assert torch.equal(hybrid, expected), (row, position)
            stats = drafter.last_generation_stats
            assert stats.lookup_rounds > 0
            checked += stats.tokens_per_forward[-1] > 1  # the EOS arrived inside a multi-token block
    assert checked >= 3


def test_bad_prompt_lookup_num_tokens_with_a_drafter(tiny_pair):
    target, drafter = tiny_pair
    ids = _repetitive_prompt(0)
    for bad in (0, 257, 2.5):
        with pytest.raises(ValueError) as raised:
            _hybrid(target, drafter, ids, lookup=bad, max_new_tokens=3)
        message = str(raised.value)
        assert f"prompt_lookup_num_tokens={bad!r}" in message and "int in [1, 256]" in message, message


def test_fallback_drafts_a_short_match_where_the_drafter_skips(tiny_pair, monkeypatch):
    """`lookup_fallback_min_match`: a round whose drafter proposes nothing drafts a shorter retrieved match instead
    of a one-token step; outputs stay identical to plain, and only skipped rounds change."""
    from transformers import GenerationConfig

    from dlite_hf.modeling.suffix_index import SuffixIndex

    target, drafter = tiny_pair
    seen = []
    original = SuffixIndex.lookup

    def recording(self, max_tokens):
        seen.append(original(self, max_tokens))
        return seen[-1]

    monkeypatch.setattr(SuffixIndex, "lookup", recording)
    runs = {}
    for fallback in (0, 1):
        ids = _repetitive_prompt(7)
        plain = target.generate(ids, do_sample=False, max_new_tokens=32)
        # the drafter skips every round (its first draft is never this sure); long matches only above 10,000
        config = GenerationConfig(
            do_sample=False,
            max_new_tokens=32,
            draft_skip_threshold=0.99,
            lookup_min_match=10_000,
            lookup_fallback_min_match=fallback,
        )
        seen.clear()
        out = target.generate(ids, generation_config=config, assistant_model=drafter, prompt_lookup_num_tokens=8)
        assert torch.equal(plain, out), fallback
        runs[fallback] = (drafter.last_generation_stats, list(seen))
    off, _ = runs[0]
    assert off.rounds == off.lookup_rounds == off.lookup_fallback_rounds == 0 and off.skipped > 0
    on, matches = runs[1]
    with_continuation = sum(1 for m in matches if m.length >= 1 and m.continuation)
    assert on.lookup_fallback_rounds == on.lookup_rounds == with_continuation > 0
    assert on.rounds == on.lookup_rounds  # the drafter itself still proposes nothing
    assert on.target_forwards < off.target_forwards  # the retrieved drafts were accepted


def test_fallback_min_match_is_validated_per_call_and_in_the_config(tiny_pair):
    from transformers import GenerationConfig

    from dlite_hf import DLiteConfig

    target, drafter = tiny_pair
    ids = _repetitive_prompt(8)
    with pytest.raises(ValueError, match=r"lookup_fallback_min_match=-1 is invalid: expected 0 \(off\)"):
        target.generate(
            ids,
            generation_config=GenerationConfig(max_new_tokens=4, lookup_fallback_min_match=-1),
            assistant_model=drafter,
            prompt_lookup_num_tokens=8,
        )
    with pytest.raises(ValueError, match=r"DLiteConfig.lookup_fallback_min_match=-2 is invalid"):
        DLiteConfig(lookup_fallback_min_match=-2)
