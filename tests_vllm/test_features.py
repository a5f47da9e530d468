"""`dlite-hf features` on the real target: vLLM's forward, tapped by the plugin, writes the entries the trainer's
history-free feature cache reads, at the positions its layout keeps. In float32 they equal transformers' float32
forward (up to the cache's float16 rounding); a second run finds every entry and starts no engine."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import DRAFTER, PACKAGE_PYTHON, ROOT, TARGET

pytestmark = pytest.mark.engine

# runs in the package's environment: transformers' float32 forward against the cache vLLM wrote
COMPARE = r"""
import json, sys, torch
from dlite_hf.assets import open_target
from dlite_hf.training.data import RegeneratedDataset
from dlite_hf.data.features.cache import FeatureCache
from dlite_hf.data.features.transformers import target_features
from transformers import AutoConfig
rows, cache_dir, drafter = sys.argv[1:4]
layers = list(AutoConfig.from_pretrained(drafter, trust_remote_code=True).target_layer_ids)
target, _, _ = open_target(sys.argv[4], dtype="float32")
cache = FeatureCache(cache_dir, target.config._name_or_path, layers, history_free=True, anchor_stride=3)
out = []
for row in RegeneratedDataset(rows, max_length=256).rows:
    ids = torch.tensor([row["input_ids"]])
    start = row["loss_mask"].index(1)
    first, kept = cache.kept(ids.shape[1], start)
    path = cache._path(f"{cache.key(ids[0])}-{first}")
    assert path.exists(), path
    states, final, stats = cache.features(target, ids, torch.ones_like(ids), torch.tensor([start]))
    ref_states, ref_final = target_features(target, ids, layers, torch.ones_like(ids))
    def rel(a, b):
        return float(((a - b).norm(dim=-1) / b.norm(dim=-1)).max())
    logits = target.get_output_embeddings()(ref_final[0, first:])
    out.append({
        "length": ids.shape[1], "first": first, "kept": kept.tolist(),
        "marked": stats["kept"][0].nonzero().flatten().tolist(),
        "states_rel": rel(states[0, kept], ref_states[0, kept]),
        "final_rel": rel(final[0, first:], ref_final[0, first:]),
        "top1_agree": float((stats["top1"][0, first:] == logits.argmax(-1)).float().mean()),
        "zeros_before_first": bool(final[0, :first].abs().sum() == 0),
    })
print(json.dumps(out))
"""


def _features(rows, cache, *extra):
    command = [str(PACKAGE_PYTHON), "-m", "dlite_hf.cli", "features", "--rows", str(rows), "--cache", str(cache)]
    command += ["--drafter", str(DRAFTER), "--target", str(TARGET), "--anchor-stride", "3", "--max-length", "256"]
    done = subprocess.run([*command, *extra], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"`dlite-hf features` exited with {done.returncode}:\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_vllm_features_equal_transformers_float32_at_the_kept_positions(real_prompts, tmp_path):
    rows = tmp_path / "rows.jsonl"
    with open(rows, "w") as handle:
        for prompt in real_prompts["prompts"][:4]:
            ids, response = prompt["prompt_ids"][:200], prompt["hf"]["output_ids"]
            record = {
                "id": prompt["id"],
                "input_ids": ids + response,
                "loss_mask": [0] * len(ids) + [1] * len(response),
            }
            handle.write(json.dumps(record) + "\n")
    cache = tmp_path / "cache"
    first = _features(rows, cache, "--dtype", "float32", "--enforce-eager")
    assert first["todo"] == 4 and first["missing"] == 0 and first["producer"] == "vllm-float32"
    compared = subprocess.run(
        [str(PACKAGE_PYTHON), "-c", COMPARE, str(rows), str(cache), str(DRAFTER), str(TARGET)],
        check=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    for row in json.loads(compared.stdout.strip().splitlines()[-1]):
        assert row["kept"] == row["marked"] and all((p + 1) % 3 == 0 for p in row["kept"]), row
        assert row["states_rel"] < 5e-3 and row["final_rel"] < 5e-3, row  # float16 rounding of float32 states
        assert row["top1_agree"] >= 0.98 and row["zeros_before_first"], row
    again = _features(rows, cache, "--dtype", "float32", "--enforce-eager")
    assert again["todo"] == 0 and again["already_cached"] == 4
