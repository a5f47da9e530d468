"""The mix's ``coding_agent`` domain: long multi-turn coding-agent sessions over standard-library modules, and
the tool results they share with the bench's coding sessions (:mod:`dlite_hf.data.workloads`).

A session is one group: a bug report about a train module (:func:`~dlite_hf.data.stdlib.module_files`), then the
agent's tool calls and their results: the module's source, a pytest failure quoting real lines of it, the sources of
the train modules it imports, and a follow-up. Every point where the agent speaks next is one prompt (about 2k to 8k
tokens of context). Files are read with :mod:`ast`, never imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

from .common import PYTHON_VERSION, Prompt, hash_key, prompt, tool_call, user
from .stdlib import module_files

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


def _read_result(module: str, path: Path, text: str) -> str:
    body = text if len(text) <= MAX_FILE_CHARS else text[: text.rfind("\n", 0, MAX_FILE_CHARS) + 1]
    return read_file_result(_repo_path(module, path), text, body)


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


def _test_output(module: str, path: Path, lines: list[str], frames: list[tuple[str, int]], error: str, attempt: int):
    test = f"test_{module.replace('.', '_')}_{frames[0][0].split('.')[-1].strip('_')}"
    passed, failed = 9 + attempt, 2 - min(attempt, 1)
    progress = "." * 3 + "F" * failed + "." * (passed - 3) + " " * 16
    quoted = [(_repo_path(module, path), n, name.split(".")[-1], lines[n - 1]) for name, n in frames]
    test_file = f"tests/test_{module.split('.')[-1]}.py"
    return pytest_failure(test_file, test, progress, quoted, error, passed, failed, 41 + attempt)


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
    frames = [functions[(pick + i * 7) % len(functions)] for i in range(3)]
    frames = list(dict.fromkeys(frames))
    error = _ERRORS[pick % len(_ERRORS)]
    lines = text.splitlines()
    request = _REQUESTS[pick % len(_REQUESTS)].format(func=frames[0][0], module=module)
    messages = [{"role": "system", "content": SESSION_SYSTEM}, user(request)]
    source = f"python=={PYTHON_VERSION}:Lib/{_repo_path(module, path)}"
    prompts: list[Prompt] = []

    def call(name: str, arguments: dict, result: str, speak: bool) -> None:
        messages.append({"role": "assistant", "content": tool_call(name, arguments)})
        messages.append({"role": "tool", "content": result})
        if speak:  # the agent speaks next: one training prompt, the context so far
            prompts.append(prompt(f"coding-agent/{module}/{len(prompts)}", "coding_agent", source, list(messages)))

    call("read_file", {"path": _repo_path(module, path)}, _read_result(module, path, text), False)
    target = f"tests/test_{module.split('.')[-1]}.py"
    call("run_tests", {"target": target}, _test_output(module, path, lines, frames, error, 0), True)
    for other in _imports(tree, known)[:2]:
        other_path = known[other]
        other_text = other_path.read_text(encoding="utf-8", errors="replace")
        call("read_file", {"path": _repo_path(other, other_path)}, _read_result(other, other_path, other_text), True)
    messages.append(user(_FOLLOW_UPS[pick % len(_FOLLOW_UPS)]))
    call("run_tests", {"target": target}, _test_output(module, path, lines, frames, error, 1), True)
    return prompts


def coding_agent() -> list[tuple[str, list[Prompt]]]:
    """The ``coding_agent`` domain: one group per module, the prompts of its session in order."""
    files = module_files()
    known = dict(files)
    out = []
    for module, path in files:
        items = _session(module, path, known)
        if items:
            out.append((f"coding-agent/{module}", items))
    return out
