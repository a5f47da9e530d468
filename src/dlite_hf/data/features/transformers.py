"""The target's training features from transformers' forward, and the full-vocabulary statistics read from them."""

from __future__ import annotations

import torch
from torch import nn

from ...modeling.tapping import TappedStateRecorder, find_decoder_layers


def find_final_norm(target: nn.Module, layers: nn.ModuleList) -> nn.Module:
    """The norm applied after the last decoder layer (its output is what the lm_head projects)."""
    for module in target.modules():
        if getattr(module, "layers", None) is layers and isinstance(getattr(module, "norm", None), nn.Module):
            return module.norm
    raise ValueError(
        f"Could not find the final norm of {type(target).__name__} (a `norm` module beside its decoder `layers`); "
        "DLite training reads the target's distribution from it."
    )


@torch.no_grad()
def target_features(
    target: nn.Module, input_ids: torch.Tensor, layer_ids: list[int], attention_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the frozen target once; return its tapped states `[B, T, L, H_t]` and final (normed) hidden states
    `[B, T, H_t]`, read with the hooks the generate() integration uses (the same features as at inference)."""
    config = target.config.get_text_config() if hasattr(target.config, "get_text_config") else target.config
    layers = find_decoder_layers(target, config.num_hidden_layers)
    norm = find_final_norm(target, layers)
    captured: list[torch.Tensor] = []
    handle = norm.register_forward_hook(lambda module, args, output: captured.append(output))
    recorder = TappedStateRecorder(layers, layer_ids, rows_to_keep=0)
    try:
        target(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, logits_to_keep=1)
        states = recorder.rows(0, input_ids.shape[1])
    finally:
        recorder.remove()
        handle.remove()
    return states, captured[-1]


@torch.no_grad()
def vocab_stats(lm_head: nn.Module, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's full-vocabulary logsumexp (float32) and argmax at every row of `hidden` `[..., H_t]`, projected
    512 rows at a time: the log-probabilities of any token subset then need only its lm_head rows,
    `log p(v) = logit(v) - logsumexp`."""
    flat = hidden.reshape(-1, hidden.shape[-1])
    lse, top1 = [], []
    for chunk in torch.split(flat, 512):
        logits = lm_head(chunk.to(lm_head.weight.dtype)).float()
        lse.append(logits.logsumexp(dim=-1))
        top1.append(logits.argmax(dim=-1))
    shape = hidden.shape[:-1]
    if not lse:
        return hidden.new_zeros(shape, dtype=torch.float32), torch.zeros(shape, dtype=torch.long, device=hidden.device)
    return torch.cat(lse).view(shape), torch.cat(top1).view(shape)
