"""The page's handlers: :class:`DemoRunner` runs the columns of a comparison and yields the page's outputs.

The columns run **one after the other**, and one request at a time: on a small CPU two concurrent generations
share the cores, so both timings (and the speedup) would mean nothing. The handlers are generators yielding one
:class:`CompareUpdate` per streamed chunk, so tests call them directly, without a browser or a server.
"""

from __future__ import annotations

import threading
from collections import namedtuple
from collections.abc import Iterator
from typing import Any

import torch

from .models import DemoModels
from .render import context_note, render_stats, render_tokens, verdict
from .streaming import DLITE_LABEL, GREEDY, SAMPLING, ColumnRun, stream_run

DEFAULT_PROMPT = "Write a Python function that checks whether a string is a palindrome, with a short docstring."


# The page's outputs, in order (what every step of DemoRunner.compare yields); details is the raw-numbers JSON.
CompareUpdate = namedtuple(
    "CompareUpdate", "plain_html plain_stats dlite_html dlite_stats lookup_html lookup_stats verdict details"
)


class DemoRunner:
    """Holds the models and runs the comparisons; its methods are the page's handlers (pure generators)."""

    def __init__(self, models: DemoModels, examples: dict[str, list[dict[str, str]]] | None = None):
        self.models = models
        self.examples = dict(examples or {})
        self._lock = threading.Lock()  # one generation at a time, whatever the caller (see the module docstring)
        self._stops: dict[str, threading.Event] = {}
        self._checker: Any = None  # dlite_hf.neartie.NearTieChecker of the target, made on the first greedy run

    def select_example(self, label: str | None) -> tuple[str, dict[str, Any] | None, str]:
        """Handler of the example dropdown: ``(prompt box text, context state, context note)``; the box gets the
        example's last message, the earlier ones are kept as context and sent before it."""
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

        messages = list((context or {}).get("messages") or [])
        messages.append({"role": (context or {}).get("role") or "user", "content": prompt})
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
        """Handler of the Run button: target alone, then target + DLite (then prompt lookup), one after the other,
        yielding a :class:`CompareUpdate` after every streamed chunk."""
        models = self.models
        plain = ColumnRun("plain", "the target alone")
        dlite = ColumnRun("dlite", DLITE_LABEL)
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
        stop = threading.Event()
        self._stops[session] = stop
        try:
            input_ids = torch.tensor([self.chat_ids(prompt, context)])
            settings = {
                "max_new_tokens": max_new_tokens,
                "decoding": decoding,
                "temperature": temperature,
                "top_p": top_p,
                "seed": seed,
            }
            yield self._update(columns, decoding)
            for column in columns:
                if column.skipped:
                    continue
                if stop.is_set():
                    column.skipped = "Not run: stopped."
                    continue
                for _ in stream_run(models, column, input_ids, settings, stop):
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
        plain, dlite, lookup = columns
        details = {
            "decoding": decoding,
            "threads": torch.get_num_threads(),
            **{
                c.method: {
                    "skipped": c.skipped,
                    "done": c.done,
                    "stopped": c.stopped,
                    "error": c.error,
                    "new_tokens": len(c.ids),
                    "elapsed_s": round(c.elapsed_s, 4),
                    "tokens_per_s": round(c.tokens_per_s, 3),
                    "target_forwards": len(c.sizes),
                    "tokens_per_forward": list(c.sizes),
                    "token_ids": list(c.ids),
                    **({"stats": c.stats} if c.stats else {}),
                    **({"near_tie": c.near_tie.to_dict()} if c.near_tie is not None else {}),
                }
                for c in columns
            },
        }
        if plain.done and dlite.done and not dlite.skipped and plain.tokens_per_s > 0:
            details["speedup"] = round(dlite.tokens_per_s / plain.tokens_per_s, 4)
        return CompareUpdate(
            render_tokens(plain, highlight=False),
            render_stats(plain),
            render_tokens(dlite, highlight=True),
            render_stats(dlite, plain),
            render_tokens(lookup, highlight=True),
            render_stats(lookup, plain),
            message_override or verdict(columns, decoding),
            details,
        )
