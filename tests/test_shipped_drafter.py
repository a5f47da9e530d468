"""The drafter shipped in the repository: loads through AutoModel, is lossless on held-out real prompts, and
accepts drafts (its tau on these prompts is the figure the README reports, measured by `dlite-hf bench`)."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_models import HUB_CODE_FILES
from transformers import AutoModel

from dlite_hf import DLiteForSpeculation
from dlite_hf.chat_template import chat_prompt_ids
from dlite_hf.data.prompts import load_prompts
from dlite_hf.defaults import default_drafter_dir

pytestmark = pytest.mark.real
SHIPPED = default_drafter_dir()
# the bar on a few held-out prompts; measured here (K every round): 3.07 on these three (48 tokens)
MIN_MEAN_TAU = 2.0


def test_shipped_drafter_files_and_size():
    names = {p.name for p in SHIPPED.iterdir()}
    assert {
        *HUB_CODE_FILES,
        "model.safetensors",
        "config.json",
        "README.md",
        "dlite_training.json",
    } <= names
    assert (SHIPPED / "model.safetensors").stat().st_size < 40 * 1024 * 1024
    config = json.loads((SHIPPED / "config.json").read_text())
    assert config["model_type"] == "dlite" and config["history_window"] == 0
    assert config["target_model"]["name_or_path"] == "smollm2-135m"


def test_shipped_drafter_is_lossless_and_accepts_drafts(smollm2):
    target, tokenizer = smollm2
    shipped = AutoModel.from_pretrained(SHIPPED)  # its adaptive drafting, as users get it
    # the paper's decoding (K drafts every round), set through from_pretrained: tau measures the drafter itself
    fixed = AutoModel.from_pretrained(
        SHIPPED, draft_confidence_threshold=0.0, draft_skip_threshold=0.0, draft_lengths=None
    )
    assert isinstance(shipped, DLiteForSpeculation) and fixed.config.draft_skip_threshold == 0.0
    taus = []
    for prompt in load_prompts("math", "eval", limit=3):
        ids = torch.tensor([chat_prompt_ids(tokenizer, prompt["messages"])])
        plain = target.generate(ids, max_new_tokens=48, do_sample=False)
        for drafter in (shipped, fixed):
            fast = target.generate(ids, max_new_tokens=48, do_sample=False, assistant_model=drafter)
            assert torch.equal(plain, fast), prompt["id"]
        taus.append(fixed.last_generation_stats.tau)
    # an untrained drafter gives tau 1.0 on these prompts; the shipped one must accept drafts
    assert sum(taus) / len(taus) > MIN_MEAN_TAU, taus


def test_compare_command_reports_tau_per_workload(tmp_path, capsys):
    from dlite_hf.cli import main

    out = tmp_path / "compare.json"
    argv = ["compare", "--workloads", "code,math", "--num-prompts", "1", "--max-new-tokens", "16"]
    assert main([*argv, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    rows, summary = result["rows"], result["summary"]
    assert [r["workload"] for r in rows] == ["code", "math"] and all(r["identical"] for r in rows)
    assert summary["all_identical"] is True and summary["prompts"] == 2
    assert summary["mean_tau_by_workload"] == {r["workload"]: pytest.approx(r["tau"]) for r in rows}
    assert all(r["tau"] > 1.0 for r in rows)  # the shipped drafter accepts drafts on code and math
    assert summary["decoding"] == "hybrid (prompt_lookup_num_tokens=32)"  # the default: measured fastest
    assert main([*argv, "--lookup-tokens", "0", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["summary"]["decoding"] == "DLite"
    with pytest.raises(SystemExit, match="--lookup-tokens -1 is invalid"):
        main([*argv, "--lookup-tokens", "-1"])
    assert "identical=True" in capsys.readouterr().out
