"""The building blocks of a DLite drafter beside transformers' own decoder layers: the backbone's block classes,
the sequential head, the history gather of the history-aware variants, and the model output."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers.utils import ModelOutput

__all__ = ["DLiteOutput", "DLiteSequentialHead", "backbone_blocks", "gather_history"]


def backbone_blocks(backbone_type: str):
    """(decoder layer, RMSNorm, rotary embedding) classes of the chosen transformers architecture."""
    if backbone_type == "qwen3":
        from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer, Qwen3RMSNorm, Qwen3RotaryEmbedding

        return Qwen3DecoderLayer, Qwen3RMSNorm, Qwen3RotaryEmbedding
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

    return LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding


def gather_history(
    tapped_states: torch.Tensor, context_positions: torch.Tensor, window: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Collect, for each block, the target states of the past positions it may attend to.

    Args:
        tapped_states: `[B, T, L, H_t]` tapped target states at every position of each sequence.
        context_positions: `[B, A]` position whose states are the block's context (anchor position - 1).
        window: N > 0 keeps the N positions before the context; -1 keeps all of them.

    Returns:
        `history` `[B * A, W, L, H_t]`, `valid` `[B * A, W]` bool and `positions` `[B * A, W]` local position ids
        (negative: -1 is the position just before the context), W being the largest window in the batch.
    """
    if window == 0:
        raise ValueError("gather_history needs history_window != 0 (0 is the history-free drafter).")
    batch, seq_len = tapped_states.shape[:2]
    num_blocks = context_positions.shape[1]
    span = int(context_positions.max().item()) if window == -1 else window
    span = max(span, 1)
    offsets = torch.arange(span, 0, -1, device=context_positions.device)  # span, ..., 1
    absolute = context_positions[..., None] - offsets  # [B, A, W]
    valid = absolute >= 0
    index = absolute.clamp(min=0, max=seq_len - 1)
    batch_index = torch.arange(batch, device=index.device)[:, None, None].expand_as(index)
    history = tapped_states[batch_index, index]  # [B, A, W, L, H_t]
    positions = -offsets.expand_as(absolute)
    return (
        history.reshape(batch * num_blocks, span, *tapped_states.shape[2:]),
        valid.reshape(batch * num_blocks, span),
        positions.reshape(batch * num_blocks, span),
    )


@dataclass
class DLiteOutput(ModelOutput):
    """Output of [`DLiteForSpeculation.forward`].

    Args:
        logits (`torch.FloatTensor` of shape `(num_blocks, K, vocab_size)`):
            Draft logits for the K positions after each anchor (teacher-forced sequential head).
        hidden_states (`torch.FloatTensor` of shape `(num_blocks, K, hidden_size)`):
            The normed per-position representations that were projected through the target's lm_head.
    """

    logits: torch.FloatTensor | None = None
    hidden_states: torch.FloatTensor | None = None


class DLiteSequentialHead(nn.Module):
    """Gated low-rank recurrence over the in-block prefix: ``s_i = GRU([P h_i, Q E(x_{i-1})], s_{i-1})``.

    ``h_i`` is the backbone output at draft position i, ``E(x_{i-1})`` the target embedding of the previous
    in-block token (the anchor for i = 1). The rank-R state is projected back and added to ``h_i``.
    """

    def __init__(self, hidden_size: int, embed_size: int, rank: int, eps: float, norm_cls: type[nn.Module]):
        super().__init__()
        self.token_norm = norm_cls(embed_size, eps=eps)
        self.token_down = nn.Linear(embed_size, rank, bias=False)
        self.state_down = nn.Linear(hidden_size, rank, bias=False)
        self.cell = nn.GRUCell(2 * rank, rank)
        self.up = nn.Linear(rank, hidden_size, bias=False)

    def init_state(self, reference: torch.Tensor) -> torch.Tensor:
        return reference.new_zeros(reference.shape[0], self.cell.hidden_size)

    def step(
        self, block_state: torch.Tensor, prev_token_embeds: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One position: `[N, H]`, `[N, E]`, `[N, R]` -> output `[N, H]`, new state `[N, R]`."""
        features = torch.cat([self.state_down(block_state), self.token_down(self.token_norm(prev_token_embeds))], -1)
        state = self.cell(features, state)
        return block_state + self.up(state), state
