"""Configuration of a DLite drafter. The ``target_`` fields record the one target it reads hidden states from and
borrows the token embedding and lm_head of, so a wrong pairing fails with a clear message."""

from typing import Any, ClassVar

from huggingface_hub.dataclasses import strict
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig, PreTrainedConfig

from .decoding_options import DECODING_OPTIONS


def default_target_layer_ids(num_target_layers: int, num_tapped: int) -> list[int]:
    """Evenly spread ``num_tapped`` layer indices over ``[1, num_target_layers - 3]`` (as DFlash does): the last two
    layers are specialised to the target's own next token, the drafter needs the tokens after it."""
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


def _increasing(values: list[int]) -> bool:
    return all(b > a for a, b in zip(values, values[1:]))


@strict
class DLiteConfig(PreTrainedConfig):
    r"""Configuration of [`DLiteForSpeculation`]: the contract with its target, the backbone and head sizes, and the
    default decoding options (all lossless: they read only the drafter's own distribution and draws)."""

    model_type = "dlite"

    _BACKBONES: ClassVar[tuple[str, ...]] = ("qwen3", "llama")

    # `@strict` checks each field's type on every assignment, and runs the class validators (`validate_dlite`, beside
    # PreTrainedConfig's own) at construction and in `save_pretrained`.
    # The target: 0-based decoder layers read (layer i's output is `hidden_states[i + 1]`), strictly increasing.
    target_layer_ids: list[int] | None = None
    num_target_layers: int = 4
    target_hidden_size: int = 64
    vocab_size: int = 128  # the target's lm_head vocabulary, in which the drafter proposes tokens
    num_draft_tokens: int = 7  # K: placeholder positions, the tokens drafted per round
    # The bidirectional backbone (hidden_size defaults to target_hidden_size; a smaller one adds projections).
    # Positions are local (0: context, 1..K: drafts, negative: history), so a small rotary base is enough.
    hidden_size: int | None = None
    num_hidden_layers: int = 5
    num_attention_heads: int = 8
    num_key_value_heads: int = 4
    head_dim: int | None = None
    intermediate_size: int | None = None  # default 3 * hidden_size
    rms_norm_eps: float | int = 1e-6
    rope_theta: float | int = 10000.0
    head_rank: int = 64  # R, the rank of the gated recurrent sequential head
    use_sequential_head: bool = True  # False: the backbone alone predicts every position ("pure parallel" ablation)
    draft_vocab_size: int | None = None  # draft only among these tokens (`draft_vocab_ids`); None: all
    # Stop a round once the joint probability of its drafts (after the logits processors) falls below this, at one
    # of `draft_lengths` (None: any; K always), with at least one draft. 0: K drafts every round.
    draft_confidence_threshold: float | int = 0.0
    # Propose nothing in a round whose most likely first draft is below this (decided before anything is drawn), for
    # hardware where a one-token forward is much cheaper than a multi-token one (CPUs). 0: never.
    draft_skip_threshold: float | int = 0.0
    draft_lengths: list[int] | None = None
    # Hybrid drafting only (`prompt_lookup_num_tokens=N`): draft the retrieved continuation of a matched suffix of at
    # least `lookup_min_match` tokens (`DraftSession(min_match=...)` overrides it), at most `lookup_length_factor`
    # tokens per matched token (1..N); else ask the drafter, and when it proposes nothing draft a match of at least
    # `lookup_fallback_min_match` tokens (0: off). Chosen with `dlite-hf bench replay hybrid`.
    lookup_min_match: int = 4
    lookup_length_factor: float | int = 2.0
    lookup_fallback_min_match: int = 0
    history_window: int = 0  # 0: history-free; N > 0: also read the N positions before; -1: all (the teacher)
    mask_token_id: int | None = None  # token whose embedding fills the placeholders; None: a learned embedding
    backbone_type: str = "qwen3"  # the transformers decoder block of the backbone: "qwen3" or "llama"
    target_model: dict[str, Any] | None = None  # target metadata (name_or_path, architecture, model_type)
    initializer_range: float = 0.02
    tie_word_embeddings: bool = False

    def __post_init__(self, **kwargs: Any) -> None:
        """Derive the defaults that depend on other fields, then run the DLite checks (a plain `ValueError`)."""
        if self.target_layer_ids is None:
            self.target_layer_ids = default_target_layer_ids(self.num_target_layers, min(4, self.num_target_layers))
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
        """`PreTrainedConfig.from_dict`, then the DLite checks again (keyword overrides of `from_pretrained` are set
        after `__init__` ran them); a value of the wrong type is a `ValueError` here too."""
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
        """Raise `ValueError` naming the field, the value and what is allowed (`@strict` has checked the types)."""
        sizes = ("num_target_layers", "target_hidden_size", "vocab_size", "hidden_size", "num_hidden_layers")
        sizes += ("num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size", "head_rank")
        ids, lengths, k, vocab = self.target_layer_ids, self.draft_lengths, self.num_draft_tokens, self.vocab_size
        layers, heads, kv = self.num_target_layers, self.num_attention_heads, self.num_key_value_heads
        mask, v_draft = self.mask_token_id, self.draft_vocab_size
        rules = [(name, getattr(self, name) >= 1, "a positive integer") for name in sizes]
        rules += [  # (field, whether its value is allowed, what is), checked in this order
            ("num_draft_tokens", 1 <= k <= 64, "an integer in [1, 64] (the paper uses 7)"),
            ("num_key_value_heads", kv >= 1 and heads % kv == 0, f"a divisor of num_attention_heads={heads}"),
            (
                "target_layer_ids",
                bool(ids) and _increasing(ids) and 0 <= ids[0] and ids[-1] < layers,
                f"a non-empty, strictly increasing list of indices in [0, {layers - 1}] (a target of {layers} layers)",
            ),
            ("draft_vocab_size", v_draft is None or 1 <= v_draft <= vocab, f"None or an integer in [1, {vocab}]"),
            (
                "draft_lengths",
                lengths is None or (bool(lengths) and _increasing(lengths) and 1 <= lengths[0] <= lengths[-1] <= k),
                f"None or a strictly increasing list of draft counts in [1, {k}] (num_draft_tokens), e.g. [3, 7]",
            ),
            ("history_window", self.history_window >= -1, "-1 (full history), 0 (history-free) or N > 0"),
            ("mask_token_id", mask is None or 0 <= mask < vocab, f"None or a token id in [0, {vocab - 1}]"),
            ("backbone_type", self.backbone_type in self._BACKBONES, f"one of {self._BACKBONES}"),
            ("rms_norm_eps", self.rms_norm_eps > 0, "a positive float"),
            ("rope_theta", self.rope_theta > 0, "a positive float"),
        ]
        for name, allowed, expected in rules:
            if not allowed:
                raise ValueError(f"DLiteConfig.{name}={getattr(self, name)!r} is invalid: expected {expected}.")
        for name, check in DECODING_OPTIONS.items():
            check(getattr(self, name), f"DLiteConfig.{name}={getattr(self, name)!r}")

    @classmethod
    def for_target(
        cls,
        target_config: PreTrainedConfig,
        num_target_layers_tapped: int | None = None,
        target_layer_ids: list[int] | None = None,
        target_name_or_path: str | None = None,
        **kwargs: Any,
    ) -> "DLiteConfig":
        """Derive a drafter config from a target's config (multimodal: its text config), tapping `target_layer_ids`
        or `num_target_layers_tapped` evenly spread layers; `kwargs` are any other `DLiteConfig` field."""
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
        config = AutoConfig.for_model(
            self.backbone_type,
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
