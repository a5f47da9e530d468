"""On-disk source: the running interpreter's standard library (sources ``stdlib_functions`` and ``stdlib_modules``).

It gives the ``code`` workload's train-only prompts (documented public functions of :data:`STDLIB_CODE_MODULES`,
body removed, HumanEval-style) and the mix's ``code_tasks`` and ``text_code`` domains, over every pure-Python module
but tests, IDLE, site-packages and those the bench's coding sessions read (:data:`EVAL_STDLIB_MODULES`). Modules
an interpreter lacks (``uu`` from 3.13 on) are skipped, so the items depend on its version.
"""

from __future__ import annotations

import ast
import copy
from pathlib import Path

from .common import MAX_PROMPT_CHARS, PYTHON_VERSION, TEXT_CHUNK_CHARS, Prompt, hash_key, prompt, text_item, user
from .sources import SOURCES, is_reserved

# modules whose documented public functions become train-only code prompts
STDLIB_CODE_MODULES: tuple[str, ...] = (
    "bisect",
    "calendar",
    "colorsys",
    "csv",
    "difflib",
    "fnmatch",
    "fractions",
    "glob",
    "gzip",
    "heapq",
    "html/__init__",
    "ipaddress",
    "json/__init__",
    "ntpath",
    "posixpath",
    "quopri",
    "random",
    "shlex",
    "shutil",
    "statistics",
    "string",
    "textwrap",
    "tokenize",
    "urllib/parse",
    "uu",
    "base64",
    "filecmp",
    "linecache",
    "mimetypes",
    "operator",
    "os",
    "pprint",
    "re/__init__",
    "reprlib",
    "sched",
    "secrets",
    "tempfile",
    "uuid",
    "zipfile/__init__",
    "email/utils",
    "http/cookies",
    "inspect",
    "dataclasses",
    "functools",
    "copy",
    "getopt",
)
# the bench's coding sessions read these modules (dlite_hf.data.workloads.CODING_TASKS): the mix never trains on them
EVAL_STDLIB_MODULES = frozenset({"json", "textwrap", "shlex", "string", "csv", "io", "codecs"})
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


def _function_stub(node: ast.FunctionDef) -> str:
    """The function's signature and docstring with the body removed (what HumanEval's prompts look like)."""
    stub = copy.deepcopy(node)
    stub.decorator_list = []
    stub.body = [stub.body[0]]  # the docstring expression
    return ast.unparse(stub)


def code_stub_prompts() -> list[Prompt]:
    """Train-only code prompts: documented public top-level functions of :data:`STDLIB_CODE_MODULES`."""
    root = Path(SOURCES["stdlib_functions"].path)
    prompts = []
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
            content = f"{CODE_INSTRUCTION}\n\n```python\n{_function_stub(node)}\n```"
            name = module.removesuffix("/__init__").replace("/", ".")
            source = f"python=={PYTHON_VERSION}:Lib/{module}.py"
            prompts.append(prompt(f"stdlib/{name}.{node.name}", "code", source, [user(content)]))
    return prompts


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


def code_tasks() -> list[tuple[str, list[Prompt]]]:
    """The ``code_tasks`` domain: one group per module, a task about each of its top-level functions."""
    out = []
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
            out.append((f"stdlib-task/{module}", items))
    return out


def text_code(held: frozenset[str]) -> list[tuple[str, list[Prompt]]]:
    """The ``text_code`` domain: modules continued chunk by chunk, but those of ``code_tasks``' eval groups."""
    held_modules = {gid.split("/", 1)[1] for gid in held}
    out = []
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
            out.append((f"stdlib-text/{module}", items))
    return out
