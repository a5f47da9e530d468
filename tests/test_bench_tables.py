"""`dlite-hf bench tables`: the README's speed tables rendered from a results document (`dlite_hf.bench.report`;
that the README quotes them is `test_readme_figures.py`'s, under the `docs` marker)."""

from __future__ import annotations

import json

import pytest

from dlite_hf.bench import report
from dlite_hf.cli import main


def _summary(methods: tuple[str, ...]) -> list[dict]:
    return [
        {
            "workload": "legal",
            "method": m,
            "prompts": 2,
            "tok_s": 10.0,
            "mean_tau": 1.0 + i,
            "tau_pooled": 1.0,
            "speedup": [1.0, 1.5, 1.2, 1.1, 1.4, 1.3][i],
            "decode_speedup": 1.0,
        }
        for i, m in enumerate(methods)
    ]


def test_the_renderer_bolds_the_fastest_and_refuses_other_documents(tmp_path) -> None:
    summary = _summary(("plain", *report.README_METHODS))
    row = report.readme_rows({"summary": summary}, "ood")
    expected = "| legal (MultiLexSum) | 10.00 | 2.00 / **1.50x** | 3.00 / 1.20x | 4.00 / 1.10x | 5.00 / 1.40x |"
    assert row == {"legal": expected}
    with pytest.raises(ValueError, match="has no dlite_fixed, hybrid rows; table ood compares"):
        report.readme_rows({"summary": summary[:3]}, "ood")
    with pytest.raises(ValueError, match="has none of table main's rows .*: it measured no such workloads"):
        report.readme_rows({"summary": summary}, "main")  # every method, but only a workload the table never shows
    with pytest.raises(ValueError, match="has no multi-turn session: table context buckets"):
        report.readme_rows({"summary": summary, "records": []}, "context")
    with pytest.raises(ValueError, match="table='card': expected one of"):
        report.readme_rows({"summary": summary}, "card")
    (tmp_path / "x.json").write_text("[]")
    with pytest.raises(ValueError, match="is not a `dlite-hf bench` results document"):
        report.load_run(str(tmp_path / "x.json"))
    with pytest.raises(FileNotFoundError, match="No bench result"):
        report.load_run("no-such-run", tmp_path)
    (tmp_path / "qwen2.5-run.json").write_text(json.dumps({"summary": summary}))
    assert report.load_run("qwen2.5-run", tmp_path).summary  # a run name with dots is a name, not a path


def test_the_tables_command_prints_the_header_and_the_rows(tmp_path, capsys) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"summary": _summary(("plain", *report.README_METHODS))}))
    assert main(["bench", "tables", "ood", "run", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (
        out
        == report.README_HEADER + "\n" + report.readme_rows(report.load_run("run", tmp_path), "ood")["legal"] + "\n"
    )
    with pytest.raises(SystemExit, match="No bench result"):
        main(["bench", "tables", "main", "missing", "--results", str(tmp_path)])


def test_the_qwen_table_adds_assisted_decoding_to_the_smollm2_columns(tmp_path, capsys) -> None:
    summary = [row | {"workload": "chat"} for row in _summary(("plain", *report.QWEN_METHODS))]
    (tmp_path / "run.json").write_text(json.dumps({"summary": summary}))
    assert main(["bench", "tables", "qwen", "run", "--results", str(tmp_path)]) == 0
    header, align, row = capsys.readouterr().out.splitlines()
    assert "| assisted (SmolLM2-135M) | DLite (shipped) | DLite, K every round |" in header
    assert header.count("|") == align.count("|") == row.count("|") == 8
    assert row == (
        "| chat (MT-bench) | 10.00 | 2.00 / **1.50x** | 3.00 / 1.20x | 4.00 / 1.10x | 5.00 / 1.40x | 6.00 / 1.30x |"
    )
    with pytest.raises(ValueError, match="has no assisted rows; table qwen compares prompt_lookup, assisted"):
        report.readme_rows({"summary": [r for r in summary if r["method"] != "assisted"]}, "qwen")
