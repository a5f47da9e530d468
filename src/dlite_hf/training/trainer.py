"""`DLiteTrainer`: the paper's three training stages (`DLiteTrainingArguments.stage`) on `transformers.Trainer`.

The frozen target runs inside `compute_loss` once per batch and feeds `num_anchors` drafter blocks per sequence,
then the stage's loss from `losses.py`. Checkpoints hold the drafter only (and its code files) and a model card.
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR
from transformers import Trainer, TrainerCallback

from ..data.features.cache import FeatureCache
from ..data.features.transformers import target_features
from ..modeling.modeling_dlite import DLiteForSpeculation
from . import losses
from .arguments import DLiteTrainingArguments
from .data import IGNORE_INDEX, DLiteCollator
from .history import history_arguments


def _unwrap(model: nn.Module) -> DLiteForSpeculation:
    """The DLite model inside a PEFT or accelerate wrapper."""
    inner = model
    for _ in range(4):
        if isinstance(inner, DLiteForSpeculation):
            return inner
        inner = inner.get_base_model() if hasattr(inner, "get_base_model") else getattr(inner, "module", None)
    raise TypeError(
        f"DLiteTrainer trains a DLiteForSpeculation (optionally PEFT-wrapped), got {type(model).__name__}."
    )


def _check_stage(stage: str, drafter: DLiteForSpeculation, teacher: DLiteForSpeculation | None) -> None:
    """Refuse a drafter or teacher the stage cannot train with, saying what it needs."""
    if stage == "teacher" and drafter.config.history_window == 0:
        raise ValueError(
            "stage='teacher' trains the history-aware teacher, not a model with history_window=0: build it with "
            "DLiteConfig(..., history_window=-1) (or N > 0 for a sliding window)."
        )
    if stage != "warmup":
        if teacher is not None:
            raise ValueError(f"A teacher is only used in stage 'warmup', got one with stage={stage!r}.")
        return
    if teacher is None:
        raise ValueError("stage='warmup' distils to the history-aware teacher: pass teacher=<trained teacher>.")
    if teacher.config.history_window == 0:
        raise ValueError("The warmup teacher must be history-aware (history_window != 0), got 0.")
    ours, theirs = drafter.config, teacher.config
    shared = (ours.num_draft_tokens, list(ours.target_layer_ids))
    if (theirs.num_draft_tokens, list(theirs.target_layer_ids)) != shared:
        raise ValueError(
            f"Teacher (K={theirs.num_draft_tokens}, layers {theirs.target_layer_ids}) and drafter "
            f"(K={ours.num_draft_tokens}, layers {ours.target_layer_ids}) must share K and the tapped layers."
        )


class TimeBudget(TrainerCallback):
    """A wall-clock training budget (``max_train_seconds``), for runs whose step rate is not known ahead (several
    sharing one lent GPU), where a step-count cosine would stop before its decay or leave the accelerator idle.
    Seconds count from :meth:`start` (the first call wins; a resumed run starts a new budget); as a callback it
    starts with training and stops it (saving a checkpoint) at the first step end after it is spent."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds <= 0:
            raise ValueError(f"TimeBudget seconds must be a finite number > 0, got {seconds!r}.")
        self.seconds = float(seconds)
        self._clock = clock
        self._start: float | None = None

    def start(self) -> None:
        if self._start is None:
            self._start = self._clock()

    def fraction(self) -> float:
        """Elapsed share of the budget in [0, 1]; 0 before :meth:`start`."""
        return 0.0 if self._start is None else min(1.0, max(0.0, (self._clock() - self._start) / self.seconds))

    def on_train_begin(self, args, state, control, **kwargs):
        self.start()
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self.fraction() >= 1.0:
            control.should_training_stop = True
            control.should_save = True
        return control


def time_cosine_schedule(optimizer: Optimizer, budget: TimeBudget, warmup_steps: int = 0) -> LambdaLR:
    """Linear warmup over ``warmup_steps`` steps, times ``0.5 * (1 + cos(pi * the budget's elapsed fraction))``."""
    budget.start()

    def factor(step: int) -> float:
        warm = min(1.0, (step + 1) / warmup_steps) if warmup_steps else 1.0
        return warm * 0.5 * (1.0 + math.cos(math.pi * budget.fraction()))

    return LambdaLR(optimizer, factor)


class DLiteTrainer(Trainer):
    """Trainer for a DLite drafter `model` (optionally PEFT-wrapped) against the frozen `target` LM; `teacher`: the
    frozen history-aware teacher of stage `warmup`; `card_info`: extra fields of the model card written on save;
    `kwargs`: `transformers.Trainer`'s (`train_dataset`, `eval_dataset`, `processing_class`, ...)."""

    def __init__(
        self,
        model: nn.Module,
        target: nn.Module,
        args: DLiteTrainingArguments,
        *,
        teacher: DLiteForSpeculation | None = None,
        data_collator: Any = None,
        card_info: dict[str, Any] | None = None,
        **kwargs: Any,
    ):
        if not isinstance(args, DLiteTrainingArguments):
            raise TypeError(f"args must be DLiteTrainingArguments, got {type(args).__name__}.")
        drafter = _unwrap(model)
        _check_stage(args.stage, drafter, teacher)
        target.eval().requires_grad_(False)
        drafter.bind_target(target)
        if teacher is not None:
            teacher.eval().requires_grad_(False).bind_target(target)
        if data_collator is None:  # pads with the target's pad token (0 without one)
            pad = getattr(target.generation_config, "pad_token_id", None)
            pad = pad if isinstance(pad, int) else 0
            k = drafter.config.num_draft_tokens
            data_collator = DLiteCollator(pad, args.num_anchors, k, args.seed, args.anchor_stride)
        super().__init__(model=model, args=args, data_collator=data_collator, **kwargs)
        self.model_accepts_loss_kwargs = True  # compute_loss normalises by num_items_in_batch itself
        # a target dispatched by accelerate (`device_map`) stays where it is; otherwise it moves to the training device
        self.target = target if getattr(target, "hf_device_map", None) else target.to(self.args.device)
        self.teacher = teacher.to(self.args.device) if teacher is not None else None
        self.card_info = dict(card_info or {})
        self.feature_cache = None  # without feature_cache_dir the target runs on every batch
        if args.feature_cache_dir:
            self.feature_cache = FeatureCache(
                args.feature_cache_dir,
                getattr(target.config, "_name_or_path", "") or type(target).__name__,
                drafter.config.target_layer_ids,
                # history-free stages keep only what their blocks read; the teacher's history needs every position
                history_free=drafter.config.history_window == 0 and teacher is None,
                anchor_stride=args.anchor_stride,
                producer=f"transformers-{str(target.dtype).removeprefix('torch.')}",
            )
        self._metrics: dict[str, dict[str, list[float]]] = {"train": defaultdict(list), "eval": defaultdict(list)}
        self.time_budget = TimeBudget(args.max_train_seconds) if args.max_train_seconds > 0 else None
        if self.time_budget is not None:
            self.add_callback(self.time_budget)

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None):
        """With ``max_train_seconds``: a cosine over the budget's elapsed time (:func:`time_cosine_schedule`)."""
        if self.time_budget is None:
            return super().create_scheduler(num_training_steps, optimizer)
        if self.lr_scheduler is None:
            warmup = self.args.get_warmup_steps(num_training_steps)
            self.lr_scheduler = time_cosine_schedule(optimizer or self.optimizer, self.time_budget, warmup)
            self._created_lr_scheduler = True
        return self.lr_scheduler

    def _target_features(self, drafter: DLiteForSpeculation, inputs: dict[str, torch.Tensor]):
        """The target's tapped and final states of the batch, and the feature cache's statistics (None without one)."""
        input_ids, attention = inputs["input_ids"], inputs["attention_mask"]
        # the frozen target runs in float32 under mixed precision (--bf16 autocasts the drafter only), so its
        # features and p^T are the ones inference sees
        with torch.autocast(device_type=input_ids.device.type, enabled=False):
            if self.feature_cache is None:
                return (*target_features(self.target, input_ids, drafter.config.target_layer_ids, attention), None)
            states, final_hidden, stats = self.feature_cache.features(
                self.target, input_ids, attention, inputs.get("response_start")
            )
        used = stats["kept"][torch.arange(input_ids.shape[0])[:, None], inputs["anchors"] - 1]
        if not bool(used[inputs["anchor_valid"]].all()):
            raise ValueError(
                "The batch has anchors whose context states the feature cache did not keep (it keeps those divisible "
                f"by anchor_stride={self.feature_cache.anchor_stride}): use DLiteCollator with that anchor_stride."
            )
        return states, final_hidden, stats

    @torch.no_grad()
    def _target_distribution(
        self, drafter: DLiteForSpeculation, final_hidden: torch.Tensor, positions: tuple, stats: Any, compact: bool
    ) -> dict[str, torch.Tensor]:
        """p^T at `positions` and its argmax (`target_top1`): full logits (`target_logits` `[N, K, V]`), or with
        `compact` the full-vocabulary log-probabilities of the draft vocabulary's tokens (`target_log_probs`)."""
        lm_head = self.target.get_output_embeddings()
        with torch.autocast(device_type=positions[0].device.type, enabled=False):  # the batch's device
            rows = final_hidden[positions].flatten(0, 1).to(lm_head.weight.dtype)  # cached features are float32
            if stats is None or not compact:  # one full projection gives the logsumexp, the argmax and the slice
                full = lm_head(rows).float()
                lse, top1 = full.logsumexp(-1), full.argmax(-1)
                if not compact:
                    return {"target_logits": full, "target_top1": top1}
                sub = full.index_select(-1, drafter.draft_vocab_ids.to(full.device))
            else:  # cached logsumexp and argmax: only the draft vocabulary's rows of the lm_head are read
                lse, top1 = stats["lse"][positions].flatten(0, 1), stats["top1"][positions].flatten(0, 1)
                weight, bias = drafter.draft_vocab_head()  # the same lm_head rows the drafter projects onto
                sub = nn.functional.linear(rows.to(weight.dtype), weight, bias).float()
        return {"target_log_probs": sub - lse[..., None], "target_top1": top1}

    def _gather_blocks(
        self, drafter: DLiteForSpeculation, inputs: dict[str, torch.Tensor], compact: bool
    ) -> dict[str, Any]:
        """One target forward gathered into the drafter's per-block inputs (`blocks`), `labels`, `valid`, the
        target's block distributions (`_target_distribution`) and the history-aware models' `history` arguments."""
        input_ids, anchors, labels = inputs["input_ids"], inputs["anchors"], inputs["labels"]
        config = drafter.config
        states, final_hidden, stats = self._target_features(drafter, inputs)
        rows = torch.arange(input_ids.shape[0], device=input_ids.device)[:, None]
        offsets = torch.arange(1, config.num_draft_tokens + 1, device=input_ids.device)
        block_positions = (anchors[..., None] + offsets).clamp(max=input_ids.shape[1] - 1)  # [B, A, K]
        # p^T at draft position i is the target's prediction at position anchor + i - 1
        target_positions = (rows[..., None], block_positions - 1)
        gathered: dict[str, Any] = {
            "blocks": {
                "context_states": states[rows, anchors - 1].flatten(0, 1),
                "anchor_ids": input_ids[rows, anchors].flatten(),
                "draft_input_ids": input_ids[rows[..., None], block_positions].flatten(0, 1),
            },
            "labels": labels.flatten(0, 1),
            "valid": labels.ne(IGNORE_INDEX).flatten(0, 1),
            **self._target_distribution(drafter, final_hidden, target_positions, stats, compact),
        }
        target_rows = inputs.get("target_labels")
        if target_rows is not None and bool(target_rows.any()):
            # label-text rows: the label at every position is the target's argmax, never the text's next token
            use = target_rows.to(anchors.device)[:, None].expand_as(anchors).flatten()[:, None] & gathered["valid"]
            gathered["labels"] = torch.where(use, gathered["target_top1"], gathered["labels"])
        window = config.history_window or (self.teacher.config.history_window if self.teacher is not None else 0)
        gathered["history"] = history_arguments(states, anchors - 1, window) if window else {}
        return gathered

    def compute_loss(
        self,
        model: nn.Module,
        inputs: dict[str, torch.Tensor],
        return_outputs: bool = False,
        num_items_in_batch: int | torch.Tensor | None = None,
    ):
        args: DLiteTrainingArguments = self.args
        drafter = _unwrap(model)
        # stable stage over a draft vocabulary: every tensor lives on the draft vocabulary (exact, ~6x cheaper)
        compact = args.stage == "stable" and args.restrict_to_draft_vocab and drafter.draft_vocab_ids is not None
        gathered = self._gather_blocks(drafter, inputs, compact)
        history = gathered["history"] if drafter.config.history_window != 0 else {}
        q_logits = model(
            **gathered["blocks"], **history, restrict_to_draft_vocab=compact, compact_draft_vocab=compact
        ).logits
        labels, valid = gathered["labels"], gathered["valid"]
        p_target = gathered["target_log_probs" if compact else "target_logits"]  # the target's p^T
        weights = losses.position_weights(
            drafter.config.num_draft_tokens, args.loss_decay_gamma, args.loss_decay_form, device=q_logits.device
        )
        chunk = args.vocab_chunk_size
        if args.stage == "teacher":
            loss = losses.weighted_cross_entropy(q_logits, labels, valid, weights, num_items_in_batch, chunk)
        elif args.stage == "warmup":
            with torch.no_grad(), torch.autocast(device_type=q_logits.device.type, enabled=False):  # reference: fp32
                p_teacher = self.teacher(**gathered["blocks"], **gathered["history"]).logits
            loss = losses.weighted_forward_kl(p_teacher, q_logits, valid, weights, num_items_in_batch, chunk)
        else:
            loss = q_logits.new_zeros(())
            if args.lambda_ce:
                ce_labels, ce_valid = labels, valid
                if compact:  # a label q cannot produce carries no CE signal (the L1 term still counts it)
                    ids = drafter.draft_vocab_ids  # column of each token in the draft vocabulary, -1 outside it
                    index = torch.full((drafter.config.vocab_size,), -1, dtype=torch.long, device=ids.device)
                    index[ids] = torch.arange(ids.numel(), device=ids.device)
                    ce_labels = index[labels.clamp(min=0)]
                    ce_valid = valid & ce_labels.ge(0)
                ce = losses.weighted_cross_entropy(q_logits, ce_labels, ce_valid, weights, num_items_in_batch, chunk)
                loss = loss + args.lambda_ce * ce
            if args.lambda_tv:
                l1_loss = losses.weighted_l1_on_support if compact else losses.weighted_l1
                loss = loss + args.lambda_tv * l1_loss(p_target, q_logits, valid, weights, num_items_in_batch, chunk)
        q = q_logits.detach()
        q_top1 = drafter.draft_vocab_ids[q.argmax(dim=-1)] if compact else q.argmax(dim=-1)
        top1 = losses.top1_agreement_from_ids(gathered["target_top1"], q_top1, valid)
        accept = (losses.one_minus_tv_on_support if compact else losses.one_minus_tv)(p_target, q, valid, chunk)
        self._record_metrics(top1, accept, "train" if model.training else "eval")
        return (loss, {"logits": q_logits}) if return_outputs else loss

    def get_eval_dataloader(self, eval_dataset: Any = None):
        """Every evaluation samples the same anchor blocks (a reseeded collator), so eval losses are comparable."""
        collator = self.data_collator
        if isinstance(collator, DLiteCollator):
            self.data_collator = replace(collator)  # the same collator, its anchor sampler reseeded
        try:
            return super().get_eval_dataloader(eval_dataset)
        finally:
            self.data_collator = collator

    def prediction_step(
        self,
        model: nn.Module,
        inputs: dict[str, torch.Tensor],
        prediction_loss_only: bool,
        ignore_keys: list[str] | None = None,
    ) -> tuple[torch.Tensor, None, None]:
        """Evaluation runs the stage's loss (and records the eval_ acceptance proxies); no logits are gathered."""
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad(), self.autocast_smart_context_manager():
            loss = self.compute_loss(model, inputs)
        return loss.detach(), None, None

    def _record_metrics(self, top1: torch.Tensor, accept: torch.Tensor, mode: str) -> None:
        recorded = self._metrics[mode]
        for i in range(top1.shape[0]):
            if not math.isnan(float(top1[i])):
                recorded[f"top1_pos{i + 1}"].append(float(top1[i]))
                recorded[f"accept_pos{i + 1}"].append(float(accept[i]))
        if not torch.isnan(top1).any():
            recorded["expected_tau_greedy"].append(losses.expected_acceptance_length(top1))
            recorded["expected_tau_sampling"].append(losses.expected_acceptance_length(accept))

    def _metric_names(self) -> list[str]:
        k = _unwrap(self.model).config.num_draft_tokens
        per_position = [f"{kind}_pos{i}" for i in range(1, k + 1) for kind in ("top1", "accept")]
        return [*per_position, "expected_tau_greedy", "expected_tau_sampling"]

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        """Add the acceptance proxies recorded since the last log, averaged over every rank's batches (one
        all-reduce of a fixed list of sums and counts, so ranks with different metrics cannot deadlock)."""
        mode = "train" if "loss" in logs or not any(k.startswith("eval_") for k in logs) else "eval"
        recorded = self._metrics[mode]
        names = self._metric_names()
        totals = torch.tensor(
            [[sum(recorded.get(n, ())), len(recorded.get(n, ()))] for n in names], dtype=torch.float64
        )
        if self.args.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            totals = totals.to(self.args.device if torch.distributed.get_backend() == "nccl" else torch.device("cpu"))
            torch.distributed.all_reduce(totals)
            totals = totals.cpu()
        for name, (total, count) in zip(names, totals.tolist()):
            if count:
                logs[("eval_" if mode == "eval" else "") + name] = total / count
        recorded.clear()
        super().log(logs, *args, **kwargs)

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        super()._save(output_dir, state_dict)
        if self.args.should_save:
            self.write_model_card(output_dir or self.args.output_dir)

    def write_model_card(self, output_dir: str | Path) -> Path:
        """Render the package's card template for the drafter being trained into `output_dir/README.md`."""
        from ..cards import render_model_card

        training = {
            "stage": self.args.stage,
            "global_step": self.state.global_step,
            "epochs": round(float(self.state.epoch or 0.0), 2),  # completed, also when max_steps set the length
            "learning_rate": self.args.learning_rate,
            "num_anchors": self.args.num_anchors,
            "loss_decay": f"{self.args.loss_decay_form}, gamma={self.args.loss_decay_gamma}",
            "lambda_ce": self.args.lambda_ce,
            "lambda_tv": self.args.lambda_tv,
            "train_samples": len(self.train_dataset) if self.train_dataset is not None else None,
            "world_size": self.args.world_size,
            # who computed the target's features: this run's forward, or a cache's producer (vLLM's bfloat16 one)
            "target_features": self.feature_cache.producer if self.feature_cache is not None else "online",
        }
        # the acceptance proxy on the last logged training batches, and on the held-out rows if there are any
        for key, name in (("expected_tau_greedy", "train"), ("eval_expected_tau_greedy", "eval")):
            if logged := [entry for entry in self.state.log_history if key in entry]:
                training[f"{name}_expected_tau_greedy_last_logged"] = round(logged[-1][key], 3)
        info = {**self.card_info, "training": {**training, **self.card_info.get("training", {})}}
        path = Path(output_dir) / "README.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_model_card(_unwrap(self.model).config, **info), encoding="utf-8")
        (Path(output_dir) / "dlite_training.json").write_text(json.dumps(training, indent=2), encoding="utf-8")
        return path

    def create_model_card(self, *args: Any, **kwargs: Any) -> None:
        """Called by `push_to_hub`: our card replaces transformers' generic one."""
        if self.is_world_process_zero():
            self.write_model_card(self.args.output_dir)
