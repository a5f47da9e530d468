"""`dlite-hf bench` end to end on tiny models (real tokenizer and real prompt files), and its workload loaders."""

from __future__ import annotations

import inspect
import json
import json.decoder
import os

import pytest
import torch
from tiny_models import make_drafter, make_smollm_vocab_target
from transformers import LlamaConfig, LlamaForCausalLM

from dlite_hf.bench import command as bench_command
from dlite_hf.bench import runner as bench_runner
from dlite_hf.bench.methods import BenchMethod, make_methods
from dlite_hf.bench.plots import PANELS
from dlite_hf.bench.report import markdown_table
from dlite_hf.bench.runner import run_bench
from dlite_hf.bench.summary import context_rows
from dlite_hf.chat_template import chat_prompt_ids
from dlite_hf.cli import main
from dlite_hf.data import prompts as P
from dlite_hf.data.workloads import CODING_TASKS, build_workloads, coding_session, session_from_messages

RECORD_KEYS = {
    "workload",
    "session_id",
    "turn",
    "prompt_id",
    "source",
    "method",
    "prompt_tokens",
    "cached_prompt_tokens",
    "new_tokens",
    "target_forwards",
    "rounds",
    "draft_calls",
    "drafted",
    "accepted",
    "tau",
    "wall_s",
    "prefill_s",
    "decode_s",
    "tok_s",
    "decode_tok_s",
    "target_s",
    "drafter_s",
    "overhead_s",
    "target_ms_per_round",
    "drafter_ms_per_round",
    "drafter_share",
    "peak_rss_delta_mb",
    "identical_to_plain",
    "first_mismatch",
    "near_tie",
    "lossless_ok",
}
SUMMARY_KEYS = {
    "workload",
    "method",
    "prompts",
    "mean_prompt_tokens",
    "new_tokens",
    "target_forwards",
    "wall_s",
    "prefill_s",
    "tok_s",
    "mean_tau",
    "tau_pooled",
    "speedup",
    "decode_speedup",
    "acceptance_rate",
    "drafter_ms_per_round",
    "target_ms_per_round",
    "drafter_share",
    "rounds",
    "peak_rss_delta_mb_max",
    "mismatches",
    "lossless",
    "exact_match_rate",
    "near_ties",
    "lossless_failures",
    "wall_ratio",
}
META_KEYS = {"machine", "threads", "python", "torch", "transformers", "dlite_hf", "max_new_tokens", "started_utc"}
ALL_METHODS = ("plain", "prompt_lookup", "dlite", "dlite_nohead", "history")
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny():
    """A seeded random Llama with SmolLM2's vocabulary (hidden 32, 2 layers) and one drafter per DLite method."""
    target = make_smollm_vocab_target(seed=0, max_positions=8192)
    target.config.bos_token_id = target.config.eos_token_id = None  # as the bench's tiny target always was
    small = dict(num_target_layers_tapped=2, hidden_size=32, intermediate_size=64, head_rank=8)
    drafters = {
        "dlite": make_drafter(target, seed=1, **small),
        "dlite_nohead": make_drafter(target, seed=2, use_sequential_head=False, **small),
        "history": make_drafter(target, seed=3, history_window=-1, **small),
    }
    return target, drafters


def _check_result(result: dict, methods: tuple[str, ...], workloads: list[str]) -> None:
    assert result["schema_version"] == 3 and result["ok"] is True and result["mismatches"] == []
    assert result["meta"]["dtype"] == "float32" and result["meta"]["near_tie_epsilon"] is None
    assert result["divergences"] == [] and all(r["near_tie"] is None and r["lossless_ok"] for r in result["records"])
    assert META_KEYS <= set(result["meta"]) and result["meta"]["threads"] == torch.get_num_threads()
    assert list(result["methods"]) == list(methods) and result["workloads"] == workloads
    for record in result["records"]:
        assert set(record) == RECORD_KEYS, set(record) ^ RECORD_KEYS
        assert record["identical_to_plain"] is True and record["first_mismatch"] is None
        assert record["new_tokens"] > 0 and record["target_forwards"] >= 1 and record["wall_s"] > 0
        assert record["tau"] == pytest.approx(record["new_tokens"] / record["target_forwards"])
        if record["method"] == "plain":
            assert record["tau"] == 1.0 and record["rounds"] == 0
        if record["method"] in ("dlite", "dlite_nohead", "history"):
            assert record["draft_calls"] >= max(1, record["rounds"]) and record["drafter_ms_per_round"] > 0
            assert 0 < record["drafter_share"] < 1
    # interleaved: every prompt ran every method, plain first
    by_prompt: dict[str, list[str]] = {}
    for record in result["records"]:
        by_prompt.setdefault(record["prompt_id"], []).append(record["method"])
    assert all(names == list(methods) for names in by_prompt.values())
    rows = {(r["workload"], r["method"]) for r in result["summary"]}
    labels = [*workloads, "all"] if len(workloads) > 1 else workloads  # "all" rows only across workloads
    assert rows == {(w, m) for w in labels for m in methods}
    for row in result["summary"]:
        assert set(row) == SUMMARY_KEYS and row["lossless"] is True
        if row["method"] == "plain":
            assert row["speedup"] == pytest.approx(1.0) and row["mean_tau"] == 1.0


def test_run_bench_all_methods_two_workloads(tiny, tokenizer, tmp_path):
    target, drafters = tiny
    workloads = {
        **build_workloads(["chat"], tokenizer, num_prompts=2),
        **build_workloads(
            ["agentic"], tokenizer, num_prompts=1, agentic_max_tokens=4000, agentic_max_turns=3, file_tokens=300
        ),
    }
    methods = {"plain": None, "prompt_lookup": None, **drafters}
    result = run_bench(
        target,
        tokenizer,
        methods,
        workloads,
        max_new_tokens=10,
        progress=False,
        out_dir=tmp_path,
        name="tiny",
        plots=True,
    )
    _check_result(result, ALL_METHODS, ["chat", "agentic"])
    agentic = [s for s in result["sessions"] if s["workload"] == "agentic"]
    assert [s["id"].split("/")[0] for s in agentic] == ["tooltalk", "bfcl", "coding"]
    assert all(s["turns_measured"] >= 2 for s in agentic)
    coding = [r for r in result["records"] if r["session_id"] == "coding/json" and r["method"] == "plain"]
    assert [r["turn"] for r in coding] == list(range(len(coding)))
    assert all(a["prompt_tokens"] < b["prompt_tokens"] for a, b in zip(coding, coding[1:])), "context must grow"
    assert max(r["prompt_tokens"] for r in coding) <= 4000
    bfcl = [r for r in result["records"] if r["session_id"].startswith("bfcl/") and r["method"] == "plain"]
    assert len(bfcl) == 3 and all(a["prompt_tokens"] < b["prompt_tokens"] for a, b in zip(bfcl, bfcl[1:]))
    # files: JSON round-trips, the table has one line per summary row, every plot is a PNG
    files = result["files"]
    saved = json.loads((tmp_path / "tiny.json").read_text())
    assert saved["summary"] == json.loads(json.dumps(result["summary"])) and files["json"] == str(
        tmp_path / "tiny.json"
    )
    table = (tmp_path / "tiny.md").read_text()
    # rows + header; sessions: header + 3 rows (the goals are benchmark policy: `dlite-hf bench goals` adds them);
    # then the turns by context length, a header and a row per bucket x method
    main, by_context = table.split("By context length")
    assert "goals" not in result and main.count("\n| ") == len(result["summary"]) + 1 + 4
    assert by_context.count("\n| ctx ") == len(context_rows(result["records"], list(result["methods"])))
    for plot in PANELS:
        assert (tmp_path / f"tiny_{plot}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def agentic_turns(tokenizer):
    """Three-turn agentic sessions (ToolTalk and a coding session, no BFCL), contexts to 3,000 tokens."""
    return build_workloads(
        ["agentic"],
        tokenizer,
        num_prompts=1,
        agentic_max_tokens=3000,
        agentic_max_turns=3,
        file_tokens=300,
        bfcl_sessions=0,
    )


def test_hybrid_method_keeps_one_index_per_session_and_records_its_sources(tiny, tokenizer, agentic_turns):
    target, drafters = tiny
    workloads = agentic_turns
    methods = make_methods({"plain": None, "dlite": drafters["dlite"], "hybrid": drafters["dlite"]})
    assert methods[2].lookup_tokens == 32 and methods[2].generate_kwargs(None)["prompt_lookup_num_tokens"] == 32
    result = run_bench(target, tokenizer, methods, workloads, max_new_tokens=12, progress=False, warmup=False)
    assert result["ok"] is True
    hybrid = [r for r in result["records"] if r["method"] == "hybrid"]
    assert hybrid and all(r["lookup_rounds"] + r["dlite_rounds"] == r["rounds"] for r in hybrid)
    for record in hybrid:  # every later turn of a session reuses what the session indexed before
        assert (record["lookup_index_reused"] > 0) == (record["turn"] > 0), record
        assert record["drafter_s"] == pytest.approx(record["dlite_drafter_s"] + record["lookup_s"])
    assert sum(r["lookup_accepted"] for r in hybrid) > 0
    assert "lookup_rounds" not in next(r for r in result["records"] if r["method"] == "dlite")
    described = result["methods"]["hybrid"]["hybrid"]
    assert described["prompt_lookup_num_tokens"] == 32 and described["lookup_min_match"] == 4
    assert described["lookup_length_factor"] == 2.0


def test_prefix_cache_reuses_each_methods_previous_turn_and_changes_no_output(tiny, tokenizer, agentic_turns):
    target, drafters = tiny
    workloads = agentic_turns
    methods = {"plain": None, "prompt_lookup": None, "hybrid": drafters["dlite"]}
    runs = {
        reuse: run_bench(
            target, tokenizer, methods, workloads, max_new_tokens=12, progress=False, warmup=False, prefix_cache=reuse
        )
        for reuse in (False, True)
    }
    assert runs[True]["ok"] and runs[True]["meta"]["prefix_cache"] is True
    assert "prefix cache across the turns" in markdown_table(runs[True])
    fresh, reused = (sorted(runs[k]["records"], key=lambda r: (r["prompt_id"], r["method"])) for k in (False, True))
    for a, b in zip(fresh, reused):  # the same turns, the same outputs (plain's reply feeds the next turn)
        assert (a["prompt_id"], a["method"], a["prompt_tokens"]) == (b["prompt_id"], b["method"], b["prompt_tokens"])
        assert a["new_tokens"] == b["new_tokens"] and b["identical_to_plain"], b
        assert a["cached_prompt_tokens"] == 0
        # a later turn of a session starts from that method's own cache of the turn before: most of its prompt;
        # transformers' prompt lookup is left as upstream, whose assisted loop cannot start on a pre-filled cache
        reuses = b["method"] != "prompt_lookup"
        assert (0 < b["cached_prompt_tokens"] < b["prompt_tokens"]) == (b["turn"] > 0 and reuses), b
    later = [r for r in reused if r["turn"] > 0 and r["method"] != "prompt_lookup"]
    assert later and sum(r["cached_prompt_tokens"] for r in later) > 0.5 * sum(r["prompt_tokens"] for r in later)


def test_a_killed_run_goes_on_from_its_journal_and_loses_no_finished_session(
    tiny, tokenizer, agentic_turns, tmp_path, monkeypatch
):
    from dlite_hf.bench import runner as bench_runner

    target, drafters = tiny
    methods = {"plain": None, "dlite": drafters["dlite"]}
    journal = tmp_path / "run.partial.jsonl"
    common = dict(max_new_tokens=8, progress=False, warmup=False, meta={"command": "dlite-hf bench x"})
    sessions = [s["id"] for s in agentic_turns["agentic"]]
    assert len(sessions) == 2
    real, calls = bench_runner._run_session, []

    def killed_in_the_second(runner, label, session, *args):
        calls.append(session["id"])
        if len(calls) == 2:
            raise KeyboardInterrupt  # a kill mid-run
        return real(runner, label, session, *args)

    monkeypatch.setattr(bench_runner, "_run_session", killed_in_the_second)
    with pytest.raises(KeyboardInterrupt):
        run_bench(target, tokenizer, methods, agentic_turns, journal=journal, **common)
    lines = journal.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["session"] == sessions[0]  # the header, the finished session
    with pytest.raises(ValueError, match="the journal of another run"):
        run_bench(target, tokenizer, methods, agentic_turns, journal=journal, **(common | {"max_new_tokens": 9}))
    journal.write_text(journal.read_text() + '{"workload": "agentic", "sess')  # a line cut short by the kill
    calls.clear()
    resumed = run_bench(target, tokenizer, methods, agentic_turns, journal=journal, **common)
    assert calls == [sessions[1]] and resumed["meta"]["resumed_sessions"] == 1 and not journal.exists()
    assert "sessions measured by an earlier one, killed, from the journal: 1" in markdown_table(resumed)
    monkeypatch.setattr(bench_runner, "_run_session", real)
    whole = run_bench(target, tokenizer, methods, agentic_turns, **common)
    key = ("prompt_id", "method", "prompt_tokens", "new_tokens", "identical_to_plain")
    assert [[r[k] for k in key] for r in resumed["records"]] == [[r[k] for k in key] for r in whole["records"]]
    assert resumed["sessions"] == whole["sessions"] and "resumed_sessions" not in whole["meta"]


def test_repeats_keep_the_fastest_run_from_the_same_state_and_rotate_the_method_order(
    tiny, tokenizer, agentic_turns, monkeypatch
):
    target, drafters = tiny
    methods = {"plain": None, "prompt_lookup": None, "hybrid": drafters["dlite"]}
    order: list[str] = []
    measure = bench_runner._Runner.measure

    def logged(self, method, input_ids, session=None, cache=None):
        order.append(method.name)
        return measure(self, method, input_ids, session=session, cache=cache)

    monkeypatch.setattr(bench_runner._Runner, "measure", logged)
    common = dict(max_new_tokens=12, progress=False, warmup=False, prefix_cache=True)
    once = run_bench(target, tokenizer, methods, agentic_turns, **common)
    order.clear()
    twice = run_bench(target, tokenizer, methods, agentic_turns, repeats=2, **common)
    assert once["ok"] and twice["ok"] and twice["meta"]["repeats"] == 2 and once["meta"]["repeats"] == 1
    assert "measured 2 times with every method" in markdown_table(twice)
    # every repeat starts from the same cache and suffix index: the same outputs, cache reuse and lookups as once
    keys = (
        "prompt_id",
        "method",
        "new_tokens",
        "target_forwards",
        "cached_prompt_tokens",
        "lookup_rounds",
        "lookup_accepted",
        "lookup_index_reused",
    )
    assert [[r.get(k) for k in keys] for r in once["records"]] == [[r.get(k) for k in keys] for r in twice["records"]]
    for record in twice["records"]:
        assert len(record["wall_s_repeats"]) == 2 and record["wall_s"] == min(record["wall_s_repeats"])
    assert "wall_s_repeats" not in once["records"][0]
    # the records keep plain first; the runs rotate: turn t starts with method t mod 3, all methods before a repeat
    names = list(methods)
    turns = len(twice["records"]) // 3
    assert len(order) == 6 * turns
    for turn in range(turns):
        shift = turn % 3
        assert order[6 * turn : 6 * turn + 6] == 2 * (names[shift:] + names[:shift])
    assert [r["method"] for r in twice["records"][:3]] == names


def test_a_repeat_with_another_output_fails_the_check(tiny, tokenizer, monkeypatch):
    target, _ = tiny
    workloads = build_workloads(["chat"], tokenizer, num_prompts=1)
    measure = bench_runner._Runner.measure
    calls = {"n": 0}

    def flaky(self, method, input_ids, session=None, cache=None):
        sequences, metrics = measure(self, method, input_ids, session=session, cache=cache)
        calls["n"] += 1
        if method.name == "prompt_lookup" and calls["n"] == 2:  # its first repeat emits another last token
            sequences = sequences.clone()
            sequences[0, -1] = (sequences[0, -1] + 1) % target.config.vocab_size
        return sequences, metrics

    monkeypatch.setattr(bench_runner._Runner, "measure", flaky)
    result = run_bench(
        target,
        tokenizer,
        {"prompt_lookup": None},
        workloads,
        max_new_tokens=6,
        progress=False,
        warmup=False,
        repeats=2,
    )
    assert result["ok"] is False and [m["method"] for m in result["mismatches"]] == ["prompt_lookup"]
    assert "repeats [0] of 2 gave another output" in result["mismatches"][0]["reason"]


@pytest.mark.parametrize("repeats", [0, -1, 1.5, True])
def test_run_bench_refuses_a_bad_repeat_count(tiny, tokenizer, repeats):
    target, _ = tiny
    with pytest.raises(ValueError, match=rf"repeats={repeats!r} is invalid: expected an int >= 1"):
        run_bench(target, tokenizer, {}, {}, repeats=repeats, progress=False)


def _patch_cli(monkeypatch, tiny, tokenizer) -> None:
    target, drafters = tiny
    monkeypatch.setattr(
        bench_command, "_load_target", lambda name, dtype, attention, pack_weights: (target, tokenizer, "/tiny")
    )
    monkeypatch.setattr(bench_command, "_load_drafter", lambda path, dtype: drafters[path])


def _cli(tmp_path, *extra: str) -> list[str]:
    return [
        "bench",
        "--target",
        "tiny",
        "--drafter",
        "dlite",
        "--drafter-history",
        "history",
        "--workloads",
        "code",
        "--methods",
        "prompt_lookup,dlite,history",
        "--num-prompts",
        "1",
        "--max-new-tokens",
        "6",
        "--out",
        str(tmp_path),
        "--name",
        "cli",
        "--no-progress",
        "--no-warmup",
        *extra,
    ]


def test_cli_writes_results_and_fails_on_a_mismatch(tiny, tokenizer, tmp_path, monkeypatch, capsys):
    _patch_cli(monkeypatch, tiny, tokenizer)
    assert main(_cli(tmp_path)) == 0
    result = json.loads((tmp_path / "cli.json").read_text())
    _check_result(result, ("plain", "prompt_lookup", "dlite", "history"), ["code"])
    assert result["meta"]["command"].startswith("dlite-hf bench --target tiny --drafter dlite")
    assert "| code | dlite |" in (tmp_path / "cli.md").read_text()
    assert result["meta"]["sdpa_force_gqa"] is False and "--bfcl-sessions" not in result["meta"]["command"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cli.json", "cli.md"]  # plots only with --plot

    # --sdpa-gqa: transformers' GQA switch for every method; recorded, in the command, outputs still identical
    monkeypatch.delenv("TRANSFORMERS_SDPA_FORCE_GQA", raising=False)
    assert main(_cli(tmp_path, "--sdpa-gqa")) == 0
    assert "TRANSFORMERS_SDPA_FORCE_GQA" not in os.environ  # set for the run only
    result = json.loads((tmp_path / "cli.json").read_text())
    assert result["meta"]["sdpa_force_gqa"] is True and " --sdpa-gqa" in result["meta"]["command"]
    assert result["ok"] is True and "--repeats" not in result["meta"]["command"]
    assert main(_cli(tmp_path, "--repeats", "2")) == 0  # --repeats reaches the run and its recorded command
    result = json.loads((tmp_path / "cli.json").read_text())
    assert result["meta"]["repeats"] == 2 and " --repeats 2 " in result["meta"]["command"]
    assert all(len(r["wall_s_repeats"]) == 2 for r in result["records"])

    original = bench_runner._Runner.generate

    def corrupt(self, method: BenchMethod, input_ids, max_new_tokens=None, session=None, cache=None):
        out = original(self, method, input_ids, max_new_tokens, session=session, cache=cache)
        if method.name == "dlite":
            out = out.clone()
            out[0, -1] = (out[0, -1] + 1) % 49152
        return out

    monkeypatch.setattr(bench_runner._Runner, "generate", corrupt)
    capsys.readouterr()
    assert main(_cli(tmp_path)) == 1
    err = capsys.readouterr().err
    assert "LOSSLESS CHECK FAILED: dlite on code" in err
    result = json.loads((tmp_path / "cli.json").read_text())
    assert result["ok"] is False and [m["method"] for m in result["mismatches"]] == ["dlite"]
    assert result["mismatches"][0]["first_mismatch"] == 5
    flags = {r["method"]: r["identical_to_plain"] for r in result["records"]}
    assert flags == {"plain": True, "prompt_lookup": True, "dlite": False, "history": True}
    assert "**NO (1/1)**" in (tmp_path / "cli.md").read_text()
    assert main(_cli(tmp_path, "--allow-mismatch")) == 0


def test_confidence_threshold_and_fixed_k_methods(tiny, tokenizer, tmp_path, monkeypatch):
    _patch_cli(monkeypatch, tiny, tokenizer)
    drafter = tiny[1]["dlite"]
    assert drafter.config.draft_confidence_threshold == 0.0
    argv = _cli(tmp_path, "--confidence-threshold", "0.5")
    argv[argv.index("prompt_lookup,dlite,history")] = "dlite,dlite_fixed"
    assert main(argv) == 0
    result = json.loads((tmp_path / "cli.json").read_text())
    _check_result(result, ("plain", "dlite", "dlite_fixed"), ["code"])
    assert " --methods plain,dlite,dlite_fixed --confidence-threshold 0.5 " in result["meta"]["command"]
    assert result["methods"]["dlite"]["drafter"]["draft_confidence_threshold"] == 0.5
    assert result["methods"]["dlite_fixed"]["drafter"]["draft_confidence_threshold"] == 0.0
    records = {r["method"]: r for r in result["records"]}
    # a random drafter over 49k tokens is never 50% sure of its first draft: one draft per round; fixed K drafts more
    assert records["dlite"]["drafted"] == records["dlite"]["rounds"] >= 1
    assert records["dlite_fixed"]["drafted"] > records["dlite_fixed"]["rounds"]
    assert drafter.config.draft_confidence_threshold == 0.0  # per call: the shared config was never changed

    with pytest.raises(ValueError, match=r"GenerationConfig.draft_confidence_threshold=2.0 is invalid"):
        BenchMethod("bad", "dlite", drafter, drafter_overrides={"draft_confidence_threshold": 2.0})
    with pytest.raises(ValueError, match=r"names \['draft_threshold'\], which a generate\(\) call cannot set"):
        BenchMethod("bad", "dlite", drafter, drafter_overrides={"draft_threshold": 0.1})
    fixed = make_methods({"dlite_fixed": drafter})[1]
    assert fixed.drafter_overrides == {"draft_confidence_threshold": 0.0, "draft_skip_threshold": 0.0}
    config = fixed.generation_config(do_sample=False, max_new_tokens=3)
    assert config.draft_confidence_threshold == 0.0 and config.max_new_tokens == 3


def test_skipped_rounds_count_as_drafting_calls(tiny, tokenizer, tmp_path, monkeypatch):
    """drafter ms per round divides drafting time by every call that ran the drafter, skipped rounds included."""
    _patch_cli(monkeypatch, tiny, tokenizer)
    argv = _cli(tmp_path, "--skip-threshold", "0.9")
    argv[argv.index("prompt_lookup,dlite,history")] = "dlite,dlite_fixed"
    assert main(argv) == 0
    result = json.loads((tmp_path / "cli.json").read_text())
    _check_result(result, ("plain", "dlite", "dlite_fixed"), ["code"])
    records = {r["method"]: r for r in result["records"]}
    # a random drafter is never 90% sure of its first draft: every round is skipped, none verified
    skipping, fixed = records["dlite"], records["dlite_fixed"]
    assert skipping["rounds"] == 0 and skipping["draft_calls"] >= 1 and skipping["tau"] == 1.0
    assert fixed["draft_calls"] == fixed["rounds"] >= 1
    for record in (skipping, fixed):
        assert record["drafter_ms_per_round"] == pytest.approx(1000 * record["drafter_s"] / record["draft_calls"])
    row = next(r for r in result["summary"] if r["method"] == "dlite")
    assert row["drafter_ms_per_round"] == pytest.approx(skipping["drafter_ms_per_round"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--methods", "plain,eagle"], "Unknown method(s) eagle; allowed: plain, prompt_lookup, dlite"),
        (["--workloads", "chat,swe"], "Unknown workload(s) swe; allowed: chat, code, math, tool, agentic, long"),
        (["--methods", "history"], "method history needs --drafter-history PATH"),
        (["--methods", "dlite_nohead,assisted"], "dlite_nohead needs --drafter-nohead PATH; method assisted needs"),
        (["--methods", "plain", "--workloads", "long", "--long-lengths", "1024,20000"], "each length must be in"),
        (["--methods", "plain", "--bfcl-sessions", "-1"], "--bfcl-sessions and --coding-sessions must be >= 0"),
        (["--methods", "plain", "--repeats", "0"], "--repeats 0 is invalid: expected >= 1"),
        (
            ["--methods", "plain", "--coding-files", "9"],
            "--coding-files 9 is invalid: a coding session reads at most 8",
        ),
        (
            ["--methods", "dlite", "--confidence-threshold", "1.5"],
            "--confidence-threshold sets draft_confidence_threshold=1.5 is invalid",
        ),
    ],
)
def test_bad_flags_say_what_is_allowed(argv, message, monkeypatch):
    def no_load(name, dtype, attention, pack_weights):
        raise AssertionError("flags must be checked before any model is loaded")

    monkeypatch.setattr(bench_command, "_load_target", no_load)
    with pytest.raises(SystemExit) as error:
        main(["bench", *argv])
    assert message in str(error.value)


def test_wrong_checkpoint_for_a_method_is_refused(tiny):
    _, drafters = tiny
    with pytest.raises(ValueError, match="history-aware checkpoint"):
        make_methods({"history": drafters["dlite"]})
    with pytest.raises(ValueError, match="--drafter-nohead"):
        make_methods({"dlite": drafters["dlite_nohead"]})
    with pytest.raises(ValueError, match="--drafter-history"):
        make_methods({"dlite": drafters["history"]})
    assert [m.name for m in make_methods({"dlite": drafters["dlite"]})] == ["plain", "dlite"]


# ------------------------------------------------------------------------------------------------ loaders
def test_workload_loaders_on_the_real_files(tokenizer):
    workloads = build_workloads(
        ["chat", "code", "math", "tool", "agentic", "long"],
        tokenizer,
        num_prompts=P.EVAL_SIZE,
        long_lengths=(1024, 4096),
        coding_sessions=len(CODING_TASKS),
    )
    counts = {label: len(sessions) for label, sessions in workloads.items()}
    assert counts == {
        "chat": 16,
        "code": 16,
        "math": 16,
        "tool": 16,
        "agentic": 16 + 1 + 3,
        "long-1024": 16,
        "long-4096": 16,
    }
    for label in ("chat", "code", "math", "tool"):
        train = P.load_prompts(label, "train")
        sessions = workloads[label]
        assert all(len(s["turns"]) == 1 and s["workload"] == label for s in sessions)
        assert not {s["id"] for s in sessions} & {p["id"] for p in train}
        assert not {json.dumps(s["turns"][0]) for s in sessions} & {json.dumps(p["messages"]) for p in train}
    train_conversations = {p["id"].rsplit("/", 1)[0] for p in P.load_prompts("agentic", "train")}
    tooltalk = [s for s in workloads["agentic"] if s["id"].startswith("tooltalk/")]
    assert len(tooltalk) == 16 and not {s["id"].rsplit("/", 1)[0] for s in tooltalk} & train_conversations
    for session in workloads["agentic"]:
        assert session["max_tokens"] == 8192 and session["max_turns"] == 8 and len(session["turns"]) >= 2
        assert session["turns"][0][0]["role"] == "system"
        assert all(m["role"] in ("user", "tool") for turn in session["turns"][1:] for m in turn)
    for label, length in (("long-1024", 1024), ("long-4096", 4096)):
        sizes = [len(chat_prompt_ids(tokenizer, s["turns"][0])) for s in workloads[label]]
        assert all(length - 64 <= n <= length for n in sizes), sizes


def test_sessions_replay_recorded_conversations_and_read_real_files(tokenizer):
    prompt = {
        "id": "x/1",
        "source": "s",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "u1"},
            {"role": "assistant", "content": "call"},
            {"role": "tool", "content": "r1"},
            {"role": "assistant", "content": "call"},
            {"role": "tool", "content": "r2"},
            {"role": "user", "content": "u2"},
        ],
    }
    session = session_from_messages(prompt, max_tokens=100)
    assert [[m["content"] for m in t] for t in session["turns"]] == [["sys", "u1"], ["r1"], ["r2", "u2"]]
    coding = coding_session(CODING_TASKS[0], tokenizer, max_tokens=None, file_tokens=200)
    contents = [m["content"] for turn in coding["turns"] for m in turn]
    decoder_head = inspect.getsource(json.decoder).splitlines()[0]
    assert decoder_head in contents[2] and "showing lines 1-" in contents[2]
    assert any("FAILURES" in c and "json/decoder.py" in c for c in contents)
    assert all(len(tokenizer(c)["input_ids"]) <= 260 for c in contents if c.startswith("read_file"))


def test_assisted_decoding_with_a_small_assistant(tiny, tokenizer):
    target, _ = tiny
    config = target.config.to_dict() | {"num_hidden_layers": 1}
    torch.manual_seed(5)
    assistant = LlamaForCausalLM(LlamaConfig(**config)).eval()
    assistant.generation_config.eos_token_id = None
    workloads = build_workloads(["math"], tokenizer, num_prompts=1)
    result = run_bench(target, tokenizer, {"assisted": assistant}, workloads, max_new_tokens=8, progress=False)
    _check_result(result, ("plain", "assisted"), ["math"])
    record = result["records"][1]
    assert record["rounds"] >= 1 and record["drafter_ms_per_round"] > 0  # the assistant's forwards, timed by hooks
    assert result["methods"]["assisted"]["assistant"]["universal"] is False


def test_weights_sha256_names_the_weights_a_table_was_measured_with(tiny, tmp_path):
    import hashlib

    from dlite_hf.bench.methods import weights_sha256

    tiny[1]["dlite"].save_pretrained(tmp_path / "drafter")
    expected = hashlib.sha256((tmp_path / "drafter" / "model.safetensors").read_bytes()).hexdigest()
    assert weights_sha256(str(tmp_path / "drafter")) == expected
    assert weights_sha256(str(tmp_path / "missing")) is None and weights_sha256(None) is None


def test_cli_measures_a_users_prompt_file(tiny, tokenizer, tmp_path, monkeypatch):
    import json as json_module

    _patch_cli(monkeypatch, tiny, tokenizer)
    path = tmp_path / "mine.jsonl"
    path.write_text(json_module.dumps({"id": "mine-1", "messages": [{"role": "user", "content": "Say hi."}]}) + "\n")
    argv = _cli(tmp_path, "--prompts", str(path))
    del argv[argv.index("--workloads") : argv.index("--workloads") + 2]  # only the file
    assert main(argv) == 0
    result = json.loads((tmp_path / "cli.json").read_text())
    assert result["workloads"] == ["prompts"] and {r["prompt_id"] for r in result["records"]} == {"mine-1"}
    assert f"--prompts {path}" in result["meta"]["command"] and "--workloads" not in result["meta"]["command"]
    path.write_text('{"messages": []}\n')
    with pytest.raises(SystemExit, match=r"--prompts .*prompt 1: expected a non-empty `messages` list"):
        main(argv)


def _record(method: str, prompt: str, new_tokens: int, wall: float, decode: float) -> dict:
    return {
        "workload": "chat",
        "method": method,
        "prompt_id": prompt,
        "prompt_tokens": 10,
        "new_tokens": new_tokens,
        "target_forwards": new_tokens,
        "rounds": 0,
        "accepted": 0,
        "drafted": 0,
        "tau": 1.0,
        "wall_s": wall,
        "decode_s": decode,
        "prefill_s": wall - decode,
        "target_s": wall,
        "drafter_s": None,
        "identical_to_plain": method == "plain" or new_tokens == 8,
        "lossless_ok": True,
        "peak_rss_delta_mb": None,
    }


def test_speedup_is_a_tokens_per_second_ratio_so_a_shorter_output_is_not_faster():
    from dlite_hf.bench.report import summarize

    records = [
        _record("plain", "a", 8, wall=4.0, decode=3.0),
        _record("plain", "b", 8, wall=4.0, decode=3.0),
        _record("dlite", "a", 8, wall=2.0, decode=1.0),  # the same output in half the time: 2x
        _record("dlite", "b", 4, wall=2.0, decode=1.5),  # a near-tie output half as long in half the time: 1x
    ]
    rows = {r["method"]: r for r in summarize(records, ["plain", "dlite"], ["chat"])}
    # tokens/s: plain 16 / 8 s = 2; dlite 12 / 4 s = 3; decode: plain 16 / 6 s, dlite 12 / 2.5 s
    assert rows["dlite"]["speedup"] == pytest.approx(1.5)
    assert rows["dlite"]["decode_speedup"] == pytest.approx((12 / 2.5) / (16 / 6))
    assert rows["dlite"]["wall_ratio"] == pytest.approx(2.0)  # what a wall-time ratio would have claimed
    same = {r["method"]: r for r in summarize(records[:3], ["plain", "dlite"], ["chat"])}
    assert same["dlite"]["speedup"] == pytest.approx(2.0) == same["dlite"]["wall_ratio"]  # identical outputs


def test_pack_weights_reaches_the_loading_and_the_record(tiny, tokenizer, tmp_path, monkeypatch):
    """`--pack-weights` loads the target with packed weights, and the run says so (command, meta, table header)."""
    target, drafters = tiny
    seen = []

    def load(name, dtype, attention, pack_weights):
        seen.append(pack_weights)
        return target, tokenizer, "/tiny"

    monkeypatch.setattr(bench_command, "_load_target", load)
    monkeypatch.setattr(bench_command, "_load_drafter", lambda path, dtype: drafters[path])
    assert main(_cli(tmp_path, "--pack-weights")) == 0
    result = json.loads((tmp_path / "cli.json").read_text())
    assert seen == [True] and result["meta"]["pack_weights"] is True and "--pack-weights" in result["meta"]["command"]
    assert "the target on weights packed once" in (tmp_path / "cli.md").read_text()
