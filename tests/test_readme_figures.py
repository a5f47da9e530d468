"""The README's speed tables and the out-of-domain figures of the README and the training log are the committed
result files' (a re-run that moves them must update both). They compare documents with documents, so they run
under the `docs` marker (`make test-docs`), outside the default run."""

from __future__ import annotations

import hashlib
import json
import statistics
from pathlib import Path

import pytest

from dlite_hf.bench import report
from dlite_hf.bench.summary import context_rows

pytestmark = pytest.mark.docs
REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def _row(label: str, document: str = "README.md") -> list[str]:
    for line in (REPO / document).read_text().splitlines():
        line = line.strip()  # a table inside a list item is indented
        if line.startswith(f"| {label} |"):
            return [cell.strip().strip("*") for cell in line.strip("|").split("|")][1:]
    raise AssertionError(f"no {document} row {label!r}")


def _check_log_table(result: str, rows: dict[str, str], cells, skip: int = 0) -> dict:
    """Each training-log row `label` holds, after its first `skip` cells, `cells(entry, tau)` of drafter
    `rows[label]` in `result`; returns the result's drafters."""
    drafters = json.loads((RESULTS / result).read_text())["drafters"]
    for label, name in rows.items():
        entry = drafters[name]
        expected = cells(entry, entry["tau_by_workload"])
        assert _row(label, "docs/training-log.md")[skip:] == expected, (label, expected)
    return drafters


def _taus(tau: dict, workloads: tuple[str, ...]) -> str:
    return " / ".join(f"{tau[w]:.2f}" for w in workloads)


def test_the_training_logs_out_of_domain_tau_table_is_the_result_file() -> None:
    rows = {
        "shipped": "base",
        "+ 200 steps on the regenerated rows": "regen@200",
        "+ 200 steps on the target-labelled text": "text@200",
        "shipped, draft vocabulary re-chosen from the mix (2,048 ids)": "v2048",
    }
    _check_log_table(
        "smollm2-135m-ood-tau.json",
        rows,
        lambda entry, tau: (
            [f"{tau[w]:.2f}" for w in ("legal", "clinical", "long")]
            + [f"{entry['mean_tau_ood']:.2f}", _taus(tau, ("chat", "code", "math", "tool"))]
            + [f"{entry['mean_tau_in_domain']:.2f}"]
        ),
    )
    # the README quotes the drafter shipped now (the weight-averaged one of smollm2-135m-scale34k.json)
    shipped = json.loads((RESULTS / "smollm2-135m-scale34k.json").read_text())["drafters"]["all39-wise0.7"]
    readme = " ".join((REPO / "README.md").read_text().split())
    quoted = f"greedy tau is {shipped['mean_tau_ood']:.2f} against {shipped['mean_tau_in_domain']:.2f} in domain"
    assert quoted in readme, quoted


def test_the_training_logs_rebalanced_study_table_is_the_result_file() -> None:
    rows = {
        "shipped until now": "shipped",
        "rebal, 900 steps": "rebal@900",
        "rebal, 2,338": "rebal",
        "nohead, 900": "nohead@900",
        "nohead, 2,389": "nohead",
        "rebal, 8,192 draft ids": "rebal-v8192",
        "0.5 shipped + 0.5 rebal": "wise0.5",
        "0.3 shipped + 0.7 rebal": "wise0.7",
        "**0.5 / 0.5, 4,096 ids (ships)**": "wise0.5-v4096",
    }
    groups = (
        ("chat", "code", "math", "tool"),
        ("long", "legal", "clinical"),
        ("manpages", "reasoning", "policy_agent"),
    )
    _check_log_table(
        "smollm2-135m-rebal.json",
        rows,
        lambda entry, tau: _mean_cells(entry) + [_taus(tau, group) for group in groups],
    )


# the workload columns of the data-scale tables: the README's workloads, out of domain, the mix's new domains
WORKLOAD_GROUPS = (
    ("chat", "code", "math", "tool", "agentic"),
    ("long", "legal", "clinical"),
    ("manpages", "reasoning", "policy_agent"),
)


def _mean_cells(entry: dict) -> list[str]:
    return [f"{entry['mean_tau_ood']:.3f}", f"{entry['mean_tau_in_domain']:.3f}"]


def test_the_training_logs_ten_million_token_table_is_the_result_file() -> None:
    rows = {
        "shipped (the 96 texts)": "shipped",
        "rebal (both arms' start)": "rebal",
        "all: greedy + sampled rows, 1,423 steps": "all37",
        "greedy rows only, 1,427 steps": "greedy37",
        "0.5 before + 0.5 all": "all37-wise",
        "0.5 before + 0.5 greedy-only": "greedy37-wise",
    }

    def first_draft(entry: dict, out_of_domain: bool) -> str:
        ood = {"legal", "clinical", "long"}
        rounds = [a for r in entry["rows"] if (r["workload"] in ood) == out_of_domain for a in r["accepted"]]
        return f"{sum(a >= 1 for a in rounds) / len(rounds):.1%}"

    _check_log_table(
        "smollm2-135m-scale24k.json",
        rows,
        lambda entry, tau: (
            _mean_cells(entry)
            + [_taus(tau, group) for group in WORKLOAD_GROUPS]
            + [f"{first_draft(entry, True)} / {first_draft(entry, False)}"]
        ),
    )


def test_the_training_logs_every_row_table_is_the_result_file() -> None:
    rows = {
        "shipped until now (the 96 texts)": "shipped",
        "all39, 1,500 steps": "all39-1500",
        "all39, 3,116 steps": "all39",
        "0.5 before + 0.5 all39": "all39-wise0.5",
        "**0.3 before + 0.7 all39 (ships)**": "all39-wise0.7",
    }
    _check_log_table(
        "smollm2-135m-scale34k.json",
        rows,
        lambda entry, tau: (
            _mean_cells(entry)
            + [_taus(tau, group) for group in WORKLOAD_GROUPS]
            + [f"{entry['first_accepted_ood']:.1%} / {entry['first_accepted_in_domain']:.1%}"]
        ),
    )


MAIN_RUN = "smollm2-135m-main-bf16-packed-r4"  # the README's main table
OOD_RUN = "smollm2-135m-ood-bf16-packed"  # the out-of-domain table (benchmarks/README.md)
SERVE_QWEN = "serve-vllm-qwen2.5-coder-0.5b"
QWEN_RUN = "qwen2.5-coder-0.5b-generate"  # the README's Qwen table, measured with the shipped Qwen drafter
QWEN_LONG_RUN = "qwen2.5-coder-0.5b-long-sessions-shipped-2"  # long sessions again, the shipped Qwen drafter


def _check_speed_table(table: str, run: str, document: str = "README.md") -> dict:
    """Every row `dlite-hf bench tables` renders from `run` is a line of `document`, verbatim."""
    result = report.load_run(run, RESULTS)
    readme = (REPO / document).read_text().splitlines()
    rendered = report.readme_rows(result, table)
    if table == "context":  # the buckets the sessions reached, from under 2k to 12k-16k
        assert {"ctx <2k", "ctx 12k-16k"} <= set(rendered), rendered
    else:
        assert set(rendered) == set(report.README_LABELS[table]), "the run lacks a workload the README's table shows"
    for workload, line in rendered.items():
        assert line in readme, f"README row for {workload} is not `dlite-hf bench tables {table} {run}`"
    assert report.README_TABLES[table][0].splitlines()[0] in readme
    assert result.ok and all(d.ok for d in result.divergences)
    return result


def test_the_out_of_domain_speed_table_is_the_bench_run() -> None:
    _check_speed_table("ood", OOD_RUN, "benchmarks/README.md")


def test_the_main_table_is_the_bench_run() -> None:
    result = _check_speed_table("main", MAIN_RUN, "benchmarks/README.md")
    assert result.meta.prefix_cache
    readme = " ".join((REPO / "README.md").read_text().split())
    rows = {(row.workload, row.method): row for row in result.summary}
    workloads = {workload for workload, _ in rows if workload != "all"}
    dlite, hybrid = rows[("all", "dlite")], rows[("all", "hybrid")]
    assert all(rows[(w, "dlite")].speedup > 1 for w in workloads)
    assert all(
        rows[(w, "hybrid")].speedup == max(r.speedup for (x, _), r in rows.items() if x == w) for w in workloads
    )
    assert (
        f"`{MAIN_RUN}`, its table in `benchmarks/README.md`): DLite alone is {dlite.speedup:.2f}x plain over all "
        f"{dlite.prompts} prompts and faster than plain on every workload, the hybrid {hybrid.speedup:.2f}x"
    ) in readme


def test_the_serving_table_is_the_vllm_bench_run(repo_script) -> None:
    """benchmarks/README.md's serving table is benchmarks/results/serve-vllm.json, rendered by serve_vllm.py, and its
    reading's averages at c = 4 are the geometric means of that table's four workloads."""
    serve = repo_script("benchmarks/serve_vllm.py")
    results = json.loads((RESULTS / "serve-vllm.json").read_text())["results"]
    page = (REPO / "benchmarks" / "README.md").read_text()
    assert serve.report(results) in page
    methods = ("hybrid", "suffix", "ngram", "dlite")
    at4 = {m: [r["speedup"] for r in results if r["method"] == m and r["concurrency"] == 4] for m in methods}
    assert all(len(speedups) == 4 for speedups in at4.values())
    means = {m: f"{statistics.geometric_mean(v):.2f}x" for m, v in at4.items()}
    text = " ".join(page.split())
    assert "the hybrid {hybrid}, suffix {suffix}, ngram {ngram}, DLite {dlite};".format(**means) in text


def _check_study_rows(result: str, rows: dict[str, str]) -> dict:
    """Each training-log row `label` (after its steps and training-seconds cells) holds the held-out tau, out of
    domain and in domain, and the first-draft share (`summarise`'s) of drafter `rows[label]` in `result`; returns the
    result's drafters."""
    return _check_log_table(
        result,
        rows,
        lambda entry, _tau: [
            f"{entry['mean_tau_ood']:.3f}",
            f"{entry['mean_tau_in_domain']:.3f}",
            f"{entry['first_accepted_ood']:.1%} / {entry['first_accepted_in_domain']:.1%}",
        ],
        skip=2,
    )


def test_the_training_logs_history_pairs_table_is_the_result_file() -> None:
    """docs/training-log.md, pairs (c) and (d): tau and the first-draft share (`summarise`'s) of each drafter."""
    rows = {
        **{f"{arm}, {steps:,}": f"{arm}@{steps}" for arm in ("A", "W128") for steps in (350, 700, 1050, 1400)},
        "B: teacher only (full history)": "B-teacher",
        "B: after the warm-up": "B-warmup",
        "B: teacher, warm-up, stable": "B",
        "A1500: stable alone": "A1500",
        "A, seed 1, 700": "A-seed1@700",
        "A, seed 1, 1,400": "A-seed1@1400",
        "A without the sequential head, 700": "A-nohead@700",
        "A without the sequential head, 1,400": "A-nohead@1400",
    }
    _check_study_rows("smollm2-135m-history-study.json", rows)


def predicted_speedup(tau: float, draft_ms: float, target_ms: dict[str, float]) -> float:
    """The training log's predicted speedup, `tau x t(1) / (t(8) + drafter ms)`: a round commits `tau` tokens for one
    drafter round plus one verification forward (the largest timed block, K + 1 tokens), where plain pays one
    1-token forward a token."""
    return tau * target_ms["1"] / (target_ms[max(target_ms, key=int)] + draft_ms)


def test_the_training_logs_capacity_study_tables_are_the_result_files() -> None:
    """docs/training-log.md, the capacity study: tau and first-draft share of each drafter, and each final drafter's
    ms per round with the speedup `predicted_speedup` derives from it and the target's timed forwards."""
    arms = ("A", "l7", "t12", "w576")
    rows = {f"{arm}, {steps:,}": f"{arm}@{steps}" for arm in arms for steps in (350, 700, 1050)}
    rows |= {f"{arm}, 1,400": arm for arm in arms}
    rows |= {"A, seed 1, 1,400": "A-seed1@1400", "A1500": "A1500", "t12-1500": "t12-1500", "w576-1500": "w576-1500"}
    rows |= {"scaleA: the shipped shape, 19,973 rows": "scaleA", "scaleW576: width 576, 19,973 rows": "scaleW576"}
    drafters = _check_study_rows("smollm2-135m-capacity-study.json", rows)
    assert predicted_speedup(2.0, 10.0, {"1": 60.0, "8": 70.0}) == pytest.approx(1.5)  # 2 x 60 / (70 + 10)
    cost = json.loads((RESULTS / "smollm2-135m-capacity-study-round-cost-bf16.json").read_text())
    labels = {
        "A": "A (the shipped shape)",
        "l7": "l7 (7 layers)",
        "t12": "t12 (12 tapped layers)",
        "w576": "w576 (width 576)",
    }
    by_time = {"A": "A1500", "t12": "t12-1500", "w576": "w576-1500"}  # the same shape, 1,500 s of training

    def speedups(name: str, ms: float) -> str:
        return " / ".join(
            f"{predicted_speedup(drafters[name][key], ms, cost['target_ms']):.2f}x"
            for key in ("mean_tau_ood", "mean_tau_in_domain")
        )

    for arm, label in labels.items():
        ms = cost["ms_per_round"][arm]
        expected = [f"{ms:.1f}", speedups(arm, ms), speedups(by_time[arm], ms) if arm in by_time else ""]
        assert _row(label, "docs/training-log.md")[1:] == expected, (label, expected)


def test_the_round_comparison_in_vllm_is_the_bench_run() -> None:
    """benchmarks/README.md: DLite in vLLM with this round and the round before, as serve-vllm-c1-round.json has it."""
    results = json.loads((RESULTS / "serve-vllm-c1-round.json").read_text())["results"]
    cell = {(r["workload"], r["method"]): r for r in results}
    text = (REPO / "benchmarks" / "README.md").read_text()
    section = text[text.index("### vLLM at c = 1: the drafting round") :].splitlines()
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")][1:]
        for line in section
        if line.startswith("| ") and not line.startswith("| workload")
    }
    for workload in ("chat", "code", "math"):
        expected = [f"{cell[workload, 'plain']['tokens_per_s']:.1f}"] + [
            f"{cell[workload, m]['speedup']:.2f}x (tau {cell[workload, m]['tau']:.2f})"
            if workload == "chat" and m == "dlite"
            else f"{cell[workload, m]['speedup']:.2f}x ({cell[workload, m]['tau']:.2f})"
            for m in ("dlite", "before")
        ]
        assert rows[workload] == expected, (workload, expected)


def test_the_readme_figures_for_a_cpu_without_native_bfloat16_are_the_result_files() -> None:
    """benchmarks/README.md's paragraph on a CPU without native bfloat16 quotes the two side-by-side runs there and the
    matmul check."""
    readme = " ".join((REPO / "benchmarks" / "README.md").read_text().split())
    runs = {}
    for dtype in ("fp32", "bf16"):
        result = json.loads((RESULTS / f"smollm2-135m-dtype-{dtype}-packed-avx2.json").read_text())
        assert result["meta"]["machine"]["bf16_native"] is False and result["ok"] is True
        runs[dtype] = {(r["workload"], r["method"]): r for r in result["summary"]}
    matmul = json.loads((RESULTS / "matmul-dtypes-avx2.json").read_text())
    gflops = matmul["shapes"]["prefill, 512 rows x MLP up"]["gflop_per_s"]
    assert matmul["machine"]["bf16_native"] is False and matmul["fastest_resolves_to"] == "float32"
    fp32, bf16 = runs["fp32"], runs["bf16"]
    speed = {w: f"{fp32[w, 'dlite']['speedup']:.2f}x" for w in ("all", "chat", "code", "math", "tool")}
    verify = fp32["chat", "dlite"]["target_ms_per_round"] / fp32["chat", "plain"]["target_ms_per_round"]
    expected = [
        f"({gflops['bfloat16']:.1f} GFLOP/s against {gflops['float32']:.1f} in float32",
        f"(DLite {bf16['all', 'dlite']['speedup']:.2f}x, the hybrid {bf16['all', 'hybrid']['speedup']:.2f}x)",
        f"DLite alone is {speed['all']} plain over chat, code, math and tool",
        f"(code {speed['code']}, math {speed['math']}, tool {speed['tool']}) but {speed['chat']} on chat",
        f"costs {verify:.2f}x a one-token step",
    ]
    for text in expected:
        assert text in readme, text
    for dtype in ("fp32", "bf16"):  # in bfloat16 every drafting method is slower than plain; in float32 DLite is not
        assert all(r["speedup"] < 1 for k, r in runs[dtype].items() if k[1] != "plain") == (dtype == "bf16")


def test_the_training_logs_window_cut_table_is_the_result_file() -> None:
    windows = json.loads((RESULTS / "smollm2-135m-window-step-cost-avx2.json").read_text())["windows"]
    for window, entry in windows.items():
        assert _row(window, "docs/training-log.md") == [
            f"{entry['uncut_s_per_step']:.2f}",
            f"{entry['cut_s_per_step']:.2f}",
            f"{entry['speedup']:.2f}x",
            f"{entry['backbone_rows_ratio']:.2f}",
        ]
    assert windows["512"]["backbone_rows_ratio"] < 1 and windows["512"]["speedup"] > 1


def test_the_machines_tables_for_a_cpu_without_native_bfloat16_are_the_result_files() -> None:
    shapes = json.loads((RESULTS / "matmul-dtypes-avx2.json").read_text())["shapes"]
    for label, key in (
        ("512 x 576 x 1536 (a prefill's MLP)", "prefill, 512 rows x MLP up"),
        ("1 x 576 x 1536 (a one-token step's)", "one-token step, MLP up"),
    ):
        gflops = shapes[key]["gflop_per_s"]
        expected = [f"{gflops[d]:.1f}" for d in ("float32", "bfloat16", "float16")]
        assert _row(label, "docs/benchmark-machines.md") == expected, (label, expected)
    for label, dtype, workload in (
        ("float32, all four", "fp32", "all"),
        ("float32, chat", "fp32", "chat"),
        ("bfloat16, all four", "bf16", "all"),
    ):
        summary = json.loads((RESULTS / f"smollm2-135m-dtype-{dtype}-packed-avx2.json").read_text())["summary"]
        rows = {r["method"]: r for r in summary if r["workload"] == workload}
        verify = rows["dlite"]["target_ms_per_round"] / rows["plain"]["target_ms_per_round"]
        expected = (
            [f"{rows['plain']['tok_s']:.2f}"]
            + [f"{rows[m]['speedup']:.2f}x" for m in ("prompt_lookup", "dlite", "hybrid")]
            + [f"{verify:.2f}x"]
        )
        assert _row(label, "docs/benchmark-machines.md") == expected, (label, expected)


def test_the_shipped_drafters_held_out_tau_replays_the_same_on_another_cpu() -> None:
    """The 96 held-out texts rebuilt from the wheels on an AVX2 machine, and the shipped drafter replayed over them,
    give the rounds the Xeon gave (float32 on both): the same accepted count in every round of every text."""
    here = json.loads((RESULTS / "smollm2-135m-replay-avx2.json").read_text())["drafters"]["shipped"]
    there = json.loads((RESULTS / "smollm2-135m-scale34k.json").read_text())["drafters"]["all39-wise0.7"]
    assert here["tau_by_workload"] == there["tau_by_workload"] and len(here["rows"]) == 96
    rounds = {row["id"]: row["accepted"] for row in there["rows"]}
    assert all(rounds[row["id"]] == row["accepted"] for row in here["rows"])
    assert f"{here['mean_tau_ood']:.3f} / {here['mean_tau_in_domain']:.3f}" == "1.440 / 1.961"


def test_the_machines_rules_table_is_the_result_file() -> None:
    """The replay of the adaptive rules on the AVX2 CPU: the shipped rule, the grid's best and K every round."""
    result = json.loads((RESULTS / "smollm2-135m-rules-avx2.json").read_text())
    assert result["environment"]["machine"]["bf16_native"] is False and len(result["rules"]) == 196
    assert result["best"] == result["rules"][0] and result["decoded_tokens"] == 3501
    for label, key in (
        ("shipped (0.3, 0.5, 3+7)", "shipped"),
        ("best of the grid (0.4, 0.4, 3+7)", "best"),
        ("K every round", "k_every_round"),
    ):
        entry = result[key]
        expected = [f"{entry[d]['speedup_est']:.2f}x" for d in ("reasoning", "manpages", "all")]
        assert _row(label, "docs/benchmark-machines.md") == expected, (label, expected)
    assert result["shipped"]["rule"] == {
        "draft_confidence_threshold": 0.3,
        "draft_skip_threshold": 0.5,
        "draft_lengths": [3, 7],
    }
    assert result["best"]["rule"]["draft_confidence_threshold"] == 0.4
    assert result["best"]["all"]["speedup_est"] / result["shipped"]["all"]["speedup_est"] < 1.01
    ms = result["drafter_ms"]["skipped_round"]
    assert f"({ms:.1f} ms, against a {result['forward_ms']['512']['1']:.0f} ms one-token step)" in " ".join(
        (REPO / "docs/benchmark-machines.md").read_text().split()
    )


def test_the_machines_hybrid_fallback_table_is_the_result_files() -> None:
    """The hybrid's fallback on the AVX2 CPU: its replay with that CPU's costs and two evaluation runs per value."""
    replay = json.loads((RESULTS / "smollm2-135m-hybrid-rules-avx2.json").read_text())
    assert replay["cost_mode"] == "float32, packed_gqa"
    rules = {
        r["rule"]["fallback"]: r
        for r in replay["rules"]
        if (r["rule"]["min_match"], r["rule"]["lookup_tokens"], r["rule"]["length_factor"]) == (4, 32, 2.0)
    }
    for label, fallback in (("1 (shipped)", 1), ("3", 3)):
        runs = []
        for run in (1, 2):
            result = json.loads((RESULTS / f"smollm2-135m-hybrid-fallback{fallback}-avx2-r{run}.json").read_text())
            assert result["ok"] and f"--lookup-fallback-min-match {fallback}" in result["meta"]["command"]
            runs.append({r["workload"]: r["speedup"] for r in result["summary"] if r["method"] == "hybrid"})
        expected = [
            f"{rules[fallback]['all']['speedup_est']:.2f}x",
            f"{rules[fallback]['chat']['speedup_est']:.2f}x",
            " / ".join(f"{run['all']:.2f}x" for run in runs),
            " / ".join(f"{run['chat']:.2f}x" for run in runs),
        ]
        assert _row(label, "docs/benchmark-machines.md") == expected, (label, expected)


def test_the_serving_run_on_a_cpu_without_native_bfloat16_is_the_result_file(repo_script) -> None:
    """docs/benchmark-machines.md holds `serve_vllm.py --report` of the AVX2 float32 run; benchmarks/README.md quotes
    its ranges."""
    serve = repo_script("benchmarks/serve_vllm.py")
    result = json.loads((RESULTS / "serve-vllm-c1-fp32-avx2.json").read_text())
    assert result["meta"]["dtype"] == "float32"
    assert serve.report(result["results"]) in (REPO / "docs" / "benchmark-machines.md").read_text()
    speedups = {m: [r["speedup"] for r in result["results"] if r["method"] == m] for m in ("dlite", "hybrid")}
    readme = " ".join((REPO / "benchmarks" / "README.md").read_text().split())
    text = "DLite is {:.2f}-{:.2f}x plain vLLM and the hybrid {:.2f}-{:.2f}x".format(
        min(speedups["dlite"]), max(speedups["dlite"]), min(speedups["hybrid"]), max(speedups["hybrid"])
    )
    assert text in readme, text


def test_the_reliability_page_shows_the_committed_verdicts():
    from dlite_hf.reliability.suite import report

    files = sorted((RESULTS / "reliability").glob("*.jsonl"))
    assert files, "benchmarks/results/reliability holds the verdict files"
    text = report(files)
    assert (RESULTS / "reliability" / "report.md").read_text() == text, "run scripts/reliability.sh's report step"
    page = (REPO / "docs" / "reliability.md").read_text()
    summary = page.split("<!-- reliability summary -->")[1].split("<!-- /reliability summary -->")[0]
    head, by_run = text.split("\n")[0], text.split("### By run\n\n")[1].split("\n\n")[0]
    assert head in summary and by_run in summary


def test_the_reliability_page_quotes_the_server_run():
    run = json.loads((RESULTS / "reliability" / "server-faults.json").read_text())
    page = " ".join((REPO / "docs" / "reliability.md").read_text().split())
    outcomes = run["outcomes"]
    assert not run["failures"] and run["healthy_after"] and run["greedy_after_equal_plain"]
    text = (
        f"{run['requests']} requests through the `openai` client, up to 32 in flight: "
        f"{outcomes['completed']} completed, {outcomes['stream completed']} streams completed, "
        f"{outcomes['stream dropped']} streams dropped by the client mid-stream, "
        f"{outcomes['malformed answered 4xx']} malformed requests answered 4xx"
    )
    assert text in page, text


def _qwen_tau_cells(entry: dict, tau: dict) -> list[str]:
    return (
        [f"{tau[w]:.2f}" for w in ("chat", "code", "math", "tool")]
        + [f"{entry['mean_tau_in_domain']:.2f}", f"{tau['legal']:.2f}"]
        + [f"{100 * entry['first_accepted_in_domain']:.1f}%"]
    )


def _qwen_runs() -> tuple[list[dict], list[dict], list[list[dict]]]:
    """The README's Qwen run and the one before it (the target's weights as loaded, the step-2,582 drafter): the
    documents, their `all` rows by method, and plain's records."""
    runs = [json.loads((RESULTS / f"{name}.json").read_text()) for name in (QWEN_RUN, QWEN_RUN + "-step2582")]
    rows = [{row["method"]: row for row in run["summary"] if row["workload"] == "all"} for run in runs]
    return runs, rows, [[r for r in run["records"] if r["method"] == "plain"] for run in runs]


def _check_qwen_paragraph(readme: str) -> None:
    """The paragraph under the README's Qwen table: its figures are the run's and the previous run's."""
    documents, (run, before), plain = _qwen_runs()
    prefill = [f"{sum(r['prefill_s'] for r in records):.0f}" for records in plain]
    share = [f"{100 * sum(r['prefill_s'] for r in p) / sum(r['wall_s'] for r in p):.0f}%" for p in plain]
    tok_s = [f"{rows['plain']['tok_s']:.2f}" for rows in (run, before)]
    step = [f"{rows['plain']['target_ms_per_round']:.0f}" for rows in (run, before)]
    for text in (
        f"{run['dlite']['speedup']:.2f}x over all against {run['dlite_fixed']['speedup']:.2f}x for K every round",
        f"plain {tok_s[0]} against {tok_s[1]} tokens/s, a decode step of {step[0]} against {step[1]} ms",
        f"({prefill[0]} against {prefill[1]} s for plain), is now {share[0]} of plain's time against {share[1]}",
        f"(DLite {before['dlite']['speedup']:.2f}x, hybrid {before['hybrid']['speedup']:.2f}x)",
        f"the hybrid is {run['hybrid']['decode_speedup']:.2f}x plain and DLite {run['dlite']['decode_speedup']:.2f}x",
    ):
        assert text in readme, text
    assert run["hybrid"]["speedup"] == max(row["speedup"] for row in run.values())
    rows = {}  # the claims of the paragraph, workload by workload
    for row in documents[0]["summary"]:
        rows.setdefault(row["workload"], {})[row["method"]] = row["speedup"]
    assert "no slower than plain anywhere, and faster than prompt lookup on chat, math and tool" in readme
    assert all(methods["dlite"] >= 1.0 for methods in rows.values())
    assert all(rows[w]["dlite"] > rows[w]["prompt_lookup"] for w in ("chat", "math", "tool"))
    assert "The hybrid is the fastest method on every workload." in readme
    assert all(methods["hybrid"] == max(methods.values()) for methods in rows.values())
    ceiling = sum(r["wall_s"] for r in plain[0]) / sum(r["prefill_s"] for r in plain[0])  # decoding in no time
    assert f"(at most {ceiling:.2f}x here were decoding free;" in readme


def test_the_qwen_figures_are_the_result_files() -> None:
    """The training log's Qwen tau table and the README's Qwen paragraph (issue 43)."""
    _check_log_table(
        "qwen2.5-coder-0.5b-ood-tau-second.json",
        {"step 694": "step694", "step 1,638 (2 + 2 epochs)": "step1638"},
        _qwen_tau_cells,
        skip=1,
    )
    _check_log_table(
        "qwen2.5-coder-0.5b-ood-tau-third.json",
        {"step 1,638, replayed again": "step1638", "step 2,582 (2 + 2 + 2 epochs; shipped until stop 55)": "step2582"},
        _qwen_tau_cells,
        skip=1,
    )
    drafters = json.loads((RESULTS / "qwen2.5-coder-0.5b-ood-tau-fourth.json").read_text())["drafters"]
    readme = " ".join((REPO / "README.md").read_text().split())
    before, shipped = ((f"{d['mean_tau_in_domain']:.2f}", f"{d['mean_tau_ood']:.2f}") for d in drafters.values())
    assert list(drafters) == ["step2582", "s54"]
    assert (
        "held-out greedy tau at K is {} in domain and {} out of domain ({} and {} at step 2,582)".format(
            *shipped, *before
        )
        in readme
    )
    result = _check_speed_table("qwen", QWEN_RUN)
    sessions = _check_speed_table("context", "qwen2.5-coder-0.5b-long-sessions")  # issue 43 part 3
    step2582 = json.loads((RESULTS / f"{QWEN_RUN}-step2582.json").read_text())["methods"]["dlite"]["drafter"]
    assert sessions.methods["dlite"]["drafter"]["weights_sha256"] == step2582["weights_sha256"], (
        "the step-2,582 drafter"
    )
    dlite = {r.workload: r for r in context_rows(sessions.records, ["dlite"])}
    drop = 1 - dlite["ctx 12k-16k"].mean_tau / dlite["ctx <2k"].mean_tau
    assert f"the bucket mean fell {drop:.0%} from under 2k" in readme
    sha = result.methods["dlite"]["drafter"]["weights_sha256"]
    assert (
        sha == hashlib.sha256((REPO / "drafters/dlite-qwen2.5-coder-0.5b/model.safetensors").read_bytes()).hexdigest()
    )
    shipped = report.load_run(QWEN_LONG_RUN, RESULTS)  # plain, DLite and the hybrid only: quoted, not a table
    assert shipped.ok and all(d.ok for d in shipped.divergences)
    assert shipped.methods["dlite"]["drafter"]["weights_sha256"] == sha and shipped.meta.pack_weights
    by = {(r.workload, r.method): r for r in context_rows(shipped.records, ["plain", "dlite", "hybrid"])}
    (short, long), (hybrid_short, hybrid_long) = (
        (by[("ctx <2k", m)], by[("ctx 12k-16k", m)]) for m in ("dlite", "hybrid")
    )
    dlite_cells = f"{short.mean_tau:.2f} under 2k tokens and {long.mean_tau:.2f} at 12k-16k"
    dlite_cells += f" ({long.mean_tau / short.mean_tau - 1:+.0%})"
    dlite_speed = f"{short.decode_speedup:.2f}x and {long.decode_speedup:.2f}x"
    hybrid_cells = f"{hybrid_short.mean_tau:.2f} and {hybrid_long.mean_tau:.2f}"
    hybrid_speed = f"{hybrid_short.decode_speedup:.2f}x and {hybrid_long.decode_speedup:.2f}x"
    sentence = f"DLite's tau is {dlite_cells}, its decode speedup {dlite_speed}; the hybrid's tau {hybrid_cells}"
    assert f"{sentence}, its decode speedup {hybrid_speed}" in readme
    _check_qwen_paragraph(readme)
    config = json.loads((REPO / "drafters/dlite-qwen2.5-coder-0.5b/config.json").read_text())
    rules = ("draft_confidence_threshold", "draft_skip_threshold", "draft_lengths")  # the shipped adaptive drafting
    assert {key: result.methods["dlite"]["drafter"][key] for key in rules} == {key: config[key] for key in rules}
    serving = json.loads((RESULTS / "serve-vllm-qwen2.5-coder-0.5b.json").read_text())["results"]
    one = {(r["workload"], r["method"]): f"{r['speedup']:.2f}x" for r in serving if r["concurrency"] == 1}
    dlite = [one[(w, "dlite")] for w in ("agentic", "math", "chat")]
    ngram = [one[(w, "ngram")] for w in ("agentic", "math", "chat")]
    assert "DLite is {} plain on agentic first turns, {} on math and {} on chat".format(*dlite) in readme
    assert "ngram {}, {}, {};".format(*ngram) in readme


def test_the_qwen_serving_section_is_the_result_files(repo_script) -> None:
    """benchmarks/README.md's Qwen vLLM section: the table is `serve_vllm.py --report` of the shipped drafter's run,
    and its comparisons with the runs drafting K every round quote the files."""
    serve = repo_script("benchmarks/serve_vllm.py")
    page = (REPO / "benchmarks" / "README.md").read_text()
    shipped, fixed, first = "serve-vllm-qwen2.5-coder-0.5b", f"{SERVE_QWEN}-k-every-round", f"{SERVE_QWEN}-step1638"
    before = f"{SERVE_QWEN}-step2582"
    runs = {}
    for name in (shipped, fixed, first, before):
        results = json.loads((RESULTS / f"{name}.json").read_text())["results"]
        runs[name] = {(r["workload"], r["method"], r["concurrency"]): r for r in results}
    assert serve.report(json.loads((RESULTS / f"{shipped}.json").read_text())["results"]) in page
    text = " ".join(page.split())

    def cells(name: str, key: str, unit: str = "") -> str:
        return " / ".join(f"{runs[name][(w, 'dlite', 1)][key]:.2f}{unit}" for w in ("agentic", "chat", "code", "math"))

    assert f"DLite {cells(fixed, 'speedup', 'x')} plain on agentic, chat, code and math at c = 1" in text
    assert f"tau {cells(fixed, 'tau')} (with the rules {cells(before, 'tau')})" in text
    assert f"DLite's tau was {cells(first, 'tau')}." in text
    assert f"DLite {cells(before, 'speedup', 'x')} plain on agentic, chat, code and math at c = 1, tau" in text
    assert f"{cells(before, 'tau')} (now {cells(shipped, 'tau')}:" in text
    one = {
        (w, m): f"{runs[shipped][(w, m, 1)]['speedup']:.2f}x" for w in ("agentic", "code") for m in ("ngram", "hybrid")
    }
    assert f"win ({one[('code', 'ngram')]}) and the hybrid keeps them ({one[('code', 'hybrid')]})" in text
    assert f"the hybrid ({one[('agentic', 'hybrid')]}) is level with ngram" in text
    four = [runs[shipped][(w, "dlite", 4)]["speedup"] for w in ("chat", "code", "math")]
    agentic = runs[shipped][("agentic", "dlite", 4)]["speedup"]
    assert f"DLite is {agentic:.2f}x plain on agentic turns and {min(four):.2f}x-{max(four):.2f}x on the rest" in text
    for name, low, high in ((shipped, "1.9", "2.3"), (fixed, "2.9", "5.5")):  # verified positions per output token
        work = [serve.target_work(runs[name][(w, "dlite", 4)]) for w in ("agentic", "chat", "code", "math")]
        assert float(low) - 0.05 <= min(work) and max(work) < float(high) + 0.05, (name, work)


def test_the_packed_weights_ab_is_the_result_files() -> None:
    """benchmarks/README.md: the drafter's round and speedups before / after its weights were packed once."""
    text = (REPO / "benchmarks" / "README.md").read_text()
    section = text[text.index("### The drafter's weights packed once") :].split("\n### ")[0]
    for target in ("qwen2.5-coder-0.5b", "smollm2-135m"):
        cells = {"dlite": [], "hybrid": []}
        drafter = []
        for arm in ("eager", "packed"):
            summary = json.loads((RESULTS / f"{target}-packed-ab-{arm}.json").read_text())["summary"]
            rows = {row["method"]: row for row in summary if row["workload"] == "all"}
            drafter.append(f"{rows['dlite']['drafter_ms_per_round']:.1f}")
            for method in cells:
                cells[method].append(f"{rows[method]['speedup']:.2f}x")
        expected = (
            f"| {target} | {' / '.join(drafter)} | {' / '.join(cells['dlite'])} | {' / '.join(cells['hybrid'])} |"
        )
        assert expected in section, expected


def test_the_training_logs_qwen_candidate_table_is_the_result_file() -> None:
    rows = {
        "step 2,582 (shipped until stop 55)": "step2582",
        "step 2,912: stop 54's candidate (+330 steps; shipped)": "s54",
    }
    drafters = _check_log_table(
        "qwen2.5-coder-0.5b-ood-tau-fourth.json",
        rows,
        _qwen_tau_cells,
    )
    assert set(drafters) == {"step2582", "s54"}
    log = " ".join((REPO / "docs" / "training-log.md").read_text().split())
    pooled, lengths = {}, []
    for run in (QWEN_RUN + "-step2582", QWEN_RUN):  # the two drafters on the same 24 prompts
        records = json.loads((RESULTS / f"{run}.json").read_text())["records"]
        lengths.append({(r["prompt_id"], r["turn"]): r["new_tokens"] for r in records if r["method"] == "plain"})
        for method in ("dlite", "hybrid"):
            mine = [r for r in records if r["method"] == method]
            forwards = sum(r["target_forwards"] for r in mine)
            pooled.setdefault(method, []).append((sum(r["new_tokens"] for r in mine) / forwards, forwards))
    assert len(lengths[0]) == 24 and lengths[0] == lengths[1], "plain's outputs have the same lengths in both runs"
    (dlite_before, n_before), (dlite_now, n_now) = pooled["dlite"]
    assert f"{dlite_before:.2f}" == f"{dlite_now:.2f}"
    assert f"are {dlite_now:.2f} with both ({n_before} and {n_now} forwards)" in log
    assert "the hybrid's {:.2f} and {:.2f}".format(*(tau for tau, _ in pooled["hybrid"])) in log
    page = " ".join((REPO / "benchmarks" / "README.md").read_text().split())
    hybrid = [f"{tau:.2f}" for tau, _ in pooled["hybrid"]]
    assert f"(pooled tau {dlite_now:.2f} for DLite with both, the hybrid's {hybrid[1]} against {hybrid[0]})" in page


def test_the_packed_target_ab_is_the_result_files() -> None:
    """benchmarks/README.md and the README: tokens per second and speedups without / with the target packed."""
    text = (REPO / "benchmarks" / "README.md").read_text()
    section = text[text.index("### The drafter's weights packed once") :].split("\n### ")[0]
    for target in ("qwen2.5-coder-0.5b", "smollm2-135m"):
        arms = []
        for arm in ("asloaded", "packed"):
            result = json.loads((RESULTS / f"{target}-target-{arm}.json").read_text())
            assert result["ok"] and result["meta"].get("pack_weights", False) == (arm == "packed")
            arms.append({row["method"]: row for row in result["summary"] if row["workload"] == "all"})
        cells = [" / ".join(f"{rows[m]['tok_s']:.2f}" for rows in arms) for m in ("plain", "dlite", "hybrid")]
        cells += [" / ".join(f"{rows[m]['speedup']:.2f}x" for rows in arms) for m in ("dlite", "hybrid")]
        assert f"| {target} | {' | '.join(cells)} |" in section, cells
    plain = [json.loads((RESULTS / f"qwen2.5-coder-0.5b-target-{a}.json").read_text()) for a in ("asloaded", "packed")]
    steps = [next(r for r in p["summary"] if r["workload"] == "all" and r["method"] == "plain") for p in plain]
    assert (
        f"(a plain step {steps[0]['target_ms_per_round']:.1f} -> {steps[1]['target_ms_per_round']:.1f} ms)" in section
    )


def test_the_qwen_packed_run_section_is_the_result_files() -> None:
    """benchmarks/README.md: the Qwen run with the target's weights packed, against the run before it."""
    text = (REPO / "benchmarks" / "README.md").read_text()
    section = " ".join(text[text.index("in `generate()`, the target's weights packed") :].split("\n### ")[0].split())
    runs, (now, before), plain = _qwen_runs()
    assert runs[0]["meta"]["pack_weights"] and not runs[1]["meta"].get("pack_weights", False)
    prefill = [sum(r["prefill_s"] for r in p) for p in plain]
    share = [f"{100 * s / sum(r['wall_s'] for r in p):.0f}%" for s, p in zip(prefill, plain)]

    def pair(method: str, key: str, unit: str = "x") -> str:
        return f"{now[method][key]:.2f}{unit} ({before[method][key]:.2f}{unit})"

    dlite, step = now["dlite"], now["plain"]["target_ms_per_round"]
    old = before["dlite"]["target_ms_per_round"] / before["plain"]["target_ms_per_round"]
    for quoted in (
        f"plain {now['plain']['tok_s']:.2f} against {before['plain']['tok_s']:.2f} tokens/s over all, a plain decode "
        f"step {step:.0f} against {before['plain']['target_ms_per_round']:.0f} ms",
        f"(plain's prefills {prefill[0]:.0f} against {prefill[1]:.0f} s), so prefill is {share[0]} of plain's time "
        f"against {share[1]}",
        f"DLite {pair('dlite', 'speedup')}, the hybrid {pair('hybrid', 'speedup')}, prompt lookup "
        f"{pair('prompt_lookup', 'speedup')}",
        f"Over decode alone: DLite {pair('dlite', 'decode_speedup')}, the hybrid {pair('hybrid', 'decode_speedup')}",
        f"costs {(dlite['target_ms_per_round'] + dlite['drafter_ms_per_round']) / step:.2f}x a plain step "
        f"({dlite['target_ms_per_round']:.1f} ms verifying and {dlite['drafter_ms_per_round']:.1f} ms drafting "
        f"against {step:.1f}",
        f"relative to a step ({dlite['target_ms_per_round'] / step:.2f}x against {old:.2f}x)",
    ):
        assert quoted in section, quoted


def test_the_training_logs_second_epoch_table_is_the_result_file() -> None:
    rows = {
        "step 2,912 (float32, before the cast)": "s54",
        "+ 330 steps on the same rows": "s55",
        "step 2,912 as shipped (bfloat16 weights, replayed in float32)": "shipped",
    }
    drafters = _check_log_table(
        "qwen2.5-coder-0.5b-ood-tau-fifth.json",
        rows,
        _qwen_tau_cells,
    )
    before, after = drafters["s54"], drafters["s55"]
    log = " ".join((REPO / "docs" / "training-log.md").read_text().split())
    change = [after[key] / before[key] - 1 for key in ("mean_tau_in_domain", "mean_tau_ood")]
    assert f"does not help ({change[0]:.1%} in domain, {change[1]:.1%} out of domain)" in log


def test_the_training_logs_draft_vocabulary_table_is_the_result_file() -> None:
    rows = {"shipped (8,192 ids)": "shipped", "16,384 ids": "v16k", "32,768 ids": "v32k"}
    drafters = _check_log_table("qwen2.5-coder-0.5b-ood-tau-vocab.json", rows, _qwen_tau_cells)
    base = drafters["shipped"]
    for key in ("mean_tau_in_domain", "mean_tau_ood"):  # "Nothing gained": within 0.2% of the shipped drafter's
        assert all(abs(entry[key] / base[key] - 1) < 0.002 for entry in drafters.values())


def test_the_draft_lengths_ab_is_the_result_files() -> None:
    """benchmarks/README.md: the generate() A/B of the replay's best lengths against the shipped ones, as quoted."""
    page = " ".join((REPO / "benchmarks" / "README.md").read_text().split())
    speed, tau = {}, {}
    for arm, lengths in (("2-4-7", [2, 4, 7]), ("3-7", [3, 7])):
        for run in ("r1", "r2"):
            result = json.loads((RESULTS / f"qwen2.5-coder-0.5b-lengths-ab-{arm}-{run}.json").read_text())
            assert result["methods"]["dlite"]["drafter"]["draft_lengths"] == lengths
            assert "--attention packed_gqa --pack-weights --out" in result["meta"]["command"]
            rows = {row["method"]: row for row in result["summary"] if row["workload"] == "all"}
            speed.setdefault(arm, []).append(f"{rows['dlite']['speedup']:.2f}x")
            tau[arm] = f"{rows['dlite']['mean_tau']:.2f}"
    assert (
        "the shipped lengths gave {} and {} plain, lengths 3 or 7 gave {} and {}".format(
            *speed["2-4-7"], *speed["3-7"]
        )
        in page
    )
    assert f"(tau {tau['2-4-7']} against {tau['3-7']})" in page
    spread = [abs(float(a[0][:-1]) - float(a[1][:-1])) for a in speed.values()]  # two runs of one rule
    means = [sum(float(x[:-1]) for x in a) / 2 for a in speed.values()]
    assert max(spread) > abs(means[0] - means[1])  # "the two runs of one rule differ more than the rules do"


def test_the_training_logs_stop_56_candidate_table_is_the_result_file() -> None:
    rows = {"step 2,912 (shipped)": "shipped", "+ 240 steps on stop 56's rows": "s56"}
    drafters = _check_log_table("qwen2.5-coder-0.5b-ood-tau-sixth.json", rows, _qwen_tau_cells)
    before, after = (drafters[name]["tau_by_workload"] for name in ("shipped", "s56"))
    log = " ".join((REPO / "docs" / "training-log.md").read_text().split())
    change = {w: f"{after[w] - before[w]:+.2f}" for w in ("math", "code", "tool")}
    assert f"No net gain: math {change['math']}, code {change['code']}, but tool {change['tool']}." in log
    rows = {**rows, "+ 265 steps on those rows and 200 tool rows": "s56b"}
    again = _check_log_table("qwen2.5-coder-0.5b-ood-tau-seventh.json", rows, _qwen_tau_cells)
    for name in ("shipped", "s56"):  # the replay is deterministic
        assert again[name]["tau_by_workload"] == drafters[name]["tau_by_workload"]
    tau = again["s56b"]["tau_by_workload"]
    assert f"tool comes back ({tau['tool']:.2f}) and math's gain goes ({tau['math']:.2f})" in log
    assert (
        f"{again['s56b']['mean_tau_in_domain']:.2f} again, out of domain +{tau['legal'] - before['legal']:.2f}" in log
    )
    readme = " ".join((REPO / "README.md").read_text().split())
    epoch = json.loads((RESULTS / "qwen2.5-coder-0.5b-ood-tau-fifth.json").read_text())["drafters"]["s55"]
    new_rows = [again[name]["mean_tau_in_domain"] for name in ("s56", "s56b")]
    figures = "({:.2f}) or on 1,120 and 1,320 new ones ({:.2f}, {:.2f})".format(epoch["mean_tau_in_domain"], *new_rows)
    assert f"another epoch on the same rows {figures} did not raise it" in readme
    assert max(epoch["mean_tau_in_domain"], *new_rows) <= again["shipped"]["mean_tau_in_domain"] + 0.005


def test_the_readme_dataset_figures_are_the_dataset_cards() -> None:
    """The README's dataset sentences quote the cards' totals (`dlite-hf dataset card` renders them from shards)."""
    readme = " ".join((REPO / "README.md").read_text().split())
    for name, quoted in (
        ("dlite-smollm2-135m-regen", "{0} greedy responses ({1} tokens) and {2} sampled ones ({3}) over {4} domains"),
        ("dlite-qwen2.5-coder-0.5b-regen", "{0} responses, {1} response tokens over {4} domains"),
    ):
        card = (REPO / "datasets" / name / "README.md").read_text()
        row = next(line for line in card.splitlines() if line.startswith("| **all ("))
        cells = [cell.strip().strip("*") for cell in row.strip("|").split("|")]
        domains = cells[0].removeprefix("all (").removesuffix(" domains)")
        text = quoted.format(cells[2], cells[3], cells[4], cells[5], domains)
        assert text in readme, text


def test_the_packed_rules_replay_is_the_result_file() -> None:
    """benchmarks/README.md: the adaptive-rule replay with the target packed, as quoted."""
    page = " ".join((REPO / "benchmarks" / "README.md").read_text().split())
    result = json.loads((RESULTS / "qwen2.5-coder-0.5b-rules-bf16-packed.json").read_text())
    assert result["pack_weights"] is True and result["command"].endswith("--attention packed_gqa --pack-weights")
    names = [rule["name"] for rule in result["rules"]]
    shipped = result["rules"][names.index("confidence 0.6, skip 0, lengths 2+4+7")]
    best, costs = result["best"], result["forward_ms"]["512"]
    assert best["name"] == "confidence 0.6, skip 0, lengths 3+7"
    assert f"(estimated {best['all']['speedup_est']:.2f}x decode)" in page
    rank = names.index(shipped["name"]) + 1
    assert f"ranks {rank}th of {len(names)} at {shipped['all']['speedup_est']:.2f}x" in page
    assert f"4 tokens {costs['4']:.1f} ms, of 1 token {costs['1']:.1f}, of 2 tokens {costs['2']:.1f})" in page
    assert f"{result['collect_s'] / 60:.0f} minutes to collect" in page
