"""Training mixes sampled from the train splits (eval items are never written; the same arguments give the same
files): the broad mix of :mod:`dlite_hf.data.domains` (``dlite-hf mix build``), the workloads' mix (``dlite-hf
regenerate`` without ``--prompts``), the table of training rows by domain (``dlite-hf mix table``) and their
rebalancing across domains (``dlite-hf mix rebalance``).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Container, Iterable
from pathlib import Path
from typing import Any

from ..jsonl import read_jsonl, write_jsonl
from .common import Prompt, check_choice
from .domains import DOMAINS, domain_prompts
from .prompts import TRAINING_WORKLOADS, load_prompts


def training_mix(
    limit_per_workload: int | dict[str, int],
    seed: int = 0,
    exclude_id_prefixes: tuple[str, ...] = (),
    exclude_ids: Container[str] = (),
) -> list[Prompt]:
    """A shuffled, seeded sample of up to ``limit_per_workload`` train prompts of each training workload (or of each
    workload of a ``{workload: limit}`` dict, in its order), but ids in ``exclude_ids`` or starting with one of
    ``exclude_id_prefixes``."""
    limits = limit_per_workload
    if isinstance(limits, int):
        limits = dict.fromkeys(TRAINING_WORKLOADS, limits)
    if min(limits.values()) <= 0:
        raise ValueError(f"limit_per_workload must be positive, got {limit_per_workload}.")
    rng = random.Random(seed)
    mix: list[Prompt] = []
    for workload, limit in limits.items():
        prompts = load_prompts(workload, "train")
        prompts = [p for p in prompts if not p["id"].startswith(exclude_id_prefixes) and p["id"] not in exclude_ids]
        mix += rng.sample(prompts, min(limit, len(prompts)))
    rng.shuffle(mix)
    return mix


def build_mix(
    out_dir: str | Path,
    prompts_per_domain: int,
    texts_per_domain: int,
    seed: int = 0,
    domains: Iterable[str] = (),
    weights: dict[str, float] | None = None,
    extends: str | Path | None = None,
) -> dict[str, Any]:
    """Write ``prompts.jsonl`` (for ``regenerate``) and ``texts.jsonl`` (for ``label-text``), each a shuffled, seeded
    sample of up to the given number of train items per domain, times its ``weights`` factor (default 1), and
    ``mix.json`` (returned) with each domain's counts and source.

    With ``extends`` (the folder of an earlier mix) the earlier mix's items come first, unchanged and in their order,
    and each domain is topped up to its cap with train items the earlier mix does not hold: rows answered for the
    earlier mix keep their place (``regenerate --limit N`` still takes its first N) and one prompts file rebuilds all.
    """
    if prompts_per_domain < 0 or texts_per_domain < 0:
        raise ValueError(
            f"prompts_per_domain={prompts_per_domain} and texts_per_domain={texts_per_domain} must be >= 0."
        )
    names = list(domains) or list(DOMAINS)
    weights = dict(weights or {})
    for name in [*names, *weights]:
        check_choice("domain", name, tuple(DOMAINS))
    for name, weight in weights.items():
        if not weight > 0:
            raise ValueError(f"The weight of {name!r} is {weight}; expected a positive factor such as 2 or 0.5.")
    if extends is not None and Path(extends).resolve() == Path(out_dir).resolve():
        raise ValueError(f"--extend {extends} is also --out: write the extended mix to a new folder.")
    earlier = _earlier_mix(extends, names)
    rng = random.Random(seed)
    chosen: dict[str, list[Prompt]] = {"prompt": [], "text": []}
    summary: dict[str, Any] = {"seed": seed, "domains": {}} | ({"extends": str(extends)} if extends else {})
    for name in names:
        domain = DOMAINS[name]
        items = domain_prompts(name, "train")
        held = [p for p in earlier[domain.kind] if p["workload"] == name]
        train_ids, held_ids = {p["id"] for p in items}, {p["id"] for p in held}
        # the earlier mix's items must still be train items (a split that moved would leak eval items)
        if stray := [p["id"] for p in held if p["id"] not in train_ids]:
            raise ValueError(
                f"--extend {extends}: {len(stray)} {name!r} items (e.g. {stray[0]!r}) are not in that domain's train "
                "split now; build a fresh mix instead of extending this one."
            )
        fresh = [p for p in items if p["id"] not in held_ids]
        cap = round((prompts_per_domain if domain.kind == "prompt" else texts_per_domain) * weights.get(name, 1))
        picked = rng.sample(fresh, max(0, min(cap - len(held), len(fresh))))
        chosen[domain.kind] += picked
        entry = {"kind": domain.kind, "source": domain.source, "available": len(items)}
        entry["written"] = len(held) + len(picked)
        entry |= ({"added": len(picked)} if extends else {}) | ({"weight": weights[name]} if name in weights else {})
        summary["domains"][name] = entry
    out_dir = Path(out_dir)
    for kind, file in (("prompt", "prompts.jsonl"), ("text", "texts.jsonl")):
        rng.shuffle(chosen[kind])
        write_jsonl(earlier[kind] + chosen[kind], out_dir / file)
    (out_dir / "mix.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def _earlier_mix(extends: str | Path | None, names: list[str]) -> dict[str, list[Prompt]]:
    """The items of the mix that ``build_mix`` extends, by kind (none without one); all its domains must be named."""
    if extends is None:
        return {"prompt": [], "text": []}
    folder = Path(extends)
    if not (folder / "mix.json").is_file():
        raise FileNotFoundError(
            f"--extend {folder}: no mix.json there; expected the folder of a mix written by `dlite-hf mix build`."
        )
    earlier = {"prompt": read_jsonl(folder / "prompts.jsonl"), "text": read_jsonl(folder / "texts.jsonl")}
    missing = sorted({p["workload"] for items in earlier.values() for p in items} - set(names))
    if missing:
        raise ValueError(
            f"--extend {folder}: the earlier mix holds domains {', '.join(missing)} that this build leaves out; "
            "name them in --domains too (or leave --domains out for all)."
        )
    return earlier


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
    labels = {"prompt": "regenerated", "text": "target-labelled"}
    stats: dict[tuple[str, str], list[int]] = {}  # (kind, domain): [rows, response tokens]
    for row in rows:
        name = row_domain(row)
        counts = stats.setdefault((DOMAINS[name].kind if name in DOMAINS else "prompt", name), [0, 0])
        counts[0] += 1
        counts[1] += int(sum(row["loss_mask"]))
    lines = ["| domain | kind | source | rows | response tokens |", "|---|---|---|---|---|"]
    totals = {kind: [0, 0] for kind in labels}
    for (kind, name), (count, tokens) in sorted(stats.items()):
        source = DOMAINS[name].source if name in DOMAINS else "?"
        lines.append(f"| {name} | {labels[kind]} | {source} | {count:,} | {tokens:,} |")
        totals[kind] = [totals[kind][0] + count, totals[kind][1] + tokens]
    lines += [f"| **all {label}** | | | {totals[k][0]:,} | {totals[k][1]:,} |" for k, label in labels.items()]
    return "\n".join(lines)


def multipliers(tokens: dict[str, int], power: float) -> dict[str, float]:
    """Per-domain repeat factor giving shares proportional to ``tokens ** power``, the smallest factor being 1."""
    if not tokens or any(t <= 0 for t in tokens.values()):
        raise ValueError(f"every domain needs response tokens > 0, got {tokens}.")
    if not 0 <= power <= 1:
        raise ValueError(f"power must be in [0, 1] (1: as is, 0: equal shares), got {power}.")
    raw = {w: t**power / t for w, t in tokens.items()}  # target share / current share, up to one constant
    low = min(raw.values())
    return {w: r / low for w, r in raw.items()}


def domain_tokens(rows: Iterable[dict]) -> Counter:
    """Response tokens per domain (a row's ``workload``)."""
    tokens = Counter()
    for row in rows:
        tokens[row["workload"]] += sum(row["loss_mask"])
    return tokens


def rebalance(rows: list[dict], power: float, seed: int = 0) -> list[dict]:
    """Every row repeated by its domain's multiplier m (floor(m) copies and one more with probability frac(m),
    seeded), then shuffled: no row is dropped, and a feature cache filled for the rows serves the result too."""
    factor = multipliers(dict(domain_tokens(rows)), power)
    generator = random.Random(seed)
    out = []
    for row in rows:
        m = factor[row["workload"]]
        out += [row] * (int(m) + (generator.random() < m - int(m)))
    generator.shuffle(out)
    return out


def balanced_order(rows: list[dict], power: float, done: list[dict] = ()) -> list[dict]:
    """`rows` once each, ordered so that every prefix's response tokens, added to those of `done` (rows already
    served, e.g. already in a feature cache), split across domains as ``tokens ** power`` of the whole: a feature pass
    over the result that is stopped at any point has filled the cache as evenly as the domains allow. Within a domain
    the rows keep their order."""
    used = domain_tokens(done)
    total = used.copy()
    total.update(domain_tokens(rows))  # update, not +: a domain of 0 tokens stays, to be refused below
    if any(t <= 0 for t in total.values()):
        raise ValueError(f"every domain needs response tokens > 0, got {dict(total)}.")
    share = {w: t**power for w, t in total.items()}
    keyed = []
    for index, row in enumerate(rows):
        domain = row["workload"]
        keyed.append((used[domain] / share[domain], index, row))  # where this row's domain is, measured in its share
        used[domain] += sum(row["loss_mask"])
    return [row for _, _, row in sorted(keyed, key=lambda item: item[:2])]


def rebalance_rows(
    rows: list[dict], out_path: str | Path, power: float, seed: int = 0, done: list[dict] | None = None
):
    """Write :func:`rebalance`'s rows to ``out_path`` (with ``done``: the rows not in ``done``, in
    :func:`balanced_order`) and return a markdown table of the domains' response tokens and shares."""
    if missing := [i for i, row in enumerate(rows) if "workload" not in row or "loss_mask" not in row]:
        raise ValueError(f"rows {missing[:5]} have no workload/loss_mask (rows of dlite-hf regenerate).")
    if done is None:
        out = rebalance(rows, power, seed)
        before, after = domain_tokens(rows), domain_tokens(out)
        lines = ["| domain | response tokens | share | share after | repeats |", "|---|---:|---:|---:|---:|"]
        lines += [
            f"| {domain} | {count:,} | {count / before.total():.1%} | {after[domain] / after.total():.1%} "
            f"| {after[domain] / count:.2f} |"
            for domain, count in before.most_common()
        ]
        lines.append(f"{len(rows)} rows -> {len(out)} ({after.total():,} response tokens)")
    else:
        done_ids = {row["id"] for row in done}
        out = balanced_order([row for row in rows if row["id"] not in done_ids], power, done)
        served, added = domain_tokens(done), domain_tokens(out)
        whole = served + added
        weight = {w: t**power for w, t in whole.items()}
        lines = [f"| domain | done | to add | share of all | tokens^{power} share |", "|---|---:|---:|---:|---:|"]
        lines += [
            f"| {domain} | {served[domain]:,} | {added[domain]:,} | {count / whole.total():.1%} "
            f"| {weight[domain] / sum(weight.values()):.1%} |"
            for domain, count in whole.most_common()
        ]
        lines.append(f"{len(done)} rows done, {len(out)} ordered ({added.total():,} response tokens)")
    write_jsonl(out, out_path)
    return "\n".join(lines)
