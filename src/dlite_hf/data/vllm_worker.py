"""The vLLM environment's workers, seen from dlite-hf: where its interpreter is, and one worker run.

vLLM pins an older transformers than dlite-hf, so it runs in `.venv-vllm` (`make vllm`) as a child process
(`python -m dlite_hf_vllm.workers.<worker>`) that reads a job file and writes its results and a JSON summary."""

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


def vllm_dtype(name: str) -> str:
    """A `--dtype` for vLLM, `fastest` resolved for the device vLLM picks (a CUDA GPU when there is one)."""
    import torch

    return resolve_dtype(name, "cuda" if torch.cuda.is_available() else "cpu")


def require_python(python: str | Path | None, alternative: str) -> Path:
    """The vLLM interpreter: `python`, else `$DLITE_VLLM_PYTHON`, else the checkout's `.venv-vllm`."""
    if python is None:
        python = os.environ.get("DLITE_VLLM_PYTHON") or repo_root() / ".venv-vllm" / "bin" / "python"
    python = Path(python)
    if not python.exists():
        raise FileNotFoundError(
            f"No vLLM environment at {python}: build it with `make vllm` (scripts/build_vllm_env.sh), or point "
            f"$DLITE_VLLM_PYTHON at one ({alternative})."
        )
    return python


def worker_command(python: Path, worker: str, options: dict[str, Any], *flags: str) -> list[str]:
    """The command line of `python -m dlite_hf_vllm.workers.<worker>`: `--NAME VALUE` per option, then `--FLAG`s."""
    named = [arg for name, value in options.items() for arg in (f"--{name}", str(value))]
    return [str(python), "-m", f"dlite_hf_vllm.workers.{worker}", *named, *(f"--{flag}" for flag in flags)]


def run_worker(command: list[str], summary_path: Path, name: str, kept: str) -> dict[str, Any]:
    """Run a worker and return its summary. It leads a process group, which vLLM's engines join; however this call
    ends (an exception, Ctrl-C, SIGTERM, SIGHUP) the whole group is stopped, as the engines outlive their parent."""
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


def stop_process_group(process: subprocess.Popen) -> None:
    """SIGTERM to the group `process` leads, then SIGKILL after 10 s (also after a clean exit, for what it left)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10.0)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@contextlib.contextmanager
def _exit_on_termination():
    """SIGTERM and SIGHUP raise `SystemExit` inside (so `finally` blocks run); a no-op outside the main thread."""
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
