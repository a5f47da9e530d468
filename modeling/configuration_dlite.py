"""Configuration of a DLite drafter.

A DLite drafter is bound to one target model: it reads hidden states from some of the target's layers and
borrows the target's token embedding and lm_head. The fields prefixed ``target_`` record that contract, so a
drafter paired with the wrong target fails with a clear message instead of drafting garbage.
"""

from typing import Any, ClassVar

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig

from .decoding_options import (
    THRESHOLD_MEANINGS,
    check_fallback_min_match,
    check_length_factor,
    check_min_match,
    check_threshold,
)


def default_target_layer_ids(num_target_layers: int, num_tapped: int) -> list[int]:
    """Evenly spread ``num_tapped`` layer indices over ``[1, num_target_layers - 3]`` (as DFlash does).

    The last two layers are skipped: their states are already specialised to the target's own next token,
    while the drafter needs information about the tokens after it.
    """
    if num_target_layers < 1:
        raise ValueError(f"num_target_layers must be >= 1, got {num_target_layers}.")
    if num_tapped < 1:
        raise ValueError(f"num_tapped (number of tapped target layers) must be >= 1, got {num_tapped}.")
    low, high = 1, min(max(1, num_target_layers - 3), num_target_layers - 1)  # a 1-layer target has only layer 0
    if num_tapped > high - low + 1:
        low, high = 0, num_target_layers - 1
    if num_tapped > high - low + 1:
        raise ValueError(
            f"Cannot tap {num_tapped} distinct layers of a target with {num_target_layers} layers; "
            f"use at most {num_target_layers}."
        )
    if num_tapped == 1:
        return [(low + high) // 2]
    step = (high - low) / (num_tapped - 1)
    ids = sorted({round(low + i * step) for i in range(num_tapped)})
    candidate = low
    while len(ids) < num_tapped:  # rounding collisions on shallow targets: fill the gaps deterministically
        if candidate not in ids:
            ids.append(candidate)
        candidate += 1
    return sorted(ids)


@strict
class DLiteConfig(PreTrainedConfig):
    r"""Configuration of [`DLiteForSpeculation`].

    Args:
        target_layer_ids (`list[int]`):
            0-based indices of the target decoder layers whose outputs the drafter reads (the output of layer
            ``i`` is ``hidden_states[i + 1]`` in transformers' ``output_hidden_states`` numbering). Must be
            strictly increasing and within ``[0, num_target_layers)``.
        num_target_layers (`int`):
            Number of decoder layers of the target the drafter was built for.
        target_hidden_size (`int`):
            Hidden size of the target (width of the tapped states, the token embedding and the lm_head input).
        vocab_size (`int`):
            Vocabulary size of the target's lm_head; the drafter proposes tokens in this vocabulary.
        num_draft_tokens (`int`, defaults to 7):
            K, the number of placeholder positions, i.e. tokens drafted per round.
        hidden_size (`int`, *optional*):
            Width of the drafter's backbone. Defaults to ``target_hidden_size``; a smaller width adds input and
            output projections (CPU-sized drafters).
        num_hidden_layers (`int`, defaults to 5):
            Number of bidirectional transformer layers of the backbone.
        num_attention_heads (`int`, defaults to 8), num_key_value_heads (`int`, defaults to 4),
        head_dim (`int`, *optional*), intermediate_size (`int`, *optional*, defaults to ``3 * hidden_size``):
            Backbone attention and MLP sizes.
        rms_norm_eps (`float`, defaults to 1e-6), rope_theta (`float`, defaults to 10000.0):
            Norm epsilon and rotary base of the backbone. Positions are local (0 for the context, 1..K for the
            drafts, negative for history), so a small base is enough.
        head_rank (`int`, defaults to 64):
            R, the rank of the gated recurrent sequential head (the paper uses 320 for Qwen3-4B, 512 for 8B).
        use_sequential_head (`bool`, defaults to `True`):
            `False` drops the recurrent head: every position is predicted from the backbone alone (the paper's
            "pure parallel", DFlash-like ablation).
        draft_vocab_size (`int`, *optional*):
            Draft only among this many target tokens (the most frequent in the training responses, stored in the
            checkpoint as `draft_vocab_ids`). At inference each draft position then reads that slice of the lm_head
            instead of all of it: on a CPU the per-position projection is memory-bound and dominates a round.
            Lossless either way: drafts are verified by the target, and the candidate logits are exactly the
            (restricted) distribution the drafts were taken from. `None` drafts over the full vocabulary.
        draft_confidence_threshold (`float`, defaults to 0.0):
            Stop a round's drafting at the first position where the drafter's own confidence in the drafts so far
            (the product of the probabilities it gave its chosen tokens, after the logits processors) falls below
            this value; at least one token is always drafted. The target then verifies a shorter block, and the
            drafter skips the positions after the stop. 0.0 drafts K tokens every round, as the paper does (an
            extension beyond it; see the README). Lossless for greedy and sampling alike: the stop depends only on
            the drafter's own distribution and draws, never on the target.
        draft_skip_threshold (`float`, defaults to 0.0):
            Propose no drafts in a round whose most likely first draft has a drafter probability below this value
            (decided before anything is drawn, so sampling stays exact; greedy drafts that token): the target
            then decodes one token alone, which on hardware where a one-token forward is much cheaper than a
            multi-token one (a CPU: 58 vs 94 ms for SmolLM2-135M, `benchmarks/verify_cost.py`, removed: `git show
            2a88d8b:benchmarks/verify_cost.py`) saves more than the
            unlikely draft would earn. 0.0 never skips (the paper; right for GPUs, where verifying K + 1 tokens
            costs about as much as decoding one). Lossless for greedy and sampling.
        draft_lengths (`list[int]`, *optional*):
            The draft counts a round may stop at when `draft_confidence_threshold` stops it early: a round that
            falls below the threshold after `n` drafts keeps drafting up to the next listed length (K is always
            allowed). Verification costs depend on the block size in hardware-specific ways: on this project's
            CPU (MKL, 1 thread) a SmolLM2 forward over 4 tokens costs less than one over 2 or 3
            (`benchmarks/verify_cost.py`, removed: `git show 2a88d8b:benchmarks/verify_cost.py`), so `[3, 7]` lets a
            round verify 4 or 8 tokens only. `None`: any length.
        lookup_min_match (`int`, defaults to 4):
            Hybrid drafting only (`generate(..., prompt_lookup_num_tokens=N)` with this drafter): a round drafts the
            continuation retrieved from the suffix index of the context when the longest earlier occurrence of the
            context's suffix is at least this many tokens long, and asks the drafter otherwise. Chosen on a tuning
            split (`dlite-hf bench replay hybrid`); a `DraftSession(min_match=...)` overrides it for its calls.
        lookup_length_factor (`float`, defaults to 2.0):
            Hybrid drafting only: a retrieved draft has at most this many tokens per matched token (a 5-token match
            drafts up to 10; always at most N and at least 1): a long match predicts a long copy, a short one is
            verified cheaply. Chosen with `lookup_min_match`.
        lookup_fallback_min_match (`int`, defaults to 0):
            Hybrid drafting only: in a round whose drafter proposes nothing (its first draft is below
            `draft_skip_threshold`), draft the retrieved continuation of a shorter match, of at least this many
            tokens, instead of a one-token step. 0: off. Chosen on the tuning split (`dlite-hf bench replay hybrid`).
        history_window (`int`, defaults to 0):
            0: DLite, history-free. N > 0: the block also attends to the target states of the N positions
            before its context (sliding-window ablation). -1: full history (the history-aware teacher).
        mask_token_id (`int`, *optional*):
            Token whose target embedding fills the placeholder positions. ``None`` uses a learned embedding.
        backbone_type (`str`, defaults to ``"qwen3"``):
            Which transformers decoder block the backbone is built from: ``"qwen3"`` or ``"llama"``.
        target_model (`dict`, *optional*):
            Metadata of the target: ``name_or_path``, ``architecture``, ``model_type``. Informational, and used
            in error messages.
    """

    model_type = "dlite"

    _BACKBONES: ClassVar[tuple[str, ...]] = ("qwen3", "llama")

    # Typed fields (transformers 5's config style): `@strict` checks each value's type on every assignment, and its
    # class validators (`validate_dlite` below, beside PreTrainedConfig's own) at construction and in
    # `save_pretrained`, so a config changed after it was built cannot be saved invalid.
    target_layer_ids: list[int] | None = None
    num_target_layers: int = 4
    target_hidden_size: int = 64
    vocab_size: int = 128
    num_draft_tokens: int = 7
    hidden_size: int | None = None
    num_hidden_layers: int = 5
    num_attention_heads: int = 8
    num_key_value_heads: int = 4
    head_dim: int | None = None
    intermediate_size: int | None = None
    rms_norm_eps: float | int = 1e-6
    rope_theta: float | int = 10000.0
    head_rank: int = 64
    use_sequential_head: bool = True
    draft_vocab_size: int | None = None
    draft_confidence_threshold: float | int = 0.0
    draft_skip_threshold: float | int = 0.0
    draft_lengths: list[int] | None = None
    lookup_min_match: int = 4
    lookup_length_factor: float | int = 2.0
    lookup_fallback_min_match: int = 0
    history_window: int = 0
    mask_token_id: int | None = None
    backbone_type: str = "qwen3"
    target_model: dict[str, Any] | None = None
    initializer_range: float = 0.02
    tie_word_embeddings: bool = False

    def __post_init__(self, **kwargs: Any) -> None:
        """Derive the defaults that depend on other fields, then run the DLite checks (a plain `ValueError`
        naming the field, the value and what is allowed)."""
        if self.target_layer_ids is None:
            self.target_layer_ids = default_target_layer_ids(self.num_target_layers, min(4, self.num_target_layers))
        else:
            self.target_layer_ids = list(self.target_layer_ids)
        if self.hidden_size is None:
            self.hidden_size = self.target_hidden_size
        if self.head_dim is None:
            self.head_dim = self.hidden_size // max(1, self.num_attention_heads)
        if self.intermediate_size is None:
            self.intermediate_size = 3 * self.hidden_size
        self.target_model = dict(self.target_model or {})
        super().__post_init__(**kwargs)
        self.validate_dlite()

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any):
        """`PreTrainedConfig.from_dict`, then the DLite checks again: keyword overrides
        (`from_pretrained(DIR, num_draft_tokens=...)`, also through `AutoModel`) are set after `__init__` ran them.
        A value of the wrong type (in config.json or an override) is a `ValueError` here too."""
        from huggingface_hub.errors import StrictDataclassError

        hint = "check the keyword overrides passed to from_pretrained and the checkpoint's config.json"
        try:
            result = super().from_dict(config_dict, **kwargs)
            config = result[0] if isinstance(result, tuple) else result
            config.validate_dlite()
        except StrictDataclassError as error:
            raise ValueError(f"DLiteConfig: {error} ({hint})") from None
        except ValueError as error:
            raise ValueError(f"{error} ({hint})") from None
        return result

    @property
    def num_tapped_layers(self) -> int:
        """L, the number of target layers read (input positions of the hidden-state part of a block)."""
        return len(self.target_layer_ids)

    def validate_dlite(self) -> None:
        """Raise `ValueError` naming the field, the value and what is allowed."""

        def bad(field: str, value: Any, allowed: str) -> ValueError:
            return ValueError(f"DLiteConfig.{field}={value!r} is invalid: expected {allowed}.")

        for name in ("num_target_layers", "target_hidden_size", "vocab_size", "hidden_size", "num_hidden_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise bad(name, value, "a positive integer")
        for name in ("num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size", "head_rank"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise bad(name, value, "a positive integer")
        if not isinstance(self.num_draft_tokens, int) or not 1 <= self.num_draft_tokens <= 64:
            raise bad("num_draft_tokens", self.num_draft_tokens, "an integer in [1, 64] (the paper uses 7)")
        if self.num_attention_heads % self.num_key_value_heads != 0:
            raise bad(
                "num_key_value_heads",
                self.num_key_value_heads,
                f"a divisor of num_attention_heads={self.num_attention_heads}",
            )
        ids = self.target_layer_ids
        if (
            not isinstance(ids, list)
            or not ids
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
        ):
            raise bad("target_layer_ids", ids, "a non-empty list of integers")
        if any(b <= a for a, b in zip(ids, ids[1:])):
            raise bad("target_layer_ids", ids, "strictly increasing layer indices")
        if ids[0] < 0 or ids[-1] >= self.num_target_layers:
            raise bad(
                "target_layer_ids",
                ids,
                f"indices in [0, {self.num_target_layers - 1}] (the target has {self.num_target_layers} layers)",
            )
        if self.draft_vocab_size is not None and (
            not isinstance(self.draft_vocab_size, int) or not 1 <= self.draft_vocab_size <= self.vocab_size
        ):
            raise bad("draft_vocab_size", self.draft_vocab_size, f"None or an integer in [1, {self.vocab_size}]")
        for name in THRESHOLD_MEANINGS:
            check_threshold(name, getattr(self, name), where="DLiteConfig.")
        lengths = self.draft_lengths
        if lengths is not None and (
            not isinstance(lengths, list)
            or not lengths
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in lengths)
            or any(b <= a for a, b in zip(lengths, lengths[1:]))
            or not 1 <= lengths[0] <= lengths[-1] <= self.num_draft_tokens
        ):
            raise bad(
                "draft_lengths",
                lengths,
                f"None or a strictly increasing list of draft counts in [1, {self.num_draft_tokens}] "
                "(num_draft_tokens), e.g. [3, 7]",
            )
        check_min_match(self.lookup_min_match, f"DLiteConfig.lookup_min_match={self.lookup_min_match!r}")
        factor = self.lookup_length_factor
        check_length_factor(factor, f"DLiteConfig.lookup_length_factor={factor!r}")
        fallback = self.lookup_fallback_min_match
        check_fallback_min_match(fallback, f"DLiteConfig.lookup_fallback_min_match={fallback!r}")
        if not isinstance(self.use_sequential_head, bool):
            raise bad("use_sequential_head", self.use_sequential_head, "True or False")
        if not isinstance(self.history_window, int) or self.history_window < -1:
            raise bad("history_window", self.history_window, "-1 (full history), 0 (history-free) or N > 0")
        if self.mask_token_id is not None and not 0 <= self.mask_token_id < self.vocab_size:
            raise bad("mask_token_id", self.mask_token_id, f"None or a token id in [0, {self.vocab_size - 1}]")
        if self.backbone_type not in self._BACKBONES:
            raise bad("backbone_type", self.backbone_type, f"one of {self._BACKBONES}")
        if not self.rms_norm_eps > 0:
            raise bad("rms_norm_eps", self.rms_norm_eps, "a positive float")
        if not self.rope_theta > 0:
            raise bad("rope_theta", self.rope_theta, "a positive float")

    @classmethod
    def for_target(
        cls,
        target_config: PreTrainedConfig,
        num_target_layers_tapped: int | None = None,
        target_layer_ids: list[int] | None = None,
        target_name_or_path: str | None = None,
        **kwargs: Any,
    ) -> "DLiteConfig":
        """Derive a drafter config from a target's config.

        Args:
            target_config: the target's config (`model.config`); multimodal configs use their text config.
            num_target_layers_tapped: L, how many layers to tap (evenly spread); ignored if `target_layer_ids`.
            target_layer_ids: explicit layer indices.
            target_name_or_path: recorded in `target_model` for error messages.
            **kwargs: any other `DLiteConfig` field (`hidden_size`, `head_rank`, `num_draft_tokens`, ...).
        """
        text = target_config.get_text_config() if hasattr(target_config, "get_text_config") else target_config
        num_layers = text.num_hidden_layers
        if target_layer_ids is None:
            tapped = num_target_layers_tapped if num_target_layers_tapped is not None else min(12, num_layers)
            target_layer_ids = default_target_layer_ids(num_layers, tapped)
        architectures = getattr(text, "architectures", None) or getattr(target_config, "architectures", None)
        metadata = {
            "name_or_path": target_name_or_path or getattr(target_config, "_name_or_path", "") or "",
            "architecture": (architectures or [type(text).__name__])[0],
            "model_type": getattr(text, "model_type", ""),
        }
        return cls(
            target_layer_ids=list(target_layer_ids),
            num_target_layers=num_layers,
            target_hidden_size=text.hidden_size,
            vocab_size=text.vocab_size,
            target_model=metadata,
            **kwargs,
        )

    def backbone_config(self) -> PreTrainedConfig:
        """The transformers config the backbone blocks are instantiated from (not saved; derived)."""
        if self.backbone_type == "qwen3":
            from transformers import Qwen3Config as BackboneConfig
        else:
            from transformers import LlamaConfig as BackboneConfig
        config = BackboneConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            rms_norm_eps=self.rms_norm_eps,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
            max_position_embeddings=4096,
            attention_bias=False,
        )
        config._attn_implementation = "sdpa"
        return config
