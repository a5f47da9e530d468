"""The page's handlers: :class:`DemoRunner` runs a comparison's columns and yields the page's outputs as they stream.

Each column is one timed generate() in a worker thread, streamed one chunk per target forward. The columns run one
after the other, and one request at a time: two concurrent generations would share the cores and void the timings.
"""

from __future__ import annotations

import threading
import time
from collections import namedtuple
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from queue import Empty, Queue
from typing import Any

import torch
from transformers.generation.stopping_criteria import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from ..bench.methods import PROMPT_LOOKUP_TOKENS
from ..modeling.decoding_options import DEFAULT_LOOKUP_TOKENS
from .models import GREEDY, SAMPLING, DemoModels
from .render import context_note, render_stats, render_tokens, verdict

DEFAULT_PROMPT = "Write a Python function that checks whether a string is a palindrome, with a short docstring."
POLL_S = 0.25  # how often the elapsed time refreshes while no token arrives (e.g. during a long prefill)

# The page's outputs, in order (what every step of DemoRunner.compare yields); details is the raw-numbers JSON.
CompareUpdate = namedtuple(
    "CompareUpdate", "plain_html plain_stats dlite_html dlite_stats lookup_html lookup_stats verdict details"
)


class ChunkStreamer(BaseStreamer):
    """Queues one token-id chunk per target forward (assisted decoding puts a verification's tokens in one call),
    skipping the prompt."""

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

    def to_dict(self) -> dict[str, Any]:
        """The column in the page's raw-numbers JSON."""
        return {
            "skipped": self.skipped,
            "done": self.done,
            "stopped": self.stopped,
            "error": self.error,
            "new_tokens": len(self.ids),
            "elapsed_s": round(self.elapsed_s, 4),
            "tokens_per_s": round(self.tokens_per_s, 3),
            "target_forwards": len(self.sizes),
            "tokens_per_forward": list(self.sizes),
            "token_ids": list(self.ids),
            **({"stats": self.stats} if self.stats else {}),
            **({"near_tie": self.near_tie.to_dict()} if self.near_tie is not None else {}),
        }

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
        for start, size in zip(accumulate(sizes, initial=0), sizes):
            self.add_chunk(tokenizer, ids[start : start + size])


def stream_run(
    models: DemoModels, column: ColumnRun, input_ids: torch.Tensor, kwargs: dict[str, Any], stop: threading.Event
) -> Iterator[ColumnRun]:
    """Run one generate() in a worker thread, yielding ``column`` after every chunk and every POLL_S seconds; closing
    the generator (the browser went away) stops the worker at its next step."""
    streamer = ChunkStreamer()
    abandoned = threading.Event()
    outcome: dict[str, Any] = {}
    kwargs = dict(kwargs)
    if column.method == "dlite":
        kwargs.update(assistant_model=models.drafter, prompt_lookup_num_tokens=DEFAULT_LOOKUP_TOKENS)
    elif column.method == "prompt_lookup":
        kwargs["prompt_lookup_num_tokens"] = PROMPT_LOOKUP_TOKENS

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
            outcome["error"] = f"{type(error).__name__}: {error}"
            streamer.end()
        finally:
            outcome["elapsed_s"] = time.perf_counter() - start

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
    column.elapsed_s = outcome.get("elapsed_s", column.elapsed_s)  # the worker's own clock: generate() alone
    column.error = outcome.get("error")
    column.stopped = stop.is_set()
    if column.method == "dlite" and column.error is None and models.drafter.last_generation_stats is not None:
        stats = models.drafter.last_generation_stats
        column.stats = stats.to_dict()
        column.regroup(models.tokenizer, list(stats.tokens_per_forward))
    yield column


class DemoRunner:
    """Holds the models and runs the comparisons; its methods are the page's handlers (pure generators)."""

    def __init__(self, models: DemoModels, examples: dict[str, list[dict[str, str]]] | None = None):
        self.models = models
        self.examples = dict(examples or {})
        self._lock = threading.Lock()  # one generation at a time, whatever the caller (see the module docstring)
        self._stops: dict[str, threading.Event] = {}
        self._checker: Any = None  # dlite_hf.neartie.NearTieChecker of the target, made on the first greedy run

    def select_example(self, label: str | None) -> tuple[str, dict[str, Any] | None, str]:
        """Handler of the example dropdown: the box gets the example's last message, the earlier ones are context."""
        messages = self.examples.get(label or "")
        if not messages:
            return DEFAULT_PROMPT, None, ""
        context = {"label": label, "messages": messages[:-1], "role": messages[-1]["role"]}
        return messages[-1]["content"], context, context_note(context)

    def stop(self, session: str = "default") -> str:
        """Handler of the Stop button: the running generation of ``session`` stops at its next step."""
        flag = self._stops.get(session)
        if flag is None:
            return "Nothing is running."
        flag.set()
        return "Stopping…"

    def warm_up(self) -> None:
        """One short run of every column, so the first visitor's timings do not include one-off start-up costs."""
        for _ in self.compare("Hello!", max_new_tokens=4, prompt_lookup=True):
            pass

    def chat_ids(self, prompt: str, context: dict[str, Any] | None) -> list[int]:
        """Token ids of the conversation (context messages, then the box as the last message), chat template on."""
        from ..chat_template import chat_prompt_ids

        context = context or {}
        messages = [*(context.get("messages") or []), {"role": context.get("role") or "user", "content": prompt}]
        return chat_prompt_ids(self.models.tokenizer, messages)

    def compare(
        self,
        prompt: str,
        context: dict[str, Any] | None = None,
        max_new_tokens: int = 96,
        decoding: str = GREEDY,
        temperature: float = 0.7,
        top_p: float = 0.9,
        prompt_lookup: bool = False,
        seed: int = 0,
        session: str = "default",
    ) -> Iterator[CompareUpdate]:
        """Handler of the Run button: the columns one after the other, a :class:`CompareUpdate` per streamed chunk."""
        models = self.models
        plain = ColumnRun("plain", "the target alone")
        dlite = ColumnRun("dlite", "target + DLite (hybrid: drafter + suffix index)")  # the decoding measured fastest
        lookup = ColumnRun("prompt_lookup", "target + prompt lookup")
        columns = [plain, dlite, lookup]
        if models.target is None:
            message = f"Target model not available. {models.target_error}"
            for column in columns:
                column.skipped = message
            yield self._update(columns, decoding, f"⚠ **{message}**")
            return
        if models.drafter is None:
            dlite.skipped = f"No DLite drafter loaded. {models.drafter_error or ''}"
        if not prompt_lookup:
            lookup.skipped = "Prompt lookup is off (tick “Also run prompt lookup”)."
        if not (prompt or "").strip():
            yield self._update(columns, decoding, "⚠ Type a prompt or pick an example.")
            return
        if decoding not in (GREEDY, SAMPLING):
            raise ValueError(f"decoding={decoding!r} is invalid: expected {GREEDY!r} or {SAMPLING!r}.")
        if not self._lock.acquire(blocking=False):
            yield self._update(columns, decoding, "⚠ Another generation is running on this machine; try again.")
            return
        self._stops[session] = stop = threading.Event()
        try:
            input_ids = torch.tensor([self.chat_ids(prompt, context)])
            kwargs = {"max_new_tokens": max(1, int(max_new_tokens)), "do_sample": decoding == SAMPLING}
            if decoding == SAMPLING:
                kwargs.update(temperature=float(temperature), top_p=float(top_p))
            yield self._update(columns, decoding)
            for column in columns:
                if column.skipped:
                    continue
                if stop.is_set():
                    column.skipped = "Not run: stopped."
                    continue
                if decoding == SAMPLING:
                    torch.manual_seed(int(seed))
                for _ in stream_run(models, column, input_ids, kwargs, stop):
                    yield self._update(columns, decoding)
            if decoding == GREEDY:
                self._check_near_ties(input_ids, plain, [dlite, lookup])
            yield self._update(columns, decoding)
        finally:
            self._stops.pop(session, None)
            self._lock.release()

    def _check_near_ties(self, input_ids: torch.Tensor, plain: ColumnRun, others: list[ColumnRun]) -> None:
        """In reduced precision, re-score every greedy column that differs from the target alone in float32."""
        if self._checker is None:
            from ..neartie import NearTieChecker

            self._checker = NearTieChecker(self.models.target)
        if self._checker.exact or not plain.done:
            return
        for column in others:
            if column.skipped or not column.done or column.error or column.ids == plain.ids:
                continue
            full = [torch.cat([input_ids, torch.tensor([c.ids], dtype=input_ids.dtype)], 1) for c in (plain, column)]
            column.near_tie = self._checker.check(input_ids.shape[1], *full)

    def _update(self, columns: list[ColumnRun], decoding: str, message_override: str | None = None) -> CompareUpdate:
        plain, dlite = columns[:2]
        details: dict[str, Any] = {"decoding": decoding, "threads": torch.get_num_threads()}
        shown = []
        for column in columns:
            details[column.method] = column.to_dict()
            shown += [render_tokens(column, highlight=column is not plain), render_stats(column, plain)]
        if plain.done and dlite.done and not dlite.skipped and plain.tokens_per_s > 0:
            details["speedup"] = round(dlite.tokens_per_s / plain.tokens_per_s, 4)
        return CompareUpdate(*shown, message_override or verdict(columns, decoding), details)
