"""A seeded run of randomised cases over real prompts of every workload, resumable, and its markdown report.

``run_suite`` appends one JSON line per case to its output file (a killed run loses at most the case in flight and
goes on from there); ``report`` reads such files, for any number of targets and dtypes, and tallies them.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from itertools import takewhile
from pathlib import Path
from typing import Any

import torch

from ..chat_template import chat_prompt_ids
from ..jsonl import completed_ids
from .cases import Context, draw_case
from .verdict import PASSING, Outcome, run_case

__all__ = ["report", "run_suite", "suite_prompts"]

_WORKLOADS = ("chat", "code", "math", "tool", "agentic")


def suite_prompts(tokenizer: Any, per_workload: int = 4, long_tokens: int = 1024) -> list[tuple[str, list[int]]]:
    """(workload, token ids) of evaluation prompts: ``per_workload`` of each workload with the chat template, as
    many long-context ones of about ``long_tokens`` tokens, one raw text without template and a 1-token prompt."""
    from ..data.prompts import load_long, load_prompts

    out = []
    for workload in _WORKLOADS:
        for item in load_prompts(workload, "eval", limit=per_workload):
            messages = item["messages"] if "messages" in item else item["turns"][0]
            messages = list(takewhile(lambda m: m["role"] != "assistant", messages))
            out.append((workload, chat_prompt_ids(tokenizer, messages)))
    for item in load_long(long_tokens, tokenizer=tokenizer, limit=per_workload):
        out.append(("long", chat_prompt_ids(tokenizer, item["messages"])))
    out.append(("raw", tokenizer("def fibonacci(n):\n    ", add_special_tokens=False)["input_ids"]))
    out.append(("one_token", out[0][1][:1]))
    return out


def run_suite(
    target: Any,
    drafter: Any,
    tokenizer: Any,
    prompts: list[tuple[str, list[int]]],
    cases: int,
    out: str | Path,
    seed: int = 0,
    max_new_tokens: int = 24,
    sampled: float = 0.25,
    label: str = "",
    progress: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Run cases ``0..cases-1`` of ``seed`` (each on a prompt drawn with it) and append each verdict to ``out``;
    the cases already there are skipped, so a killed run resumes (the same seed draws the same cases)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    eos = target.generation_config.eos_token_id
    common = Counter(t for _, ids in prompts for t in ids).most_common(64)  # the drawers' picks: ids that occur
    ctx = Context(len(tokenizer), (eos,) if isinstance(eos, int) else tuple(eos or ()), tuple(t for t, _ in common))
    rng = random.Random(seed)
    done = completed_ids(out, key="index")  # a line torn by a kill is dropped: its case runs again
    outcomes = []
    for index in range(cases):
        case = draw_case(rng, ctx, index, max_new_tokens=max_new_tokens, sampled=sampled)
        workload, ids = prompts[rng.randrange(len(prompts))]
        if index in done:
            continue
        outcome = run_case(target, drafter, tokenizer, torch.tensor([ids]), case, workload)
        record = {**vars(outcome), "label": label, "case": case.describe(), "prompt_tokens": len(ids)}
        with open(out, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        outcomes.append(outcome)
        if progress is not None:
            progress(outcome)
    return outcomes


def _table(counter: dict[str, Counter], columns: list[str]) -> list[str]:
    lines = ["| | " + " | ".join(columns) + " | all |", "|---|" + "---:|" * (len(columns) + 1)]
    for name in sorted(counter):
        row = counter[name]
        lines.append(f"| {name} | " + " | ".join(str(row[c]) for c in columns) + f" | {sum(row.values())} |")
    return lines


def report(paths: Iterable[str | Path]) -> str:
    """A markdown report of result files: verdicts per run label, per option family, refusals by reason, failures."""
    records = [json.loads(line) for p in paths for line in Path(p).read_text(encoding="utf-8").splitlines() if line]
    found = {r["kind"] for r in records}  # the vLLM runs' verdicts too (tests_vllm/random_params.py)
    kinds = [*PASSING, *sorted(found - {*PASSING, "failure"}), "failure"]
    by_label, by_family = defaultdict(Counter), defaultdict(Counter)
    for r in records:
        by_label[r["label"] or "?"][r["kind"]] += 1
        for family in r["case"]["families"]:
            by_family[family][r["kind"]] += 1
    refusals = Counter(f"{r['kind']}: {r['reason']}" for r in records if r["kind"].startswith("refused"))
    failures = [r for r in records if r["kind"] == "failure"]
    lines = [f"{len(records)} cases, {len(by_family)} option families, {len(failures)} failures.", ""]
    lines += ["### By run", "", *_table(by_label, kinds), "", "### By option family", "", *_table(by_family, kinds)]
    lines += ["", "### Refusals by reason", "", "| reason | cases |", "|---|---:|"]
    lines += [f"| {reason} | {n} |" for reason, n in refusals.most_common()]
    lines += ["", "### Failures", ""]
    lines += [f"- {r['label']} case {r['index']} ({r['workload']}): {r['reason']}" for r in failures] or ["None."]
    return "\n".join(lines) + "\n"
