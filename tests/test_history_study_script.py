"""`scripts/history_study.sh` (issue 27, pairs c and d on the CPU) with a stand-in `dlite-hf`: each arm's train
calls, the two-stage arm's budget split, and the refusals. `taskset` is replaced too (no core pinning here)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "history_study.sh"


def _run(tmp_path, **env):
    log = tmp_path / "calls.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (("dlite-hf", f'echo "$*" >> {log}'), ("taskset", 'shift 2; exec "$@"')):
        (bin_dir / name).write_text(f"#!/usr/bin/env bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    base = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "DLITE": str(bin_dir / "dlite-hf"),
        "ROWS": "rows.jsonl",
        "CACHE": "cache",
        "RUN": str(tmp_path / "run"),
    }
    result = subprocess.run(["bash", str(SCRIPT)], env={**base, **env}, capture_output=True, text=True, check=False)
    calls = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return result, calls


def test_each_arm_trains_the_shipped_shape_on_the_shared_cache(tmp_path):
    result, calls = _run(tmp_path, ARM="W128", STEPS="700", ANCHORS="8")
    assert result.returncode == 0, result.stderr
    assert len(calls) == 1 and "--stage stable" in calls[0] and "--sliding_window 128" in calls[0]
    assert "--max_steps 700" in calls[0] and "--num_anchors 8" in calls[0] and "--feature_cache_dir cache" in calls[0]
    assert "--drafter_hidden_size 256" in calls[0] and "--drafter_layers 5" in calls[0]
    result, calls = _run(tmp_path, ARM="A", STEPS="700")
    assert result.returncode == 0 and "--sliding_window" not in calls[0] and "--num_anchors 32" in calls[0]
    result, calls = _run(tmp_path, ARM="A", BUDGET="1500")  # pair (c)'s baseline: by time, like arm B
    assert result.returncode == 0 and "--max_steps 100000 --max_train_seconds 1500" in calls[0]
    assert "--bf16 true" in calls[0]  # the study's autocast by default; BF16=false trains in float32
    result, calls = _run(tmp_path, ARM="A", STEPS="9", BF16="false")
    assert result.returncode == 0 and "--bf16 false" in calls[0] and "--bf16 true" not in calls[0]
    result, calls = _run(tmp_path, ARM="A", STEPS="9", TRAIN_ARGS="--seed 1 --no_sequential_head")
    assert result.returncode == 0 and calls[0].endswith(f"--seed 1 --no_sequential_head --output_dir {tmp_path}/run")


def test_the_two_stage_arm_splits_the_budget_a_quarter_a_quarter_and_the_rest(tmp_path):
    result, calls = _run(tmp_path, ARM="B", BUDGET="1001")
    assert result.returncode == 0, result.stderr
    teacher, warmup, stable = calls
    run = tmp_path / "run"
    assert "--stage teacher --history_window -1" in teacher and "--max_train_seconds 250" in teacher
    assert f"--output_dir {run}-teacher" in teacher and "--drafter_hidden_size 256" in teacher
    assert f"--stage warmup --teacher_path {run}-teacher" in warmup and "--max_train_seconds 250" in warmup
    assert f"--init {run}-warmup" in stable and "--max_train_seconds 501" in stable and f"--output_dir {run}" in stable


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ARM": "X"}, "ARM=X is invalid: expected A, W<N>"),
        ({"ARM": "W0", "STEPS": "5"}, "ARM=W0 is invalid"),
        ({"ARM": "B"}, "set BUDGET"),
        ({"ARM": "A"}, "set STEPS (or BUDGET, seconds) for arm A"),
        ({"ARM": "A", "STEPS": "5", "CORE": "x"}, "CORE=x is invalid"),
    ],
)
def test_refusals_name_what_to_set(tmp_path, env, message):
    result, calls = _run(tmp_path, **env)
    assert result.returncode != 0 and message in result.stderr and calls == []
