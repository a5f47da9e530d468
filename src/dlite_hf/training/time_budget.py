"""A wall-clock training budget: the learning rate follows a cosine over the budget's elapsed fraction, and the
run stops (and saves) when the budget is spent.

Used where the step rate is not known ahead (several runs sharing one lent GPU): a step-count cosine would either
stop before its decay or leave the accelerator idle. The warmup still counts steps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR
from transformers import TrainerCallback


class TimeBudget(TrainerCallback):
    """Seconds of training, counted from :meth:`start` (the first call wins; a resumed run starts a new budget). As
    a callback it starts with training and stops it (saving a checkpoint) at the first step end after it is spent."""

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
        if self._start is None:
            return 0.0
        return min(1.0, max(0.0, (self._clock() - self._start) / self.seconds))

    def on_train_begin(self, args, state, control, **kwargs):
        self.start()
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self.fraction() >= 1.0:
            control.should_training_stop = True
            control.should_save = True
        return control


def time_cosine_schedule(optimizer: Optimizer, budget: TimeBudget, warmup_steps: int = 0) -> LambdaLR:
    """Linear warmup over ``warmup_steps`` steps, times ``0.5 * (1 + cos(pi * elapsed fraction))``."""
    budget.start()

    def factor(step: int) -> float:
        warm = min(1.0, (step + 1) / warmup_steps) if warmup_steps else 1.0
        return warm * 0.5 * (1.0 + math.cos(math.pi * budget.fraction()))

    return LambdaLR(optimizer, factor)
