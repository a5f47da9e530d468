"""benchmarks/simulate_hybrid.py replays the hybrid with the core's own rule: on real prompts, its replay of greedy
decoding counts the same target forwards as real `generate()` with the hybrid (float32, the shipped drafter)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel

from dlite_hf.data.prompts import load_prompts
from dlite_hf.defaults import default_drafter_dir
from dlite_hf.modeling.drafting import HybridRule
from dlite_hf.modeling.options import DEFAULT_LOOKUP_TOKENS
from dlite_hf.rows import chat_prompt_ids

pytestmark = pytest.mark.real
MAX_NEW = 48


def test_the_simulators_replay_counts_the_forwards_generate_runs(smollm2, repo_script):
    simulate = repo_script("benchmarks/simulate_hybrid.py")
    target, tokenizer = smollm2
    drafter = AutoModel.from_pretrained(default_drafter_dir())  # the shipped drafter, its adaptive drafting
    config = drafter.config
    rule = HybridRule(config.lookup_min_match, config.lookup_length_factor, config.lookup_fallback_min_match)
    compared = []
    for workload in ("code", "tool"):
        for prompt in load_prompts(workload, "eval", limit=2):
            ids = torch.tensor([chat_prompt_ids(tokenizer, prompt["messages"])])
            plain = target.generate(ids, max_new_tokens=MAX_NEW, do_sample=False)
            hybrid = target.generate(
                ids,
                max_new_tokens=MAX_NEW,
                do_sample=False,
                assistant_model=drafter,
                prompt_lookup_num_tokens=DEFAULT_LOOKUP_TOKENS,
            )
            assert torch.equal(hybrid, plain), prompt["id"]
            stats = drafter.last_generation_stats
            turn = simulate.Turn.measure(target, drafter, ids[0].tolist(), plain[0, ids.shape[1] :].tolist())
            costs = {id(turn): {1: 1.0, 64: 1.0}}
            replayed = simulate.replay([[turn]], (DEFAULT_LOOKUP_TOKENS, rule), costs, 0.0, 0.0, MAX_NEW)
            compared.append((prompt["id"], stats.lookup_rounds, stats.target_forwards))
            assert replayed["tau"] == pytest.approx(stats.tau), (prompt["id"], replayed, stats.to_dict())
    assert any(lookups for _, lookups, _ in compared), compared  # the retrieved side was exercised
