"""One generation run of a column, streamed chunk by chunk (one chunk per target forward) and timed.

:func:`stream_run` runs generate() in a worker thread and yields the column's :class:`ColumnRun` as it grows; the
Stop button and a closed page stop it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from queue import Empty, Queue
from typing import Any

import torch
from transformers.generation.stopping_criteria import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from ..modeling.decoding_options import DEFAULT_LOOKUP_TOKENS
from .models import DemoModels

GREEDY, SAMPLING = "greedy", "sampling"
# The DLite column drafts with the hybrid (DLite plus a suffix index of the context), the decoding measured fastest.
DLITE_LABEL = "target + DLite (hybrid: drafter + suffix index)"
POLL_S = 0.25  # how often the elapsed time refreshes while no token arrives (e.g. during a long prefill)


class ChunkStreamer(BaseStreamer):
    """A generate() streamer that queues one token-id chunk per target forward, skipping the prompt.

    Assisted decoding puts every token a verification forward committed (accepted drafts + the target's own token)
    in one call, so the chunks are the rounds the page highlights.
    """

    def __init__(self) -> None:
        self.queue: Queue[list[int] | None] = Queue()
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.queue.put([int(t) for t in value.reshape(-1).tolist()])

    def end(self) -> None:
        self.queue.put(None)


class StopOnFlag(StoppingCriteria):
    """Stops generate() at the next step (the next round, for speculative decoding) once any flag is set."""

    def __init__(self, *flags: threading.Event) -> None:
        self.flags = flags

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        stop = any(flag.is_set() for flag in self.flags)
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)


@dataclass
class ColumnRun:
    """The state of one column: tokens so far, how they were committed, timings and, at the end, statistics."""

    method: str
    title: str
    ids: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)  # tokens committed by each target forward
    texts: list[str] = field(default_factory=list)  # the text of each forward's tokens
    elapsed_s: float = 0.0
    first_token_s: float | None = None
    prompt_tokens: int = 0
    running: bool = False
    done: bool = False
    stopped: bool = False
    skipped: str | None = None  # why the column did not run
    error: str | None = None
    stats: dict[str, Any] | None = None  # DLiteGenerationStats.to_dict() for the DLite column
    near_tie: Any = None  # reduced-precision greedy runs that differ from plain: dlite_hf.neartie.NearTieReport
    _shown: int = 0

    @property
    def tokens_per_s(self) -> float:
        return len(self.ids) / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def add_chunk(self, tokenizer: Any, chunk: list[int]) -> None:
        """Append one forward's tokens; the text is the growth of the decoded sequence (partial UTF-8 held back)."""
        self.ids += chunk
        self.sizes.append(len(chunk))
        text = tokenizer.decode(self.ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        stable = text.rstrip("\ufffd")
        self.texts.append(stable[self._shown :])
        self._shown = max(self._shown, len(stable))

    def regroup(self, tokenizer: Any, sizes: list[int]) -> None:
        """Rebuild the per-forward texts from ``sizes`` (the drafter's own record) over the final token ids."""
        if sum(sizes) != len(self.ids) or not sizes:
            return
        ids, self.ids, self.sizes, self.texts, self._shown = self.ids, [], [], [], 0
        start = 0
        for size in sizes:
            self.add_chunk(tokenizer, ids[start : start + size])
            start += size


def stream_run(
    models: DemoModels, column: ColumnRun, input_ids: torch.Tensor, settings: dict[str, Any], stop: threading.Event
) -> Iterator[ColumnRun]:
    """Run one generate() in a worker thread and yield ``column`` after every chunk (and every POLL_S seconds).

    Closing the generator early (the browser went away) stops the worker at its next step and joins it.
    """
    streamer = ChunkStreamer()
    abandoned = threading.Event()
    box: dict[str, Any] = {}
    kwargs: dict[str, Any] = {"max_new_tokens": max(1, int(settings["max_new_tokens"])), "do_sample": False}
    if settings["decoding"] == SAMPLING:
        kwargs.update(do_sample=True, temperature=float(settings["temperature"]), top_p=float(settings["top_p"]))
        torch.manual_seed(int(settings.get("seed", 0)))
    if column.method == "dlite":
        kwargs.update(assistant_model=models.drafter, prompt_lookup_num_tokens=DEFAULT_LOOKUP_TOKENS)
    elif column.method == "prompt_lookup":
        kwargs["prompt_lookup_num_tokens"] = 7

    def work() -> None:
        start = time.perf_counter()
        try:
            models.target.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                streamer=streamer,
                stopping_criteria=StoppingCriteriaList([StopOnFlag(stop, abandoned)]),
                **kwargs,
            )
        except Exception as error:  # noqa: BLE001 - any failure of generate() is shown in the column, not raised
            box["error"] = f"{type(error).__name__}: {error}"
            streamer.end()
        finally:
            box["elapsed_s"] = time.perf_counter() - start

    column.prompt_tokens = int(input_ids.shape[1])
    column.running = True
    started = time.perf_counter()
    worker = threading.Thread(target=work, name=f"dlite-demo-{column.method}", daemon=True)
    worker.start()
    try:
        while True:
            try:
                chunk = streamer.queue.get(timeout=POLL_S)
            except Empty:
                column.elapsed_s = time.perf_counter() - started
                yield column
                continue
            if chunk is None:
                break
            column.add_chunk(models.tokenizer, chunk)
            column.elapsed_s = time.perf_counter() - started
            if column.first_token_s is None:
                column.first_token_s = column.elapsed_s
            yield column
    finally:
        if worker.is_alive():
            abandoned.set()
        worker.join()
    column.running, column.done = False, True
    column.elapsed_s = box.get("elapsed_s", column.elapsed_s)  # the worker's own clock: generate() alone
    column.error = box.get("error")
    column.stopped = stop.is_set()
    if column.method == "dlite" and column.error is None and models.drafter.last_generation_stats is not None:
        stats = models.drafter.last_generation_stats
        column.stats = stats.to_dict()
        column.regroup(models.tokenizer, list(stats.tokens_per_forward))
    yield column
