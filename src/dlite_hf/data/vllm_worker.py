"""The vLLM environment's workers, seen from dlite-hf: where its interpreter is, and one worker run.

vLLM pins an older transformers than dlite-hf, so it runs in `.venv-vllm` (`make vllm`) as a child process
(`python -m dlite_hf_vllm.workers.<worker>`) that reads a job file and writes its results and a JSON summary.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

from ..defaults import repo_root, resolve_dtype

__all__ = ["default_vllm_python", "require_python", "run_worker", "stop_process_group", "vllm_dtype", "worker_command"]


def default_vllm_python() -> Path:
    """The vLLM environment's interpreter: `$DLITE_VLLM_PYTHON`, else `.venv-vllm/bin/python` of the checkout."""
    env = os.environ.get("DLITE_VLLM_PYTHON")
    if env:
        return Path(env)
    return repo_root() / ".venv-vllm" / "bin" / "python"


def vllm_dtype(name: str) -> str:
    """A `--dtype` for vLLM, `fastest` resolved for the device vLLM picks (a CUDA GPU when there is one)."""
    import torch

    return resolve_dtype(name, "cuda" if torch.cuda.is_available() else "cpu")


def require_python(python: str | Path | None, alternative: str) -> Path:
    """The vLLM interpreter to run (`python`, else `default_vllm_python()`); `FileNotFoundError` naming where it
    looked, how to build it and `alternative` (what the caller can do without vLLM) when it is not there."""
    python = Path(python) if python is not None else default_vllm_python()
    if not python.exists():
        raise FileNotFoundError(
            f"No vLLM environment at {python}: build it with `make vllm` (scripts/build_vllm_env.sh), or point "
            f"$DLITE_VLLM_PYTHON at one ({alternative})."
        )
    return python


def worker_command(python: Path, worker: str, options: dict[str, Any], *flags: str) -> list[str]:
    """The command line of `python -m dlite_hf_vllm.workers.<worker>`: `--NAME VALUE` per option, then `--FLAG`s."""
    command = [str(python), "-m", f"dlite_hf_vllm.workers.{worker}"]
    for name, value in options.items():
        command += [f"--{name}", str(value)]
    return command + [f"--{flag}" for flag in flags]


def run_worker(command: list[str], summary_path: Path, name: str, kept: str) -> dict[str, Any]:
    """Run a worker (its progress goes to this process's stdout and stderr) and return its summary. Raises
    `RuntimeError` saying that `kept` (what it wrote before stopping) stays and that the same command resumes.

    The worker runs in a process group of its own, and vLLM's engine processes (renamed `VLLM::EngineCore`,
    `VLLM::Worker`) join it. However this call ends (the worker's exit, an exception, Ctrl-C, or a SIGTERM or SIGHUP
    to this process), the whole group is stopped: a killed run leaves no engine behind holding the cores and its
    share of memory (vLLM's engine processes outlive their parent otherwise)."""
    summary_path.unlink(missing_ok=True)
    process = subprocess.Popen(command, start_new_session=True)
    with _exit_on_termination():
        try:
            returncode = process.wait()
        finally:
            stop_process_group(process)
    if returncode != 0:
        raise RuntimeError(
            f"The vLLM {name} exited with status {returncode} (command: {' '.join(command)}); its log is "
            f"above. {kept} written before it stopped are kept; run the same command again to resume."
        )
    summary = json.loads(summary_path.read_text())
    summary_path.unlink(missing_ok=True)
    return summary


def stop_process_group(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM to `process`'s group (it leads one: `start_new_session=True`), SIGKILL after `grace_s` if the leader
    has not exited; also after a clean exit, for processes it left in its group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@contextlib.contextmanager
def _exit_on_termination():
    """SIGTERM and SIGHUP raise `SystemExit` while inside (so that `finally` blocks run), as SIGINT raises
    `KeyboardInterrupt`; the previous handlers come back on exit. Signal handlers belong to the main thread: in
    another thread this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def leave(signum, _frame):
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, leave) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
