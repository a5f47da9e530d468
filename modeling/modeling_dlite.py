"""DLite: a history-free speculative drafter built from transformers' own blocks.

One speculation round (method.md): the target's hidden states from L tapped layers at the last processed
position (each plus a learned depth embedding, laid along the sequence), the anchor token (the newest committed
token) and K placeholders go through a small bidirectional backbone with local position ids. A gated low-rank
recurrent head then restores the in-block causal dependence, and every position is projected once through the
target's lm_head. No KV cache and no history: the cost of a round does not depend on the context length.

With ``config.history_window != 0`` the same class also attends to the target states of past positions
(causally among themselves): -1 is the history-aware teacher of the training recipe, N > 0 a sliding window.
"""

from __future__ import annotations

from typing import Any

import torch
from safetensors import SafetensorError
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init

from .blocks import DLiteOutput, DLiteSequentialHead, backbone_blocks
from .candidate_generators import DLiteCandidateGenerator, make_candidate_generator
from .configuration_dlite import DLiteConfig
from .drafting import DraftRules, draft_tokens, row_lengths
from .integration import install_generate_hook
from .options import check_threshold
from .suffix_index import DraftSession

# a windowed batch's blocks run in at most this many groups, each cut to the longest history one of its blocks reads
WINDOW_GROUPS = 4


class DLitePreTrainedModel(PreTrainedModel):
    config_class = DLiteConfig
    base_model_prefix = "dlite"
    main_input_name = "context_states"
    supports_gradient_checkpointing = False
    _no_split_modules = ["Qwen3DecoderLayer", "LlamaDecoderLayer"]
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)  # Linear, Embedding, RMSNorm, rotary buffers
        std = self.config.initializer_range
        if isinstance(module, nn.GRUCell):
            for name, param in module.named_parameters():
                if name.startswith("weight"):
                    init.normal_(param, mean=0.0, std=std)
                else:
                    init.zeros_(param)
        elif isinstance(module, DLiteForSpeculation) and module.mask_embedding is not None:
            init.normal_(module.mask_embedding, mean=0.0, std=std)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: Any, *args: Any, **kwargs: Any):
        """`PreTrainedModel.from_pretrained`, but a partial or corrupt checkpoint is an error, not a warning.

        transformers initialises missing weights randomly and only logs it; a drafter with random pieces
        silently drafts garbage, so missing, unexpected or mismatched keys raise `ValueError` here.
        """
        want_info = kwargs.pop("output_loading_info", False)
        # Let shape mismatches (config.json not matching the weights) reach the loading info, reported below.
        kwargs.setdefault("ignore_mismatched_sizes", True)
        try:
            model, info = super().from_pretrained(
                pretrained_model_name_or_path, *args, output_loading_info=True, **kwargs
            )
        except (OSError, RuntimeError, ValueError, SafetensorError) as error:
            if "safetensors" in repr(error).lower() or "deserializ" in str(error).lower():
                raise ValueError(
                    f"Could not read the DLite checkpoint at {pretrained_model_name_or_path!r}: {error}. The weights "
                    "file looks truncated or corrupt; re-download it or save the drafter again."
                ) from error
            raise
        problems = {k: sorted(v) for k, v in info.items() if k != "error_msgs" and v}
        if problems or info.get("error_msgs"):
            details = "; ".join(f"{k}: {v[:8]}{' ...' if len(v) > 8 else ''}" for k, v in problems.items())
            raise ValueError(
                f"The DLite checkpoint at {pretrained_model_name_or_path!r} does not match its config ({details} "
                f"{info.get('error_msgs') or ''}). The checkpoint is partial or was saved by an incompatible "
                "version; expected exactly the weights of DLiteForSpeculation for this config. Re-save it with "
                "`save_pretrained`, or check that config.json belongs to these weights."
            )
        return (model, info) if want_info else model


class DLiteForSpeculation(DLitePreTrainedModel):
    """The DLite drafter. Borrows the target's token embedding and lm_head (see `bind_target`)."""

    def __init__(self, config: DLiteConfig):
        super().__init__(config)
        layer_cls, norm_cls, rotary_cls = backbone_blocks(config.backbone_type)
        backbone_config = config.backbone_config()
        hidden, target_hidden = config.hidden_size, config.target_hidden_size
        eps = config.rms_norm_eps

        self.state_norm = norm_cls(target_hidden, eps=eps)
        self.state_proj = nn.Linear(target_hidden, hidden, bias=False) if hidden != target_hidden else nn.Identity()
        self.depth_embedding = nn.Embedding(config.num_tapped_layers, hidden)
        self.token_proj = nn.Linear(target_hidden, hidden, bias=False) if hidden != target_hidden else nn.Identity()
        self.mask_embedding = nn.Parameter(torch.zeros(hidden)) if config.mask_token_id is None else None
        if config.history_window != 0:
            self.history_proj = nn.Linear(config.num_tapped_layers * target_hidden, hidden, bias=False)
        self.layers = nn.ModuleList(layer_cls(backbone_config, i) for i in range(config.num_hidden_layers))
        for layer in self.layers:
            layer.self_attn.is_causal = False  # bidirectional inside a block
        self.rotary_emb = rotary_cls(backbone_config)
        self.head = (
            DLiteSequentialHead(hidden, target_hidden, config.head_rank, eps, norm_cls)
            if config.use_sequential_head
            else None
        )
        self.norm = norm_cls(hidden, eps=eps)
        self.out_proj = nn.Linear(hidden, target_hidden, bias=False) if hidden != target_hidden else nn.Identity()
        if config.draft_vocab_size is not None:
            self.register_buffer("draft_vocab_ids", torch.arange(config.draft_vocab_size), persistent=True)
        else:
            self.draft_vocab_ids = None
        self._target_embeddings: tuple[nn.Module, nn.Module] | None = None
        self._draft_head: tuple[torch.Tensor, torch.Tensor | None] | None = None
        self._inference_head_cache: tuple[tuple, tuple[torch.Tensor, torch.Tensor | None]] | None = None
        self.last_generation_stats = None
        self.post_init()
        install_generate_hook()  # on first use of a drafter, not on import: generate(assistant_model=self) works

    # ----------------------------------------------------------------------------------------- target binding
    def check_target(self, target: nn.Module) -> None:
        """Raise `ValueError` if `target` is not the kind of model this drafter was trained for."""
        config = target.config.get_text_config() if hasattr(target.config, "get_text_config") else target.config
        expected = self.config.target_model.get("name_or_path") or "its target"
        problems = []
        if config.num_hidden_layers != self.config.num_target_layers:
            problems.append(
                f"{config.num_hidden_layers} layers (the drafter taps layers {self.config.target_layer_ids} "
                f"of a {self.config.num_target_layers}-layer target)"
            )
        if config.hidden_size != self.config.target_hidden_size:
            problems.append(f"hidden size {config.hidden_size} (expected {self.config.target_hidden_size})")
        output = target.get_output_embeddings()
        vocab = output.weight.shape[0] if output is not None else config.vocab_size
        if vocab != self.config.vocab_size:
            problems.append(f"a vocabulary of {vocab} tokens (expected {self.config.vocab_size})")
        if problems:
            name = getattr(target.config, "_name_or_path", "") or type(target).__name__
            raise ValueError(
                f"This DLite drafter was trained for {expected} "
                f"({self.config.target_model.get('architecture', '?')}), but the target {name!r} has "
                + "; ".join(problems)
                + ". A drafter only works with the target it was trained on: load the matching drafter, or train "
                "one for this target with `dlite-hf train`."
            )

    def bind_target(self, target: nn.Module) -> DLiteForSpeculation:
        """Borrow `target`'s token embedding and lm_head (not copied, not saved). Returns self."""
        self.check_target(target)
        embeddings, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
        if embeddings is None or lm_head is None:
            raise ValueError(
                f"The target {type(target).__name__} exposes no input/output embeddings "
                "(get_input_embeddings() / get_output_embeddings()); DLite needs both."
            )
        self._target_embeddings = (embeddings, lm_head)
        self._draft_head = None  # the lm_head slice of the draft vocabulary, rebuilt on first use
        self._inference_head_cache = None
        return self

    @torch.no_grad()
    def set_draft_vocab(self, token_counts: torch.Tensor, size: int | None = None) -> torch.Tensor:
        """Choose the draft vocabulary: the most frequent tokens of `token_counts` `[V]`.

        Args:
            token_counts: how often each token of the target's vocabulary occurs in the responses to draft.
            size: how many tokens to keep (default: `config.draft_vocab_size`; required for a drafter over the full
                vocabulary). A new size updates the config. The drafter's own weights do not depend on it (the
                draft vocabulary's rows are read from the target's lm_head), so a trained drafter can be given a
                smaller vocabulary without retraining: each round then reads fewer lm_head rows, and it can no
                longer draft the tokens it dropped.
        """
        if self.draft_vocab_ids is None and size is None:
            raise ValueError(
                "This drafter drafts over the full vocabulary (config.draft_vocab_size=None): pass `size` to give it "
                "a draft vocabulary."
            )
        if token_counts.shape != (self.config.vocab_size,):
            raise ValueError(
                f"token_counts has shape {tuple(token_counts.shape)}; expected ({self.config.vocab_size},)."
            )
        if size is not None:
            if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= self.config.vocab_size:
                raise ValueError(
                    f"size={size!r}: expected an integer in [1, {self.config.vocab_size}] (the target's vocabulary), "
                    "or None to keep config.draft_vocab_size."
                )
            self.config.draft_vocab_size = size
        ids = torch.topk(token_counts.float(), self.config.draft_vocab_size).indices.sort().values.to(self.device)
        if self.draft_vocab_ids is None:
            del self.draft_vocab_ids  # a plain attribute (None) until now
            self.register_buffer("draft_vocab_ids", ids, persistent=True)
        else:
            self.draft_vocab_ids = ids
        self._draft_head = None
        self._inference_head_cache = None
        return self.draft_vocab_ids

    def _embeddings(self) -> tuple[nn.Module, nn.Module]:
        if self._target_embeddings is None:
            raise RuntimeError(
                "This DLite drafter is not bound to a target model. It borrows the target's token embedding and "
                "lm_head: call `drafter.bind_target(target)` first, or use it through "
                "`target.generate(..., assistant_model=drafter)`, which binds it automatically."
            )
        return self._target_embeddings

    def embed_tokens(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Target token embeddings `[..., H_t]` in the drafter's dtype."""
        return self._embeddings()[0](token_ids).to(self.dtype)

    def draft_vocab_head(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The draft vocabulary's rows of the target's lm_head (weight `[V_draft, H_t]`, bias or None), detached
        and built once per binding: what the drafter projects onto, and what training projects the target onto."""
        if self.draft_vocab_ids is None:
            raise ValueError("This drafter drafts over the full vocabulary (config.draft_vocab_size=None).")
        if self._draft_head is None:
            lm_head = self._embeddings()[1]
            ids = self.draft_vocab_ids.to(lm_head.weight.device)
            bias = lm_head.bias[ids].detach() if getattr(lm_head, "bias", None) is not None else None
            self._draft_head = (lm_head.weight[ids].detach().contiguous(), bias)
        return self._draft_head

    def project(self, outputs: torch.Tensor, restrict: bool = False, compact: bool = False) -> torch.Tensor:
        """Normed head outputs `[..., H]` -> logits `[..., V]` through the target's lm_head (float32).

        With `restrict=True` and a draft vocabulary, only its rows of the lm_head are read; every other token
        gets -inf (probability 0), so the result is still a distribution over the whole vocabulary. With
        `compact=True` as well, the logits are returned over the draft vocabulary only (`[..., V_draft]`, column
        `j` is token `draft_vocab_ids[j]`), which is what training uses to keep its losses small.
        """
        lm_head = self._embeddings()[1]
        projected = self.out_proj(outputs).to(lm_head.weight.dtype)
        if not restrict or self.draft_vocab_ids is None:
            return lm_head(projected).float()
        weight, bias = self.draft_vocab_head()
        sub = nn.functional.linear(projected, weight, bias).float()
        if compact:
            return sub
        return self.expand_draft_logits(sub)

    def draft_columns(self) -> torch.Tensor | None:
        """The token id of each column of `draft_step`'s logits (the draft vocabulary, sorted), or None when the
        columns are the whole vocabulary."""
        return self.draft_vocab_ids

    def expand_draft_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary `[..., V_draft]` -> `[..., V]`, -inf (probability 0) for every other
        token; returned as they are by a drafter over the full vocabulary."""
        if self.draft_vocab_ids is None:
            return logits
        full = logits.new_full((*logits.shape[:-1], self.config.vocab_size), float("-inf"))
        return full.index_copy_(-1, self.draft_vocab_ids.to(logits.device), logits)

    def _inference_head(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What `draft_step` projects onto: the draft vocabulary's lm_head rows (the whole lm_head without one)
        times `out_proj`, one `[C, H]` matrix in the lm_head's dtype, and the rows' bias or None.

        `W_vocab (W_out h)` becomes `(W_vocab W_out) h`: each column then costs H multiply-adds instead of H_t, and
        the `[H_t]` intermediate is gone (SmolLM2: 256 against 576 per column, so 2.25x fewer for the head's largest
        product, done K times a round). The product is formed in float32 and rounded once. It is cached, keyed on the
        storage, version counter and dtype of both weights and of the draft vocabulary, so an optimizer step, a
        `load_state_dict`, a `.to()`, `bind_target` or `set_draft_vocab` rebuilds it on the next round.
        """
        lm_head = self._embeddings()[1]
        out_weight = getattr(self.out_proj, "weight", None)  # None: out_proj is the identity (H = H_t)
        tensors = [t for t in (lm_head.weight, out_weight, self.draft_vocab_ids) if t is not None]
        key = tuple((t.data_ptr(), t._version, t.dtype, t.device) for t in tensors)
        if self._inference_head_cache is not None and self._inference_head_cache[0] == key:
            return self._inference_head_cache[1]
        with torch.no_grad():
            if self.draft_vocab_ids is not None:
                weight, bias = self.draft_vocab_head()
            else:
                weight, bias = lm_head.weight.detach(), getattr(lm_head, "bias", None)
                bias = bias.detach() if bias is not None else None
            if out_weight is not None:
                weight = (weight.float() @ out_weight.detach().float()).to(lm_head.weight.dtype)
        self._inference_head_cache = (key, (weight.contiguous(), bias))
        return self._inference_head_cache[1]

    # ----------------------------------------------------------------------------------------- backbone
    def encode_block(
        self,
        context_states: torch.Tensor,
        anchor_ids: torch.Tensor,
        history_states: torch.Tensor | None = None,
        history_valid: torch.Tensor | None = None,
        history_positions: torch.Tensor | None = None,
        sequence_states: torch.Tensor | None = None,
        context_positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run the bidirectional backbone over one block per row.

        Args:
            context_states: `[N, L, H_t]` tapped target states at the position before the anchor.
            anchor_ids: `[N]` anchor tokens (the newest committed token).
            history_states, history_valid, history_positions: `[N, W, L, H_t]`, `[N, W]`, `[N, W]`, only when
                `config.history_window != 0` (see `gather_history`).
            sequence_states, context_positions: instead of `history_*`, for full-history drafters
                (`history_window=-1`) in training: `[B, T, L, H_t]` tapped states of B whole sequences and `[B, A]`
                each block's context position (the N = B * A blocks are sequence-major). Each sequence's history
                then runs through the backbone once, shared by its A blocks, instead of once per block: the same
                result (history rows attend causally to earlier ones, and RoPE sees the same relative offsets) at
                about 1/A of the cost.

        Returns:
            `[N, K, H]` representations of the K draft positions.
        """
        config = self.config
        num_blocks, num_tapped = context_states.shape[:2]
        if num_tapped != config.num_tapped_layers or context_states.shape[-1] != config.target_hidden_size:
            raise ValueError(
                f"context_states has shape {tuple(context_states.shape)}; expected [N, {config.num_tapped_layers}, "
                f"{config.target_hidden_size}] (tapped layers {config.target_layer_ids} of the target)."
            )
        if sequence_states is not None and config.history_window != -1:
            raise ValueError(
                f"sequence_states shares one history among a sequence's blocks, which is exact only for full-history "
                f"drafters (history_window=-1); this one has history_window={config.history_window}. Pass "
                "history_states / history_valid / history_positions (gather_history) instead."
            )
        hidden, positions = self._block_rows(context_states, anchor_ids)
        k = config.num_draft_tokens
        if sequence_states is not None:
            return self._encode_blocks_shared_history(hidden, positions, sequence_states, context_positions)
        if config.history_window == 0:
            return self._run_backbone(hidden, positions, None)[:, -k:]
        if history_states is None or history_valid is None or history_positions is None:
            raise ValueError(
                f"This drafter has history_window={config.history_window} and needs history_states, "
                "history_valid and history_positions (see gather_history)."
            )
        return self._encode_blocks_windowed(hidden, positions, history_states, history_valid, history_positions)

    def _encode_blocks_windowed(
        self,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        history_states: torch.Tensor,
        history_valid: torch.Tensor,
        history_positions: torch.Tensor,
    ) -> torch.Tensor:
        """`encode_block` for blocks that each read their own history rows (a sliding window, or full history without
        `sequence_states`). A history row that is invalid (before the sequence's start) is masked as a key, so the
        leading invalid columns can be cut from a block with no change to its result. Blocks are grouped by how many
        they lead with, and each group runs with only the columns some block of it reads: a window of 512 over
        contexts shorter than 512 then costs what they hold, not 512 rows each."""
        num_blocks = hidden.shape[0]
        leading = (~history_valid.bool()).long().cumprod(dim=1).sum(dim=1)  # [N] columns before the first valid
        order = leading.argsort(descending=True, stable=True)  # fewest history rows first
        groups = order.split(max(1, -(-num_blocks // WINDOW_GROUPS)))
        parts = []
        for group in groups:
            # keep one column at least: a group with no past at all keeps one masked dummy row
            drop = min(int(leading[group].min().item()), history_valid.shape[1] - 1)
            parts.append(
                self._encode_group_windowed(
                    hidden[group],
                    positions[group],
                    history_states[group, drop:],
                    history_valid[group, drop:],
                    history_positions[group, drop:],
                )
            )
        out = torch.cat(parts, dim=0)
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(num_blocks, device=order.device)
        return out[inverse.to(out.device)]

    def _encode_group_windowed(
        self,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        history_states: torch.Tensor,
        history_valid: torch.Tensor,
        history_positions: torch.Tensor,
    ) -> torch.Tensor:
        """One pass over blocks that each read their own history rows: `[history, block]` rows per block, history
        rows causal among themselves, block rows bidirectional over their block and every valid history row."""
        k = self.config.num_draft_tokens
        num_blocks = hidden.shape[0]
        device = hidden.device
        history = self._project_history(history_states)
        span = history.shape[1]
        hidden = torch.cat([history, hidden], dim=1)
        positions = torch.cat([history_positions.to(device), positions], dim=1)
        total = hidden.shape[1]
        is_block = torch.arange(total, device=device) >= span  # [Q]
        key_history_ok = torch.cat(
            [history_valid.to(device), torch.ones(num_blocks, total - span, dtype=torch.bool, device=device)], 1
        )  # [N, Kv]
        causal = torch.ones(total, total, dtype=torch.bool, device=device).tril()
        allowed = (is_block[:, None] & is_block[None, :]) | (
            ~is_block[None, :] & (is_block[:, None] | causal)
        )  # [Q, Kv]
        allowed = allowed[None] & key_history_ok[:, None, :]
        allowed = allowed | torch.eye(total, dtype=torch.bool, device=device)[None]  # padded rows see themselves
        attention_mask = allowed[:, None]  # [N, 1, Q, Kv]
        return self._run_backbone(hidden, positions, attention_mask)[:, -k:]

    def _block_rows(self, context_states: torch.Tensor, anchor_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The backbone inputs of each block, `[N, L + 1 + K, H]` (context states, anchor, K mask rows), and their
        positions `[N, L + 1 + K]` (0 for the context and the anchor, 1..K for the draft positions)."""
        config = self.config
        num_blocks, num_tapped = context_states.shape[:2]
        states = self.state_proj(self.state_norm(context_states.to(self.dtype)))
        context = states + self.depth_embedding.weight[None]
        anchor = self.token_proj(self.embed_tokens(anchor_ids))[:, None]
        k = config.num_draft_tokens
        if self.mask_embedding is not None:
            masks = self.mask_embedding.expand(num_blocks, k, -1)
        else:
            mask_ids = anchor_ids.new_full((num_blocks, k), config.mask_token_id)
            masks = self.token_proj(self.embed_tokens(mask_ids))
        hidden = torch.cat([context, anchor, masks], dim=1)
        device = hidden.device
        positions = torch.cat(
            [torch.zeros(num_tapped + 1, dtype=torch.long, device=device), torch.arange(1, k + 1, device=device)]
        ).expand(num_blocks, -1)
        return hidden, positions

    def _project_history(self, states: torch.Tensor) -> torch.Tensor:
        """`[..., L, H_t]` tapped states of past positions -> `[..., H]` history rows of the backbone."""
        return self.history_proj(self.state_norm(states.to(self.dtype)).flatten(-2))

    def _run_backbone(
        self, hidden: torch.Tensor, positions: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> torch.Tensor:
        position_embeddings = self.rotary_emb(hidden, positions)
        for layer in self.layers:
            hidden = layer(
                hidden,
                attention_mask=attention_mask,
                position_ids=positions,
                position_embeddings=position_embeddings,
            )
        return hidden

    def _encode_blocks_shared_history(
        self,
        block_rows: torch.Tensor,
        block_positions: torch.Tensor,
        sequence_states: torch.Tensor,
        context_positions: torch.Tensor,
    ) -> torch.Tensor:
        """`encode_block` for full-history drafters with each sequence's history computed once (see there).

        One backbone pass per sequence over `[S history rows, A blocks of M rows]`: history row j sits at position
        j and attends to rows 0..j; block a (context position c) sits at c + its usual positions and attends to
        history rows < c and to its own rows. Relative to the per-block layout (history at j - c, block at 0..K)
        every offset RoPE sees is unchanged, and each block's history rows depend only on rows before them.
        """
        config = self.config
        if context_positions is None or sequence_states.dim() != 4:
            raise ValueError(
                "sequence_states `[B, T, L, H_t]` needs context_positions `[B, A]` (each block's context position)."
            )
        batch, num_anchors = context_positions.shape
        num_blocks, rows_per_block, width = block_rows.shape
        if num_blocks != batch * num_anchors:
            raise ValueError(
                f"{num_blocks} blocks but context_positions {tuple(context_positions.shape)} describes "
                f"{batch} x {num_anchors}; the blocks must be the sequences' anchors in sequence-major order."
            )
        device = block_rows.device
        span = max(int(context_positions.max().item()), 1)  # history rows any block may read: 0 .. span - 1
        history = self._project_history(sequence_states[:, :span].to(device))  # [B, S, H]
        contexts = context_positions.to(device)
        hidden = torch.cat([history, block_rows.reshape(batch, num_anchors * rows_per_block, width)], dim=1)
        shifted = (block_positions.reshape(batch, num_anchors, rows_per_block) + contexts[..., None]).flatten(1)
        positions = torch.cat([torch.arange(span, device=device).expand(batch, -1), shifted], dim=1)
        # queries: S history rows, then the blocks' rows; keys likewise
        history_index = torch.arange(span, device=device)
        block_of_row = torch.arange(num_anchors, device=device).repeat_interleave(rows_per_block)  # [A*M]
        history_to_history = history_index[:, None] >= history_index[None, :]  # [S, S] causal
        block_to_history = history_index[None, None, :] < contexts[:, block_of_row, None]  # [B, A*M, S]
        block_to_block = block_of_row[:, None] == block_of_row[None, :]  # [A*M, A*M]
        top = torch.cat(
            [history_to_history, torch.zeros(span, num_anchors * rows_per_block, dtype=torch.bool, device=device)], 1
        ).expand(batch, -1, -1)
        bottom = torch.cat([block_to_history, block_to_block.expand(batch, -1, -1)], dim=2)
        attention_mask = torch.cat([top, bottom], dim=1)[:, None]  # [B, 1, Q, Kv]
        hidden = self._run_backbone(hidden, positions, attention_mask)[:, span:]
        k = config.num_draft_tokens
        return hidden.reshape(num_blocks, rows_per_block, width)[:, -k:]

    def head_step(
        self,
        block: torch.Tensor,
        prev_ids: torch.Tensor,
        state: torch.Tensor,
        restrict: bool = False,
        compact: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out, state = self._head_out(block, prev_ids, state)
        normed = self.norm(out)
        return self.project(normed, restrict, compact), normed, state

    @torch.no_grad()
    def draft_step(
        self, block: torch.Tensor, prev_ids: torch.Tensor, state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One inference step of the sequential head (what a drafting round runs K times).

        The same function as `head_step(..., restrict=True, compact=True)`, through the fused head
        (`_inference_head`), so it differs from it only by rounding.

        Returns:
            float32 logits `[N, C]` over `draft_columns()` (C = V without a draft vocabulary) and the new state.
        """
        out, state = self._head_out(block, prev_ids, state)
        weight, bias = self._inference_head()
        return nn.functional.linear(self.norm(out).to(weight.dtype), weight, bias).float(), state

    def _head_out(
        self, block: torch.Tensor, prev_ids: torch.Tensor, state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.head is None:  # pure parallel ablation: the backbone alone predicts every position
            return block, state
        return self.head.step(block, self.embed_tokens(prev_ids), state)

    # ----------------------------------------------------------------------------------------- training forward
    def forward(
        self,
        context_states: torch.Tensor,
        anchor_ids: torch.Tensor,
        draft_input_ids: torch.Tensor,
        history_states: torch.Tensor | None = None,
        history_valid: torch.Tensor | None = None,
        history_positions: torch.Tensor | None = None,
        restrict_to_draft_vocab: bool = False,
        compact_draft_vocab: bool = False,
        sequence_states: torch.Tensor | None = None,
        context_positions: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> DLiteOutput:
        """Teacher-forced forward over many blocks (training).

        Args:
            context_states: `[N, L, H_t]` tapped target states at each anchor position - 1.
            anchor_ids: `[N]` anchor tokens x_a.
            draft_input_ids: `[N, K]` the true tokens x_{a+1..a+K}; position i's head step sees x_{a+i-1}
                (the anchor for i = 1), so the last column is never read. Any id is fine where invalid.
            history_*, sequence_states, context_positions: see `encode_block` (the last two: one shared history
                pass per sequence for full-history drafters, what training uses).
            restrict_to_draft_vocab: project onto the draft vocabulary only (what `draft()` does); every other
                token gets logit -inf. Cheaper, and trains exactly the distribution used at inference.
            compact_draft_vocab: with `restrict_to_draft_vocab`, return logits `[N, K, V_draft]` over the draft
                vocabulary only (column `j` is token `draft_vocab_ids[j]`) instead of scattering them into `V`.

        Returns:
            [`DLiteOutput`] with `logits` `[N, K, V]`.
        """
        if compact_draft_vocab and not (restrict_to_draft_vocab and self.draft_vocab_ids is not None):
            raise ValueError(
                "compact_draft_vocab=True returns logits over the draft vocabulary, so it needs "
                f"restrict_to_draft_vocab=True (got {restrict_to_draft_vocab}) and a drafter with a draft vocabulary "
                f"(config.draft_vocab_size={self.config.draft_vocab_size})."
            )
        block = self.encode_block(
            context_states,
            anchor_ids,
            history_states,
            history_valid,
            history_positions,
            sequence_states=sequence_states,
            context_positions=context_positions,
        )
        prev_ids = torch.cat([anchor_ids[:, None], draft_input_ids[:, :-1]], dim=1)
        state = self.head.init_state(block[:, 0]) if self.head is not None else None
        logits, hiddens = [], []
        for i in range(self.config.num_draft_tokens):
            step_logits, normed, state = self.head_step(
                block[:, i], prev_ids[:, i], state, restrict_to_draft_vocab, compact_draft_vocab
            )
            logits.append(step_logits)
            hiddens.append(normed)
        return DLiteOutput(logits=torch.stack(logits, 1), hidden_states=torch.stack(hiddens, 1))

    # ----------------------------------------------------------------------------------------- inference
    @torch.no_grad()
    def draft(
        self,
        context_states: torch.Tensor,
        anchor_ids: torch.Tensor,
        num_tokens: int | None = None,
        do_sample: bool = False,
        logits_processor: Any = None,
        prefix_ids: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        history_states: torch.Tensor | None = None,
        history_valid: torch.Tensor | None = None,
        history_positions: torch.Tensor | None = None,
        confidence_threshold: float | None = None,
        skip_threshold: float | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draft up to `num_tokens` (<= K) tokens after each anchor.

        Each position is chosen from the *processed* logits (the target's logits processors, given the committed
        prefix plus the tokens drafted so far): argmax when greedy, a sample otherwise. Those processed logits are
        returned, so speculative sampling compares the target against exactly the distribution drafted from.
        Drafting stops early once every row's joint probability of its drafts (under those processed logits)
        is below `confidence_threshold` (default `config.draft_confidence_threshold`; 0 never stops early) and
        the number of drafts is one of `config.draft_lengths` (any when None; `num_tokens` always), and nothing
        is returned when, in every row, the most likely first draft has a probability below `skip_threshold`
        (default `config.draft_skip_threshold`; 0 never skips).

        Both rules keep speculative sampling exact. The stop after draft n looks only at drafts 1..n, already drawn
        and proposed, so whether draft n+1 is proposed never depends on draft n+1 itself. The skip looks at the
        first position's distribution, its top probability, before anything is drawn: a skip that looked at the
        *sampled* first draft would drop the drafts it was unsure of and keep the others, so the proposed first
        draft would no longer follow q, and the output would be biased (`tests/test_sampling.py`). Greedy drafts
        the argmax, whose probability is that top probability, so greedy skips the same rounds either way.

        Returns:
            `tokens` `[N, n]` and `logits` `[N, n, V]` (float32, processed), `0 <= n <= num_tokens`; `n = 0` only
            through `skip_threshold`.
        """
        k = self.config.num_draft_tokens if num_tokens is None else int(num_tokens)
        if not 1 <= k <= self.config.num_draft_tokens:
            raise ValueError(f"num_tokens={k} is invalid: expected 1..{self.config.num_draft_tokens} (config K).")
        if logits_processor is not None and prefix_ids is None:
            raise ValueError("draft(logits_processor=...) needs prefix_ids, the committed tokens the processors see.")
        if confidence_threshold is not None:
            where = "draft(confidence_threshold=...): "
            check_threshold("draft_confidence_threshold", confidence_threshold, where=where)
        if skip_threshold is not None:
            check_threshold("draft_skip_threshold", skip_threshold, where="draft(skip_threshold=...): ")
        rules = DraftRules.from_config(self.config, confidence_threshold, skip_threshold)
        history = None if history_states is None else (history_states, history_valid, history_positions)
        return draft_tokens(
            self,
            context_states,
            anchor_ids,
            k,
            rules,
            do_sample=do_sample,
            logits_processor=logits_processor,
            prefix_ids=prefix_ids,
            generator=generator,
            history=history,
        )

    def draft_row_lengths(
        self,
        tokens: torch.Tensor,
        logits: torch.Tensor,
        confidence_threshold: float | None = None,
        skip_threshold: float | None = None,
    ) -> list[int]:
        """For a batched `draft()` output, each row's draft count had it been drafted alone (the same rules and
        defaults as `draft`; `drafting.row_lengths`). An engine that verifies each request's own draft, as vLLM
        does, proposes that many: a batch then proposes what each request alone would."""
        rules = DraftRules.from_config(self.config, confidence_threshold, skip_threshold)
        return row_lengths(tokens, logits, rules, self.draft_columns())

    @staticmethod
    def draft_session(min_match: int | None = None) -> DraftSession:
        """A new `DraftSession` for hybrid drafting (`with drafter.draft_session() as session: ...`): the same class
        as `dlite_hf.DraftSession`, reachable from a drafter loaded with trust_remote_code without dlite-hf."""
        return DraftSession(min_match=min_match)

    def get_candidate_generator(self, target: nn.Module, **kwargs: Any) -> DLiteCandidateGenerator:
        """Called by the generate() integration when this drafter is passed as `assistant_model`: the hybrid
        generator with `prompt_lookup_num_tokens`, else DLite alone (`candidate_generators.py`)."""
        return make_candidate_generator(self, target, **kwargs)


DLiteConfig.register_for_auto_class()
DLiteForSpeculation.register_for_auto_class("AutoModel")
