"""Offline tau (dlite_hf.bench.replay) equals the real greedy speculative run it replays."""

from __future__ import annotations

import pytest
import torch
from transformers import GenerationConfig

from dlite_hf.bench.replay import greedy_texts, replay_tau, replay_text, summarise


class _Chat:
    """Tokenizer stand-in: the prompt's content is already a list of token ids."""

    def apply_chat_template(self, messages, **_):
        return list(messages[0]["content"])


def test_replay_equals_the_real_run_token_for_token(fitted_pair) -> None:
    target, drafter, prompts, _, _ = fitted_pair
    drafter.bind_target(target)
    items = [
        {"id": str(i), "workload": "w", "messages": [{"role": "user", "content": p.tolist()}]}
        for i, p in enumerate(prompts[:4])
    ]
    texts = list(greedy_texts(target, _Chat(), items, max_new_tokens=24))
    for text in texts:
        ids = torch.tensor([text["tokens"][: text["prompt_length"]]])
        config = GenerationConfig(
            max_new_tokens=24, do_sample=False, draft_confidence_threshold=0.0, draft_skip_threshold=0.0
        )  # K drafts every round, per call
        out = target.generate(ids, generation_config=config, assistant_model=drafter)
        assert out[0].tolist() == text["tokens"]
        stats = drafter.last_generation_stats
        row = replay_text(drafter, target, text)
        # the prefill commits the first token, then each verify forward commits its accepted drafts plus one; the
        # last round may accept drafts past max_new_tokens, which generate then cuts
        assert row["forwards"] == stats.target_forwards and row["new_tokens"] == stats.new_tokens
        assert [1] + [a + 1 for a in row["accepted"][:-1]] == stats.tokens_per_forward[:-1]
    rows = [replay_text(drafter, target, t) for t in texts]
    tau = sum(r["new_tokens"] for r in rows) / sum(r["forwards"] for r in rows)
    assert tau > 2.0  # the fitted drafter is accepted in long runs, so the check above is not vacuous
    summary = summarise(rows + [{**rows[0], "workload": "ood"}], out_of_domain=["ood"])
    assert summary["tau_by_workload"]["w"] == pytest.approx(tau)
    assert summary["mean_tau_ood"] == pytest.approx(rows[0]["new_tokens"] / rows[0]["forwards"])
    assert summary["mean_tau_in_domain"] == pytest.approx(tau)


def test_summarise_pools_tau_and_the_first_draft_share_per_workload() -> None:
    rows = [
        {"workload": "a", "new_tokens": 10, "forwards": 5, "accepted": [0, 2, 1, 0]},
        {"workload": "a", "new_tokens": 6, "forwards": 3, "accepted": [3, 0]},
        {"workload": "b", "new_tokens": 4, "forwards": 4, "accepted": [0, 0, 0]},
    ]
    summary = summarise(rows, out_of_domain=["b"])
    assert summary["tau_by_workload"] == {"a": 16 / 8, "b": 1.0} and summary["mean_tau"] == 1.5
    assert summary["first_accepted_in_domain"] == 3 / 6 and summary["first_accepted_ood"] == 0.0
    assert summarise(rows[:2])["first_accepted_ood"] is None


def test_replay_counts_analytically_with_a_scripted_drafter() -> None:
    class Scripted:
        """Drafts the text's next three tokens, the third one wrong: every round accepts 2 (last round: fewer)."""

        def __init__(self, tokens):
            self.tokens = tokens

        def draft(self, states, anchor, **_):
            position = int(states[0, 0])  # the state carries its own position
            nxt = self.tokens[position + 2 : position + 5]
            return torch.tensor([nxt[:2] + [-1]]), None

    tokens = list(range(100, 120))
    states = torch.arange(len(tokens)).float().view(1, -1, 1)
    new, forwards, accepted = replay_tau(Scripted(tokens), states, tokens, prompt_length=5)
    # the prefill commits 1 token, then rounds of 3 (2 accepted + 1), and the last round has 2 tokens left
    assert new == 15 and forwards == 1 + 5 and accepted == [2, 2, 2, 2, 1]
    with pytest.raises(ValueError, match="prompt_length must be in 2..20"):
        replay_tau(Scripted(tokens), states, tokens, prompt_length=1)


@pytest.mark.parametrize("window", [3, -1])
def test_replay_gives_a_history_drafter_the_inputs_generate_gives_it(window) -> None:
    """A sliding-window drafter (and the full-history teacher) replayed: each round's context, anchor and history
    (states, valid, positions) are those of the real `generate` run, round for round."""
    from tiny_models import make_drafter, make_tiny_target

    target = make_tiny_target("qwen3", seed=0)
    drafter = make_drafter(target, seed=1, history_window=window)
    drafter.bind_target(target)
    calls = []
    encode = drafter.encode_block

    def recording(context, anchor, *history):
        calls.append((context.clone(), anchor.clone(), [h.clone() for h in history]))
        return encode(context, anchor, *history)

    drafter.encode_block = recording
    prompt = {"id": "0", "workload": "w", "messages": [{"role": "user", "content": list(range(3, 9))}]}
    text = next(greedy_texts(target, _Chat(), [prompt], max_new_tokens=12))
    config = GenerationConfig(
        max_new_tokens=12, do_sample=False, draft_confidence_threshold=0.0, draft_skip_threshold=0.0
    )
    target.generate(
        torch.tensor([text["tokens"][: text["prompt_length"]]]), generation_config=config, assistant_model=drafter
    )
    real, calls[:] = list(calls), []
    row = replay_text(drafter, target, text)
    assert len(calls) == len(row["accepted"]) >= len(real) > 5  # generate skips drafting when one token is left
    spans = set()
    for (context, anchor, history), (context_r, anchor_r, history_r) in zip(calls, real):
        torch.testing.assert_close(context, context_r, atol=1e-5, rtol=1e-4)
        assert anchor.tolist() == anchor_r.tolist() and len(history) == len(history_r) == 3
        torch.testing.assert_close(history[0], history_r[0], atol=1e-5, rtol=1e-4)
        assert history[1].tolist() == history_r[1].tolist() and history[2].tolist() == history_r[2].tolist()
        spans.add(history[0].shape[1])
    assert (max(spans) == 3) if window == 3 else (len(spans) == len(real))  # the window caps it; -1 grows
