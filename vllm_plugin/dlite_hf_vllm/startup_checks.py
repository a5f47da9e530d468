"""Start-up checks of a DLite drafter against the engine it is given to, from the drafter's config.json alone.

They run where vLLM builds its speculative config (the process that calls `LLM(...)` or `vllm serve`), before
any model loads, so a wrong drafter fails at once with a message that names what was given and what fits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from .compat import DLiteVLLMError

__all__ = ["read_drafter_config", "validate_drafter"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def read_drafter_config(folder: Path) -> dict[str, Any] | None:
    """The drafter's config.json if `folder` holds a DLite drafter (model_type "dlite"), else None."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return config if isinstance(config, dict) and config.get("model_type") == "dlite" else None


def _text_config(hf_config: Any) -> Any:
    getter = getattr(hf_config, "get_text_config", None)
    return getter() if callable(getter) else hf_config


def validate_drafter(
    config: dict[str, Any],
    folder: str,
    target_hf_config: Any,
    target_name: str,
    num_speculative_tokens: int | None,
    dtype: torch.dtype,
    target_supports_aux_states: bool,
    lookup_tokens: int | None = None,
) -> int:
    """Raise `DLiteVLLMError` unless the drafter at `folder` fits this target and these settings.

    `lookup_tokens` (speculative_config's `prompt_lookup_max`) turns on hybrid drafting: a retrieved draft may be
    up to that long, so `num_speculative_tokens` may exceed the drafter's K (the drafter still drafts at most K).

    Returns:
        the number of speculative tokens to use (the drafter's K when none was given, at least `lookup_tokens`).
    """
    trained_for = (config.get("target_model") or {}).get("name_or_path") or "its target"
    where = f"The DLite drafter {folder!r} (trained for {trained_for!r})"
    text = _text_config(target_hf_config)
    problems = []
    if text.num_hidden_layers != config["num_target_layers"]:
        problems.append(f"{text.num_hidden_layers} layers (expected {config['num_target_layers']})")
    if text.hidden_size != config["target_hidden_size"]:
        problems.append(f"hidden size {text.hidden_size} (expected {config['target_hidden_size']})")
    if text.vocab_size != config["vocab_size"]:
        problems.append(f"a vocabulary of {text.vocab_size} tokens (expected {config['vocab_size']})")
    if problems:
        raise DLiteVLLMError(
            f"{where} does not fit the target {target_name!r}, which has " + "; ".join(problems) + ". A drafter "
            "only works with the target it was trained on: pass the matching drafter folder as "
            "speculative_config's 'model', or train one for this target with `dlite-hf train`."
        )
    layers = list(config["target_layer_ids"])
    if any(not 0 <= i < text.num_hidden_layers for i in layers) or not target_supports_aux_states:
        reason = (
            f"layers {layers}, but the target has layers 0..{text.num_hidden_layers - 1}"
            if target_supports_aux_states
            else f"layers {layers}, and vLLM's {getattr(target_hf_config, 'architectures', ['?'])} does not expose "
            "the hidden states of its layers (it lacks vLLM's SupportsEagle3 interface)"
        )
        raise DLiteVLLMError(
            f"{where} taps the target {target_name!r} at {reason}. Serve a target whose vLLM model class supports "
            "auxiliary hidden states (Llama, Qwen2/3 and most decoder-only families do), with a drafter trained "
            "for it."
        )
    k = config["num_draft_tokens"]
    if lookup_tokens is not None:
        if num_speculative_tokens is None:
            num_speculative_tokens = max(k, lookup_tokens)
        if not 1 <= lookup_tokens <= num_speculative_tokens:
            raise DLiteVLLMError(
                f"{where}: speculative_config asks for retrieved drafts of up to prompt_lookup_max={lookup_tokens} "
                f"tokens, but vLLM verifies at most num_speculative_tokens={num_speculative_tokens} a round. Raise "
                f"num_speculative_tokens to {lookup_tokens} (the drafter still drafts at most its K={k}) or lower "
                "prompt_lookup_max."
            )
    if num_speculative_tokens is None:
        num_speculative_tokens = k
    if num_speculative_tokens < 1 or (lookup_tokens is None and num_speculative_tokens > k):
        raise DLiteVLLMError(
            f"{where} drafts at most {k} tokens a round (it was trained with K={k}), but speculative_config asks "
            f"for num_speculative_tokens={num_speculative_tokens}. Use 1..{k}."
        )
    _check_dtype(config, dtype, where)
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
