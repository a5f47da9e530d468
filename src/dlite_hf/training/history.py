"""The history-aware drafters' inputs in training (the teacher and the sliding-window ablations), from the tapped
states of whole sequences: :func:`gather_history` copies each block's past positions (any window);
:class:`SharedHistory` runs each sequence's history through the backbone once for all its blocks (full history only:
the same result at about 1/A of the cost). Inference keeps its own committed positions (`AcceptedHistory`).
"""

from __future__ import annotations

from typing import Any

import torch


def history_arguments(tapped_states: torch.Tensor, context_positions: torch.Tensor, window: int) -> dict[str, Any]:
    """The history keyword arguments of `DLiteForSpeculation.forward` for the blocks at `context_positions` `[B, A]`
    of `tapped_states` `[B, T, L, H_t]`: a :class:`SharedHistory` for full history (-1), else per-block copies."""
    if window == -1:
        return {"block_encoder": SharedHistory(tapped_states, context_positions)}
    names = ("history_states", "history_valid", "history_positions")
    return dict(zip(names, gather_history(tapped_states, context_positions, window)))


def gather_history(
    tapped_states: torch.Tensor, context_positions: torch.Tensor, window: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For each block, the tapped states `[B, T, L, H_t]` of the last `window` (-1: all) past positions before its
    context position (`[B, A]`): `history` `[B * A, W, L, H_t]`, `valid` `[B * A, W]` bool and `positions`
    `[B * A, W]` (-1 is the position just before the context), W the largest window in the batch."""
    if window == 0:
        raise ValueError("gather_history needs history_window != 0 (0 is the history-free drafter).")
    batch, seq_len = tapped_states.shape[:2]
    span = max(int(context_positions.max().item()) if window == -1 else window, 1)
    offsets = torch.arange(span, 0, -1, device=context_positions.device)  # span, ..., 1
    absolute = context_positions[..., None] - offsets  # [B, A, W]
    valid = absolute >= 0
    index = absolute.clamp(min=0, max=seq_len - 1)
    batch_index = torch.arange(batch, device=index.device)[:, None, None].expand_as(index)
    history = tapped_states[batch_index, index]  # [B, A, W, L, H_t]
    positions = -offsets.expand_as(absolute)
    return history.flatten(0, 1), valid.flatten(0, 1), positions.flatten(0, 1)  # the B * A blocks, sequence-major


class SharedHistory:
    """A `block_encoder` (see `DLiteForSpeculation.encode_block`) for full-history drafters: the blocks of B whole
    sequences (`sequence_states` `[B, T, L, H_t]`; `context_positions` `[B, A]`, the N = B * A blocks sequence-major).

    One backbone pass per sequence over `[S history rows, A blocks of M rows]`: history row j sits at position j and
    attends to rows 0..j; block a (context position c) sits at c + its usual positions and attends to history rows
    < c and to its own rows. Every offset RoPE sees is the per-block layout's (history at j - c, block at 0..K)."""

    def __init__(self, sequence_states: torch.Tensor, context_positions: torch.Tensor):
        self.sequence_states = sequence_states
        self.context_positions = context_positions

    def __call__(self, drafter: torch.nn.Module, block_rows: torch.Tensor, block_positions: torch.Tensor):
        """`[N, K, H]` representations of the blocks' K draft positions (`encode_block`'s result)."""
        window = drafter.config.history_window
        if window != -1:
            raise ValueError(
                f"SharedHistory is exact only for full-history drafters (history_window=-1), not {window}: pass"
                " history_states / history_valid / history_positions (gather_history) instead."
            )
        batch, num_anchors = self.context_positions.shape
        num_blocks, rows_per_block, width = block_rows.shape
        if num_blocks != batch * num_anchors:
            raise ValueError(
                f"{num_blocks} blocks but context_positions {tuple(self.context_positions.shape)} describes "
                f"{batch} x {num_anchors}; the blocks must be the sequences' anchors in sequence-major order."
            )
        device = block_rows.device
        contexts = self.context_positions.to(device)
        span = max(int(contexts.max().item()), 1)  # history rows any block may read: 0 .. span - 1
        history = drafter.project_history(self.sequence_states[:, :span].to(device))  # [B, S, H]
        hidden = torch.cat([history, block_rows.reshape(batch, num_anchors * rows_per_block, width)], dim=1)
        shifted = (block_positions.reshape(batch, num_anchors, rows_per_block) + contexts[..., None]).flatten(1)
        positions = torch.cat([torch.arange(span, device=device).expand(batch, -1), shifted], dim=1)
        hidden = drafter.run_backbone(hidden, positions, _shared_history_mask(contexts, span, rows_per_block))
        return hidden[:, span:].reshape(num_blocks, rows_per_block, width)[:, -drafter.config.num_draft_tokens :]


def _shared_history_mask(contexts: torch.Tensor, span: int, rows_per_block: int) -> torch.Tensor:
    """`[B, 1, Q, Kv]` bool: queries and keys are S history rows, then the A blocks' rows (`SharedHistory`)."""
    batch, num_anchors = contexts.shape
    device = contexts.device
    history_index = torch.arange(span, device=device)
    block_of_row = torch.arange(num_anchors, device=device).repeat_interleave(rows_per_block)  # [A*M]
    history_to_history = history_index[:, None] >= history_index[None, :]  # [S, S] causal
    block_to_history = history_index[None, None, :] < contexts[:, block_of_row, None]  # [B, A*M, S]
    block_to_block = block_of_row[:, None] == block_of_row[None, :]  # [A*M, A*M]
    top = torch.cat(
        [history_to_history, torch.zeros(span, num_anchors * rows_per_block, dtype=torch.bool, device=device)], 1
    ).expand(batch, -1, -1)
    bottom = torch.cat([block_to_history, block_to_block.expand(batch, -1, -1)], dim=2)
    return torch.cat([top, bottom], dim=1)[:, None]
