"""The out-of-domain figures of the README and the training log are the committed result files' (a re-run that
moves them must update both)."""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def _row(label: str, document: str = "README.md") -> list[str]:
    for line in (REPO / document).read_text().splitlines():
        if line.startswith(f"| {label} |"):
            return [cell.strip().strip("*") for cell in line.strip("|").split("|")][1:]
    raise AssertionError(f"no {document} row {label!r}")


def test_the_training_logs_out_of_domain_tau_table_is_the_result_file() -> None:
    drafters = json.loads((RESULTS / "smollm2-135m-ood-tau.json").read_text())["drafters"]
    rows = {
        "shipped": "base",
        "+ 200 steps on the regenerated rows": "regen@200",
        "+ 200 steps on the target-labelled text": "text@200",
        "shipped, draft vocabulary re-chosen from the mix (2,048 ids)": "v2048",
    }
    for label, name in rows.items():
        entry = drafters[name]
        tau = entry["tau_by_workload"]
        cells = _row(label, "docs/training-log.md")
        expected = [f"{tau[w]:.2f}" for w in ("legal", "clinical", "long")] + [
            f"{entry['mean_tau_ood']:.2f}",
            " / ".join(f"{tau[w]:.2f}" for w in ("chat", "code", "math", "tool")),
            f"{entry['mean_tau_in_domain']:.2f}",
        ]
        assert cells == expected, (label, cells, expected)
    base = drafters["base"]
    readme = " ".join((REPO / "README.md").read_text().split())
    quoted = f"greedy tau is {base['mean_tau_ood']:.2f} against {base['mean_tau_in_domain']:.2f} in domain"
    assert quoted in readme, quoted


def _check_speed_table(run: str, labels: dict[str, str], cell) -> dict:
    """Every README row `label` of a speed table: plain's tok/s, then one `cell(summary_row)` per method."""
    result = json.loads((RESULTS / f"{run}.json").read_text())
    summary = {(s["workload"], s["method"]): s for s in result["summary"]}
    for label, workload in labels.items():
        cells = _row(label)
        assert cells[0] == f"{summary[(workload, 'plain')]['tok_s']:.2f}"
        for shown, method in zip(cells[1:], ("prompt_lookup", "dlite", "dlite_fixed", "hybrid")):
            assert re.sub(r"\*", "", shown) == cell(summary[(workload, method)]), (label, method, shown)
    assert result["ok"] and all(d["ok"] for d in result["divergences"])
    return result


def test_the_out_of_domain_speed_table_is_the_bench_run() -> None:
    labels = {
        "legal (MultiLexSum)": "legal",
        "clinical (MTS-Dialog)": "clinical",
        "long 1k (essays; this run)": "long-1024",
        "all (9)": "all",
    }
    _check_speed_table("smollm2-135m-ood-bf16-packed", labels, lambda s: f"{s['mean_tau']:.2f} / {s['speedup']:.2f}x")


def test_the_main_table_is_the_bench_run() -> None:
    labels = {
        "chat (MT-bench)": "chat",
        "code (HumanEval)": "code",
        "math (ASDiv)": "math",
        "tool (BFCL)": "tool",
        "agentic (ToolTalk, coding session; 16 turns)": "agentic",
        "long 1k (essays)": "long-1024",
        "long 4k": "long-4096",
        "all (34)": "all",
    }

    def cell(s: dict) -> str:
        return f"{s['mean_tau']:.2f} ({s['tau_pooled']:.2f}) / {s['speedup']:.2f}x ({s['decode_speedup']:.2f}x)"

    result = _check_speed_table("smollm2-135m-main-bf16-packed", labels, cell)
    assert result["meta"]["prefix_cache"]
