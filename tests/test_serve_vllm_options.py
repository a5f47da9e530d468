"""The serving benchmark's option parsing and its tau (benchmarks/serve_vllm.py; the run itself needs .venv-vllm)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "serve_vllm.py"
_spec = importlib.util.spec_from_file_location("serve_vllm", _PATH)
serve_vllm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(serve_vllm)


def test_tau_counts_one_target_forward_per_emitted_token_not_accepted():
    assert serve_vllm.tau(100, 0) == 1.0  # no speculation: one token per forward
    assert serve_vllm.tau(120, 80) == 3.0  # 40 forwards, each emitting its accepted drafts plus one
    assert math.isnan(serve_vllm.tau(0, 0))


def test_level_maps_need_a_count_for_every_concurrency():
    assert serve_vllm.level_map("--repeats", "1:3,4:2", [1, 4]) == {1: 3, 4: 2}
    with pytest.raises(SystemExit, match=r"--requests '1:4,16': expected CONCURRENCY:COUNT pairs"):
        serve_vllm.level_map("--requests", "1:4,16", [1, 16])
    with pytest.raises(SystemExit, match=r"no count for concurrency \[64\] \(--concurrency\)"):
        serve_vllm.level_map("--repeats", "1:3,4:2", [1, 4, 64])
    with pytest.raises(SystemExit, match=r"counts must be >= 1, got \['4:0'\]"):
        serve_vllm.level_map("--repeats", "1:3,4:0", [1, 4])


def test_bad_concurrency_is_refused_before_any_engine_loads(tmp_path):
    prompts = tmp_path / "p.json"
    prompts.write_text('{"meta": {"target": "t"}, "prompts": []}')
    with pytest.raises(SystemExit, match=r"--concurrency '1,four': expected integers"):
        serve_vllm.main(["--prompts", str(prompts), "--methods", "plain", "--concurrency", "1,four"])


def test_results_are_written_whole_after_every_cell(tmp_path):
    out = tmp_path / "serve.json"
    serve_vllm.write_results(out, {"finished": False}, [{"method": "plain"}])
    first = json.loads(out.read_text())
    assert first == {"meta": {"finished": False}, "results": [{"method": "plain"}]}
    serve_vllm.write_results(out, {"finished": True}, [{"method": "plain"}, {"method": "dlite"}])
    assert json.loads(out.read_text())["meta"]["finished"] is True
    assert [p.name for p in tmp_path.iterdir()] == ["serve.json"]  # no temporary file left behind
    serve_vllm.write_results(None, {}, [])  # no --out: nothing written


def test_a_drafter_variant_needs_a_new_name_and_a_drafter_folder(tmp_path):
    prompts = tmp_path / "p.json"
    prompts.write_text('{"meta": {"target": "t"}, "prompts": []}')
    base = ["--prompts", str(prompts), "--methods", "plain", "--concurrency", "1"]
    with pytest.raises(SystemExit, match=r"--drafter-variant 'dlite=.*NAME not one of plain, ngram"):
        serve_vllm.main([*base, "--drafter-variant", f"dlite={tmp_path}"])  # a method's own name
    with pytest.raises(SystemExit, match=r"FOLDER a drafter folder \(with its config.json\)"):
        serve_vllm.main([*base, "--drafter-variant", f"before={tmp_path}"])  # no config.json there
    with pytest.raises(SystemExit, match=r"expected NAME=FOLDER"):
        serve_vllm.main([*base, "--drafter-variant", "before"])
    (tmp_path / "config.json").write_text("{}")  # a folder now: the variant is a method --methods may name
    with pytest.raises(SystemExit, match=r"--methods plain,typo: expected 'plain' and any of .*before"):
        serve_vllm.main([*base[:3], "plain,typo", "--drafter-variant", f"before={tmp_path}"])


def test_the_suffix_method_needs_suffix_decoding_on_the_path_before_any_engine_loads(tmp_path, monkeypatch):
    """vLLM's suffix proposer imports arctic_inference.suffix_decoding, which `make bench-vllm` puts on PYTHONPATH
    (the script itself never edits sys.path)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "arctic_inference" else real(name)
    )
    prompts = tmp_path / "p.json"
    prompts.write_text('{"meta": {"target": "t"}, "prompts": [{"workload": "chat", "prompt_ids": [1]}]}')
    argv = ["--prompts", str(prompts), *"--methods plain,suffix --workloads chat --concurrency 1".split()]
    argv += ["--requests", "1:1", "--repeats", "1:1"]
    with pytest.raises(SystemExit, match=r"arctic_inference.suffix_decoding is not importable.*PYTHONPATH="):
        serve_vllm.main(argv)


def test_the_prompts_files_drafter_must_be_a_drafter_folder_before_any_engine_loads(tmp_path):
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"meta": {"target": "t", "drafter": str(tmp_path / "gone")}, "prompts": []}))
    with pytest.raises(SystemExit, match=r"names the drafter .*gone, which has no config.json"):
        serve_vllm.main(["--prompts", str(prompts), "--methods", "plain,dlite", "--concurrency", "1"])
