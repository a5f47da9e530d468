"""The same `dlite-hf train` command runs data-parallel on several processes (torchrun, gloo on CPU here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch
from conftest import make_tiny_target
from transformers import AutoTokenizer


def test_train_command_runs_on_two_processes(tmp_path, smollm2_dir):
    target = make_tiny_target("llama", seed=0)
    target.save_pretrained(tmp_path / "target")
    AutoTokenizer.from_pretrained(smollm2_dir).save_pretrained(tmp_path / "target")  # the CLI loads one
    prompts = torch.randint(1, 128, (8, 6), generator=torch.Generator().manual_seed(1))
    sequences = target.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=12, do_sample=False)
    with open(tmp_path / "data.jsonl", "w") as handle:
        for i, row in enumerate(sequences.tolist()):
            handle.write(json.dumps({"id": str(i), "input_ids": row, "loss_mask": [0] * 6 + [1] * 12}) + "\n")
    train = [
        "train",
        "--stage",
        "stable",
        "--target",
        str(tmp_path / "target"),
        "--data",
        str(tmp_path / "data.jsonl"),
        "--output_dir",
        str(tmp_path / "run"),
        "--max_steps",
        "2",
        "--per_device_train_batch_size",
        "2",
        "--num_anchors",
        "2",
        "--num_tapped_layers",
        "2",
        "--drafter_hidden_size",
        "32",
        "--drafter_layers",
        "1",
        "--drafter_heads",
        "2",
        "--drafter_kv_heads",
        "1",
        "--head_rank",
        "8",
        "--draft_vocab_size",
        "0",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--use_cpu",
        "--ddp_backend",
        "gloo",
    ]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "dlite_hf.cli", *train]
    result = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((tmp_path / "run" / "dlite_training.json").read_text())
    assert record["world_size"] == 2 and record["global_step"] == 2
