"""On-disk source: the running interpreter's standard library, read with :mod:`ast`, never imported.

It gives the ``code`` workload's train-only prompts (documented functions of :data:`STDLIB_CODE_MODULES`, body
removed) and the mix's ``code_tasks``, ``text_code`` and ``coding_agent`` domains over every pure-Python module but
tests, IDLE and those the bench's coding sessions read (:data:`EVAL_STDLIB_MODULES`); the items depend on the
interpreter's version (``uu`` is gone from 3.13 on). A ``coding_agent`` session is a bug report, then the agent's
tool calls and results (the module, a pytest failure quoting it, modules it imports, a follow-up); every point where
the agent speaks next is one prompt (2k to 8k tokens of context).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from pathlib import Path

from .common import (
    MAX_PROMPT_CHARS,
    PYTHON_VERSION,
    TEXT_CHUNK_CHARS,
    Group,
    Prompt,
    hash_key,
    prompt,
    text_item,
    tool_call,
    user,
)
from .sources import SOURCES, is_reserved

# modules whose documented public functions become train-only code prompts, in the prompts' order
STDLIB_CODE_MODULES: tuple[str, ...] = tuple(
    "bisect calendar colorsys csv difflib fnmatch fractions glob gzip heapq html/__init__ ipaddress json/__init__ "
    "ntpath posixpath quopri random shlex shutil statistics string textwrap tokenize urllib/parse uu base64 "
    "filecmp linecache mimetypes operator os pprint re/__init__ reprlib sched secrets tempfile uuid "
    "zipfile/__init__ email/utils http/cookies inspect dataclasses functools copy getopt".split()
)
# the bench's coding sessions read these modules (dlite_hf.data.workloads.CODING_TASKS): no mix domain reads their
# files, but STDLIB_CODE_MODULES names five of them, so the ``code`` domain holds stubs of their functions; the mix
# keeps those prompts (the shipped datasets rebuild from it by hash) and training drops their rows (held_out_row)
EVAL_STDLIB_MODULES = frozenset({"json", "textwrap", "shlex", "string", "csv", "io", "codecs"})


def held_out_row(row_id: str) -> bool:
    """Whether a training row's prompt (``stdlib/<module>.<function>``) comes from a module the bench holds out."""
    return row_id.startswith("stdlib/") and row_id.split("/", 1)[1].split(".")[0] in EVAL_STDLIB_MODULES


CODE_INSTRUCTION = "Complete the following Python function. Reply with the whole function in a Python code block."
_STDLIB_MIN_BODY_LINES = 4
_STDLIB_MAX_BODY_LINES = 40
_SKIPPED_TOP = ("test", "idlelib", "lib2to3", "site-packages", "dist-packages", "tkinter", "turtledemo", "encodings")
_CODE_TASKS = (
    "Explain what this function from Python's `{module}` module does, step by step.",
    "Write pytest unit tests for this function from Python's `{module}` module.",
    "Refactor this function from Python's `{module}` module for readability, keeping its behaviour. Reply with "
    "the new code and a short list of changes.",
)


def code_stub_prompts() -> Iterator[Prompt]:
    """The ``code`` workload's train-only prompts: documented functions of :data:`STDLIB_CODE_MODULES`."""
    root = Path(SOURCES["stdlib_functions"].path)
    for module in STDLIB_CODE_MODULES:
        path = root / f"{module}.py"
        if not path.is_file():
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_") or ast.get_docstring(node) is None:
                continue
            body_lines = node.end_lineno - node.body[0].end_lineno
            if not _STDLIB_MIN_BODY_LINES <= body_lines <= _STDLIB_MAX_BODY_LINES:
                continue
            stub = copy.deepcopy(node)  # the signature and docstring, body removed: what HumanEval's prompts look like
            stub.decorator_list = []
            stub.body = stub.body[:1]
            content = f"{CODE_INSTRUCTION}\n\n```python\n{ast.unparse(stub)}\n```"
            name = module.removesuffix("/__init__").replace("/", ".")
            source = f"python=={PYTHON_VERSION}:Lib/{module}.py"
            yield prompt(f"stdlib/{name}.{node.name}", "code", source, [user(content)])


def module_files() -> list[tuple[str, Path]]:
    """Pure-Python standard-library modules (no tests, no IDLE, none the bench's coding sessions read)."""
    root = Path(SOURCES["stdlib_modules"].path)
    out = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        parts = relative.parts
        if parts[0] in _SKIPPED_TOP or "tests" in parts or "test" in parts or parts[0].startswith("_"):
            continue
        if is_reserved(relative.as_posix()):
            continue
        module = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
        if module.split(".")[0] in EVAL_STDLIB_MODULES:
            continue
        out.append((module, path))
    return out


def code_tasks() -> Iterator[Group]:
    """One group per module, a task about each of its top-level functions."""
    for module, path in module_files():
        try:
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        lines = text.splitlines()
        items = []
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or not 6 <= node.end_lineno - node.lineno <= 60:
                continue
            code = "\n".join(lines[node.lineno - 1 : node.end_lineno])
            task = _CODE_TASKS[int(hash_key(f"{module}.{node.name}"), 16) % len(_CODE_TASKS)]
            request = f"{task.format(module=module)}\n\n```python\n{code}\n```"
            if len(request) <= MAX_PROMPT_CHARS:
                id_ = f"stdlib-task/{module}.{node.name}"
                items.append(prompt(id_, "code_tasks", f"python=={PYTHON_VERSION}:Lib/{path.name}", [user(request)]))
        if items:
            yield f"stdlib-task/{module}", items


def text_code(held: frozenset[str]) -> Iterator[Group]:
    """Modules continued chunk by chunk, but those of ``code_tasks``' eval groups."""
    held_modules = {gid.split("/", 1)[1] for gid in held}
    for module, path in module_files():
        if module in held_modules:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        chunks = [
            text[i : i + TEXT_CHUNK_CHARS] for i in range(0, min(len(text), 6 * TEXT_CHUNK_CHARS), TEXT_CHUNK_CHARS)
        ]
        items = []
        for n in range(1, len(chunks)):
            if len(chunks[n]) < 400:
                continue
            request = f"Continue this part of Python's `{module}` module.\n\n```python\n{chunks[n - 1][-1200:]}\n```"
            reply = f"```python\n{chunks[n]}\n```"
            source = f"python=={PYTHON_VERSION}:Lib/{path.name}"
            items.append(text_item(f"text/stdlib/{module}/{n}", "text_code", source, request, reply))
        if items:
            yield f"stdlib-text/{module}", items


# ---------------------------------------------------------------------------------------- coding-agent sessions
SESSION_SYSTEM = (
    "You are a coding agent working in a Python repository. You act through these functions:\n"
    "<tools>\n"
    '{"name": "read_file", "description": "Read a source file of the repository.", "parameters": {"type": "object", '
    '"properties": {"path": {"type": "string"}}, "required": ["path"]}}\n'
    '{"name": "run_tests", "description": "Run the test suite with pytest and return its output.", "parameters": '
    '{"type": "object", "properties": {"target": {"type": "string"}}, "required": ["target"]}}\n'
    "</tools>\n"
    "To call a function, reply with one <tool_call></tool_call> block per call, each holding a JSON object "
    '{"name": <function name>, "arguments": <arguments object>}. Keep replies short: reason briefly, then act.'
)
MAX_FILE_CHARS = 12000  # about 3.5k tokens of code: two or three files make an 8k-token context
_MIN_FUNCTIONS = 3
_REQUESTS = (
    "Users report wrong results from `{func}` in our vendored copy of `{module}`. Read the code, run the tests, find "
    "the cause and propose a minimal fix.",
    "`{func}` in the vendored `{module}` started raising on inputs that used to work. Investigate and fix it.",
    "CI is red on the tests of `{module}` since the last merge; the failure is in `{func}`. Find out why and fix it.",
)
_ERRORS = (
    "AssertionError: assert result == expected",
    "TypeError: unsupported operand type(s) for +: 'NoneType' and 'int'",
    "ValueError: invalid literal for int() with base 10: ''",
    "IndexError: list index out of range",
    "KeyError: 'name'",
    "AttributeError: 'NoneType' object has no attribute 'group'",
)
_FOLLOW_UPS = (
    "The tests still fail after your change. Write the complete patch as a unified diff.",
    "Good. Now add a regression test for this case and show the full test function.",
    "Explain the root cause in two sentences, then give the patch as a unified diff.",
)


def _functions(tree: ast.Module) -> list[tuple[str, int]]:
    """(qualified name, line of the last code line) of the module's top-level functions and methods."""
    out = []
    for node in tree.body:
        nodes = [(node, node.name)] if isinstance(node, ast.FunctionDef) else []
        if isinstance(node, ast.ClassDef):
            nodes = [(n, f"{node.name}.{n.name}") for n in node.body if isinstance(n, ast.FunctionDef)]
        for fn, name in nodes:
            if fn.end_lineno - fn.lineno >= 4 and not fn.name.startswith("__"):
                out.append((name, fn.body[-1].lineno))
    return out


def _imports(tree: ast.Module, known: dict[str, Path]) -> list[str]:
    """Train modules the module imports at the top level, in order of first import."""
    names = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return [n for n in dict.fromkeys(names) if n in known]


def read_file_result(path: str, text: str, body: str) -> str:
    """The result of ``read_file(path)``: ``body``, the start of the file's ``text`` (all of it, or cut)."""
    total = text.count("\n") + 1
    shown = body.count("\n") + (0 if body.endswith("\n") else 1)
    note = f" (showing lines 1-{shown} of {total})" if body != text else f" ({total} lines)"
    return f"read_file(path={path!r}){note}:\n```python\n{body.rstrip()}\n```"


def _repo_path(module: str, path: Path) -> str:
    return module.replace(".", "/") + ("/__init__.py" if path.name == "__init__.py" else ".py")


def pytest_failure(
    test_file: str,
    test: str,
    progress: str,
    frames: list[tuple[str, int, str, str]],
    error: str,
    passed: int,
    failed: int,
    seconds: int,
    body: tuple[str, ...] = (),
    summary_header: bool = False,
) -> str:
    """Pytest-like output of a failing run; ``frames``: the traceback's (path, line number, function, source line)."""
    lines = [
        "=" * 29 + " test session starts " + "=" * 30,
        f"platform linux -- Python {PYTHON_VERSION}, pytest-8.3.2, pluggy-1.5.0",
        "rootdir: /workspace/service",
        f"collected {passed + failed} items",
        "",
        f"{test_file} {progress}[100%]",
        "",
        "=" * 35 + " FAILURES " + "=" * 35,
        "_" * 28 + f" {test} " + "_" * 28,
        "",
        *body,
    ]
    for path, number, name, source in frames:
        lines += ["_ " * 40, "", f"{path}:{number}: in {name}", f"    {source.strip()}"]
    lines += [f"E   {error}", ""] + ["=" * 27 + " short test summary info " + "=" * 28] * summary_header
    lines.append(f"FAILED {test_file}::{test} - {error.split(':')[0]}")
    return "\n".join([*lines, "=" * 24 + f" {failed} failed, {passed} passed in 0.{seconds}s " + "=" * 24])


def _session(module: str, path: Path, known: dict[str, Path]) -> list[Prompt]:
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    functions = _functions(tree)
    if len(functions) < _MIN_FUNCTIONS:
        return []
    pick = int(hash_key(module), 16)
    frames = list(dict.fromkeys(functions[(pick + i * 7) % len(functions)] for i in range(3)))
    request = _REQUESTS[pick % len(_REQUESTS)].format(func=frames[0][0], module=module)
    messages = [{"role": "system", "content": SESSION_SYSTEM}, user(request)]
    source = f"python=={PYTHON_VERSION}:Lib/{_repo_path(module, path)}"
    prompts: list[Prompt] = []

    def call(name: str, arguments: dict, result: str, speak: bool) -> None:
        messages.append({"role": "assistant", "content": tool_call(name, arguments)})
        messages.append({"role": "tool", "content": result})
        if speak:  # the agent speaks next: one training prompt, the context so far
            prompts.append(prompt(f"coding-agent/{module}/{len(prompts)}", "coding_agent", source, list(messages)))

    def read(name: str, file: Path, text: str, speak: bool) -> None:
        body = text if len(text) <= MAX_FILE_CHARS else text[: text.rfind("\n", 0, MAX_FILE_CHARS) + 1]
        shown = _repo_path(name, file)
        call("read_file", {"path": shown}, read_file_result(shown, text, body), speak)

    test_file = f"tests/test_{module.split('.')[-1]}.py"
    test = f"test_{module.replace('.', '_')}_{frames[0][0].split('.')[-1].strip('_')}"
    lines, error = text.splitlines(), _ERRORS[pick % len(_ERRORS)]
    quoted = [(_repo_path(module, path), n, name.split(".")[-1], lines[n - 1]) for name, n in frames]

    def run_tests(attempt: int) -> None:  # a failing pytest run whose traceback quotes the module's lines
        passed, failed = 9 + attempt, 2 - min(attempt, 1)
        progress = "." * 3 + "F" * failed + "." * (passed - 3) + " " * 16
        output = pytest_failure(test_file, test, progress, quoted, error, passed, failed, 41 + attempt)
        call("run_tests", {"target": test_file}, output, True)

    read(module, path, text, False)
    run_tests(0)
    for other in _imports(tree, known)[:2]:
        read(other, known[other], known[other].read_text(encoding="utf-8", errors="replace"), True)
    messages.append(user(_FOLLOW_UPS[pick % len(_FOLLOW_UPS)]))
    run_tests(1)
    return prompts


def coding_agent() -> Iterator[Group]:
    files = module_files()
    known = dict(files)
    for module, path in files:
        if items := _session(module, path, known):
            yield f"coding-agent/{module}", items
