"""The workloads: real prompt sets for training and evaluating drafters, with fixed, disjoint splits.

``split="eval"`` holds the first ``EVAL_SIZE`` groups of a workload's eval pool (an item, or a whole conversation)
by sha1 of the group id; ``split="train"`` the rest of the pool plus the train-only sources, disjoint by id,
conversation and message text (each source's rule: :mod:`dlite_hf.data.sources`). ``agentic`` is ToolTalk
conversations, every prefix ending at a user or tool turn (eval: the longest). ``long``, ``legal`` and ``clinical``
are out of domain (:data:`OUT_OF_DOMAIN_WORKLOADS`). Never train a drafter on eval items.
"""

from __future__ import annotations

import ast
import copy
import csv
import functools
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from . import sources as S
from .common import (
    EVAL_SIZE,
    SPLITS,
    TOOL_CALL_HELP,
    Prompt,
    check_choice,
    check_limit,
    dedupe,
    hash_key,
    prompt,
    tool_call,
    tool_system_prompt,
    tools_block,
    user,
)
from .stdlib import CODE_INSTRUCTION, code_stub_prompts

WORKLOADS: tuple[str, ...] = ("chat", "code", "math", "tool", "agentic", "long", "legal", "clinical")
TRAINING_WORKLOADS: tuple[str, ...] = ("chat", "code", "math", "tool", "agentic")
OUT_OF_DOMAIN_WORKLOADS: tuple[str, ...] = ("legal", "clinical", "long")  # no drafter trains on their sources

_CHAT_TRAIN_SOURCES = ("fiqa", "truthfulqa", "liveqa")
_BFCL_EVAL_SOURCES = ("bfcl_simple_python", "bfcl_multiple")
_BFCL_TRAIN_SOURCES = ("bfcl_live_simple", "bfcl_live_multiple")
_LEGAL_MAX_CHARS = 5000  # about 1,100 SmolLM2 tokens of case text
_CLINICAL_SECTIONS = {  # the MTS-Dialog headers whose name is not the header in lower case
    "GENHX": "history of present illness",
    "FAM/SOCHX": "family and social history",
    "PASTMEDICALHX": "past medical history",
    "CC": "chief complaint",
    "PASTSURGICAL": "past surgical history",
    "ALLERGY": "allergies",
    "ROS": "review of systems",
    "EXAM": "examination",
    "EDCOURSE": "emergency department course",
    "GYNHX": "gynecologic history",
    "OTHER_HISTORY": "other history",
    "LABS": "laboratory results",
}

# A workload's pool: its groups (group id, eval item, train items) and its train-only prompts
_Group = tuple[str, Prompt, list[Prompt]]
_Items = tuple[list[Prompt], list[Prompt]]  # a single-turn workload's eval-pool prompts and train-only prompts


def _chat() -> _Items:
    source = S.provenance("mtbench")
    pool = [
        prompt(f"mtbench/{row['question_id']}", "chat", source, [user(row["turns"][0])])
        for row in S.read_jsonl("mtbench")
    ]
    extra = []
    for name in _CHAT_TRAIN_SOURCES:
        source, label = S.provenance(name), Path(S.source(name).path).parent.name.lower()
        for index, row in enumerate(S.read_jsonl(name)):
            extra.append(prompt(f"{label}/{index}", "chat", source, [user(row["question"].strip())]))
    return pool, extra


def _code() -> _Items:
    source = S.provenance("humaneval")
    pool = []
    for row in S.read_jsonl("humaneval"):
        content = f"{CODE_INSTRUCTION}\n\n```python\n{row['prompt'].strip()}\n```"
        pool.append(prompt(f"humaneval/{row['task_id'].split('/')[-1]}", "code", source, [user(content)]))
    return pool, list(code_stub_prompts())


def _math() -> _Items:
    source = S.provenance("asdiv")
    pool = []
    for index, row in enumerate(S.read_jsonl("asdiv")):
        problem = " ".join(part.strip() for part in (row.get("passage", ""), row["question"]) if part.strip())
        content = f"{problem}\nSolve the problem step by step, then state the final answer."
        pool.append(prompt(f"asdiv/{index}", "math", source, [user(content)]))
    return pool, []


def _bfcl_prompts(name: str) -> Iterator[Prompt]:
    """BFCL v4 single-turn questions of one category, with its function docs in a system message."""
    source = S.provenance(name)
    for row in S.read_jsonl(name):
        if len(row["question"]) != 1:  # single-turn workload only
            continue
        turn = row["question"][0]
        system = tool_system_prompt(row["function"], preamble=[m["content"] for m in turn if m["role"] == "system"])
        chat = [{"role": m["role"], "content": m["content"]} for m in turn if m["role"] != "system"]
        yield prompt(f"bfcl/{row['id']}", "tool", source, [{"role": "system", "content": system}, *chat])


def _tool() -> _Items:
    pool = [p for name in _BFCL_EVAL_SOURCES for p in _bfcl_prompts(name)]
    return pool, [p for name in _BFCL_TRAIN_SOURCES for p in _bfcl_prompts(name)]


# ----------------------------------------------------------------------------------------------------- ToolTalk
@functools.cache
def _tooltalk_apis() -> tuple[dict[str, dict], dict[str, list[str]]]:
    """ToolTalk's API classes parsed with ast: (function doc per API, API names per suite)."""
    apis: dict[str, dict] = {}
    suites: dict[str, list[str]] = {}
    for file in S.list_files("tooltalk_apis", ".py"):
        tree = ast.parse(S.fetch("tooltalk_apis", file).read_text(encoding="utf-8"))
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
    """A ToolTalk conversation: system (time, place, login, API docs), then user / call / result turns."""
    apis, suites = _tooltalk_apis()
    names = [n for suite in conv["suites_used"] for n in suites[suite]]
    meta, account = conv.get("metadata", {}), conv.get("user", {})
    lines = [
        "You are a helpful assistant that acts on the user's behalf through the APIs below.",
        f"Current time: {meta.get('timestamp', 'unknown')}. User location: {meta.get('location', 'unknown')}.",
    ]
    if account.get("session_token"):
        lines.append(f"The user {account['username']} is logged in (session_token: {account['session_token']}).")
    lines += ["", tools_block(apis[n] for n in names), "", TOOL_CALL_HELP]
    messages = [{"role": "system", "content": "\n".join(lines)}]
    for turn in conv["conversation"]:
        if turn["role"] == "user":
            messages.append(user(turn["text"]))
            continue
        for call in turn.get("apis") or []:
            request = call["request"]
            messages.append({"role": "assistant", "content": tool_call(request["api_name"], request["parameters"])})
            result = {"response": call["response"], "exception": call["exception"]}
            messages.append({"role": "tool", "content": json.dumps(result, ensure_ascii=False)})
        messages.append({"role": "assistant", "content": turn["text"]})
    return messages


def _tooltalk_prefixes(name: str, prefix_id: str) -> Iterator[tuple[str, list[Prompt]]]:
    """Per conversation of the folder source ``name``: every prefix that ends at a user or tool message."""
    for file in S.list_files(name, ".json"):
        conv = json.loads(S.fetch(name, file).read_text(encoding="utf-8"))
        messages = _tooltalk_messages(conv)
        source = S.provenance(name, file)
        group = f"{prefix_id}/{conv['name']}"
        cuts = [i for i in range(2, len(messages) + 1) if messages[i - 1]["role"] in ("user", "tool")]
        if prompts := [prompt(f"{group}/{i - 1}", "agentic", source, messages[:i]) for i in cuts]:
            yield group, prompts


def _agentic_pool() -> tuple[list[_Group], list[Prompt]]:
    """Whole conversations are groups: eval holds a conversation's longest prefix, train every prefix."""
    groups = [(gid, prompts[-1], prompts) for gid, prompts in _tooltalk_prefixes("tooltalk", "tooltalk")]
    return groups, [p for _, prompts in _tooltalk_prefixes("tooltalk_easy", "tooltalk-easy") for p in prompts]


def _legal() -> _Items:
    source = S.provenance("multilexsum")
    prompts = []
    for index, row in enumerate(S.read_jsonl("multilexsum")):
        document = row["document"].strip()[:_LEGAL_MAX_CHARS]
        cut = document.rfind(". ") + 1 if len(row["document"].strip()) > _LEGAL_MAX_CHARS else len(document)
        content = (
            f"Here are documents from a civil-rights case.\n\n<documents>\n{document[:cut]}\n</documents>\n\n"
            "Summarise the case in one paragraph: the parties, the claims, and what happened."
        )
        prompts.append(prompt(f"multilexsum/{index}", "legal", source, [user(content)]))
    return prompts, []


def _clinical() -> _Items:
    source = S.provenance("mtsdialog")
    prompts = []
    for row in csv.DictReader(io.StringIO(S.read_text("mtsdialog"))):
        section = _CLINICAL_SECTIONS.get(row["section_header"].strip(), row["section_header"].strip().lower())
        content = (
            f"Here is a conversation between a doctor and a patient.\n\n{row['dialogue'].strip()}\n\n"
            f"Write the '{section}' section of the clinical note for this visit."
        )
        prompts.append(prompt(f"mtsdialog/{row['ID']}", "clinical", source, [user(content)]))
    return prompts, []


# ----------------------------------------------------------------------------------------- long (out of domain)
LONG_DEFAULT_TOKENS = 2048
_CHARS_PER_TOKEN = 4  # rough English average; only used by the long workload when no tokenizer is given
_LONG_WINDOW_CHARS_PER_TOKEN = 6  # window size per requested token: enough text for any BPE tokenizer here

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


@functools.lru_cache(maxsize=1)
def _essays() -> str:
    return json.loads(S.read_text("essays"))["text"]


def _long_messages(context: str, question: str) -> list[dict[str, str]]:
    return [user(f"Read the following essays by Paul Graham.\n\n<essays>\n{context}\n</essays>\n\n{question}")]


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
    """A window of the essays (``6 * n_tokens`` characters, none overlapping), then a question, the templated prompt
    cut to at most ``n_tokens`` of ``tokenizer``'s tokens (without one: about 4 characters a token)."""
    check_choice("split", split, SPLITS)
    if n_tokens <= 0:
        raise ValueError(f"n_tokens must be positive, got {n_tokens}.")
    check_limit(limit)
    text = _essays()
    width = n_tokens * _LONG_WINDOW_CHARS_PER_TOKEN
    n_windows = len(text) // width
    if n_windows < 2:
        raise ValueError(
            f"n_tokens={n_tokens} is too large: the essays ({len(text)} characters) give fewer than two windows "
            f"of {width} characters. Use n_tokens <= {len(text) // (2 * _LONG_WINDOW_CHARS_PER_TOKEN)}."
        )
    ids = [f"long/{n_tokens}/{i}" for i in range(n_windows)]
    ranked = sorted(range(n_windows), key=lambda i: (hash_key(ids[i]), i))
    n_eval = min(EVAL_SIZE, n_windows // 2)
    chosen = ranked[:n_eval] if split == "eval" else sorted(ranked[n_eval:])
    source = S.provenance("essays")
    prompts = []
    for i in chosen[:limit]:
        window = text[i * width : (i + 1) * width]
        space = window.find(" ")
        window = window[space + 1 :] if 0 <= space < 200 else window  # start on a word boundary
        question = _LONG_QUESTIONS[int(hash_key(ids[i]), 16) % len(_LONG_QUESTIONS)]
        context = _fit_context(window, question, n_tokens, tokenizer)
        prompts.append(prompt(ids[i], "long", source, _long_messages(context, question)))
    return prompts


_SINGLE_TURN: dict[str, Callable[[], _Items]] = {
    "legal": _legal,
    "clinical": _clinical,
    "chat": _chat,
    "code": _code,
    "math": _math,
    "tool": _tool,
}


@functools.cache
def _pool(workload: str) -> tuple[list[_Group], list[Prompt]]:
    """A workload's pool: a single-turn prompt is a group of its own; a repeated prompt is dropped."""
    if workload == "agentic":
        return _agentic_pool()
    pool, extra = _SINGLE_TURN[workload]()
    seen: set[str] = set()
    return [(p["id"], p, [p]) for p in dedupe(pool, seen)], dedupe(extra, seen)


def _split(groups: list[_Group], extra: list[Prompt], split: str) -> list[Prompt]:
    """Eval: the eval item of the first ``EVAL_SIZE`` groups by sha1 of the group id. Train: everything else."""
    ranked = sorted(groups, key=lambda g: (hash_key(g[0]), g[0]))
    if split == "eval":
        return [g[1] for g in ranked[:EVAL_SIZE]]
    held_out = {g[0] for g in ranked[:EVAL_SIZE]}
    return [p for gid, _, prompts in groups if gid not in held_out for p in prompts] + list(extra)


def load_prompts(
    workload: str,
    split: str = "eval",
    limit: int | None = None,
    *,
    n_tokens: int = LONG_DEFAULT_TOKENS,
    tokenizer: Any = None,
) -> list[Prompt]:
    """The prompts of one workload and split, in a fixed order, at most ``limit`` (fresh copies); ``n_tokens`` and
    ``tokenizer`` are :func:`load_long`'s."""
    check_choice("workload", workload, WORKLOADS)
    check_choice("split", split, SPLITS)
    check_limit(limit)
    if workload == "long":
        return load_long(n_tokens, tokenizer, split=split, limit=limit)
    if split == "train" and workload in OUT_OF_DOMAIN_WORKLOADS:
        raise ValueError(
            f"{workload!r} is an out-of-domain workload: it has no train split, so that no drafter is trained on it. "
            f"Train on the training workloads ({', '.join(TRAINING_WORKLOADS)}) or dlite_hf.data.mix."
        )
    groups, extra = _pool(workload)
    return copy.deepcopy(_split(groups, extra, split)[:limit])
