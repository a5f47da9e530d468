"""The vLLM worker of `dlite-hf regenerate --engine vllm` on the real target: the rows it appends, their tokens
(float32 greedy: the target's own greedy continuation), stable seeds for sampled rows, and appending after
rows already written. The dlite-hf side (job building, resume, errors) is tested in tests/test_regenerate_vllm.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, TARGET

pytestmark = pytest.mark.engine

MAX_NEW = 16


def _worker(job, out, *extra, env=None):
    command = [sys.executable, "-m", "dlite_hf_vllm.workers.regenerate", "--model", str(TARGET), "--job", str(job)]
    command += ["--out", str(out), "--max-new-tokens", str(MAX_NEW), "--memory-fraction", "0.15", "--enforce-eager"]
    subprocess.run([*command, "--chunk", "2", *extra], check=True, cwd=ROOT, env=env)
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.fixture(scope="module")
def job(real_prompts, tmp_path_factory):
    rows = real_prompts["prompts"][:4]
    path = tmp_path_factory.mktemp("job") / "job.jsonl"
    lines = [json.dumps({"id": r["id"], "workload": r["workload"], "prompt_ids": r["prompt_ids"]}) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path, rows


def test_greedy_rows_are_the_targets_float32_greedy_continuations(job, tmp_path):
    path, rows = job
    out = tmp_path / "greedy.jsonl"
    out.write_text('{"id": "earlier", "input_ids": [1], "loss_mask": [0], "prompt_tokens": 1}\n')  # kept, not redone
    written = _worker(path, out, "--dtype", "float32")
    assert written[0]["id"] == "earlier" and sorted(r["id"] for r in written[1:]) == sorted(r["id"] for r in rows)
    by_id = {r["id"]: r for r in written[1:]}
    for row in rows:
        got, ids = by_id[row["id"]], row["prompt_ids"]
        response = got["input_ids"][len(ids) :]
        assert got["input_ids"][: len(ids)] == ids and got["prompt_tokens"] == len(ids)
        assert got["loss_mask"] == [0] * len(ids) + [1] * len(response) and 0 < len(response) <= MAX_NEW
        assert response == row["hf"]["output_ids"][: len(response)], row["id"]  # dlite-hf's lossless generate()
        assert got["sampling"] == "greedy" and got["engine"].endswith(":float32")
        assert got["finished"] == (len(response) < MAX_NEW)


def test_sampled_rows_have_stable_seeds(job, tmp_path):
    """Two runs of the same sampled job on the same schedule draw the same responses, and two samples of one prompt
    get their own seeds. The engine runs in-process here: vLLM's own engine-core process batches requests as they
    arrive over its socket, so two runs can batch differently and, at a rounding error, draw differently (CI saw
    one of eight responses part so, in bfloat16). In-process, `add_request` queues all before the first step."""
    path, rows = job
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    sampled = ("--samples", "2", "--temperature", "1.0", "--top-p", "1.0")
    first = _worker(path, tmp_path / "a.jsonl", *sampled, env=env)
    second = _worker(path, tmp_path / "b.jsonl", *sampled, env=env)
    assert sorted(r["id"] for r in first) == sorted(f"{r['id']}#{s}" for r in rows for s in (0, 1))
    a, b = ({r["id"]: r["input_ids"] for r in run} for run in (first, second))
    assert a == b
    assert any(a[f"{r['id']}#0"] != a[f"{r['id']}#1"] for r in rows)
    assert all(r["sampling"] == "sampled:t=1.0,top_p=1.0,seed=0" for r in first)
