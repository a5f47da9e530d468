"""Training arguments of the DLite trainer (one dataclass for Python, the CLI and YAML, as TRL's configs)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainingArguments

from ..defaults import native_bfloat16
from .losses import DEFAULT_CHUNK_SIZE, POSITION_WEIGHT_FORMS

logger = logging.getLogger(__name__)

__all__ = ["LORA_DEFAULT_TARGETS", "STAGES", "DLiteTrainingArguments"]

STAGES = ("teacher", "warmup", "stable")
LORA_DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj")
"""The drafter modules LoRA adapts when `lora_target_modules` is unset (the backbone's projections)."""


def _invalid(name: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"DLiteTrainingArguments.{name}={value!r} is invalid: expected {allowed}.")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class DLiteTrainingArguments(TrainingArguments):
    r"""Configuration of the DLite trainer.

    Extends [`~transformers.TrainingArguments`] with the fields of DLite's three training stages. Through
    [`~transformers.HfArgumentParser`] the same class parses command-line arguments and YAML / JSON files.

    Parameters:
        > Stage and objective

        stage (`str`, *optional*, defaults to `"stable"`):
            `"teacher"`: stage 0, train the history-aware teacher (a drafter that attends to past positions) with
            the weighted token cross-entropy. `"warmup"`: stage 1, distil the history-free drafter to that teacher
            with the weighted forward KL(p^H || q). `"stable"`: stage 2, `lambda_ce * CE + lambda_tv * L1(p^T, q)`
            against the target itself; it needs no teacher, hence the default.
        teacher_path (`str` or `None`, *optional*, defaults to `None`):
            Path or hub id of the stage-0 teacher checkpoint. Required when `stage="warmup"`, and must be `None`
            for the other stages (they never load a teacher; a value there is a misconfiguration, so it raises
            instead of being silently ignored).
        lambda_ce (`float`, *optional*, defaults to `0.1`), lambda_tv (`float`, *optional*, defaults to `1.0`):
            Weights of the cross-entropy and L1 (TV) terms in the stable stage (the paper's values). Both >= 0, not
            both 0.
        loss_decay_gamma (`float`, *optional*, defaults to `4.0`):
            gamma of the position weights, finite and > 0.
        loss_decay_form (`str`, *optional*, defaults to `"divide"`):
            `"divide"`: `w_i = exp(-(i-1)/gamma)` (DFlash style, the likely intent). `"multiply"`:
            `w_i = exp(-(i-1)*gamma)` (the paper's literal formula).

        > Blocks and data

        num_anchors (`int`, *optional*, defaults to `16`):
            Anchor blocks sampled per sequence; one target forward serves all of them.
        max_length (`int`, *optional*, defaults to `1024`):
            Maximum sequence length (prompt + response) fed to the target; longer sequences are truncated. At
            least 3 (an anchor needs a position before it and a label after it).
        history_window (`int`, *optional*, defaults to `-1`):
            Stage `"teacher"` only: history positions the teacher attends to before each block's context. `-1`:
            all; `0`: none; `N > 0`: the last N (sliding-window ablation). Ignored by the other stages, whose
            drafter is history-free.
        vocab_chunk_size (`int`, *optional*, defaults to `8`):
            Memory knob of the chunked losses: how many anchor blocks' full-vocabulary distributions
            (`[chunk, K, V]` in float32) are materialised at once. Does not change the loss value.
        anchor_stride (`int`, *optional*, defaults to `1`):
            Anchors only at positions divisible by this (>= 1). Blocks of K tokens still cover every response
            position once the stride is at most K; what it buys is a smaller feature cache, which then keeps the
            tapped states at those anchors only (1/stride of them).
        feature_cache_dir (`str` or `None`, *optional*, defaults to `None`):
            Optional on-disk cache of the target's forward, one entry per sequence, in float16, with the target's
            logsumexp and argmax (`FeatureCache`). History-free stages keep only what their blocks read: the final
            states from the first label on and the tapped states at the anchors (`anchor_stride`); for SmolLM2
            (6 tapped + 1 final state x 576 x 2 bytes) that is 1.2 + 6.9 / stride KB per response token, against
            8.1 KB per token of prompt and response when every position is kept (history-aware stages: the teacher
            and KL warm-up). It pays off from the second epoch or stage on. `None`: run the frozen target online,
            every step.

        > LoRA

        lora (`bool`, *optional*, defaults to `False`):
            Train LoRA adapters (PEFT) instead of all drafter parameters.
        lora_r (`int`, *optional*, defaults to `16`), lora_alpha (`int`, *optional*, defaults to `32`):
            LoRA rank and scaling numerator (both >= 1).
        lora_target_modules (`list[str]` or `None`, *optional*, defaults to `None`):
            Module names to adapt; `None` adapts the drafter backbone's attention and MLP projections
            (`LORA_DEFAULT_TARGETS`: q/k/v/o_proj, gate_proj, up_proj).

    > [!NOTE]
    > These parameters have default values different from [`~transformers.TrainingArguments`]:
    > - `learning_rate`: `4e-4` (the paper's AdamW learning rate) instead of `5e-5`.
    > - `logging_steps`: `10` instead of `500`.
    > - `remove_unused_columns`: `False`: the trainer consumes columns (`loss_mask`, prompts) that the drafter's
    >   `forward` does not take.
    > - `report_to`: `"none"` unless given (the same as this transformers version's default, pinned here).
    >
    > There is no `save_safetensors` field: transformers >= 5 always saves weights as safetensors.
    """

    # Parameters whose default values are overridden from TrainingArguments
    learning_rate: float = field(
        default=4e-4,
        metadata={"help": "The initial learning rate for AdamW (the paper uses 4e-4)."},
    )
    logging_steps: float = field(
        default=10,
        metadata={
            "help": "Log every X update steps. Should be an integer or a float in range `[0,1)`. If smaller than 1, "
            "will be interpreted as ratio of total training steps."
        },
    )
    remove_unused_columns: bool = field(
        default=False,
        metadata={
            "help": "Whether to drop dataset columns the model's forward does not take. DLite's trainer consumes "
            "extra columns (loss_mask, ...), so it defaults to False."
        },
    )
    report_to: None | str | list[str] = field(
        default="none",
        metadata={"help": "Integrations to report results and logs to ('none' by default, 'all' for all installed)."},
    )

    # Stage and objective
    stage: str = field(
        default="stable",
        metadata={
            "help": "Training stage: 'teacher' (history-aware teacher, weighted CE), 'warmup' (distil to the "
            "teacher, weighted forward KL) or 'stable' (lambda_ce * CE + lambda_tv * L1 against the target).",
            "choices": list(STAGES),
        },
    )
    teacher_path: str | None = field(
        default=None,
        metadata={
            "help": "Path or hub id of the stage-0 teacher. Required for stage 'warmup'; must be unset otherwise."
        },
    )
    lambda_ce: float = field(
        default=0.1,
        metadata={"help": "Weight of the cross-entropy term in the stable stage (>= 0)."},
    )
    lambda_tv: float = field(
        default=1.0,
        metadata={"help": "Weight of the L1 (TV) term ||p^T - q||_1 in the stable stage (>= 0)."},
    )
    loss_decay_gamma: float = field(
        default=4.0,
        metadata={"help": "gamma of the position weights (finite, > 0)."},
    )
    loss_decay_form: str = field(
        default="divide",
        metadata={
            "help": "Position weights: 'divide' -> exp(-(i-1)/gamma) (DFlash style), 'multiply' -> "
            "exp(-(i-1)*gamma) (the paper's literal formula).",
            "choices": list(POSITION_WEIGHT_FORMS),
        },
    )

    # Blocks and data
    num_anchors: int = field(
        default=16,
        metadata={"help": "Anchor blocks sampled per sequence (>= 1); one target forward serves all of them."},
    )
    max_length: int = field(
        default=1024,
        metadata={"help": "Maximum sequence length fed to the target (>= 3); longer sequences are truncated."},
    )
    history_window: int = field(
        default=-1,
        metadata={
            "help": "Stage 'teacher' only: history positions attended before each block's context. -1: all, "
            "0: none, N > 0: the last N."
        },
    )
    vocab_chunk_size: int = field(
        default=DEFAULT_CHUNK_SIZE,
        metadata={
            "help": "Anchor blocks whose full-vocabulary distributions are materialised at once in the chunked "
            "losses (>= 1). Memory only; the loss value does not change."
        },
    )
    restrict_to_draft_vocab: bool = field(
        default=True,
        metadata={
            "help": "Stage stable, drafters with a draft vocabulary: train q over the draft vocabulary only, as "
            "draft() uses it (positions whose label is outside it are left out of the CE term; the L1 term is exact)."
        },
    )
    anchor_stride: int = field(
        default=1,
        metadata={
            "help": "Anchors only at positions divisible by this (>= 1): the feature cache keeps 1/stride of the "
            "tapped states."
        },
    )
    feature_cache_dir: str | None = field(
        default=None,
        metadata={
            "help": "Optional on-disk cache of the target's forward (float16; history-free stages keep the final "
            "states of the responses and the tapped states at the anchors); unset runs the target online."
        },
    )

    max_train_seconds: float = field(
        default=0.0,
        metadata={
            "help": "Wall-clock budget (> 0, with lr_scheduler_type cosine): the cosine follows the elapsed share of "
            "this budget instead of the steps, and training stops when it is spent (max_steps stays an upper bound). "
            "For runs whose step rate is unknown ahead, such as several sharing one GPU. 0: off."
        },
    )

    # LoRA
    lora: bool = field(
        default=False,
        metadata={"help": "Train LoRA adapters (PEFT) instead of all drafter parameters."},
    )
    lora_r: int = field(default=16, metadata={"help": "LoRA rank (>= 1)."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha, the scaling numerator (>= 1)."})
    lora_target_modules: list[str] | None = field(
        default=None,
        metadata={
            "help": "Module names to adapt with LoRA; unset adapts the backbone's q/k/v/o_proj, gate_proj and "
            "up_proj (LORA_DEFAULT_TARGETS)."
        },
    )

    def __post_init__(self) -> None:
        self._validate_dlite()
        super().__post_init__()
        if self.bf16 and self.device.type == "cpu" and not native_bfloat16("cpu"):
            logger.warning(
                "bf16=True on a CPU without native bfloat16 (no AVX512-BF16 or AMX): torch emulates bfloat16 matrix "
                "products here, tens of times slower than float32 (benchmarks/results/smollm2-135m-dtype-*-avx2.json)."
                " Training goes on in bfloat16 as asked; pass --bf16 false to train in float32 on this machine."
            )

    def _validate_dlite(self) -> None:
        """Raise ``ValueError`` naming the field, the value and what is allowed."""
        if self.stage not in STAGES:
            raise _invalid("stage", self.stage, f"one of {STAGES}")
        if self.stage == "warmup":
            if not isinstance(self.teacher_path, str) or not self.teacher_path.strip():
                raise _invalid(
                    "teacher_path", self.teacher_path, "the path or hub id of the stage-0 teacher when stage='warmup'"
                )
        elif self.teacher_path is not None:
            raise _invalid(
                "teacher_path",
                self.teacher_path,
                f"None when stage={self.stage!r} (only stage 'warmup' loads a teacher)",
            )

        for name in ("lambda_ce", "lambda_tv"):
            value = getattr(self, name)
            if not _is_number(value) or value < 0:
                raise _invalid(name, value, "a finite number >= 0")
        if self.stage == "stable" and self.lambda_ce == 0 and self.lambda_tv == 0:
            raise _invalid("lambda_tv", self.lambda_tv, "> 0 when lambda_ce is 0 (the stable loss would be 0)")
        if not _is_number(self.loss_decay_gamma) or self.loss_decay_gamma <= 0:
            raise _invalid("loss_decay_gamma", self.loss_decay_gamma, "a finite number > 0")
        if self.loss_decay_form not in POSITION_WEIGHT_FORMS:
            raise _invalid("loss_decay_form", self.loss_decay_form, f"one of {POSITION_WEIGHT_FORMS}")

        for name, minimum in (("num_anchors", 1), ("max_length", 3), ("vocab_chunk_size", 1), ("anchor_stride", 1)):
            value = getattr(self, name)
            if not _is_int(value) or value < minimum:
                raise _invalid(name, value, f"an int >= {minimum}")
        if not _is_int(self.history_window) or self.history_window < -1:
            raise _invalid("history_window", self.history_window, "-1 (all), 0 (none) or an int > 0")
        if self.feature_cache_dir is not None and (
            not isinstance(self.feature_cache_dir, str) or not self.feature_cache_dir
        ):
            raise _invalid("feature_cache_dir", self.feature_cache_dir, "None or a non-empty path")

        if not _is_number(self.max_train_seconds) or self.max_train_seconds < 0:
            raise _invalid("max_train_seconds", self.max_train_seconds, "a finite number >= 0 (0: no budget)")
        if (
            self.max_train_seconds > 0
            and str(getattr(self.lr_scheduler_type, "value", self.lr_scheduler_type)) != "cosine"
        ):
            raise _invalid(
                "lr_scheduler_type",
                self.lr_scheduler_type,
                "cosine with max_train_seconds > 0 (the budget's schedule is a cosine over time); pass "
                "--lr_scheduler_type cosine",
            )
        if not isinstance(self.lora, bool):
            raise _invalid("lora", self.lora, "a bool")
        for name in ("lora_r", "lora_alpha"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise _invalid(name, value, "an int >= 1")
        if self.lora_target_modules is not None:
            if isinstance(self.lora_target_modules, str):  # one module name
                self.lora_target_modules = [self.lora_target_modules]
            modules = self.lora_target_modules
            if (
                not isinstance(modules, (list, tuple))
                or not modules
                or not all(isinstance(m, str) and m for m in modules)
            ):
                raise _invalid("lora_target_modules", modules, "None or a non-empty list of module names")
            self.lora_target_modules = list(modules)
