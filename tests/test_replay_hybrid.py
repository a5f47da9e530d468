"""`dlite-hf bench replay hybrid` (`dlite_hf.bench.replay_hybrid`) replays the hybrid with the core's own rule: on
real prompts, its replay of greedy decoding counts the same target forwards as real `generate()` with the hybrid
(float32, the shipped drafter); and the runner replays saved data without loading a model."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModel

from dlite_hf.bench import replay_hybrid
from dlite_hf.chat_template import chat_prompt_ids
from dlite_hf.cli import main
from dlite_hf.data.prompts import load_prompts
from dlite_hf.defaults import default_drafter_dir
from dlite_hf.modeling.decoding_options import DEFAULT_LOOKUP_TOKENS
from dlite_hf.modeling.drafting import HybridRule

MAX_NEW = 48


@pytest.mark.real
def test_the_replay_counts_the_forwards_generate_runs(smollm2):
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
            turn = replay_hybrid.HybridTurn.measure(
                target, drafter, ids[0].tolist(), plain[0, ids.shape[1] :].tolist()
            )
            costs = {id(turn): {1: 1.0, 64: 1.0}}
            replayed = replay_hybrid.replay_rule([[turn]], (DEFAULT_LOOKUP_TOKENS, rule), costs, 0.0, 0.0, MAX_NEW)
            compared.append((prompt["id"], stats.lookup_rounds, stats.target_forwards))
            assert replayed["tau"] == pytest.approx(stats.tau), (prompt["id"], replayed, stats.to_dict())
    assert any(lookups for _, lookups, _ in compared), compared  # the retrieved side was exercised


def _turn(ids, plain, drafts):
    return {"ids": ids, "plain": plain, "drafts": {str(p): d for p, d in drafts.items()}}


def test_the_runner_replays_saved_data_without_a_model(tmp_path):
    """Two sessions of saved turns: the runner's rows are the replays of its grid, the fastest first."""
    repeat = [5, 6, 7, 8, 9, 10, 11, 12]
    first = _turn([1, 2, 3, *repeat], [5, 6, 7, 8, 9, 13], {12: [6, 7], 13: [], 14: [8, 9, 1], 15: [], 16: [13]})
    second = _turn([4] * 600, [4, 4, 20, 21], {601: [4, 20], 602: [20, 21], 603: [21]})
    data = tmp_path / "replay.json"
    forward = {"512": {"1": 0.02, "2": 0.022, "4": 0.026, "33": 0.1}, "1024": {"1": 0.03, "8": 0.04}}
    data.write_text(
        json.dumps({"sessions": {"code": [[first]], "agentic": [[second]]}, "forward_s": forward, "drafter_s": 0.005})
    )
    out = tmp_path / "rules.json"
    assert main(["bench", "replay", "hybrid", "--replay-data", str(data), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert len(result["rules"]) == len(replay_hybrid.hybrid_grid()) and result["turns"] == {"code": 1, "agentic": 1}
    speeds = [row["all"]["speedup_est"] for row in result["rules"]]
    assert speeds == sorted(speeds, reverse=True)
    sessions = {
        k: [[replay_hybrid.HybridTurn.from_json(t) for t in s] for s in v]
        for k, v in json.loads(data.read_text())["sessions"].items()
    }
    tables = {int(c): {int(q): t for q, t in tb.items()} for c, tb in forward.items()}
    assert result["rules"] == replay_hybrid.rule_rows(sessions, tables, 0.005, 96)
    alone = next(row for row in result["rules"] if row["rule"]["min_match"] is None)
    # the drafter alone on `first`: the prefill, then rounds at 12 (2 drafts accepted), 15 (none) and 16 (the last)
    assert alone["code"]["tau"] == pytest.approx(6 / 4)
    assert result["command"].startswith("dlite-hf bench replay hybrid ") and "--replay-data" in result["command"]
