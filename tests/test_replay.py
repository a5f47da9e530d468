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
    items = [{"id": str(i), "workload": "w", "messages": [{"role": "user", "content": p.tolist()}]} for i, p in
             enumerate(prompts[:4])]  # fmt: skip
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
