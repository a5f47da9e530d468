"""The typed results document (`dlite_hf.bench.results`): every committed run loads and writes back byte for
byte, the loader's errors say what it got, what it expected and how to fix it, older schema versions are migrated
on read, and a document built in code is written in the runner's key order."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from dlite_hf.bench.report import markdown_table
from dlite_hf.bench.results import (
    SCHEMA_VERSION,
    BenchResult,
    Divergence,
    Goal,
    Mismatch,
    NearTie,
    Record,
    ResultsError,
    RunMeta,
    SummaryRow,
    as_parts,
    load_result,
    parse_result,
)

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
BENCH_RUNS = sorted(
    path for path in RESULTS.glob("*.json") if '"schema_version"' in path.read_text(encoding="utf-8")[:200]
)


def _record(method: str, **fields) -> dict:
    """A version-1 record: no draft_calls, near_tie, lossless_ok nor cached_prompt_tokens."""
    record = {
        "workload": "chat",
        "session_id": "s",
        "turn": 0,
        "prompt_id": "s",
        "source": "",
        "method": method,
        "prompt_tokens": 10,
        "new_tokens": 8,
        "target_forwards": 4,
        "rounds": 3,
        "drafted": 9,
        "accepted": 4,
        "tau": 2.0,
        "wall_s": 1.0,
        "prefill_s": 0.25,
        "decode_s": 0.75,
        "tok_s": 8.0,
        "decode_tok_s": 10.0,
        "target_s": 0.5,
        "drafter_s": 0.3,
        "overhead_s": 0.2,
        "target_ms_per_round": 80.0,
        "drafter_ms_per_round": 100.0,
        "drafter_share": 0.5,
        "peak_rss_delta_mb": 1.5,
        "identical_to_plain": True,
        "first_mismatch": None,
    }
    return {**record, **fields}


def _version_1_document() -> dict:
    return {
        "schema_version": 1,
        "meta": {"machine": {"cpu": "x86", "cpu_count": 2}, "threads": 1, "command": "dlite-hf bench", "note": "kept"},
        "methods": {"plain": {"kind": "plain"}, "dlite": {"kind": "dlite"}},
        "workloads": ["chat"],
        "sessions": [
            {
                "workload": "chat",
                "id": "s",
                "turns_available": 1,
                "turns_measured": 1,
                "stop_reason": "end",
                "last_context_tokens": 10,
            }
        ],
        "records": [_record("plain", rounds=0), _record("dlite", identical_to_plain=False, first_mismatch=5)],
        "summary": [{"workload": "chat", "method": "dlite", "prompts": 1, "mean_tau": 2.0, "speedup": 1.5}],
        "goals": [{"goal": "chat: dlite speedup > prompt_lookup speedup", "met": None, "measured": "not measured"}],
        "mismatches": [],
        "ok": True,
    }


# ---------------------------------------------------------------------------------------------------------------------
# every committed run
# ---------------------------------------------------------------------------------------------------------------------


def test_the_committed_runs_span_every_supported_version():
    versions = {json.loads(path.read_text())["schema_version"] for path in BENCH_RUNS}
    assert versions == {1, 2, 3} and SCHEMA_VERSION == 3, versions


@pytest.mark.parametrize("path", BENCH_RUNS, ids=lambda p: p.stem)
def test_every_committed_run_loads_and_writes_back_byte_for_byte(path):
    result = load_result(path)
    assert isinstance(result, BenchResult) and result.summary and result.records
    assert json.dumps(result.to_dict(), indent=1) + "\n" == path.read_text(encoding="utf-8")
    # its table renders as committed (the README quotes these tables' numbers)
    assert markdown_table(result) == path.with_suffix(".md").read_text(encoding="utf-8")
    # migrated to the current version's meaning, whatever version it was written in
    assert result.meta.dtype in ("float32", "bfloat16") and result.meta.attention
    assert all(r.draft_calls is not None and r.lossless_ok is not None for r in result.records)


def test_the_module_needs_no_torch():
    """The cards, the README tables and the goals read results without torch: the typed definition imports only
    the standard library."""
    tree = ast.parse((REPO / "src" / "dlite_hf" / "bench" / "results.py").read_text())
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {
        node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 0
    }
    relative = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level}
    assert imported <= sys.stdlib_module_names, imported - sys.stdlib_module_names
    assert not relative, relative


# ---------------------------------------------------------------------------------------------------------------------
# validation errors
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (
            [],
            r"run\.json is not a `dlite-hf bench` results document: it holds a list \(\[\]\), expected a JSON "
            r"object with schema_version, meta, records and summary\. Pass the NAME\.json `dlite-hf bench",
        ),
        (
            {"records": []},
            r"run\.json is not a `dlite-hf bench` results document \(it has no 'summary'; its keys: "
            r"records\)\. Pass the NAME\.json",
        ),
        (
            {"schema_version": 9, "summary": []},
            r"schema_version is 9: expected one of 1, 2, 3 \(this dlite-hf reads "
            r"versions 1 to 3\); upgrade dlite-hf to read it",
        ),
        ({"schema_version": "3", "summary": []}, r"schema_version is \"3\": expected one of 1, 2, 3 .*no version"),
        (
            {"summary": {"chat": 1}},
            r"run\.json: summary is \{\"chat\": 1\}: expected a list\. The file is not as "
            r"`dlite-hf bench` writes it .*restore it \(git checkout\) or re-run",
        ),
        (
            {"summary": [{"workload": "chat", "method": "dlite", "mean_tau": 2.0}]},
            r"run\.json: summary\[0\]\.speedup is absent: expected a number\.",
        ),
        (
            {"summary": [], "records": [{"workload": "chat", "method": "dlite", "prompt_id": "a", "tau": "2.0"}]},
            r"run\.json: records\[0\]\.tau is \"2\.0\": expected a number or null\.",
        ),
        (
            {"summary": [], "records": [{"workload": "chat", "method": "dlite", "prompt_id": "a", "turn": True}]},
            r"records\[0\]\.turn is true: expected an integer or null",
        ),
        (
            {"summary": [], "meta": {"machine": ["x86"]}},
            r"run\.json: meta\.machine is \[\"x86\"\]: expected a JSON "
            r"object",
        ),
        (
            {"summary": [], "goals": [{"goal": "g", "measured": "m"}]},
            r"goals\[0\]\.met is absent: expected true "
            r"or false or null",
        ),
    ],
)
def test_the_loader_says_what_it_got_what_it_expected_and_how_to_fix_it(document, expected):
    with pytest.raises(ResultsError, match=expected):
        parse_result(document, "run.json")


def test_load_result_names_the_file_and_refuses_what_is_not_json(tmp_path):
    path = tmp_path / "run.json"
    path.write_text("{not json")
    with pytest.raises(ResultsError, match=r"run\.json is not a `dlite-hf bench` results document: it is not JSON"):
        load_result(path)
    assert issubclass(ResultsError, ValueError)  # callers that catch ValueError keep working
    with pytest.raises(OSError):
        load_result(tmp_path / "missing.json")


def test_rows_given_as_json_are_checked_too():
    row = {"workload": "chat", "method": "dlite", "mean_tau": 2, "speedup": 1.5}
    assert as_parts([row], SummaryRow, "summary")[0].mean_tau == 2
    with pytest.raises(ResultsError, match=r"summary\[1\]\.method is absent: expected a string"):
        typed = SummaryRow(workload="a", method="b", mean_tau=1.0, speedup=1.0)
        as_parts([typed, {"workload": "chat"}], SummaryRow, "summary")
    with pytest.raises(ResultsError, match=r"records\[0\] is 3: expected a JSON object"):
        as_parts([3], Record, "records")


# ---------------------------------------------------------------------------------------------------------------------
# migration
# ---------------------------------------------------------------------------------------------------------------------


def test_a_version_1_document_reads_with_the_current_versions_meaning():
    document = _version_1_document()
    result = parse_result(json.loads(json.dumps(document)))
    assert result.schema_version == 1  # the version it was written in
    plain, dlite = result.records
    # version 1 divided drafter time by verified rounds: draft_calls = rounds
    assert (plain.draft_calls, dlite.draft_calls) == (0, 3)
    # version 2 had no near-tie check: float32 only, lossless meant identical to plain; no divergences
    assert (plain.lossless_ok, dlite.lossless_ok) == (True, False) and dlite.near_tie is None
    assert result.divergences == [] and result.meta.dtype == "float32" and result.meta.near_tie_epsilon is None
    assert result.meta.attention == "sdpa" and result.meta.prefix_cache is False and result.meta.repeats == 1
    assert result.meta.extra == {"note": "kept"} and result.meta.machine.cpu == "x86"
    assert result.goals == [Goal(goal=document["goals"][0]["goal"], met=None, measured="not measured")]
    # written back as it was read: the migration is the values' meaning, not new keys in the file
    assert result.to_dict() == document and list(result.to_dict()) == list(document)
    assert list(result.to_dict()["records"][0]) == list(document["records"][0])


def test_a_version_2_document_keeps_its_draft_calls_and_gains_lossless_ok():
    document = _version_1_document()
    document["schema_version"] = 2
    document["records"][1]["draft_calls"] = 5  # a skipped round ran the drafter too
    result = parse_result(document)
    assert result.records[1].draft_calls == 5 and result.records[0].draft_calls is None
    assert [r.lossless_ok for r in result.records] == [True, False]


def test_a_document_without_a_version_or_ok_reads_as_the_current_version():
    document = {"summary": [], "mismatches": [{"workload": "chat", "prompt_id": "a", "method": "dlite"}]}
    result = parse_result(document)
    assert result.schema_version == SCHEMA_VERSION and result.ok is False  # ok: no lossless failure
    assert result.to_dict() == document
    assert parse_result({"summary": []}).ok is True


# ---------------------------------------------------------------------------------------------------------------------
# round trip and the writer's order
# ---------------------------------------------------------------------------------------------------------------------


def _near_tie() -> NearTie:
    return NearTie(
        identical=False,
        first_divergence=5,
        plain_token=11,
        speculative_token=12,
        divergence_margin=0.01,
        top2_margin=0.01,
        max_gap=0.2,
        worst_position=5,
        epsilon=1.75,
        ok=True,
        reason="",
    )


def test_a_document_built_in_code_is_written_in_the_runners_order_and_reads_back_the_same():
    metrics = {k: v for k, v in _record("hybrid").items() if k not in ("identical_to_plain", "first_mismatch")}
    hybrid = Record(
        **metrics,
        draft_calls=4,
        cached_prompt_tokens=0,
        lookup_rounds=1,
        lookup_drafted=3,
        lookup_accepted=2,
        lookup_s=0.01,
        lookup_index_reused=0,
        lookup_fallback_rounds=0,
        dlite_rounds=2,
        dlite_accepted=2,
        dlite_drafter_s=0.29,
        identical_to_plain=False,
        first_mismatch=5,
        near_tie=_near_tie(),
        lossless_ok=True,
        wall_s_repeats=[1.0, 1.1],
    )
    plain_metrics = {**_record("plain"), "draft_calls": 0, "cached_prompt_tokens": 0}
    plain = Record(**plain_metrics, near_tie=None, lossless_ok=True)
    result = BenchResult(
        meta=RunMeta.from_dict({"machine": {"cpu": "x86"}, "command": "dlite-hf bench", "dtype": "bfloat16"}),
        methods={"plain": {"kind": "plain"}, "hybrid": {"kind": "dlite"}},
        workloads=["chat"],
        records=[plain, hybrid],
        summary=[SummaryRow(workload="chat", method="hybrid", mean_tau=2.0, speedup=1.5)],
        mismatches=[Mismatch(workload="chat", prompt_id="s", turn=0, method="hybrid", first_mismatch=5)],
        divergences=[Divergence.of(hybrid)],
        ok=False,
    )
    written = result.to_dict()
    assert list(written) == [
        "schema_version",
        "meta",
        "methods",
        "workloads",
        "sessions",
        "records",
        "summary",
        "mismatches",
        "divergences",
        "ok",
    ]  # files, goals: only when set
    assert written["schema_version"] == SCHEMA_VERSION and list(written["meta"]) == ["machine", "command", "dtype"]
    # a hybrid record: the lookup keys after the timings, the verdict last; a plain one has no lookup keys
    keys = list(written["records"][1])
    assert keys.index("peak_rss_delta_mb") + 1 == keys.index("lookup_rounds") and keys[-1] == "wall_s_repeats"
    assert keys[-5:-1] == ["identical_to_plain", "first_mismatch", "near_tie", "lossless_ok"]
    assert "lookup_rounds" not in written["records"][0] and "wall_s_repeats" not in written["records"][0]
    assert "reason" not in written["mismatches"][0]
    # a divergence is where it happened, then the verdict, as `{...} | near_tie` wrote it
    where = {k: written["records"][1][k] for k in ("workload", "prompt_id", "method", "first_mismatch", "new_tokens")}
    assert written["divergences"] == [where | _near_tie().to_dict()]
    assert list(written["divergences"][0]) == [*where, *NearTie.field_names()]
    # JSON -> typed -> JSON is the identity, and typed -> JSON -> typed gives equal parts
    again = parse_result(json.loads(json.dumps(written)))
    assert again.to_dict() == written and again.records == result.records and again.divergences == result.divergences


def test_set_after_loading_files_and_goals_are_written_where_a_rewrite_put_them(tmp_path):
    document = _version_1_document()
    del document["goals"]
    result = parse_result(document)
    result.goals = [Goal(goal="g", met=True, measured="1.5x")]
    result.files = {"json": "run.json"}
    written = result.to_dict()
    assert list(written)[-2:] == ["files", "goals"] and written["goals"] == [
        {"goal": "g", "met": True, "measured": "1.5x"}
    ]
    result.goals = None  # a key written only when set
    assert "goals" not in result.to_dict()


def test_value_or_tells_a_missing_key_from_a_null_one():
    meta = parse_result({"summary": [], "meta": {"command": None}}).meta
    assert meta.value_or("command", "(Python API)") is None  # present, null
    assert meta.value_or("target", "?") == "?" and meta.target is None  # absent
    assert RunMeta(target="t").value_or("target", "?") == "t"  # built in code: every field is set
