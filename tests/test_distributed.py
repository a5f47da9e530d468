"""The same `dlite-hf train` command runs data-parallel on several processes (gloo on CPU here), launched by
torchrun or by `accelerate launch`.

`accelerate launch --multi_gpu` is accelerate's data-parallel launcher (torchrun underneath, the path a GPU run
takes); `--use_cpu --ddp_backend gloo` make its processes CPU ones. (`accelerate launch --cpu` would need MPI to
start more than one process.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tiny_models import write_tiny_training_run

pytestmark = pytest.mark.heavy  # two training processes a test: in `make test` and CI, not test-fast

LAUNCHERS = {
    "torchrun": ["-m", "torch.distributed.run", "--nproc_per_node", "2"],
    "accelerate": [
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
    ],
}


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_train_command_runs_on_two_processes(tmp_path, smollm2_dir, launcher):
    train = write_tiny_training_run(tmp_path, smollm2_dir) + [
        "--output_dir",
        str(tmp_path / "run"),
        "--max_steps",
        "2",
        "--draft_vocab_size",
        "0",
        "--use_cpu",
        "--ddp_backend",
        "gloo",
    ]
    command = [sys.executable, *LAUNCHERS[launcher], "-m", "dlite_hf.cli", *train]
    result = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((tmp_path / "run" / "dlite_training.json").read_text())
    assert record["world_size"] == 2 and record["global_step"] == 2
