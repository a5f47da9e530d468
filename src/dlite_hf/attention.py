"""An opt-in attention function for grouped-query targets on CPU: SDPA with the query groups packed into rows.

transformers' `sdpa` (`enable_gqa=True`, or keys and values copied to every query head) is slow on CPU for short
queries in bfloat16 (docs/design.md); here each key/value head attends over `groups x q` query rows with the same
kernel, the causal mask repeated per group. Registered through `AttentionInterface`, only when you ask for it:

    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=dlite_hf.attention.register())
    dlite_hf.attention.use_packed_gqa_attention(model)  # or, on a loaded model

Prefills longer than :data:`MAX_PACKED_QUERY`, models without grouped-query attention, and options this function
does not implement (per-head masks, position bias, softcapping) go to transformers' own `sdpa` unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations import sdpa_attention
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

__all__ = ["MAX_PACKED_QUERY", "PACKED_GQA_SDPA", "packed_gqa_sdpa_attention", "register", "use_packed_gqa_attention"]

PACKED_GQA_SDPA = "dlite_packed_gqa_sdpa"  # the attention implementation's name (`attn_implementation=...`)
# queries up to this many tokens (decode steps, verification blocks) are packed; longer ones use `sdpa` as is
MAX_PACKED_QUERY = 64


def packed_gqa_sdpa_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: `query` `[B, H, q, D]`, `key`/`value` `[B, H_kv, k, D]`
    (after the cache update), `attention_mask` as `sdpa` builds it (bool, True = attend; or None). Returns the
    attention output `[B, q, H, D]` and no weights."""
    batch, heads, q_length, head_dim = query.shape
    groups = heads // key.shape[1]
    unsupported = any(kwargs.get(name) is not None for name in ("position_bias", "softcap", "sliding_window"))
    per_head_mask = attention_mask is not None and attention_mask.shape[1] != 1
    if groups == 1 or q_length > MAX_PACKED_QUERY or unsupported or per_head_mask or kwargs.get("output_attentions"):
        return sdpa_attention.sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    kv_length = key.shape[2]
    if attention_mask is None and q_length > 1:  # the new tokens are the last q of the k positions: causal among them
        rows = torch.arange(q_length, device=query.device)[:, None] + (kv_length - q_length)
        attention_mask = (torch.arange(kv_length, device=query.device)[None, :] <= rows)[None, None]
    packed = query.reshape(batch, heads // groups, groups * q_length, head_dim)  # row g * q + i: head g, token i
    if attention_mask is not None:  # repeated per group, as the packed rows: `[B, 1, groups * q, k]`
        attention_mask = attention_mask[:, :, None].expand(-1, 1, groups, q_length, kv_length).flatten(2, 3)
    output = torch.nn.functional.scaled_dot_product_attention(
        packed, key, value, attn_mask=attention_mask, dropout_p=dropout if module.training else 0.0, scale=scaling
    )
    return output.reshape(batch, heads, q_length, head_dim).transpose(1, 2).contiguous(), None


def register() -> str:
    """Register the packed layout with transformers (idempotent); returns its name for `attn_implementation`."""
    AttentionInterface.register(PACKED_GQA_SDPA, packed_gqa_sdpa_attention)
    AttentionMaskInterface.register(PACKED_GQA_SDPA, sdpa_mask)
    return PACKED_GQA_SDPA


def use_packed_gqa_attention(model: nn.Module) -> nn.Module:
    """Switch a loaded model to the packed layout (`model.set_attn_implementation`); returns the model."""
    model.set_attn_implementation(register())
    return model
