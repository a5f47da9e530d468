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

from .blocks import DLiteOutput, DLiteSequentialHead, PerBlockHistory, backbone_blocks
from .candidate_generators import DLiteCandidateGenerator, make_candidate_generator
from .configuration_dlite import DLiteConfig
from .decoding_options import check_threshold
from .drafting import DraftRules, draft_tokens, row_lengths
from .integration import install_generate_hook
from .suffix_index import DraftSession
from .target_binding import TargetBindingMixin


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


class DLiteForSpeculation(TargetBindingMixin, DLitePreTrainedModel):
    """The DLite drafter. Borrows the target's token embedding and lm_head (`bind_target`, `target_binding.py`)."""

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
        self.last_generation_stats = None
        self.post_init()
        install_generate_hook()  # on first use of a drafter, not on import: generate(assistant_model=self) works

    # ----------------------------------------------------------------------------------------- backbone
    def encode_block(
        self,
        context_states: torch.Tensor,
        anchor_ids: torch.Tensor,
        history_states: torch.Tensor | None = None,
        history_valid: torch.Tensor | None = None,
        history_positions: torch.Tensor | None = None,
        block_encoder: Any = None,
    ) -> torch.Tensor:
        """Run the bidirectional backbone over one block per row.

        Args:
            context_states: `[N, L, H_t]` tapped target states at the position before the anchor.
            anchor_ids: `[N]` anchor tokens (the newest committed token).
            history_states, history_valid, history_positions: `[N, W, L, H_t]`, `[N, W]`, `[N, W]`, only when
                `config.history_window != 0` (in training: `dlite_hf.training.history.gather_history`).
            block_encoder: instead of `history_*`, another layout of the same computation, called as
                `block_encoder(self, rows, positions)` with each block's backbone inputs `[N, L + 1 + K, H]` and
                their positions, returning `[N, K, H]`: training's shared history pass for full-history drafters
                (`dlite_hf.training.history.SharedHistory`).

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
        hidden, positions = self._block_rows(context_states, anchor_ids)
        k = config.num_draft_tokens
        if block_encoder is not None:
            return block_encoder(self, hidden, positions)
        if config.history_window == 0:
            return self.run_backbone(hidden, positions, None)[:, -k:]
        if history_states is None or history_valid is None or history_positions is None:
            raise ValueError(
                f"This drafter has history_window={config.history_window} and needs history_states, "
                "history_valid and history_positions (see gather_history)."
            )
        return PerBlockHistory(history_states, history_valid, history_positions)(self, hidden, positions)

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
                hidden,
                attention_mask=attention_mask,
                position_ids=positions,
                position_embeddings=position_embeddings,
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
        """One inference step of the sequential head (what a drafting round runs K times).

        The same function as `head_step(..., restrict=True, compact=True)`, through the fused head
        (`_inference_head`), so it differs from it only by rounding.

        Returns:
            float32 logits `[N, C]` over `draft_columns()` (C = V without a draft vocabulary) and the new state.
        """
        out, state = self._sequential_head_step(block, prev_ids, state)
        weight, bias = self._inference_head()
        return nn.functional.linear(self.norm(out).to(weight.dtype), weight, bias).float(), state

    def _sequential_head_step(
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
        block_encoder: Any = None,
        **kwargs: Any,
    ) -> DLiteOutput:
        """Teacher-forced forward over many blocks (training).

        Args:
            context_states: `[N, L, H_t]` tapped target states at each anchor position - 1.
            anchor_ids: `[N]` anchor tokens x_a.
            draft_input_ids: `[N, K]` the true tokens x_{a+1..a+K}; position i's head step sees x_{a+i-1}
                (the anchor for i = 1), so the last column is never read. Any id is fine where invalid.
            history_*, block_encoder: see `encode_block` (the latter: training's shared history pass for
                full-history drafters).
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
            block_encoder=block_encoder,
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
        """Draft up to `num_tokens` (<= K) tokens after each anchor: the core's `drafting.draft_tokens` (what
        `generate()` runs each round) under this drafter's rules, checked here on every call.

        Each position is chosen from the *processed* logits (the target's logits processors, given the committed
        prefix plus the tokens drafted so far): argmax when greedy, a sample otherwise; those are returned, so
        speculative sampling compares the target against exactly the distribution drafted from. Drafting stops
        early once every row's joint probability of its drafts is below `confidence_threshold` (default
        `config.draft_confidence_threshold`; 0 never stops early) and the number of drafts is one of
        `config.draft_lengths` (any when None; `num_tokens` always), and nothing is returned when, in every row,
        the most likely first draft has a probability below `skip_threshold` (default `config.draft_skip_threshold`;
        0 never skips). Both rules keep speculative sampling exact (see `draft_tokens`).

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
