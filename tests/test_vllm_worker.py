"""The vLLM worker's lifetime: however the dlite-hf process that runs it ends, the worker and the engine processes
it started (vLLM's `VLLM::EngineCore` / `VLLM::Worker`, which outlive their parent otherwise) end with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# a stand-in worker: starts a grandchild (as vLLM starts its engine), writes both pids, then writes its summary
# and exits (WAIT=0) or runs on until it is stopped
WORKER = """
import json, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
open(sys.argv[1], "w").write(json.dumps({"worker": __import__("os").getpid(), "engine": child.pid}))
if sys.argv[3] == "0":
    open(sys.argv[2], "w").write(json.dumps({"written": 3}))
    sys.exit(0)
time.sleep(300)
"""

# the dlite-hf side: run_worker as features_vllm and regenerate_vllm call it
# The parent takes SIGINT as an interactive run does: a job a non-interactive shell puts in the background starts with
# SIGINT ignored, and Python then leaves it ignored (no KeyboardInterrupt), which would make the SIGINT case hang
PARENT = """
import signal
import sys
from pathlib import Path
from dlite_hf.data.vllm_worker import run_worker
signal.signal(signal.SIGINT, signal.default_int_handler)
print(run_worker([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]], Path(sys.argv[3]),
                 "stand-in worker", "Entries"), flush=True)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has exited: only its parent's wait is missing
        return stat.read().split(") ", 1)[1][0] != "Z"


def _wait_for(path: Path, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text():
            return json.loads(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path} was not written within {timeout} s")


def _gone(pids: list[int], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_alive(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_killed_run_stops_the_worker_and_the_engine_it_started(tmp_path, stop):
    pids_path, summary = tmp_path / "pids.json", tmp_path / "summary.json"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, WORKER, str(pids_path), str(summary), "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pids = _wait_for(pids_path)
    assert _alive(pids["worker"]) and _alive(pids["engine"])
    parent.send_signal(stop)
    parent.wait(timeout=30)
    assert parent.returncode != 0
    assert _gone([pids["worker"], pids["engine"]]), f"left running after {stop.name}: {pids}"


def test_a_finished_worker_returns_its_summary_and_leaves_nothing_running(tmp_path):
    pids_path, summary = tmp_path / "pids.json", tmp_path / "summary.json"
    done = subprocess.run(
        [sys.executable, "-c", PARENT, WORKER, str(pids_path), str(summary), "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "{'written': 3}" in done.stdout and not summary.exists()  # read, then removed
    pids = json.loads(pids_path.read_text())
    assert _gone([pids["worker"], pids["engine"]])
