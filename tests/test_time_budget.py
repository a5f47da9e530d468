"""The wall-clock training budget: a cosine over elapsed time, a stop when it is spent, and its refusals."""

from __future__ import annotations

import json
import math

import pytest
import torch
from tiny_models import write_tiny_training_run

from dlite_hf.training.arguments import DLiteTrainingArguments
from dlite_hf.training.trainer import TimeBudget, time_cosine_schedule


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_schedule_is_a_cosine_over_elapsed_time_after_a_step_warmup():
    clock = FakeClock()
    budget = TimeBudget(40.0, clock=clock)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    schedule = time_cosine_schedule(optimizer, budget, warmup_steps=4)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(2.0 * 1 / 4)  # step 0 of the warmup, no time spent
    for _ in range(5):  # past the warmup, still no time spent: the peak
        optimizer.step()
        schedule.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(2.0)
    clock.now += 10.0  # a quarter of the budget
    optimizer.step()
    schedule.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(2.0 * 0.5 * (1 + math.cos(math.pi / 4)))
    clock.now += 1000.0  # past the end: zero, never negative or rising again
    optimizer.step()
    schedule.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


def test_callback_stops_and_saves_once_the_budget_is_spent():
    from transformers import TrainerControl, TrainerState

    clock = FakeClock()
    callback = TimeBudget(5.0, clock=clock)
    control = callback.on_train_begin(None, TrainerState(), TrainerControl())
    control = callback.on_step_end(None, TrainerState(), control)
    assert not control.should_training_stop and not control.should_save
    clock.now += 5.0
    control = callback.on_step_end(None, TrainerState(), control)
    assert control.should_training_stop and control.should_save


@pytest.mark.parametrize("seconds", [0, -1.0, float("nan"), float("inf"), "10"])
def test_budget_refuses_a_non_positive_or_non_finite_value(seconds):
    with pytest.raises(ValueError, match="finite number > 0"):
        TimeBudget(seconds)


def test_arguments_need_the_cosine_scheduler_and_a_non_negative_budget(tmp_path):
    with pytest.raises(ValueError, match="pass --lr_scheduler_type cosine"):
        DLiteTrainingArguments(output_dir=str(tmp_path), max_train_seconds=10.0)
    with pytest.raises(ValueError, match="max_train_seconds"):
        DLiteTrainingArguments(output_dir=str(tmp_path), max_train_seconds=-1.0, lr_scheduler_type="cosine")
    args = DLiteTrainingArguments(output_dir=str(tmp_path), max_train_seconds=10.0, lr_scheduler_type="cosine")
    assert args.max_train_seconds == 10.0


def test_a_budgeted_run_stops_before_max_steps_with_its_rate_decayed(tmp_path, smollm2_dir):
    from dlite_hf.cli import run_train

    base = write_tiny_training_run(tmp_path, smollm2_dir)[1:]
    out = tmp_path / "budget"
    run_train(
        base
        + ["--output_dir", str(out), "--max_steps", "100000", "--max_train_seconds", "3"]
        + ["--lr_scheduler_type", "cosine", "--logging_steps", "1", "--learning_rate", "1e-3"]
    )
    assert (out / "model.safetensors").is_file()
    state = json.loads(sorted(out.glob("checkpoint-*"))[-1].joinpath("trainer_state.json").read_text())
    assert 1 <= state["global_step"] < 100000
    rates = [entry["learning_rate"] for entry in state["log_history"] if "learning_rate" in entry]
    # the last step's rate was set in the budget's last third at most (also where one slow step spent it all)
    assert rates and rates[-1] < 0.25 * 1e-3
