"""Whether a speculative config names a DLite drafter, and whether the drafter fits the engine (its config.json,
its weights file complete, its code files importable together): where vLLM builds its speculative config, before
any model loads, so that a wrong drafter fails at once with a message that names what was given and what fits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from .compat import DLiteVLLMError

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def read_drafter_config(folder: Path) -> dict[str, Any] | None:
    """The drafter's config.json if `folder` holds a DLite drafter (model_type "dlite"), else None."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):  # no config.json, or not JSON
        return None
    return config if isinstance(config, dict) and config.get("model_type") == "dlite" else None


def resolve_drafter_folder(model: str | None) -> tuple[Path, dict] | None:
    """`(folder, config)` if `model` names a DLite drafter: a local folder, or a Hub repo (downloaded), else None."""
    if not model:
        return None
    path = Path(model).expanduser()
    if path.is_dir():
        config = read_drafter_config(path)
        return (path.resolve(), config) if config is not None else None
    if model.count("/") != 1 or path.exists():
        return None
    try:
        from huggingface_hub import hf_hub_download, snapshot_download

        config = read_drafter_config(Path(hf_hub_download(model, "config.json")).parent)
        return (Path(snapshot_download(model)), config) if config is not None else None
    except (OSError, ValueError, ImportError):  # not on the Hub, offline, or not a repo id: vLLM decides
        return None


def check_drafter_files(folder: Path, where: str) -> None:
    """Raise `DLiteVLLMError` if the drafter's weights file is truncated or its code files do not import together
    (copied from different releases): here, at start-up, rather than as a bare error inside an engine process."""
    from safetensors import SafetensorError, safe_open

    for weights in sorted(folder.glob("*.safetensors")):
        try:  # safetensors checks the header against the file's size
            safe_open(str(weights), "pt")
        except SafetensorError as error:
            raise DLiteVLLMError(
                f"{where}: its weights file {weights} is truncated or corrupt ({error}). Copy the drafter folder "
                "again, or save the drafter again with `save_pretrained`."
            ) from error
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    try:  # the code the engine will run (trust_remote_code), imported once here
        get_class_from_dynamic_module("modeling_dlite.DLiteForSpeculation", str(folder))
    except ImportError as error:
        raise DLiteVLLMError(f"{where}: {error}") from error


def validate_drafter(config: dict[str, Any], spec: Any) -> tuple[int, tuple[int, int | None] | None]:
    """Raise `DLiteVLLMError` unless the drafter of vLLM's speculative config `spec` (its config.json: `config`) fits
    the target and the settings; else vLLM's K and the hybrid's `(prompt_lookup_max, prompt_lookup_min)` or None."""
    target = spec.target_model_config
    if target is None:
        raise DLiteVLLMError("A DLite drafter needs the target's model config (vLLM passes it).")
    # prompt_lookup_max beside a DLite drafter: the hybrid (vLLM zeroes it for a custom class, so it is kept)
    lookup, lookup_min = spec.prompt_lookup_max, spec.prompt_lookup_min
    if lookup is None and lookup_min is not None:
        raise DLiteVLLMError(
            f"speculative_config gives prompt_lookup_min={lookup_min} without prompt_lookup_max "
            "beside the DLite drafter. Hybrid drafting (a suffix index of each request beside the drafter) "
            "is on with prompt_lookup_max=N (the longest retrieved draft); prompt_lookup_min is its "
            "shortest match. Pass both, or neither for DLite alone."
        )
    trained_for = (config.get("target_model") or {}).get("name_or_path") or "its target"
    where = f"The DLite drafter {str(spec.model)!r} (trained for {trained_for!r})"
    _check_target(config, where, target)
    num_tokens = _speculative_tokens(config["num_draft_tokens"], where, spec.num_speculative_tokens, lookup)
    _check_dtype(config, target.dtype, where)
    return num_tokens, None if lookup is None else (int(lookup), lookup_min)


def _check_target(config: dict[str, Any], where: str, target: Any) -> None:
    """The target's layers, hidden size and vocabulary, and the layers the drafter taps."""
    from vllm.model_executor.models import ModelRegistry
    from vllm.model_executor.models.interfaces import supports_eagle3

    try:
        model_cls, _ = ModelRegistry.resolve_model_cls(target.architectures, target)
    except (ValueError, ImportError):  # vLLM reports an unknown architecture itself
        model_cls = None
    supports_aux_states = model_cls is None or bool(supports_eagle3(model_cls))
    text = target.hf_config.get_text_config()
    problems = []
    if text.num_hidden_layers != config["num_target_layers"]:
        problems.append(f"{text.num_hidden_layers} layers (expected {config['num_target_layers']})")
    if text.hidden_size != config["target_hidden_size"]:
        problems.append(f"hidden size {text.hidden_size} (expected {config['target_hidden_size']})")
    if text.vocab_size != config["vocab_size"]:
        problems.append(f"a vocabulary of {text.vocab_size} tokens (expected {config['vocab_size']})")
    if problems:
        raise DLiteVLLMError(
            f"{where} does not fit the target {str(target.model)!r}, which has " + "; ".join(problems) + ". A "
            "drafter only works with the target it was trained on: pass the matching drafter folder as "
            "speculative_config's 'model', or train one for this target with `dlite-hf train`."
        )
    layers = list(config["target_layer_ids"])
    if any(not 0 <= i < text.num_hidden_layers for i in layers) or not supports_aux_states:
        reason = (
            f"layers {layers}, but the target has layers 0..{text.num_hidden_layers - 1}"
            if supports_aux_states
            else f"layers {layers}, and vLLM's {getattr(target.hf_config, 'architectures', ['?'])} does not expose "
            "the hidden states of its layers (it lacks vLLM's SupportsEagle3 interface)"
        )
        raise DLiteVLLMError(
            f"{where} taps the target {str(target.model)!r} at {reason}. Serve a target whose vLLM model class "
            "supports auxiliary hidden states (Llama, Qwen2/3 and most decoder-only families do), with a drafter "
            "trained for it."
        )


def _speculative_tokens(k: int, where: str, num_speculative_tokens: int | None, lookup: int | None) -> int:
    """vLLM's K (the drafter's `k` by default): at most `k`, or with the hybrid at least `lookup`."""
    if num_speculative_tokens is None:
        num_speculative_tokens = k if lookup is None else max(k, lookup)
    if lookup is not None and not 1 <= lookup <= num_speculative_tokens:
        raise DLiteVLLMError(
            f"{where}: speculative_config asks for retrieved drafts of up to prompt_lookup_max={lookup} "
            f"tokens, but vLLM verifies at most num_speculative_tokens={num_speculative_tokens} a round. Raise "
            f"num_speculative_tokens to {lookup} (the drafter still drafts at most its K={k}) or lower "
            "prompt_lookup_max."
        )
    if num_speculative_tokens < 1 or (lookup is None and num_speculative_tokens > k):
        raise DLiteVLLMError(
            f"{where} drafts at most {k} tokens a round (it was trained with K={k}), but speculative_config asks "
            f"for num_speculative_tokens={num_speculative_tokens}. Use 1..{k}."
        )
    return num_speculative_tokens


def _check_dtype(config: dict[str, Any], dtype: torch.dtype, where: str) -> None:
    """Raise `DLiteVLLMError` unless the drafter's stored weights run in the engine's `dtype` without loss."""
    stored = _DTYPES.get(str(config.get("dtype") or config.get("torch_dtype") or "float32"))
    if stored is None:
        raise DLiteVLLMError(
            f"{where} stores its weights as {config.get('dtype')!r}; expected float32, bfloat16 or float16."
        )
    if dtype not in _DTYPES.values():
        raise DLiteVLLMError(
            f"The engine runs in {dtype}; a DLite drafter runs in the engine's dtype, one of float32, bfloat16 or "
            "float16. Pass dtype='bfloat16' (or float32) to the engine."
        )
    if stored not in (torch.float32, dtype):
        raise DLiteVLLMError(
            f"{where} stores its weights in {stored}, but the engine runs in {dtype}. The drafter runs in the "
            f"engine's dtype, and {stored} weights do not convert to {dtype} without loss (their range and "
            f"precision differ): serve with dtype={str(stored).removeprefix('torch.')!r}, or save the drafter in "
            "float32 (`drafter.to(torch.float32).save_pretrained(...)`) or in the engine's dtype."
        )
