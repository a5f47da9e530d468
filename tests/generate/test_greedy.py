"""DLite inside transformers' generate(): lossless greedy, statistics, no extra target forwards."""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_drafter, make_tiny_target
from transformers.generation.streamers import BaseStreamer

from dlite_hf.draft_vocab import set_draft_vocab


def _plain_and_dlite(target, drafter, ids, **kwargs):
    plain = target.generate(ids, do_sample=False, **kwargs)
    assisted = target.generate(ids, do_sample=False, assistant_model=drafter, **kwargs)
    return plain, assisted


@pytest.mark.parametrize("arch", ["qwen3", "llama", "qwen2"])
def test_random_drafter_greedy_is_lossless(arch):
    target = make_tiny_target(arch, seed=3)
    drafter = make_drafter(target, seed=4)
    for seed, prompt_len, max_new in [(0, 1, 1), (1, 5, 9), (2, 17, 23), (3, 40, 31)]:
        ids = torch.randint(1, 128, (1, prompt_len), generator=torch.Generator().manual_seed(seed))
        plain, assisted = _plain_and_dlite(target, drafter, ids, max_new_tokens=max_new)
        assert torch.equal(plain, assisted), (arch, seed, prompt_len, max_new)
        stats = drafter.last_generation_stats
        assert stats.new_tokens == max_new == plain.shape[1] - prompt_len
        assert stats.rounds + 1 <= stats.target_forwards <= stats.rounds + 2  # prefill, and a last 1-token step


def test_fitted_drafter_accepts_long_runs_and_stays_lossless(fitted_pair):
    target, drafter, prompts, sequences, _ = fitted_pair
    taus = []
    for row in range(prompts.shape[0]):
        ids = prompts[row : row + 1]
        for max_new in (3, 8, 13, 40):  # max_new_tokens falls inside accepted blocks
            plain, assisted = _plain_and_dlite(target, drafter, ids, max_new_tokens=max_new)
            assert torch.equal(plain, assisted), (row, max_new)
            assert torch.equal(plain[0], sequences[row, : plain.shape[1]])
        taus.append(drafter.last_generation_stats.tau)
    # the fit must produce long accepted runs, otherwise this test would not exercise them
    assert max(taus) > 3.0, taus
    assert max(max(drafter.last_generation_stats.tokens_per_forward) for _ in [0]) >= 2


def test_eos_inside_an_accepted_block(fitted_pair):
    target, drafter, prompts, sequences, _ = fitted_pair
    checked = 0
    for row in range(prompts.shape[0]):
        ids = prompts[row : row + 1]
        continuation = sequences[row, prompts.shape[1] :].tolist()
        for position in (4, 11, 19):
            eos = continuation[position]
            if eos in continuation[:position]:
                continue
            plain, assisted = _plain_and_dlite(target, drafter, ids, max_new_tokens=40, eos_token_id=eos)
            assert torch.equal(plain, assisted)
            assert assisted[0, -1].item() == eos and assisted.shape[1] == prompts.shape[1] + position + 1
            checked += 1
    assert checked >= 5


def test_no_extra_target_forwards(fitted_pair):
    target, drafter, prompts, _, _ = fitted_pair
    calls = []
    handle = target.register_forward_pre_hook(lambda module, args: calls.append(1))
    try:
        target.generate(prompts[:1], max_new_tokens=30, do_sample=False, assistant_model=drafter)
    finally:
        handle.remove()
    stats = drafter.last_generation_stats
    assert len(calls) == stats.target_forwards
    assert stats.target_forwards < stats.new_tokens  # fewer forwards than plain decoding
    assert sum(stats.tokens_per_forward) == stats.new_tokens == 30
    assert stats.accepted == stats.new_tokens - stats.target_forwards
    assert stats.drafter_time_s > 0 and stats.target_time_s > 0
    # per forward: what it verified and what it committed (at most the accepted drafts plus the target's token)
    assert len(stats.drafted_per_forward) == stats.target_forwards and sum(stats.drafted_per_forward) == stats.drafted
    assert sum(d > 0 for d in stats.drafted_per_forward) == stats.rounds
    assert all(t <= d + 1 for t, d in zip(stats.tokens_per_forward, stats.drafted_per_forward))


def test_hooks_are_removed_after_generate(fitted_pair):
    target, drafter, prompts, _, _ = fitted_pair
    target.generate(prompts[:1], max_new_tokens=5, do_sample=False, assistant_model=drafter)
    import gc

    gc.collect()
    assert all(not layer._forward_hooks for layer in target.model.layers)


def test_num_assistant_tokens_can_only_lower_k(fitted_pair):
    target, drafter, prompts, _, _ = fitted_pair
    plain = target.generate(prompts[:1], max_new_tokens=30, do_sample=False)
    out = target.generate(
        prompts[:1], max_new_tokens=30, do_sample=False, assistant_model=drafter, num_assistant_tokens=3
    )
    assert torch.equal(plain, out)
    stats = drafter.last_generation_stats
    assert max(stats.tokens_per_forward) <= 4 and stats.drafted <= 3 * stats.rounds
    target.generate(prompts[:1], max_new_tokens=30, do_sample=False, assistant_model=drafter, num_assistant_tokens=50)
    assert (
        drafter.last_generation_stats.drafted <= drafter.config.num_draft_tokens * drafter.last_generation_stats.rounds
    )


def test_confidence_threshold_shortens_rounds_and_stays_lossless(fitted_pair, monkeypatch):
    target, drafter, prompts, _, _ = fitted_pair
    from dlite_hf.modeling import candidate_generators

    calls = []  # (budget the generator asked for, drafts returned) of every drafting round
    original = candidate_generators.draft_tokens

    def recording(drafter, context, anchors, num_tokens, rules, **kwargs):
        tokens, logits = original(drafter, context, anchors, num_tokens, rules, **kwargs)
        calls.append((num_tokens, tokens.shape[1]))
        return tokens, logits

    monkeypatch.setattr(candidate_generators, "draft_tokens", recording)
    drafted = {}
    for threshold, lengths in ((0.0, None), (0.5, None), (0.99, None), (0.99, [3, 7])):
        monkeypatch.setattr(drafter.config, "draft_confidence_threshold", threshold)
        monkeypatch.setattr(drafter.config, "draft_lengths", lengths)
        calls.clear()
        for row in range(4):
            plain, assisted = _plain_and_dlite(target, drafter, prompts[row : row + 1], max_new_tokens=40)
            assert torch.equal(plain, assisted), (threshold, row)
        assert calls and all(1 <= n <= budget for budget, n in calls)
        if threshold == 0:
            assert all(n == budget for budget, n in calls)  # the whole budget (K, less near max_new_tokens)
        elif lengths is None:
            assert any(n < budget for budget, n in calls)  # some rounds stopped early
        else:  # an early stop ends at an allowed length; only the budget can end a round elsewhere
            assert all(n in lengths or n == budget for budget, n in calls), calls
            assert any(n == 3 < budget for budget, n in calls)
        drafted[threshold, str(lengths)] = sum(n for _, n in calls) / len(calls)
    assert drafted[0.99, "None"] <= drafted[0.5, "None"] < drafted[0.0, "None"], drafted
    assert drafted[0.99, "None"] < drafted[0.99, "[3, 7]"], drafted


def test_skip_threshold_turns_unsure_rounds_into_plain_steps(fitted_pair, monkeypatch):
    target, drafter, prompts, _, _ = fitted_pair
    skipped = {}
    for skip in (0.0, 0.9, 0.999999):
        monkeypatch.setattr(drafter.config, "draft_skip_threshold", skip)
        calls = []
        handle = target.register_forward_pre_hook(
            lambda module, args, kwargs, calls=calls: calls.append(1), with_kwargs=True
        )
        try:
            plain, assisted = _plain_and_dlite(target, drafter, prompts[4:5], max_new_tokens=30)
        finally:
            handle.remove()
        assert torch.equal(plain, assisted), skip
        stats = drafter.last_generation_stats
        assert stats.target_forwards == len(calls) - 30  # the plain run's 30 forwards, then the assisted run's
        # every forward is the prefill, a verified round, a skipped round (one token), or a last step with no budget
        assert 1 + stats.rounds + stats.skipped <= stats.target_forwards <= 2 + stats.rounds + stats.skipped
        skipped[skip] = (stats.skipped, stats.rounds)
    assert skipped[0.0][0] == 0
    assert skipped[0.999999][0] > 0  # the fitted drafter is rarely that sure: mostly plain steps
    assert skipped[0.999999][0] >= skipped[0.9][0]


class _Collect(BaseStreamer):
    def __init__(self):
        self.chunks = []

    def put(self, value):
        self.chunks.append(value.flatten().tolist())

    def end(self):
        self.chunks.append(None)


def test_streamer_receives_every_committed_token(fitted_pair):
    target, drafter, prompts, _, _ = fitted_pair
    streamer = _Collect()
    out = target.generate(prompts[:1], max_new_tokens=25, do_sample=False, assistant_model=drafter, streamer=streamer)
    assert streamer.chunks[-1] is None
    streamed = [t for chunk in streamer.chunks[1:-1] for t in chunk]  # first chunk is the prompt
    assert streamed == out[0, prompts.shape[1] :].tolist()


def test_history_variants_are_lossless():
    target = make_tiny_target("llama", seed=5)
    for window in (-1, 4):
        drafter = make_drafter(target, seed=6, history_window=window)
        ids = torch.randint(1, 128, (1, 9), generator=torch.Generator().manual_seed(window + 10))
        plain, assisted = _plain_and_dlite(target, drafter, ids, max_new_tokens=20)
        assert torch.equal(plain, assisted)


def test_draft_vocabulary_is_lossless_and_restricts_candidates(fitted_pair):
    target, _, prompts, sequences, _ = fitted_pair
    drafter = make_drafter(target, seed=7, draft_vocab_size=40)
    counts = torch.bincount(sequences[:, prompts.shape[1] :].flatten(), minlength=128).float()
    ids = set_draft_vocab(drafter, counts)
    assert ids.shape == (40,) and set(ids.tolist()) <= set(range(128))
    drafter.bind_target(target)
    context = torch.randn(2, drafter.config.num_tapped_layers, 64)
    tokens, logits = drafter.draft(context, torch.tensor([3, 4]))
    outside = torch.ones(128, dtype=torch.bool)
    outside[ids] = False
    assert torch.isinf(logits[..., outside]).all() and torch.isfinite(logits[..., ~outside]).all()
    assert set(tokens.flatten().tolist()) <= set(ids.tolist())
    for row in range(3):
        plain, assisted = _plain_and_dlite(target, drafter, prompts[row : row + 1], max_new_tokens=20)
        assert torch.equal(plain, assisted)
    torch.manual_seed(0)
    sampled = target.generate(prompts[:1], max_new_tokens=12, do_sample=True, assistant_model=drafter)
    assert sampled.shape[1] == prompts.shape[1] + 12


def test_drafter_keeps_a_constant_amount_of_target_state(monkeypatch):
    from dlite_hf.modeling import tapping

    target = make_tiny_target("llama", seed=8)
    drafter = make_drafter(target, seed=9)
    kept = []
    original = tapping.TappedStateRecorder._hook

    def counting(self, position, module, args, output):
        original(self, position, module, args, output)
        kept.append(sum(t.numel() for t in self.states.values()))

    monkeypatch.setattr(tapping.TappedStateRecorder, "_hook", counting)
    peaks = []
    for length in (12, 600):
        kept.clear()
        ids = torch.randint(1, 128, (1, length), generator=torch.Generator().manual_seed(length))
        target.generate(ids, max_new_tokens=10, do_sample=False, assistant_model=drafter)
        peaks.append(max(kept))
    k, layers, hidden = drafter.config.num_draft_tokens, drafter.config.num_tapped_layers, 64
    assert peaks[0] == peaks[1] <= layers * (k + 1) * hidden  # at most K + 1 rows per tapped layer, any context


def test_concurrent_calls_each_get_their_own_statistics_through_a_session(fitted_pair):
    """Two threads share one target and drafter; each call's session holds that call's statistics (its own token
    count and forwards), and each output equals plain greedy."""
    import threading

    from dlite_hf import DraftSession

    target, drafter, prompts, _, _ = fitted_pair
    results, errors = {}, []

    def run(name: str, prompt: torch.Tensor, new_tokens: int) -> None:
        try:
            session = DraftSession()
            with session:
                out = target.generate(
                    prompt[None], max_new_tokens=new_tokens, do_sample=False, assistant_model=drafter
                )
            results[name] = (out, session.last_generation_stats, new_tokens, prompt)
        except Exception as error:  # noqa: BLE001 (reported below, in the main thread)
            errors.append(error)

    threads = [threading.Thread(target=run, args=(f"t{i}", prompts[i], n)) for i, n in enumerate((11, 29))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    for out, stats, new_tokens, prompt in results.values():
        plain = target.generate(prompt[None], max_new_tokens=new_tokens, do_sample=False)
        assert torch.equal(out, plain)
        assert stats.new_tokens == new_tokens and sum(stats.tokens_per_forward) == new_tokens
