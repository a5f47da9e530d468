"""The arguments of `dlite-hf train`: the trainer's (one dataclass for Python, the CLI and YAML, as TRL's configs) and
the command's own."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainingArguments

from ..defaults import DEFAULT_TARGET, DTYPE_CHOICES, native_bfloat16
from .losses import DEFAULT_CHUNK_SIZE, POSITION_WEIGHT_FORMS

logger = logging.getLogger(__name__)

STAGES = ("teacher", "warmup", "stable")
# the drafter modules LoRA adapts when `lora_target_modules` is unset (the backbone's projections)
LORA_DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj")
_INT_MINIMUMS = dict(num_anchors=1, max_length=3, vocab_chunk_size=1, anchor_stride=1, lora_r=1, lora_alpha=1)


def _invalid(name: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"DLiteTrainingArguments.{name}={value!r} is invalid: expected {allowed}.")


def _field(default: Any, help: str, **metadata: Any) -> Any:
    return field(default=default, metadata={"help": help, **metadata})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class DLiteTrainingArguments(TrainingArguments):
    """[`~transformers.TrainingArguments`] plus the fields of DLite's three training stages (`stage`), validated in
    `__post_init__`; through [`~transformers.HfArgumentParser`] the same class parses the command line (each field's
    `help`: `dlite-hf train --help`) and YAML / JSON files. transformers >= 5 always saves safetensors."""

    # defaults that differ from TrainingArguments'
    learning_rate: float = _field(4e-4, "The initial learning rate for AdamW (the paper's 4e-4).")
    logging_steps: float = _field(10, "Log every X update steps (an int, or a float in [0, 1): a share of all steps).")
    remove_unused_columns: bool = _field(False, "Drop columns forward() does not take (the trainer needs them).")
    report_to: None | str | list[str] = _field("none", "Integrations to report to ('none', or 'all' installed).")

    # Stage and objective
    stage: str = _field(
        "stable",
        "'teacher' (history-aware, weighted CE), 'warmup' (weighted forward KL to the teacher) or 'stable' "
        "(lambda_ce * CE + lambda_tv * L1 against the target).",
        choices=list(STAGES),
    )
    teacher_path: str | None = _field(None, "Path or hub id of the stage-0 teacher; stage 'warmup' only (required).")
    lambda_ce: float = _field(0.1, "Weight of the cross-entropy term in the stable stage (>= 0).")
    lambda_tv: float = _field(1.0, "Weight of the L1 (TV) term ||p^T - q||_1 in the stable stage (>= 0).")
    loss_decay_gamma: float = _field(4.0, "gamma of the position weights (finite, > 0).")
    loss_decay_form: str = _field(
        "divide",
        "Position weights: 'divide' exp(-(i-1)/gamma) (DFlash), 'multiply' exp(-(i-1)*gamma) (the paper's formula).",
        choices=list(POSITION_WEIGHT_FORMS),
    )

    # Blocks and data
    num_anchors: int = _field(16, "Anchor blocks sampled per sequence (>= 1); one target forward serves them all.")
    max_length: int = _field(1024, "Maximum sequence length fed to the target (>= 3); longer ones are truncated.")
    history_window: int = _field(-1, "Stage teacher: past positions each block attends (-1: all, 0: none, N: last N).")
    vocab_chunk_size: int = _field(DEFAULT_CHUNK_SIZE, "Anchor blocks per loss chunk (>= 1): memory only, same loss.")
    restrict_to_draft_vocab: bool = _field(True, "Stage stable: train q over the draft vocabulary as draft() uses it.")
    anchor_stride: int = _field(1, "Anchors at positions divisible by this (>= 1); a feature cache keeps 1/stride.")
    feature_cache_dir: str | None = _field(None, "Float16 on-disk cache of the target's forward (unset: online).")
    max_train_seconds: float = _field(
        0.0,
        "Wall-clock budget (> 0, with lr_scheduler_type cosine): the cosine follows elapsed time and training stops "
        "when it is spent (max_steps stays an upper bound). 0: off.",
    )

    # LoRA
    lora: bool = _field(False, "Train LoRA adapters (PEFT) instead of all drafter parameters.")
    lora_r: int = _field(16, "LoRA rank (>= 1).")
    lora_alpha: int = _field(32, "LoRA alpha, the scaling numerator (>= 1).")
    lora_target_modules: list[str] | None = _field(
        None, "Module names to adapt with LoRA; unset: q/k/v/o_proj, gate_proj, up_proj (LORA_DEFAULT_TARGETS)."
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
        if self.stage == "warmup" and not (isinstance(self.teacher_path, str) and self.teacher_path.strip()):
            raise _invalid("teacher_path", self.teacher_path, "the stage-0 teacher's path or hub id (stage 'warmup')")
        if self.stage != "warmup" and self.teacher_path is not None:
            expected = f"None when stage={self.stage!r} (only stage 'warmup' loads a teacher)"
            raise _invalid("teacher_path", self.teacher_path, expected)
        for name in ("lambda_ce", "lambda_tv", "max_train_seconds"):
            if not _is_number(getattr(self, name)) or getattr(self, name) < 0:
                raise _invalid(name, getattr(self, name), "a finite number >= 0")
        if not _is_number(self.loss_decay_gamma) or self.loss_decay_gamma <= 0:
            raise _invalid("loss_decay_gamma", self.loss_decay_gamma, "a finite number > 0")
        if self.stage == "stable" and self.lambda_ce == 0 and self.lambda_tv == 0:
            raise _invalid("lambda_tv", self.lambda_tv, "> 0 when lambda_ce is 0 (the stable loss would be 0)")
        if self.loss_decay_form not in POSITION_WEIGHT_FORMS:
            raise _invalid("loss_decay_form", self.loss_decay_form, f"one of {POSITION_WEIGHT_FORMS}")
        for name, minimum in _INT_MINIMUMS.items():
            if not _is_int(getattr(self, name)) or getattr(self, name) < minimum:
                raise _invalid(name, getattr(self, name), f"an int >= {minimum}")
        if not _is_int(self.history_window) or self.history_window < -1:
            raise _invalid("history_window", self.history_window, "-1 (all), 0 (none) or an int > 0")
        cache = self.feature_cache_dir
        if cache is not None and not (isinstance(cache, str) and cache):
            raise _invalid("feature_cache_dir", cache, "None or a non-empty path")
        scheduler = str(getattr(self.lr_scheduler_type, "value", self.lr_scheduler_type))
        if self.max_train_seconds > 0 and scheduler != "cosine":
            expected = "cosine with max_train_seconds > 0 (a cosine over time); pass --lr_scheduler_type cosine"
            raise _invalid("lr_scheduler_type", self.lr_scheduler_type, expected)
        if not isinstance(self.lora, bool):
            raise _invalid("lora", self.lora, "a bool")
        modules = [self.lora_target_modules] if isinstance(self.lora_target_modules, str) else self.lora_target_modules
        if modules is not None and not (
            isinstance(modules, (list, tuple)) and modules and all(isinstance(m, str) and m for m in modules)
        ):
            raise _invalid("lora_target_modules", modules, "None or a non-empty list of module names")
        self.lora_target_modules = None if modules is None else list(modules)


@dataclass
class ScriptArguments:
    """`dlite-hf train`'s own flags (the trainer's are `DLiteTrainingArguments`)."""

    target: str = _field(DEFAULT_TARGET, "Target: a local folder, a Hub id or a registry name.")
    data: str = _field("", "JSONL written by `dlite-hf regenerate` or `label-text`; several: comma-separated.")
    init: str | None = _field(None, "Start from this drafter checkpoint folder.")
    init_only: bool = _field(
        False,
        "Save the new drafter a run would start from (weights seeded by --seed, draft vocabulary from --data) to "
        "--output_dir and exit, e.g. for `dlite-hf features --drafter`.",
    )
    target_adapter: str | None = _field(None, "PEFT adapter to apply to the target.")
    target_dtype: str = _field(
        "float32",
        "The target's dtype in training: the drafter's features and p^T are computed in it (the drafter's weights "
        "stay float32; --bf16 autocasts them).",
        choices=list(DTYPE_CHOICES),
    )
    target_device_map: str | None = _field(
        None, "accelerate's device_map for the frozen target (e.g. auto); default: all of it on the training device."
    )
    num_tapped_layers: int = _field(6, "New drafters: target layers to tap (L).")
    num_draft_tokens: int = _field(7, "New drafters: K.")
    drafter_hidden_size: int | None = _field(None, "New drafters: backbone width.")
    drafter_layers: int = _field(5, "New drafters: backbone layers.")
    drafter_heads: int = _field(8, "New drafters: attention heads.")
    drafter_kv_heads: int = _field(4, "New drafters: key/value heads.")
    drafter_intermediate_size: int | None = _field(None, "New drafters: MLP width.")
    head_rank: int = _field(64, "New drafters: rank R of the sequential head.")
    draft_vocab_size: int = _field(
        8192, "New drafters, --refresh_draft_vocab: draft among the N most frequent response tokens (0: all)."
    )
    refresh_draft_vocab: bool = _field(
        False,
        "With --init or --teacher: choose the draft vocabulary again from --data (--draft_vocab_size) instead of "
        "keeping the drafter's, e.g. when the data grew: a stale vocabulary cannot draft the new tokens.",
    )
    grow_layers: int = _field(
        0, "With --init: add N backbone layers on top, their o_proj and down_proj at zero (the init's drafts, deeper)."
    )
    sequential_head: bool = _field(True, "New drafters: keep the recurrent head (--no_sequential_head: ablation).")
    sliding_window: int = _field(
        0, "Stage stable, new drafters: attend to the last N positions before each block (0: history-free, shipped)."
    )
    threads: int | None = _field(None, "torch.set_num_threads for this run.")
    eval_fraction: float = _field(0.0, "Fraction of rows held out for eval logs.")
