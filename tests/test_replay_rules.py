"""The adaptive rules as a pure function of what a round reads (`drafting.lengths_under_rules`), and
`dlite-hf bench replay rules` (`dlite_hf.bench.replay_rules`), which replays them: by hand on made-up rounds, from
saved replay data, and on the real target against the rounds `generate()` runs with the shipped drafter."""

from __future__ import annotations

import json
import os
import time

import pytest
import torch
from tiny_models import make_tiny_target
from transformers import AutoModel

from dlite_hf.bench import command as bench_command
from dlite_hf.bench import replay, replay_rules
from dlite_hf.bench.replay import context_key
from dlite_hf.chat_template import chat_prompt_ids
from dlite_hf.cli import main
from dlite_hf.data.prompts import load_prompts
from dlite_hf.defaults import default_drafter_dir
from dlite_hf.modeling.drafting import DraftRules, lengths_under_rules, row_lengths, rule_probabilities

# joint probabilities: row 0 0.9, 0.45, 0.225, 0.2025; row 1 0.2, 0.2, ...; row 2 never below 0.3
CHOSEN = torch.tensor([[0.9, 0.5, 0.5, 0.9], [0.2, 1.0, 1.0, 1.0], [1.0, 0.9, 0.8, 0.6]])
FIRST_TOP = torch.tensor([0.9, 0.45, 1.0])


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        (DraftRules(), [4, 4, 4]),  # no rule: K every round
        (DraftRules(confidence_threshold=0.3), [3, 1, 4]),  # stop at the draft whose joint fell below 0.3
        (DraftRules(confidence_threshold=0.5), [2, 1, 4]),  # row 2: 1.0, 0.9, 0.72, then 0.432
        (DraftRules(skip_threshold=0.5), [4, 0, 4]),  # row 1's top first probability 0.45 < 0.5: skipped
        (DraftRules(0.3, 0.5, (2, 4)), [4, 0, 4]),  # row 0 unsure at 3: the next allowed length is 4
        (DraftRules(0.3, 0.0, (2, 4)), [4, 2, 4]),  # row 1 unsure at 1: the first allowed length at or after is 2
        (DraftRules(0.5, 0.0, (1,)), [4, 1, 4]),  # no allowed length at or after the stop: the round's n
    ],
)
def test_lengths_under_rules_by_hand(rules, expected):
    assert lengths_under_rules(CHOSEN, FIRST_TOP, rules) == expected


def test_row_lengths_is_the_rule_on_what_the_round_reads():
    """`row_lengths` = `lengths_under_rules` on `rule_probabilities`, with and without draft columns."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 4, 32, generator=generator) * 3
    columns = torch.tensor([1, 3, 4, 8, 9, 15, 20, 31])
    masked = torch.full_like(logits, float("-inf"))
    masked[..., columns] = logits[..., columns]
    for logit, cols in ((logits, None), (masked, columns)):
        tokens = logit.argmax(-1)
        chosen, top = rule_probabilities(tokens, logit, cols)
        probs = torch.softmax(logit, -1)
        assert torch.allclose(chosen, probs.gather(-1, tokens[..., None])[..., 0], atol=1e-6)
        assert torch.allclose(top, probs[:, 0].max(-1).values, atol=1e-6)
        for rules in (DraftRules(0.2, 0.0), DraftRules(0.4, 0.6, (2, 4)), DraftRules(0.0, 0.5)):
            assert row_lengths(tokens, logit, rules, cols) == lengths_under_rules(chosen, top, rules)


def test_replay_by_hand():
    """Two prompts, made-up drafts: the replay's rounds, tau and cost, worked out by hand."""
    # prompt [1, 2], plain [10, 11, 12, 13, 14]: rounds start once the prefill committed 10 (position 3)
    drafts = [[11, 12, 99], [12, 13, 14], [13, 14, 0], [14, 0, 0]]
    turn = replay_rules.RulesTurn("d", "a", [1, 2], [10, 11, 12, 13, 14], drafts, [[0.5] * 3] * 4, [0.9] * 4)
    costs = {512: {1: 1.0, 2: 1.5, 3: 1.75, 4: 2.0}}
    lengths = {id(turn): [3, 3, 3, 3]}
    out = replay_rules.replay_rule([turn], lengths, costs, skip_s=0.25, step_s=0.125, trace=True)
    # round 1 at position 3: 3 drafts, 2 accepted (11, 12), commits 3 tokens; round 2 at position 6: one token left
    assert out["drafted_per_round"] == [3, 0] and out["rounds"] == 2 and out["decoded_tokens"] == 4
    assert out["tau"] == 2.0 and out["acceptance_rate"] == pytest.approx(2 / 3)
    # costs: (0.25 + 2 x 0.125 + T(4) = 2.0) + (0.25 + 0.25 drafter, the rule drafted 3, + T(1)); plain 4 x T(1)
    assert out["speedup_est"] == pytest.approx(4.0 / (2.5 + 1.5))
    skipped = {id(turn): [0, 0, 0, 0]}
    out = replay_rules.replay_rule([turn], skipped, costs, skip_s=0.25, step_s=0.125)
    assert out["rounds"] == 4 and out["skipped_rounds"] == 4 and out["speedup_est"] == pytest.approx(4.0 / 5.0)


def test_grid_refusals():
    assert replay_rules.parse_grid("0.3:0.5:3+7,0:0") == [DraftRules(0.3, 0.5, (3, 7)), DraftRules()]
    for bad in ("0.3", "1.5:0", "a:b", "0.3:0.5:x", "0.3:0.5:0+3", ""):
        with pytest.raises(SystemExit, match="--grid"):
            replay_rules.parse_grid(bad)


# one turn of saved replay data (the hand-worked prompt of test_replay_by_hand) and its forward costs
SAVED = {
    "turns": [
        {
            "domain": "d",
            "prompt_id": "a",
            "ids": [1, 2],
            "plain": [10, 11, 12, 13, 14],
            "drafts": [[11, 12, 99], [12, 13, 14], [13, 14, 0], [14, 0, 0]],
            "chosen": [[0.9, 0.2, 0.9]] * 4,
            "first_top": [0.9, 0.4, 0.9, 0.9],
        }
    ],
    "forward_s": {"512": {"1": 1.0, "2": 1.5, "3": 1.75, "4": 2.0}},
    "drafter_skip_s": 0.25,
    "drafter_step_s": 0.125,
}


def test_the_runner_replays_saved_data_without_a_model(tmp_path):
    """The runner on saved replay data: K every round and the shipped rule first, then the grid's, ranked; the
    same rows as the replay of each rule."""
    data = tmp_path / "replay.json"
    data.write_text(json.dumps({**SAVED, "collect_s": 712.0}))
    out = tmp_path / "rules.json"
    argv = ["bench", "replay", "rules", "--replay-data", str(data), "--out", str(out), "--grid", "0.5:0,0:0.5"]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert len(result["rules"]) == 4  # the grid and the two shipped rows
    assert result["k_every_round"]["name"] == "confidence 0, skip 0, lengths any"
    assert result["shipped"]["name"] == "confidence 0.3, skip 0.5, lengths 3+7"
    assert result["best"] == result["rules"][0] and result["decoded_tokens"] == 4
    # K every round: as in test_replay_by_hand, 4 / (2.5 + 1.5)
    assert result["k_every_round"]["all"]["speedup_est"] == pytest.approx(1.0)
    # confidence 0.5: the joint 0.9 x 0.2 falls below it at the second draft, so every round drafts one
    (half,) = [row for row in result["rules"] if row["name"] == "confidence 0.5, skip 0, lengths any"]
    assert half["all"]["rounds"] == 2 and half["all"]["tau"] == 2.0
    assert result["drafter_ms"] == {"skipped_round": 250.0, "further_step": 125.0}
    assert result["collect_s"] == 712.0  # the collection's seconds, not this invocation's


def test_a_collection_records_its_seconds(tmp_path, monkeypatch):
    """Collected data (no --replay-data file yet) is written with the collection's seconds, and the result keeps
    them when a later run reads the file; data without turns is refused."""
    data = tmp_path / "replay.json"
    monkeypatch.setattr(replay_rules, "collect", lambda args: (time.sleep(0.05), dict(SAVED))[1])
    argv = ["bench", "replay", "rules", "--replay-data", str(data), "--grid", "0:0"]
    assert main([*argv, "--out", str(tmp_path / "first.json")]) == 0
    collected = json.loads(data.read_text())["collect_s"]
    assert collected >= 0.05 and json.loads((tmp_path / "first.json").read_text())["collect_s"] == collected
    assert main([*argv, "--out", str(tmp_path / "again.json")]) == 0
    assert json.loads((tmp_path / "again.json").read_text())["collect_s"] == collected
    data.write_text(json.dumps({**SAVED, "turns": []}))
    with pytest.raises(SystemExit, match="holds no turns"):
        main([*argv, "--out", str(tmp_path / "none.json")])


@pytest.mark.real
def test_the_replay_runs_the_rounds_generate_runs(smollm2):
    """On the real target, the replay of the shipped drafter's rules proposes, round by round, what `generate()`
    proposed (float32 greedy; the drafts come from teacher-forced states)."""
    target, tokenizer = smollm2
    drafter = AutoModel.from_pretrained(default_drafter_dir())  # its adaptive drafting, as users get it
    rules = DraftRules.from_config(drafter.config)
    assert rules.skip_threshold > 0 and rules.confidence_threshold > 0
    skipped = 0
    for workload in ("chat", "math"):
        for prompt in load_prompts(workload, "eval", limit=2):
            ids = torch.tensor([chat_prompt_ids(tokenizer, prompt["messages"])])
            plain = target.generate(ids, max_new_tokens=40, do_sample=False)
            fast = target.generate(ids, max_new_tokens=40, do_sample=False, assistant_model=drafter)
            assert torch.equal(fast, plain), prompt["id"]
            stats = drafter.last_generation_stats
            out = plain[0, ids.shape[1] :].tolist()
            turn = replay_rules.RulesTurn.measure(target, drafter, workload, prompt["id"], ids[0].tolist(), out)
            lengths = {id(turn): lengths_under_rules(torch.tensor(turn.chosen), torch.tensor(turn.first_top), rules)}
            costs = {context_key(len(turn.ids)): {1: 1.0}}
            replayed = replay_rules.replay_rule([turn], lengths, costs, 0.0, 0.0, trace=True)
            assert replayed["drafted_per_round"] == stats.drafted_per_forward[1:], prompt["id"]
            skipped += replayed["skipped_rounds"]
    assert skipped > 0  # the skip rule was exercised


def test_the_runner_refuses_another_kinds_replay_data(tmp_path):
    data = tmp_path / "replay.json"
    data.write_text(json.dumps({"sessions": {}, "forward_s": {}, "drafter_s": 0.005}))  # the hybrid's
    with pytest.raises(SystemExit, match=r"--replay-data .*: no turns, drafter_skip_s, drafter_step_s"):
        main(["bench", "replay", "rules", "--replay-data", str(data), "--out", str(tmp_path / "out.json")])


@pytest.mark.parametrize("kind", ["rules", "hybrid"])
def test_the_replay_loads_the_target_in_the_dtype_asked(tmp_path, monkeypatch, kind):
    """`--dtype bfloat16` (the fast mode of a CPU with native bfloat16) reaches the target's loading; float16 is
    refused by the parser."""
    seen = []

    def load_models(target, drafter, attention, threads, dtype, pack_weights=False):
        seen.append(dtype)
        raise SystemExit("loaded")

    monkeypatch.setattr(replay, "load_models", load_models)
    argv = ["bench", "replay", kind, "--out", str(tmp_path / "out.json")]
    with pytest.raises(SystemExit, match="loaded"):
        main([*argv, "--dtype", "bfloat16"])
    with pytest.raises(SystemExit, match="loaded"):
        main(argv)
    assert seen == ["bfloat16", "float32"]
    with pytest.raises(SystemExit) as refused:
        main([*argv, "--dtype", "float16"])
    assert refused.value.code == 2


def test_the_rules_replay_measures_costs_on_packed_weights_when_asked(tmp_path, monkeypatch):
    """`--pack-weights` reaches the target's loading and is recorded with the costs (read from the replay data, not
    from the invocation that replays it); on a float32 target it is refused, saying why."""
    seen = []

    def load_models(target, drafter, attention, threads, dtype, pack_weights=False):
        seen.append(pack_weights)
        raise SystemExit("loaded")

    monkeypatch.setattr(replay, "load_models", load_models)
    argv = ["bench", "replay", "rules", "--out", str(tmp_path / "out.json")]
    for extra in (["--pack-weights"], []):
        with pytest.raises(SystemExit, match="loaded"):
            main([*argv, "--dtype", "bfloat16", *extra])
    assert seen == [True, False]
    monkeypatch.undo()
    forced = []

    def collect(args):  # what the models would be loaded and measured under
        forced.append(os.environ.get("TRANSFORMERS_SDPA_FORCE_GQA"))
        return {**SAVED, "pack_weights": args.pack_weights}

    monkeypatch.setattr(replay_rules, "collect", collect)
    monkeypatch.setenv("TRANSFORMERS_SDPA_FORCE_GQA", "0")
    data = tmp_path / "replay.json"
    assert main([*argv, "--pack-weights", "--replay-data", str(data), "--grid", "0:0"]) == 0
    assert forced == ["1"] and os.environ["TRANSFORMERS_SDPA_FORCE_GQA"] == "0"  # forced while collecting only
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["pack_weights"] is True and " --pack-weights --grid" in result["command"]  # a switch, no value
    assert main([*argv, "--replay-data", str(data), "--grid", "0:0"]) == 0  # replayed later without the flag
    assert json.loads((tmp_path / "out.json").read_text())["pack_weights"] is True
    make_tiny_target().save_pretrained(tmp_path / "target")  # float32: nothing would take the packed path
    with pytest.raises(SystemExit, match="--pack-weights: Packed weights apply to bfloat16"):
        replay.load_models(str(tmp_path / "target"), "unused", "sdpa", 1, "float32", pack_weights=True)
    with pytest.raises(SystemExit, match="--pack-weights: Packed weights apply to bfloat16"):  # bench's, one loader
        bench_command._load_target(str(tmp_path / "target"), "float32", "sdpa", True)
