"""DLite: a history-free speculative drafter built from transformers' own blocks.

A round (method.md): the target's states from L tapped layers at the last position (plus a depth embedding), the
anchor token and K placeholders go through a small bidirectional backbone; a gated low-rank recurrent head restores
the in-block causal order, and each position is projected through the target's lm_head. No KV cache, no history
(``config.history_window != 0``: the history-aware teacher and sliding-window ablations).
"""

from __future__ import annotations

from typing import Any

import torch
from safetensors import SafetensorError
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init

try:
    from .blocks import DLiteOutput, DLiteSequentialHead, backbone_blocks, encode_with_history
    from .candidate_generators import DLiteCandidateGenerator, HybridCandidateGenerator
    from .configuration_dlite import DLiteConfig
    from .drafting import DraftRules, draft_tokens, row_lengths
    from .integration import install_generate_hook
    from .packed_linear import PackedWeight, pack_linears, packed_linear
    from .suffix_index import DraftSession
    from .target_binding import TargetBindingMixin
except ImportError as error:  # a folder whose code files were copied from different releases
    raise ImportError(
        f"The DLite drafter's code files do not fit together ({error}): they come from different dlite-hf versions. "
        "A drafter folder must hold the .py files of one release: copy them all from the release its weights were "
        "saved with, or load the drafter with dlite-hf installed and save it again (save_pretrained writes them)."
    ) from error


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
        """`PreTrainedModel.from_pretrained`, but missing, unexpected or mismatched keys (which transformers would
        initialise randomly and only log) or a corrupt weights file raise `ValueError`."""
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


class DLiteForSpeculation(TargetBindingMixin, DLitePreTrainedModel):
    """The DLite drafter. Borrows the target's token embedding and lm_head (`bind_target`, `target_binding.py`)."""

    def __init__(self, config: DLiteConfig):
        super().__init__(config)
        layer_cls, norm_cls, rotary_cls = backbone_blocks(config.backbone_type)
        backbone_config = config.backbone_config()
        hidden, target_hidden, eps = config.hidden_size, config.target_hidden_size, config.rms_norm_eps

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
        self.head = None  # None: the pure parallel ablation
        if config.use_sequential_head:
            self.head = DLiteSequentialHead(hidden, target_hidden, config.head_rank, eps, norm_cls)
        self.norm = norm_cls(hidden, eps=eps)
        self.out_proj = nn.Linear(hidden, target_hidden, bias=False) if hidden != target_hidden else nn.Identity()
        ids = None if config.draft_vocab_size is None else torch.arange(config.draft_vocab_size)
        self.register_buffer("draft_vocab_ids", ids, persistent=True)  # None (not saved): the full vocabulary
        self.last_generation_stats = None
        pack_linears(self)  # inference in bfloat16 on a CPU: weights packed once (packed_linear.py)
        self._head_packing = PackedWeight()
        self.post_init()
        install_generate_hook()  # on first use of a drafter, not on import: generate(assistant_model=self) works

    def encode_block(
        self,
        context_states: torch.Tensor,
        anchor_ids: torch.Tensor,
        history_states: torch.Tensor | None = None,
        history_valid: torch.Tensor | None = None,
        history_positions: torch.Tensor | None = None,
        block_encoder: Any = None,
    ) -> torch.Tensor:
        """The bidirectional backbone over one block per row: `[N, K, H]` representations of the K draft positions.

        Args:
            context_states: `[N, L, H_t]` tapped target states at the position before the anchor.
            anchor_ids: `[N]` anchor tokens (the newest committed token).
            history_states, history_valid, history_positions: `[N, W, L, H_t]`, `[N, W]`, `[N, W]`, only when
                `config.history_window != 0`.
            block_encoder: instead, `block_encoder(self, rows, positions) -> [N, K, H]` over each block's backbone
                rows `[N, L + 1 + K, H]` (training's shared history pass, `dlite_hf.training.history`).
        """
        config, k = self.config, self.config.num_draft_tokens
        num_blocks, num_tapped = context_states.shape[:2]
        if num_tapped != config.num_tapped_layers or context_states.shape[-1] != config.target_hidden_size:
            raise ValueError(
                f"context_states has shape {tuple(context_states.shape)}; expected [N, {config.num_tapped_layers}, "
                f"{config.target_hidden_size}] (tapped layers {config.target_layer_ids} of the target)."
            )
        # each block's rows: the L context states, the anchor, K mask rows; at positions 0 (context, anchor), 1..K
        states = self.state_proj(self.state_norm(context_states.to(self.dtype)))
        context = states + self.depth_embedding.weight[None]
        anchor = self.token_proj(self.embed_tokens(anchor_ids))[:, None]
        if self.mask_embedding is not None:
            masks = self.mask_embedding.expand(num_blocks, k, -1)
        else:
            masks = self.token_proj(self.embed_tokens(anchor_ids.new_full((num_blocks, k), config.mask_token_id)))
        hidden = torch.cat([context, anchor, masks], dim=1)
        positions = torch.arange(-num_tapped, k + 1, device=hidden.device).clamp(min=0).expand(num_blocks, -1)
        if block_encoder is not None:
            return block_encoder(self, hidden, positions)
        if config.history_window == 0:
            return self.run_backbone(hidden, positions, None)[:, -k:]
        if history_states is None or history_valid is None or history_positions is None:
            raise ValueError(
                f"This drafter has history_window={config.history_window} and needs history_states, "
                "history_valid and history_positions (see gather_history)."
            )
        return encode_with_history(self, hidden, positions, (history_states, history_valid, history_positions))

    def project_history(self, states: torch.Tensor) -> torch.Tensor:
        """`[..., L, H_t]` tapped states of past positions -> `[..., H]` history rows of the backbone."""
        return self.history_proj(self.state_norm(states.to(self.dtype)).flatten(-2))

    def run_backbone(
        self, hidden: torch.Tensor, positions: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """The backbone layers over rows `[N, Q, H]` at `positions` `[N, Q]`, under `attention_mask` (bool
        `[N, 1, Q, Kv]`, True where a query may attend; None: every row attends to every row)."""
        position_embeddings = self.rotary_emb(hidden, positions)
        for layer in self.layers:
            hidden = layer(
                hidden, attention_mask=attention_mask, position_ids=positions, position_embeddings=position_embeddings
            )
        return hidden

    def head_step(
        self,
        block: torch.Tensor,
        prev_ids: torch.Tensor,
        state: torch.Tensor,
        restrict: bool = False,
        compact: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out, state = self._sequential_head_step(block, prev_ids, state)
        normed = self.norm(out)
        return self.project(normed, restrict, compact), normed, state

    @torch.no_grad()
    def draft_step(
        self, block: torch.Tensor, prev_ids: torch.Tensor, state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One inference step of the sequential head: float32 logits `[N, C]` over `draft_columns()` and the new
        state. `head_step(..., restrict=True, compact=True)` through the fused head (`_inference_head`): equal up to
        rounding."""
        out, state = self._sequential_head_step(block, prev_ids, state)
        weight, bias = self._inference_head()
        return packed_linear(self.norm(out).to(weight.dtype), weight, bias, self._head_packing).float(), state

    def _sequential_head_step(
        self, block: torch.Tensor, prev_ids: torch.Tensor, state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.head is None:  # pure parallel ablation: the backbone alone predicts every position
            return block, state
        return self.head.step(block, self.embed_tokens(prev_ids), state)

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
        block_encoder: Any = None,
        **kwargs: Any,
    ) -> DLiteOutput:
        """Teacher-forced forward over many blocks (training): [`DLiteOutput`] with `logits` `[N, K, V]`.

        Args:
            context_states, anchor_ids, history_*, block_encoder: see `encode_block`.
            draft_input_ids: `[N, K]` the true tokens after each anchor; position i's head step sees token i - 1
                (the anchor for i = 1), so the last column is never read.
            restrict_to_draft_vocab: project onto the draft vocabulary only (as `draft()` does), -inf elsewhere.
            compact_draft_vocab: with it, logits `[N, K, V_draft]` over the draft vocabulary only.
        """
        if compact_draft_vocab and not (restrict_to_draft_vocab and self.draft_vocab_ids is not None):
            raise ValueError(
                "compact_draft_vocab=True returns logits over the draft vocabulary, so it needs "
                f"restrict_to_draft_vocab=True (got {restrict_to_draft_vocab}) and a drafter with a draft vocabulary "
                f"(config.draft_vocab_size={self.config.draft_vocab_size})."
            )
        block = self.encode_block(
            context_states, anchor_ids, history_states, history_valid, history_positions, block_encoder=block_encoder
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
        """Draft up to `num_tokens` (<= K) tokens after each anchor: `drafting.draft_tokens` (what `generate()` runs
        each round) under this drafter's rules, with `confidence_threshold` and `skip_threshold` overriding the
        config's. Returns `tokens` `[N, n]` and their processed float32 `logits` `[N, n, V]`, `0 <= n <= num_tokens`
        (`n = 0` only through the skip rule)."""
        k = self.config.num_draft_tokens if num_tokens is None else int(num_tokens)
        if not 1 <= k <= self.config.num_draft_tokens:
            raise ValueError(f"num_tokens={k} is invalid: expected 1..{self.config.num_draft_tokens} (config K).")
        if logits_processor is not None and prefix_ids is None:
            raise ValueError("draft(logits_processor=...) needs prefix_ids, the committed tokens the processors see.")
        rules = DraftRules.from_config(self.config, confidence_threshold, skip_threshold)  # checks the thresholds
        history = None if history_states is None else (history_states, history_valid, history_positions)
        return draft_tokens(
            self, context_states, anchor_ids, k, rules, do_sample, logits_processor, prefix_ids, generator, history
        )

    def draft_row_lengths(
        self,
        tokens: torch.Tensor,
        logits: torch.Tensor,
        confidence_threshold: float | None = None,
        skip_threshold: float | None = None,
    ) -> list[int]:
        """For a batched `draft()` output, each row's draft count had it been drafted alone (`drafting.row_lengths`,
        the same rules as `draft`): what an engine that verifies each request's own draft (vLLM) proposes."""
        rules = DraftRules.from_config(self.config, confidence_threshold, skip_threshold)
        return row_lengths(tokens, logits, rules, self.draft_columns())

    @staticmethod
    def draft_session(min_match: int | None = None) -> DraftSession:
        """A new `DraftSession` for hybrid drafting (`with drafter.draft_session() as session: ...`), reachable from
        a drafter loaded with trust_remote_code without dlite-hf."""
        return DraftSession(min_match=min_match)

    def get_candidate_generator(self, target: nn.Module, **kwargs: Any) -> DLiteCandidateGenerator:
        """The candidate generator of a `generate(assistant_model=self)` call: the hybrid with
        `prompt_lookup_num_tokens`, else DLite alone (`candidate_generators.py`)."""
        if kwargs["generation_config"].prompt_lookup_num_tokens is not None:
            return HybridCandidateGenerator(self, target, **kwargs)
        return DLiteCandidateGenerator(self, target, **kwargs)


DLiteConfig.register_for_auto_class()
DLiteForSpeculation.register_for_auto_class("AutoModel")
