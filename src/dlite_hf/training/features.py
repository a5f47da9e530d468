"""Target features for training: the tapped layers' states (and logits) from one frozen target forward."""

from __future__ import annotations

import torch
from torch import nn

from ..modeling.generation_dlite import TappedStateRecorder, find_decoder_layers


@torch.no_grad()
def target_features(
    target: nn.Module,
    input_ids: torch.Tensor,
    layer_ids: list[int],
    attention_mask: torch.Tensor | None = None,
    return_logits: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run the frozen target once and return its tapped states and (optionally) logits.

    The states are read with the same forward hooks the generate() integration uses, so the drafter sees
    identical features in training and at inference.

    Returns:
        `states` `[B, T, L, H_t]` and `logits` `[B, T, V]` (float32) or None.
    """
    config = target.config.get_text_config() if hasattr(target.config, "get_text_config") else target.config
    layers = find_decoder_layers(target, config.num_hidden_layers)
    recorder = TappedStateRecorder(layers, layer_ids, rows_to_keep=0)
    try:
        outputs = target(
            input_ids=input_ids,
            attention_mask=attention_mask,
            use_cache=False,
            logits_to_keep=0 if return_logits else 1,
        )
        states = recorder.rows(0, input_ids.shape[1])
    finally:
        recorder.remove()
    return states, (outputs.logits.float() if return_logits else None)
