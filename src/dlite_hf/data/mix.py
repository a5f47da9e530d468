"""Training mixes sampled from the train splits (eval items are never written; the same arguments give the same
files): the broad mix of :mod:`dlite_hf.data.domains` (``dlite-hf mix build``), the workloads' mix (``dlite-hf
regenerate`` without ``--prompts``) and the table of training rows by domain (``dlite-hf mix table``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..jsonl import write_jsonl
from .common import Prompt
from .domains import DOMAINS, domain_prompts
from .prompts import TRAINING_WORKLOADS, load_prompts


def training_mix(limit_per_workload: int, seed: int = 0, exclude_id_prefixes: tuple[str, ...] = ()) -> list[Prompt]:
    """A shuffled, seeded sample of up to ``limit_per_workload`` train prompts of each training workload, but ids
    starting with one of ``exclude_id_prefixes``."""
    if limit_per_workload <= 0:
        raise ValueError(f"limit_per_workload must be positive, got {limit_per_workload}.")
    rng = random.Random(seed)
    mix: list[Prompt] = []
    for workload in TRAINING_WORKLOADS:
        prompts = [p for p in load_prompts(workload, "train") if not p["id"].startswith(exclude_id_prefixes)]
        mix += rng.sample(prompts, min(limit_per_workload, len(prompts)))
    rng.shuffle(mix)
    return mix


def build_mix(
    out_dir: str | Path,
    prompts_per_domain: int,
    texts_per_domain: int,
    seed: int = 0,
    domains: Iterable[str] = (),
    weights: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Write ``prompts.jsonl`` (for ``regenerate``) and ``texts.jsonl`` (for ``label-text``), each a shuffled, seeded
    sample of up to the given number of train items per domain, times its ``weights`` factor (default 1), and
    ``mix.json`` (returned) with each domain's counts and source."""
    if prompts_per_domain < 0 or texts_per_domain < 0:
        raise ValueError(
            f"prompts_per_domain={prompts_per_domain} and texts_per_domain={texts_per_domain} must be >= 0."
        )
    names = list(domains) or list(DOMAINS)
    weights = dict(weights or {})
    for name in [*names, *weights]:
        if name not in DOMAINS:
            raise ValueError(f"Unknown domain {name!r}; the mix has: {', '.join(DOMAINS)}.")
    for name, weight in weights.items():
        if not weight > 0:
            raise ValueError(f"The weight of {name!r} is {weight}; expected a positive factor such as 2 or 0.5.")
    rng = random.Random(seed)
    chosen: dict[str, list[Prompt]] = {"prompt": [], "text": []}
    summary: dict[str, Any] = {"seed": seed, "domains": {}}
    for name in names:
        domain = DOMAINS[name]
        items = domain_prompts(name, "train")
        cap = prompts_per_domain if domain.kind == "prompt" else texts_per_domain
        cap = round(cap * weights.get(name, 1))
        picked = rng.sample(items, min(cap, len(items)))
        chosen[domain.kind] += picked
        entry = {"kind": domain.kind, "source": domain.source, "available": len(items), "written": len(picked)}
        summary["domains"][name] = entry | ({"weight": weights[name]} if name in weights else {})
    out_dir = Path(out_dir)
    for kind, file in (("prompt", "prompts.jsonl"), ("text", "texts.jsonl")):
        rng.shuffle(chosen[kind])
        write_jsonl(chosen[kind], out_dir / file)
    (out_dir / "mix.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


_LEGACY_ID_HEADS = {
    "chat": ("mtbench", "fiqa", "truthfulqa", "liveqa"),
    "code": ("humaneval", "stdlib"),
    "math": ("asdiv",),
    "tool": ("bfcl",),
    "agentic": ("tooltalk", "tooltalk-easy"),
}


def row_domain(row: dict[str, Any]) -> str:
    """The domain of a training row (its ``workload``; rows of older regenerate runs fall back to the id)."""
    if row.get("workload"):
        return str(row["workload"])
    head = str(row.get("id", "")).split("/", 1)[0]
    return next((domain for domain, heads in _LEGACY_ID_HEADS.items() if head in heads), head or "?")


def data_table(rows: Iterable[dict[str, Any]]) -> str:
    """A markdown table of training rows and response tokens by domain, regenerated and target-labelled apart."""
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
