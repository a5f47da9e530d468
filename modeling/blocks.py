"""The building blocks of a DLite drafter beside transformers' own decoder layers: the sequential head, the backbone
pass of history-aware drafters, and the model output."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers.utils import ModelOutput

__all__ = ["DLiteOutput", "DLiteSequentialHead", "backbone_blocks", "encode_with_history"]

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
    """Output of [`DLiteForSpeculation.forward`]: draft `logits` `(num_blocks, K, vocab_size)` of the K positions
    after each anchor, and the normed `hidden_states` `(num_blocks, K, hidden_size)` projected to them."""

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


def encode_with_history(drafter: nn.Module, hidden: torch.Tensor, positions: torch.Tensor, history: tuple):
    """`[N, K, H]` backbone outputs of blocks that each read their own history rows (`encode_block`'s `history_*`:
    `[N, W, L, H_t]` states, `[N, W]` validity, `[N, W]` local positions, -1 just before the context).

    Invalid history rows are masked keys, so blocks are grouped by how many they lead with, and each group runs
    only the columns some block of it reads: the same result."""
    num_blocks, valid = hidden.shape[0], history[1]
    leading = (~valid.bool()).long().cumprod(dim=1).sum(dim=1)  # [N] columns before the first valid
    order = leading.argsort(descending=True, stable=True)  # fewest history rows first
    parts = []
    for group in order.split(max(1, -(-num_blocks // WINDOW_GROUPS))):
        # keep one column at least: a group with no past at all keeps one masked dummy row
        drop = min(int(leading[group].min().item()), valid.shape[1] - 1)
        cut = tuple(tensor[group, drop:] for tensor in history)
        parts.append(_encode_group(drafter, hidden[group], positions[group], *cut))
    out = torch.cat(parts, dim=0)
    return out[order.argsort().to(out.device)]  # the blocks' own order again (argsort inverts a permutation)


def _encode_group(drafter: nn.Module, hidden: torch.Tensor, positions: torch.Tensor, *past: torch.Tensor):
    """One pass over blocks that each read their own history rows: `[history, block]` rows per block, history
    rows causal among themselves, block rows bidirectional over their block and every valid history row."""
    history_states, history_valid, history_positions = past
    num_blocks, device = hidden.shape[0], hidden.device
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
