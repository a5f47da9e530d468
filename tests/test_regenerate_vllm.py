"""`dlite-hf regenerate --engine vllm`, the side that runs here (no vLLM needed): job building, resume, errors.

The worker itself runs in the vLLM environment: `tests_vllm/test_regenerate_worker.py` (make test-vllm)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dlite_hf.data.regenerate import (
    OutputBusyError,
    exclusive_writer,
    pending_prompts,
    regenerate_vllm,
    shard_prompts,
)
from dlite_hf.jsonl import write_jsonl

PLUGIN = Path(__file__).resolve().parents[1] / "vllm_plugin"


class _Tokenizer:
    def apply_chat_template(self, messages, **kwargs):
        return [1] + [ord(c) % 50 for m in messages for c in m["content"]]


def _prompts(n):
    return [
        {"id": f"p{i}", "workload": "chat", "messages": [{"role": "user", "content": "x" * (i + 1)}]} for i in range(n)
    ]


def test_pending_prompts_skip_done_and_long_prompts_and_refuse_duplicates():
    prompts = _prompts(5)
    todo, skipped = pending_prompts(_Tokenizer(), prompts, {"p0", "p1#0"}, max_prompt_tokens=4)
    assert [t[0] for t in todo] == ["p1", "p2"] and skipped == 2  # p3, p4 are over 4 tokens
    todo, _ = pending_prompts(_Tokenizer(), prompts, {"p0", "p1#0"}, max_prompt_tokens=4, first_id="{id}#0")
    assert [t[0] for t in todo] == ["p0", "p2"]  # sampled rows: a prompt is done when its first sample is
    with pytest.raises(ValueError, match="Duplicate prompt id 'p0'"):
        pending_prompts(_Tokenizer(), prompts + prompts[:1], set(), max_prompt_tokens=99)


def test_a_missing_vllm_environment_says_how_to_build_one(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"No vLLM environment at .*make vllm.*--engine transformers"):
        regenerate_vllm(tmp_path, _Tokenizer(), _prompts(2), tmp_path / "out.jsonl", python=tmp_path / "nope")


def test_a_failing_worker_keeps_the_rows_and_says_to_resume(tmp_path, monkeypatch):
    """This interpreter has no vLLM: the worker refuses, and the rows already written stay."""
    monkeypatch.setenv("PYTHONPATH", str(PLUGIN))
    out = tmp_path / "out.jsonl"
    kept = {"id": "p0", "workload": "chat", "input_ids": [1, 2], "loss_mask": [0, 1], "prompt_tokens": 1}
    out.write_text(json.dumps(kept) + "\n" + '{"id": "p1", "inpu')  # a torn last line, as a kill leaves it
    with pytest.raises(RuntimeError, match=r"exited with status 1 .*run the same command again to resume"):
        regenerate_vllm(tmp_path, _Tokenizer(), _prompts(3), out, python=sys.executable)
    assert out.read_text() == json.dumps(kept) + "\n"  # the torn line cut, the finished row kept
    job = [json.loads(line) for line in out.with_suffix(".job.jsonl").read_text().splitlines()]
    assert sorted(j["id"] for j in job) == ["p1", "p2"]  # only what is left, tokenized by the target's template


def test_the_cli_refuses_bad_sampling_options(tmp_path):
    from dlite_hf.cli import main

    prompts = write_jsonl(_prompts(1), tmp_path / "p.jsonl")
    base = ["regenerate", "--prompts", str(prompts), "--out", str(tmp_path / "o.jsonl")]
    with pytest.raises(SystemExit, match=r"--samples -1 is invalid"):
        main([*base, "--samples", "-1"])
    with pytest.raises(SystemExit, match=r"--samples 3 needs --engine vllm"):
        main([*base, "--samples", "3", "--engine", "transformers"])
    for option in (["--top-p", "0"], ["--top-p", "1.5"], ["--temperature", "0"]):
        with pytest.raises(SystemExit, match=r"sampling needs a temperature above 0 and a top-p in \(0, 1\]"):
            main([*base, "--samples", "1", *option])


def test_rows_shipped_in_the_dataset_are_not_regenerated(tmp_path, monkeypatch):
    """A fresh machine has no work file: `--skip-dataset` reads the shipped shards' ids; the job leaves them out."""
    pytest.importorskip("pyarrow")
    from dlite_hf.commands.regenerate import _shipped_ids
    from dlite_hf.data.dataset import export_rows

    prompts = _prompts(4)
    prompt_file = write_jsonl([{**p, "source": "pkg==1:row"} for p in prompts], tmp_path / "p.jsonl")
    shipped = [
        {"id": i, "workload": "chat", "input_ids": [1, 5, 7], "loss_mask": [0, 1, 1], "prompt_tokens": 1}
        for i in ("p0", "p2")
    ]
    export_rows(write_jsonl(shipped, tmp_path / "rows.jsonl"), prompt_file, tmp_path / "dataset")
    ids = _shipped_ids(str(tmp_path / "dataset"))
    assert ids == {"p0", "p2"}
    monkeypatch.setenv("PYTHONPATH", str(PLUGIN))
    out = tmp_path / "fresh" / "out.jsonl"
    with pytest.raises(RuntimeError, match="exited with status 1"):  # this interpreter has no vLLM
        regenerate_vllm(tmp_path, _Tokenizer(), prompts, out, python=sys.executable, skip_ids=ids)
    job = [json.loads(line) for line in out.with_suffix(".job.jsonl").read_text().splitlines()]
    assert sorted(j["id"] for j in job) == ["p1", "p3"]
    with pytest.raises(SystemExit, match=r"--skip-dataset .*no parquet shards under .*dataset export"):
        _shipped_ids(str(tmp_path / "fresh"))


def test_shards_split_the_prompts_by_id_whatever_their_order():
    prompts = _prompts(200)
    parts = [shard_prompts(prompts, i, 3) for i in range(3)]
    ids = [{p["id"] for p in part} for part in parts]
    assert sorted(len(part) for part in parts)[0] > 40  # every shard gets a share
    assert ids[0] | ids[1] | ids[2] == {p["id"] for p in prompts} and not (ids[0] & ids[1] or ids[1] & ids[2])
    again = [{p["id"] for p in shard_prompts(prompts[::-1][50:], i, 3)} for i in range(3)]
    assert all(a <= b for a, b in zip(again, ids, strict=True))  # a shard depends on the id, not the file's order
    assert shard_prompts(prompts, 0, 1) == prompts
    with pytest.raises(ValueError, match=r"shard 3/3 is invalid: expected I/N with 0 <= I < N"):
        shard_prompts(prompts, 3, 3)


def test_a_second_job_on_the_same_output_is_refused_until_the_first_ends(tmp_path):
    out = tmp_path / "rows.jsonl"
    with exclusive_writer(out):
        with pytest.raises(OutputBusyError, match=r"Another process is writing .*rows.jsonl.*its own output file"):
            with exclusive_writer(out):
                pass
        with exclusive_writer(tmp_path / "other.jsonl"):  # another shard's file is free
            pass
    with exclusive_writer(out):  # released on exit
        pass


def test_the_cli_refuses_a_bad_shard(tmp_path):
    from dlite_hf.cli import main

    prompts = write_jsonl(_prompts(1), tmp_path / "p.jsonl")
    base = ["regenerate", "--prompts", str(prompts), "--out", str(tmp_path / "o.jsonl")]
    with pytest.raises(SystemExit, match=r"--shard '2/2' is invalid: expected I/N with 0 <= I < N"):
        main([*base, "--shard", "2/2"])


def test_regenerate_vllm_locks_its_output(tmp_path):
    """The library function takes the lock (not only the CLI): a second job on the same rows is refused before it
    writes a job file or starts a worker, and the first job's rows stay as they were."""
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "p0", "input_ids": [1, 2], "loss_mask": [0, 1], "prompt_tokens": 1}\n{"id": "p1", "in')
    before = out.read_text()
    with exclusive_writer(out), pytest.raises(OutputBusyError, match=r"Another process is writing .*out.jsonl"):
        regenerate_vllm(tmp_path, _Tokenizer(), _prompts(3), out, python=sys.executable)
    assert out.read_text() == before  # not even the torn line was cut: that is the running job's to do
    assert not out.with_suffix(".job.jsonl").exists()


def _run_mix_script(
    tmp_path, fail_on=None, script="regenerate_mix.sh", mixes=("mix", "mix-qwen", "mix-qwen-2"), **extra_env
):
    """`scripts/<script>` with a stand-in for `dlite-hf` that logs each call (and fails on `fail_on`; `mix build
    --out DIR` writes DIR/mix.json), the `mixes` built beforehand (by default regenerate_mix.sh's and Qwen's)."""
    import subprocess

    log = tmp_path / "calls.log"
    fake = tmp_path / "dlite-hf"
    fail = f'case "$*" in *"{fail_on}"*) exit 3;; esac' if fail_on else ""
    build = 'if [ "$1 $2 $3" = "mix build --out" ]; then mkdir -p "$4" && echo {} > "$4/mix.json"; fi'
    fake.write_text(f'#!/usr/bin/env bash\necho "$*" >> {log}\n{fail}\n{build}\n')
    fake.chmod(0o755)
    for mix in mixes:
        (tmp_path / "work" / mix).mkdir(parents=True, exist_ok=True)
        (tmp_path / "work" / mix / "mix.json").write_text("{}")
    env = {"PATH": "/usr/bin:/bin", "DLITE": str(fake), "DLITE_WORK": str(tmp_path / "work"), "WORKERS": "1"}
    env.update(extra_env)
    script = Path(__file__).resolve().parents[1] / "scripts" / script
    result = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=False)
    calls = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return result, calls


def test_the_mix_script_skips_finished_stages_and_resumes_a_failed_one(tmp_path):
    result, calls = _run_mix_script(tmp_path, fail_on="--seed 1 --samples 1 --temperature 0.7 --top-p 1.0 --skip")
    assert result.returncode != 0 and len(calls) == 2  # greedy --limit 8192 ran, then the first sampled stage failed
    assert "--limit 8192" in calls[0] and "--samples 1" in calls[1] and "--top-p 1.0" in calls[1]
    result, calls = _run_mix_script(tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(calls) == 3 and all("--samples 1" in c or "--limit" not in c for c in calls)  # greedy 8192 skipped
    assert "done before" in result.stdout
    result, calls = _run_mix_script(tmp_path)
    assert result.returncode == 0 and calls == []  # every stage finished: nothing is started again


def test_the_mix_script_takes_another_target_its_own_folders_and_stages(tmp_path):
    mix = tmp_path / "work" / "mix-q"
    mix.mkdir(parents=True)
    (mix / "mix.json").write_text("{}")
    options = {"TARGET": "qwen2.5-coder-0.5b", "MIX": str(mix), "REGEN": str(tmp_path / "rq"), "DATASET": ""}
    result, calls = _run_mix_script(tmp_path, STAGES="greedy:5 greedy", **options)
    assert result.returncode == 0, result.stderr
    assert len(calls) == 2 and all("--target qwen2.5-coder-0.5b" in c and "--skip-dataset" not in c for c in calls)
    assert f"--prompts {mix}/prompts.jsonl --out {tmp_path}/rq/greedy.jsonl" in calls[0]
    assert "--limit 5" in calls[0] and "--limit" not in calls[1]
    result, calls = _run_mix_script(tmp_path, STAGES="greedy beam:3", **options)
    assert result.returncode == 2 and "STAGES item beam:3: expected greedy or sampled" in result.stderr


def test_the_qwen_script_runs_the_mix_script_for_qwen_and_skips_its_shipped_rows(tmp_path):
    result, calls = _run_mix_script(tmp_path, script="regenerate_qwen.sh", mixes=())
    assert result.returncode == 0, result.stderr
    # the dataset's mix: mix-qwen at 1,000 prompts a domain, then extended to 2,000 (its first 11,604 kept)
    work = tmp_path / "work"
    assert calls[0].startswith(f"mix build --out {work}/mix-qwen --prompts-per-domain 1000 --texts-per-domain 500")
    assert calls[1].startswith(f"mix build --out {work}/mix-qwen-2 --prompts-per-domain 2000 --texts-per-domain 500")
    assert calls[1].endswith(f"--extend {work}/mix-qwen") and "--weights code=3,code_tasks=3" in calls[0]
    calls = calls[2:]
    # greedy stages of growing limits (each finished stage holds the mix's first N prompts), then all of them
    limits = [call.split("--limit ")[1].split()[0] if "--limit" in call else None for call in calls]
    assert limits == ["3000", "6000", "9000", "11604", "13000", "14500", None]
    for call in calls:
        assert f"--prompts {work}/mix-qwen-2/prompts.jsonl" in call
        assert "--target qwen2.5-coder-0.5b" in call and "--max-prompt-tokens 8192" in call
        assert "--skip-dataset datasets/dlite-qwen2.5-coder-0.5b-regen" in call
        assert f"{tmp_path}/work/regen-qwen/greedy.jsonl" in call


def test_the_qwen_training_script_rebuilds_the_rows_from_the_datasets_own_mix(tmp_path):
    result, calls = _run_mix_script(tmp_path, script="train_qwen.sh", mixes=())
    assert result.returncode == 0, result.stderr
    work = tmp_path / "work"
    assert [call.split(" --prompts-per-domain")[0] for call in calls[:2]] == [
        f"mix build --out {work}/mix-qwen",
        f"mix build --out {work}/mix-qwen-2",
    ]
    assert calls[2].startswith(f"dataset rebuild datasets/dlite-qwen2.5-coder-0.5b-regen --prompts {work}/mix-qwen-2/")
    result, calls = _run_mix_script(tmp_path, script="train_qwen.sh", MIX=str(tmp_path / "nowhere"))
    assert result.returncode == 2 and calls == []
    assert f"MIX={tmp_path}/nowhere: no prompts.jsonl there" in result.stderr
