"""The target's training features from transformers' forward: the tapped layers' states and the final hidden
states from one frozen forward, and the full-vocabulary statistics the trainer reads from them."""

from __future__ import annotations

import torch
from torch import nn

from ...modeling.tapping import TappedStateRecorder, find_decoder_layers

__all__ = ["find_final_norm", "target_features", "vocab_stats"]


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
    target: nn.Module,
    input_ids: torch.Tensor,
    layer_ids: list[int],
    attention_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the frozen target once; return its tapped states and its final (normed) hidden states.

    The states are read with the same forward hooks the generate() integration uses, so the drafter sees
    identical features in training and at inference. The vocabulary projection is left to the caller, who
    applies the lm_head only at the rows it needs (memory stays bounded for long sequences).

    Returns:
        `states` `[B, T, L, H_t]` and `final_hidden` `[B, T, H_t]`.
    """
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
def vocab_stats(
    lm_head: nn.Module, hidden: torch.Tensor, rows_per_chunk: int = 512
) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's full-vocabulary logsumexp and argmax at every row of `hidden` `[..., H_t]`.

    With these two numbers per position, the target's log-probabilities of any token subset (the draft
    vocabulary) need only that subset's rows of the lm_head: `log p(v) = logit(v) - logsumexp`. Rows are
    projected `rows_per_chunk` at a time, so memory stays bounded for long sequences.

    Returns:
        `lse` `[...]` float32 and `top1` `[...]` long.
    """
    flat = hidden.reshape(-1, hidden.shape[-1])
    lse, top1 = [], []
    for chunk in torch.split(flat, rows_per_chunk):
        logits = lm_head(chunk.to(lm_head.weight.dtype)).float()
        lse.append(logits.logsumexp(dim=-1))
        top1.append(logits.argmax(dim=-1))
    shape = hidden.shape[:-1]
    if not lse:
        return hidden.new_zeros(shape, dtype=torch.float32), torch.zeros(shape, dtype=torch.long, device=hidden.device)
    return torch.cat(lse).view(shape), torch.cat(top1).view(shape)
