"""The mix domains read from prompt wheels: news and text_news (XSum), story_qa and text_stories (NarrativeQA),
dialogue_qa (QuAC), writing (WritingBench), policy_agent (tau2-bench) and text_reference (MT-bench answers).

Each builder returns the domain's groups; a text domain's builder takes the group ids of its prompt domain's eval
split (``held``) and reads only the other groups' material.
"""

from __future__ import annotations

import functools
import json
import re

from . import sources as S
from .common import MAX_PROMPT_CHARS, TEXT_CHUNK_CHARS, Groups, Prompt, cut, hash_key, prompt, text_item, user
from .prompts import load_prompts

_TAU2_DOMAINS = ("airline", "retail", "telecom")


# ------------------------------------------------------------------------------------------------------ XSum
@functools.cache
def _xsum_groups() -> list[tuple[str, dict]]:
    return [(f"xsum/{row['id']}", row) for row in S.read_jsonl("xsum")]


def news() -> Groups:
    source = S.provenance("xsum")
    out = []
    for gid, row in _xsum_groups():
        article = cut(row["document"].strip(), MAX_PROMPT_CHARS - 200)
        request = f"Summarise this news article in two or three sentences.\n\n{article}"
        out.append((gid, [prompt(gid, "news", source, [user(request)])]))
    return out


def text_news(held: frozenset[str]) -> Groups:
    """XSum rows outside the ``news`` domain's eval groups: an article as the reply to a request with its summary."""
    source = S.provenance("xsum")
    out = []
    for gid, row in _xsum_groups():
        if gid in held:
            continue
        request = f"Write a news article that fits this summary: {row['summary'].strip()}"
        article = cut(row["document"].strip(), TEXT_CHUNK_CHARS * 2)
        out.append((gid, [text_item(f"text/{gid}", "text_news", source, request, article)]))
    return out


# ----------------------------------------------------------------------------------------------- NarrativeQA
@functools.cache
def _narrativeqa_rows() -> list[tuple[str, dict]]:
    return [(f"narrativeqa/{i}", row) for i, row in enumerate(S.read_jsonl("narrativeqa"))]


def _story_group(row: dict) -> str:
    return "narrativeqa/" + hash_key(row["passage"][:400])[:16]  # questions on one passage: one group


def story_qa() -> Groups:
    source = S.provenance("narrativeqa")
    groups: dict[str, list[Prompt]] = {}
    for id_, row in _narrativeqa_rows():
        passage = cut(row["passage"].strip(), MAX_PROMPT_CHARS - 300)
        request = (
            f"Read this passage.\n\n{passage}\n\nQuestion: {row['question'].strip()}\nAnswer, then explain briefly."
        )
        groups.setdefault(_story_group(row), []).append(prompt(id_, "story_qa", source, [user(request)]))
    return sorted(groups.items())


def text_stories(held: frozenset[str]) -> Groups:
    """NarrativeQA passages outside the ``story_qa`` domain's eval groups, continued."""
    source = S.provenance("narrativeqa")
    out, seen = [], set()
    for _, row in _narrativeqa_rows():
        gid = _story_group(row)
        if gid in held or gid in seen:
            continue
        seen.add(gid)
        passage = row["passage"].strip()
        split = passage.find(". ", 300) + 1
        if split <= 0 or len(passage) - split < 400:
            continue
        request = f"Continue this story.\n\n{passage[:split]}"
        reply = cut(passage[split:].strip(), TEXT_CHUNK_CHARS * 2)
        out.append((gid, [text_item(f"text/{gid}", "text_stories", source, request, reply)]))
    return out


# ------------------------------------------------------------------------------------------------------ QuAC
def dialogue_qa() -> Groups:
    source = S.provenance("quac")
    out = []
    for index, row in enumerate(S.read_jsonl("quac")):
        questions = [re.sub(r"^question\d+:\s*", "", q).strip() for q in row["question"].splitlines() if q.strip()]
        passage = cut(row["passage"].strip(), MAX_PROMPT_CHARS - 400)
        asks = "\n".join(f"{n}. {q}" for n, q in enumerate(questions, start=1))
        request = f"Read this text.\n\n{passage}\n\nAnswer these questions in order, from the text:\n{asks}"
        out.append((f"quac/{index}", [prompt(f"quac/{index}", "dialogue_qa", source, [user(request)])]))
    return out


# ------------------------------------------------------------------------------------------ other packages
def writing() -> Groups:
    source = S.provenance("writingbench")
    out = []
    for row in S.read_jsonl("writingbench"):
        query = row["query"].strip()
        if sum(c.isascii() for c in query) < 0.95 * len(query) or len(query) > MAX_PROMPT_CHARS:
            continue  # English requests that fit the prompt budget (the target is English-only)
        gid = f"writingbench/{row['index']}"
        out.append((gid, [prompt(gid, "writing", source, [user(query)])]))
    return out


def policy_agent() -> Groups:
    out = []
    for name in _TAU2_DOMAINS:
        policy_file = "main_policy.md" if name == "telecom" else "policy.md"
        policy = S.read_text("tau2", f"{name}/{policy_file}")
        source = S.provenance("tau2", f"{name}/tasks.json")
        # the policy's opening part, so that a task fits regenerate's prompt budget
        system = (
            f"You are a customer-service agent. Follow this policy.\n\n{cut(policy.strip(), MAX_PROMPT_CHARS - 800)}"
        )
        for task in json.loads(S.read_text("tau2", f"{name}/tasks.json")):
            instructions = (task.get("user_scenario") or {}).get("instructions") or {}
            if not isinstance(instructions, dict) or not instructions.get("reason_for_call"):
                continue
            parts = [instructions["reason_for_call"].strip(), (instructions.get("known_info") or "").strip()]
            gid = f"tau2/{name}/{task['id']}"
            messages = [{"role": "system", "content": system}, user(" ".join(p for p in parts if p))]
            out.append((gid, [prompt(gid, "policy_agent", source, messages)]))
    return out


def reference() -> Groups:
    """MT-bench reference answers, for the questions of the ``chat`` workload's train split only."""
    train_ids = {p["id"] for p in load_prompts("chat", "train") if p["id"].startswith("mtbench/")}
    questions = {f"mtbench/{r['question_id']}": r for r in S.read_jsonl("mtbench")}
    source = S.provenance("mtbench_reference")
    out = []
    for row in S.read_jsonl("mtbench_reference"):
        gid = f"mtbench/{row['question_id']}"
        if gid not in train_ids:
            continue
        answer = row["choices"][0]["turns"][0]
        question = questions[gid]["turns"][0]
        out.append((f"ref/{gid}", [text_item(f"text/{gid}", "text_reference", source, question, answer)]))
    return out
