"""The vLLM environment's workers, seen from dlite-hf: where its interpreter is, and one worker run.

vLLM pins an older transformers than dlite-hf, so it runs in `.venv-vllm` (`make vllm`) as a child process
(`python -m dlite_hf_vllm.<worker>`) that reads a job file and writes its results and a JSON summary.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["default_vllm_python", "require_python", "run_worker"]


def default_vllm_python() -> Path:
    """The vLLM environment's interpreter: `$DLITE_VLLM_PYTHON`, else `.venv-vllm/bin/python` of the checkout."""
    env = os.environ.get("DLITE_VLLM_PYTHON")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / ".venv-vllm" / "bin" / "python"


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


def run_worker(command: list[str], summary_path: Path, name: str, kept: str) -> dict[str, Any]:
    """Run a worker (its progress goes to this process's stdout and stderr) and return its summary. Raises
    `RuntimeError` saying that `kept` (what it wrote before stopping) stays and that the same command resumes."""
    summary_path.unlink(missing_ok=True)
    result = subprocess.run(command, check=False)
    if result.returncode != 0:
        raise RuntimeError(
            f"The vLLM {name} exited with status {result.returncode} (command: {' '.join(command)}); its log is "
            f"above. {kept} written before it stopped are kept; run the same command again to resume."
        )
    summary = json.loads(summary_path.read_text())
    summary_path.unlink(missing_ok=True)
    return summary
