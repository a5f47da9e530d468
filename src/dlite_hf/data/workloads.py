"""Benchmark workloads as *sessions*: lists of turns, each turn the messages appended before the model speaks.

A session is ``{"id", "workload", "source", "turns", "max_tokens", "max_turns"}``: it stops at the first turn whose
context is longer than ``max_tokens`` and measures at most ``max_turns`` turns; between turns the runner appends the
target's own greedy reply. All from eval splits: the workloads of :mod:`dlite_hf.data.prompts` (``long-N``: essays
cut to N tokens) and, for ``agentic``, ToolTalk conversations, BFCL multi-turn sessions (:mod:`dlite_hf.data.bfcl`)
and coding sessions over real standard-library files; and a user's own prompts (``--prompts FILE.jsonl``).
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..jsonl import read_jsonl
from .bfcl import bfcl_sessions as load_bfcl_sessions
from .common import EVAL_SIZE, PYTHON_VERSION, Prompt, prompt
from .prompts import WORKLOADS, load_long, load_prompts
from .stdlib import SESSION_SYSTEM, pytest_failure, read_file_result

Session = dict[str, Any]

AGENTIC_WORKLOAD = "agentic"
WORKLOAD_CHOICES = WORKLOADS  # every workload of dlite_hf.data.prompts, as sessions (`dlite-hf bench --workloads`)
LONG_MAX_TOKENS = 16384  # the longest long-context prompt `--long-lengths` accepts
USER_PROMPTS_WORKLOAD = "prompts"  # the workload label of a user's prompt file
_ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class CodingTask:
    """A coding session: ``modules`` are read in order (a session reads the first ``files`` of them; the first three
    are the default session's), ``frames`` (module, qualified name) form the failing test's traceback, which ends
    with ``error``. No training domain reads these modules' files, and training drops the ``code`` stubs of their
    functions (:data:`dlite_hf.data.stdlib.EVAL_STDLIB_MODULES`, :func:`~dlite_hf.data.stdlib.held_out_row`)."""

    id: str
    request: str
    modules: tuple[str, ...]
    frames: tuple[tuple[str, str], ...]
    error: str
    follow_up: str


CODING_TASKS: tuple[CodingTask, ...] = (
    CodingTask(
        id="json",
        request=(
            "Our service's JSON round-trip tests started failing after we vendored the standard json package "
            "into `json/`. Read the decoder and encoder, run the tests, find the cause and propose a minimal fix."
        ),
        modules=("json.decoder", "json.encoder", "json", "json.scanner", "json.tool", "codecs", "io", "string"),
        frames=(("json", "loads"), ("json.decoder", "JSONDecoder.decode"), ("json.decoder", "JSONDecoder.raw_decode")),
        error="json.decoder.JSONDecodeError: Expecting ',' delimiter: line 1 column 47 (char 46)",
        follow_up="The tests still fail after your change. Write the complete patch as a unified diff.",
    ),
    CodingTask(
        id="textwrap",
        request=(
            "`textwrap.fill` produces lines longer than `width` for our CLI help texts in the vendored copy of "
            "textwrap. Read the module, run the tests and fix it."
        ),
        modules=("textwrap", "shlex", "string", "csv", "io", "codecs", "json.decoder", "json.scanner"),
        frames=(("textwrap", "fill"), ("textwrap", "TextWrapper.fill"), ("textwrap", "TextWrapper.wrap")),
        error="AssertionError: assert 83 <= 80",
        follow_up="Good. Now add a regression test for the long-word case and show the full test file.",
    ),
    CodingTask(
        id="csv",
        request=(
            "Exports written with our vendored `csv` module cannot be read back when a field contains a newline. "
            "Read the relevant code, run the tests and propose a fix."
        ),
        modules=("csv", "io", "codecs", "string", "textwrap", "shlex", "json.encoder", "json.tool"),
        frames=(("csv", "DictWriter.writerow"), ("csv", "DictWriter._dict_to_list")),
        error="_csv.Error: new-line character seen in unquoted field - do you need to open the file with newline=''?",
        follow_up="Explain the root cause in two sentences, then give the patch as a unified diff.",
    ),
)


def as_session(item: Session | dict[str, Any], workload: str) -> Session:
    """``item`` as a session: a prompt (with ``messages``) becomes a one-turn session."""
    if "turns" in item:
        session = dict(item)
    elif "messages" in item:
        session = {"id": item["id"], "source": item.get("source", ""), "turns": [list(item["messages"])]}
    else:
        raise ValueError(f"A workload item needs `turns` (a session) or `messages` (a prompt); got {sorted(item)}.")
    if not session["turns"] or not session["turns"][0]:
        raise ValueError(f"Session {session.get('id')!r} has no messages in its first turn.")
    session["workload"] = workload
    session.setdefault("source", "")
    session.setdefault("max_tokens", None)
    session.setdefault("max_turns", None)
    return session


def session_from_messages(
    prompt: dict[str, Any], workload: str = AGENTIC_WORKLOAD, max_tokens: int | None = None
) -> Session:
    """A recorded conversation as turns: each run of non-assistant messages is one turn; the recorded assistant
    messages are dropped (the benchmark replaces them with the target's own replies)."""
    turns = [
        [{"role": m["role"], "content": m["content"]} for m in run]
        for is_assistant, run in itertools.groupby(prompt["messages"], key=lambda m: m["role"] == "assistant")
        if not is_assistant
    ]
    return as_session(
        {"id": prompt["id"], "source": prompt.get("source", ""), "turns": turns, "max_tokens": max_tokens}, workload
    )


def tooltalk_sessions(limit: int | None, max_tokens: int | None = None) -> list[Session]:
    """The agentic eval conversations (ToolTalk) as multi-turn sessions."""
    return [session_from_messages(p, AGENTIC_WORKLOAD, max_tokens) for p in load_prompts("agentic", "eval", limit)]


def _shown_path(path: Path) -> str | None:
    """``path`` relative to the standard library, or None outside it."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return path.relative_to(stdlib).as_posix() if path.is_relative_to(stdlib) else None


def _read_file_result(module: str, tokenizer: Any, max_tokens: int) -> str:
    """The result of `read_file` on a standard-library module's file, cut to at most `max_tokens` tokens of
    `tokenizer` (at a line boundary when possible)."""
    path = Path(inspect.getsourcefile(importlib.import_module(module)) or "")
    if not path.is_file():
        raise FileNotFoundError(f"No source file on disk for the standard-library module {module!r}.")
    source = body = path.read_text(encoding="utf-8")
    ids = tokenizer(source, add_special_tokens=False)["input_ids"]
    if len(ids) > max_tokens:
        body = tokenizer.decode(ids[:max_tokens])
        newline = body.rfind("\n")
        body = body[: newline + 1] if newline > len(body) // 2 else body
    return read_file_result(_shown_path(path) or path.name, source, body)


def _frame(module: str, qualname: str) -> tuple[str, int, str, str]:
    """(file, line number, function name, source line) of the last non-blank code line of a real function."""
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    lines, start = inspect.getsourcelines(obj)
    index = max(i for i, line in enumerate(lines) if line.strip() and not line.strip().startswith(("#", '"""')))
    path = Path(inspect.getsourcefile(obj) or module)
    relative = _shown_path(path)  # shown machine-independent, as in a standard Linux install
    shown = f"/usr/lib/python{sys.version_info[0]}.{sys.version_info[1]}/{relative}" if relative else path.name
    return shown, start + index, qualname.split(".")[-1], lines[index].rstrip()


def _test_output(task: CodingTask, attempt: int) -> str:
    """Pytest-like output of a failing run whose traceback frames are real lines of the source files."""
    test, test_file = f"test_{task.id}_roundtrip", f"tests/test_{task.id}.py"
    passed, failed = 11 + attempt, 2 - min(attempt, 1)
    progress = "." * 4 + "F" + "." * (passed - 4) + "F" * (failed - 1) + " " * 20
    body = (
        f"    def {test}():",
        f"        data = load_fixture('{task.id}_cases.txt')",
        f">       assert roundtrip_{task.id}(data) == data",
        "",
        f"{test_file}:{41 + attempt}: ",
    )
    frames = [_frame(module, qualname) for module, qualname in task.frames]
    return pytest_failure(test_file, test, progress, frames, task.error, passed, failed, 37 + attempt, body, True)


def coding_session(
    task: CodingTask, tokenizer: Any, max_tokens: int | None, file_tokens: int, files: int = 3
) -> Session:
    """A coding-agent session: the request, then the first ``files`` of the task's standard-library files (each cut
    to ``file_tokens`` of ``tokenizer``'s tokens) as tool results, test output after the first file and after each
    one from the fourth on (read a file, propose an edit, read the test output, repeat), then a follow-up and the
    last test output. ``files=3`` is the default session; more make the context grow (to 16k tokens and beyond)."""
    if not 1 <= files <= len(task.modules):
        raise ValueError(f"files must be in 1..{len(task.modules)} (task {task.id!r} has that many), got {files}.")
    read = [[{"role": "tool", "content": _read_file_result(m, tokenizer, file_tokens)}] for m in task.modules[:files]]
    tests = [[{"role": "tool", "content": _test_output(task, attempt)}] for attempt in range(max(2, files - 1))]
    cycles = [turn for k in range(3, files) for turn in (read[k], tests[k - 2])]
    turns = [
        [{"role": "system", "content": SESSION_SYSTEM}, {"role": "user", "content": task.request}],
        read[0],
        tests[0],
        *read[1:3],
        *cycles,
        [{"role": "user", "content": task.follow_up}],
        tests[-1],
    ]
    id_ = f"coding/{task.id}" + (f"-{files}" if files != 3 else "")
    source = f"python-stdlib {PYTHON_VERSION}: {', '.join(task.modules[:files])}"
    return as_session({"id": id_, "source": source, "turns": turns, "max_tokens": max_tokens}, AGENTIC_WORKLOAD)


def load_prompt_file(path: str | Path) -> list[Prompt]:
    """A user's prompts: a JSONL file whose rows hold `messages` (`[{"role", "content"}, ...]`, ending with a message
    the target answers) and optionally an `id`; a malformed row is a `ValueError` naming it and what was expected."""
    rows = read_jsonl(path)
    if not rows:
        raise ValueError(f"{path} holds no prompts: expected one JSON object per line with a `messages` list.")
    prompts = []
    for number, row in enumerate(rows, start=1):
        messages = row.get("messages")
        where = f"{path}, prompt {number}"
        if not isinstance(messages, list) or not messages:
            raise ValueError(
                f"{where}: expected a non-empty `messages` list (chat format: "
                f'[{{"role": "user", "content": "..."}}]), got {type(messages).__name__}.'
            )
        for message in messages:
            known_role = isinstance(message, dict) and message.get("role") in _ROLES
            if not known_role or not isinstance(message.get("content"), str):
                raise ValueError(
                    f"{where}: each message needs a `role` in {', '.join(_ROLES)} and a string `content`; got "
                    f"{message!r:.120}."
                )
        if messages[-1]["role"] == "assistant":
            raise ValueError(f"{where}: the last message is the assistant's; end with the message to answer.")
        id_ = str(row.get("id") or f"{Path(path).stem}/{number}")
        prompts.append(prompt(id_, USER_PROMPTS_WORKLOAD, str(path), [dict(m) for m in messages]))
    ids = [p["id"] for p in prompts]
    if len(set(ids)) != len(ids):
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"{path}: prompt ids must be unique; repeated: {repeated}.")
    return prompts


def parse_workloads(spec: str | Iterable[str]) -> list[str]:
    """Split and validate a workload list (``"chat,code"``); unknown names list the allowed ones."""
    names = [w.strip() for w in (spec.split(",") if isinstance(spec, str) else spec) if w.strip()]
    if unknown := [w for w in names if w not in WORKLOADS]:
        raise ValueError(f"Unknown workload(s) {', '.join(unknown)}; allowed: {', '.join(WORKLOADS)}.")
    if not names:
        raise ValueError(f"No workload given; allowed: {', '.join(WORKLOADS)}.")
    return list(dict.fromkeys(names))


def build_workloads(
    names: Sequence[str],
    tokenizer: Any,
    num_prompts: int = 4,
    long_lengths: Sequence[int] = (1024, 4096),
    agentic_max_tokens: int = 8192,
    agentic_max_turns: int | None = 8,
    coding_sessions: int = 1,
    coding_files: int = 3,
    file_tokens: int | None = None,
    bfcl_sessions: int = 1,
    bfcl_category: str = "multi_turn_base",
) -> dict[str, list[Session]]:
    """The sessions of every workload of ``names``, keyed by label (``long`` becomes ``long-1024``, ...).
    ``num_prompts`` is per workload, per long length and of ToolTalk for ``agentic``, which adds ``coding_sessions``
    and ``bfcl_sessions``; a coding session reads ``coding_files`` files, each cut to ``file_tokens`` (default
    ``agentic_max_tokens // 4``)."""
    if not 1 <= num_prompts <= EVAL_SIZE:
        raise ValueError(f"num_prompts must be in 1..{EVAL_SIZE} (the eval split's size), got {num_prompts}.")
    if not 0 <= coding_sessions <= len(CODING_TASKS):
        raise ValueError(f"coding_sessions must be in 0..{len(CODING_TASKS)}, got {coding_sessions}.")
    for length in long_lengths:
        if not 64 <= length <= LONG_MAX_TOKENS:
            raise ValueError(f"long lengths must be in 64..{LONG_MAX_TOKENS} tokens, got {length}.")
    workloads: dict[str, list[Session]] = {}
    for name in parse_workloads(names):
        if name == "long":
            for length in long_lengths:
                label = f"long-{length}"
                workloads[label] = [as_session(p, label) for p in load_long(length, tokenizer, "eval", num_prompts)]
        elif name == AGENTIC_WORKLOAD:
            sessions = tooltalk_sessions(num_prompts, agentic_max_tokens)
            sessions += load_bfcl_sessions(bfcl_sessions, agentic_max_tokens, bfcl_category)
            budget = file_tokens or max(128, agentic_max_tokens // 4)
            tasks = CODING_TASKS[:coding_sessions]
            sessions += [coding_session(t, tokenizer, agentic_max_tokens, budget, coding_files) for t in tasks]
            for session in sessions:
                session["max_turns"] = agentic_max_turns
            workloads[AGENTIC_WORKLOAD] = sessions
        else:
            workloads[name] = [as_session(p, name) for p in load_prompts(name, "eval", num_prompts)]
    return workloads
