"""The building blocks of a DLite drafter beside transformers' own decoder layers: the backbone's block classes,
the sequential head, the backbone pass of history-aware drafters whose blocks each read their own history rows, and
the model output."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers.utils import ModelOutput

__all__ = ["DLiteOutput", "DLiteSequentialHead", "PerBlockHistory", "backbone_blocks"]

# a windowed batch's blocks run in at most this many groups, each cut to the longest history one of its blocks reads
WINDOW_GROUPS = 4


def backbone_blocks(backbone_type: str):
    """(decoder layer, RMSNorm, rotary embedding) classes of the chosen transformers architecture."""
    if backbone_type == "qwen3":
        from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer, Qwen3RMSNorm, Qwen3RotaryEmbedding

        return Qwen3DecoderLayer, Qwen3RMSNorm, Qwen3RotaryEmbedding
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

    return LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding


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


class PerBlockHistory:
    """The backbone pass of blocks that each read their own history rows (`encode_block` of a drafter with
    `history_window != 0`: a sliding window, or full history without training's shared pass).

    A history row that is invalid (before the sequence's start) is masked as a key, so the leading invalid columns
    can be cut from a block with no change to its result. Blocks are grouped by how many they lead with, and each
    group runs with only the columns some block of it reads: a window of 512 over contexts shorter than 512 then
    costs what they hold, not 512 rows each.

    Args:
        history_states, history_valid, history_positions: `[N, W, L, H_t]` tapped states of each block's past
            positions, `[N, W]` whether each is valid, `[N, W]` their local positions (-1: just before the context).
    """

    def __init__(self, history_states: torch.Tensor, history_valid: torch.Tensor, history_positions: torch.Tensor):
        self.states, self.valid, self.positions = history_states, history_valid, history_positions

    def __call__(self, drafter: nn.Module, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """`[N, K, H]` representations of the blocks' K draft positions, from their backbone rows and positions."""
        num_blocks = hidden.shape[0]
        leading = (~self.valid.bool()).long().cumprod(dim=1).sum(dim=1)  # [N] columns before the first valid
        order = leading.argsort(descending=True, stable=True)  # fewest history rows first
        parts = []
        for group in order.split(max(1, -(-num_blocks // WINDOW_GROUPS))):
            # keep one column at least: a group with no past at all keeps one masked dummy row
            drop = min(int(leading[group].min().item()), self.valid.shape[1] - 1)
            history = (self.states[group, drop:], self.valid[group, drop:], self.positions[group, drop:])
            parts.append(_encode_group(drafter, hidden[group], positions[group], *history))
        out = torch.cat(parts, dim=0)
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(num_blocks, device=order.device)
        return out[inverse.to(out.device)]


def _encode_group(
    drafter: nn.Module,
    hidden: torch.Tensor,
    positions: torch.Tensor,
    history_states: torch.Tensor,
    history_valid: torch.Tensor,
    history_positions: torch.Tensor,
) -> torch.Tensor:
    """One pass over blocks that each read their own history rows: `[history, block]` rows per block, history
    rows causal among themselves, block rows bidirectional over their block and every valid history row."""
    num_blocks = hidden.shape[0]
    device = hidden.device
    history = drafter.project_history(history_states)
    span = history.shape[1]
    hidden = torch.cat([history, hidden], dim=1)
    positions = torch.cat([history_positions.to(device), positions], dim=1)
    total = hidden.shape[1]
    is_block = torch.arange(total, device=device) >= span  # [Q]
    key_history_ok = torch.cat(
        [history_valid.to(device), torch.ones(num_blocks, total - span, dtype=torch.bool, device=device)], 1
    )  # [N, Kv]
    causal = torch.ones(total, total, dtype=torch.bool, device=device).tril()
    allowed = (is_block[:, None] & is_block[None, :]) | (~is_block[None, :] & (is_block[:, None] | causal))  # [Q, Kv]
    allowed = allowed[None] & key_history_ok[:, None, :]
    allowed = allowed | torch.eye(total, dtype=torch.bool, device=device)[None]  # padded rows see themselves
    return drafter.run_backbone(hidden, positions, allowed[:, None])[:, -drafter.config.num_draft_tokens :]
