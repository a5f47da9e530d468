"""`dlite-hf bench replay rules`: a drafter's adaptive-drafting thresholds (`draft_confidence_threshold`,
`draft_skip_threshold`, `draft_lengths`), replayed offline (:mod:`.replay`) with this machine's costs. Where a rule
stops is a function of what the round reads (`drafting.lengths_under_rules`, as `generate()` calls it), so one
K-draft round at every position of plain greedy's output replays any rule, on train-split prompts of `--domains`
minus every id in `--exclude` (the mix the drafter trained on).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..chat_template import chat_prompt_ids
from ..modeling.drafting import DraftRules, draft_tokens, lengths_under_rules, rule_probabilities
from . import replay
from .measure import environment_info

NAME, HELP = "rules", "the adaptive-drafting thresholds, on prompts no drafter saw"
MAX_NEW_TOKENS = 128
DATA_KEYS = ("turns", "forward_s", "drafter_skip_s", "drafter_step_s")

COST_SIZES = [1, 2, 3, 4, 5, 6, 7, 8]  # q = n + 1 new tokens of a verification forward (K = 7)
SHIPPED_GRID = "0:0,0.3:0.5:3+7"  # K every round, then the shipped drafter's rule: the first two rows of a replay
DEFAULT_GRID = ",".join(
    f"{c}:{s}" + (f":{lengths}" if lengths else "")
    for c, s, lengths in itertools.product(
        (0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6), (0, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8), ("", "3+7", "1+3+7", "2+4+7")
    )
)


def parse_grid(spec: str) -> list:
    """``"c:s,c:s:3+7"`` -> `DraftRules` (confidence and skip thresholds in [0, 1), optional draft lengths)."""
    rules = []
    for item in filter(None, spec.split(",")):
        parts = item.split(":")
        try:
            if len(parts) not in (2, 3):
                raise ValueError("expected 2 or 3 fields")
            lengths = tuple(int(n) for n in parts[2].split("+")) if len(parts) == 3 else None
            if lengths is not None and min(lengths) < 1:
                raise ValueError("draft lengths are counts of at least 1")
            rules.append(DraftRules(float(parts[0]), float(parts[1]), lengths))
        except ValueError as error:
            raise SystemExit(
                f"--grid items are CONFIDENCE:SKIP[:LENGTHS] with thresholds in [0, 1) (e.g. 0.3:0.5:3+7); got "
                f"{item!r} ({error})."
            ) from None
    if not rules:
        raise SystemExit(f"--grid names no rule: got {spec!r}; expected e.g. {SHIPPED_GRID!r}.")
    return rules


def rule_name(rules: Any) -> str:
    lengths = "+".join(map(str, rules.draft_lengths)) if rules.draft_lengths else "any"
    return f"confidence {rules.confidence_threshold:g}, skip {rules.skip_threshold:g}, lengths {lengths}"


@dataclass
class RulesTurn:
    """One prompt's plain greedy output, and at every position a round can start from (index: position - len(ids)
    - 1), the drafter's K drafts and what its rules read (each draft's probability, the first position's top one)."""

    domain: str
    prompt_id: str
    ids: list[int]
    plain: list[int]
    drafts: list[list[int]]
    chosen: list[list[float]]
    first_top: list[float]

    @functools.cached_property
    def tokens(self) -> list[int]:
        return self.ids + self.plain

    @classmethod
    def measure(cls, target, drafter, domain: str, prompt_id: str, ids: list[int], plain: list[int], batch: int = 64):
        tokens = ids + plain
        k = drafter.config.num_draft_tokens
        states = replay.teacher_states(target, drafter, tokens)
        positions = list(range(len(ids) + 1, len(tokens)))  # committed tokens before a round (prefill commits one)
        drafts, chosen, first_top = [], [], []
        for start in range(0, len(positions), batch):
            part = torch.tensor(positions[start : start + batch])
            context, anchors = states[0, part - 2], torch.tensor(tokens)[part - 1]
            out, logits = draft_tokens(drafter, context, anchors, k, DraftRules())  # K every round: no rule stops
            probs, top = rule_probabilities(out, logits, drafter.draft_columns())
            drafts += out.tolist()
            chosen += probs.tolist()
            first_top += top.tolist()
        return cls(domain, prompt_id, ids, plain, drafts, chosen, first_top)


def replay_rule(
    turns: list[RulesTurn], lengths_by_turn, costs, skip_s: float, step_s: float, trace: bool = False
) -> dict:
    """Tau and estimated decode speedup of a rule over `turns`, given where it stops at every position
    (`lengths_by_turn[id(turn)]`) and the forward costs by context; `trace`: also the drafts each round proposed
    (`drafted_per_round`)."""
    tokens = forwards = drafted = accepted_total = skipped = 0
    cost = plain_cost = 0.0
    per_round = []
    for turn in turns:
        table = costs[replay.context_key(len(turn.ids))]
        lengths = lengths_by_turn[id(turn)]
        p, end = len(turn.ids) + 1, len(turn.tokens)
        while p < end:
            row = p - len(turn.ids) - 1
            n = min(lengths[row], end - p - 1)
            accepted = replay.accepted_prefix(turn.drafts[row][:n], turn.tokens, p)
            # the drafter: the backbone and the first step (all a skip pays), then one step per further draft
            cost += skip_s + max(0, lengths[row] - 1) * step_s + replay.cost_at(table, n + 1)
            drafted, accepted_total, skipped = drafted + n, accepted_total + accepted, skipped + (lengths[row] == 0)
            p, forwards = p + accepted + 1, forwards + 1
            per_round.append(n)
        tokens += len(turn.plain) - 1
        plain_cost += (len(turn.plain) - 1) * table[1]
    return {
        "tau": tokens / forwards if forwards else 0.0,
        "speedup_est": plain_cost / cost if cost else 0.0,
        "rounds": forwards,
        "skipped_rounds": skipped,
        "acceptance_rate": accepted_total / drafted if drafted else None,
        "decoded_tokens": tokens,
        **({"drafted_per_round": per_round} if trace else {}),
    }


def unseen_prompts(domains: str, exclude: str, seed: int, max_prompt_tokens: int, tokenizer: Any) -> list[dict]:
    """`--domains` prompts drawn (seeded) from each domain's train split minus the `--exclude` ids."""
    from ..data.domains import domain_prompts

    excluded: set[str] = set()
    for path in filter(None, exclude.split(",")):
        excluded |= {json.loads(line)["id"] for line in Path(path).read_text().splitlines() if line.strip()}
    chosen = []
    for item in domains.split(","):
        name, _, count = item.partition(":")
        if not count.isdigit() or int(count) < 1:
            raise SystemExit(f"--domains items are DOMAIN:N with N >= 1 (e.g. reasoning:16); got {item!r}.")
        unseen = [p for p in domain_prompts(name, "train") if p["id"] not in excluded]
        random.Random(f"{seed}/{name}").shuffle(unseen)
        kept = []
        for prompt in unseen:
            ids = chat_prompt_ids(tokenizer, prompt["messages"])
            if len(ids) <= max_prompt_tokens:
                kept.append({"domain": name, "id": prompt["id"], "ids": ids})
            if len(kept) == int(count):
                break
        if len(kept) < int(count):
            raise SystemExit(
                f"{name}: only {len(kept)} unseen train-split prompts of at most {max_prompt_tokens} "
                f"tokens outside --exclude; ask for fewer."
            )
        chosen += kept
    return chosen


def measure_drafter_round(target, drafter, turns: list[RulesTurn], repeats: int = 30) -> tuple[float, float]:
    """Median seconds of a skipped round (backbone and first step) and of one further draft step (single-row
    rounds, as `generate()` runs them)."""
    turn = turns[0]
    k = drafter.config.num_draft_tokens
    states = replay.teacher_states(target, drafter, turn.tokens)
    p = len(turn.ids) + 1
    context, anchor = states[0, p - 2 : p - 1], torch.tensor([turn.tokens[p - 1]])
    skip = DraftRules(skip_threshold=0.999999)

    def timed(rules) -> float:
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            draft_tokens(drafter, context, anchor, k, rules)
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    timed(DraftRules())  # warm-up
    skip_s, full_s = [], []
    for _ in range(3):  # interleaved
        skip_s.append(timed(skip))
        full_s.append(timed(DraftRules()))
    skip_s, full_s = statistics.median(skip_s), statistics.median(full_s)
    return skip_s, max(0.0, full_s - skip_s) / (k - 1)


def collect(args: Any) -> dict[str, Any]:
    """The replay data, loading the models: the turns (plain runs, K drafts and what the rules read at every
    position), the forward costs by context, and the drafter's round costs."""
    target, tokenizer, drafter = replay.load_models(
        args.target, args.drafter, args.attention, args.threads, args.dtype, args.pack_weights
    )
    turns = []
    for prompt in unseen_prompts(args.domains, args.exclude, args.seed, args.max_prompt_tokens, tokenizer):
        plain = replay.plain_greedy(target, prompt["ids"], args.max_new_tokens)
        turns.append(RulesTurn.measure(target, drafter, prompt["domain"], prompt["id"], prompt["ids"], plain))
        print(f"{prompt['domain']} {prompt['id']}: {len(prompt['ids'])} + {len(plain)} tokens", flush=True)
    costs = replay.cost_tables(target, turns, COST_SIZES, repeats=9)
    skip_s, step_s = measure_drafter_round(target, drafter, turns)
    turns = [dataclasses.asdict(t) for t in turns]
    data = {"turns": turns, "forward_s": costs, "drafter_skip_s": skip_s, "drafter_step_s": step_s}
    return {**data, "pack_weights": args.pack_weights}  # what the costs were measured on (the texts: the same bits)


def rule_rows(turns: list[RulesTurn], grid: list, costs: dict, skip_s: float, step_s: float) -> list[dict[str, Any]]:
    """The shipped rules (:data:`SHIPPED_GRID`), then every other rule of `grid`, replayed per domain and over all
    turns."""
    shipped = parse_grid(SHIPPED_GRID)
    probabilities = {id(t): (torch.tensor(t.chosen), torch.tensor(t.first_top)) for t in turns}
    groups = {d: [t for t in turns if t.domain == d] for d in sorted({t.domain for t in turns})} | {"all": turns}
    results = []
    for rules in [*shipped, *(r for r in grid if r not in shipped)]:
        lengths = {key: lengths_under_rules(*probs, rules) for key, probs in probabilities.items()}
        row: dict[str, Any] = {
            "rule": {
                "draft_confidence_threshold": rules.confidence_threshold,
                "draft_skip_threshold": rules.skip_threshold,
                "draft_lengths": list(rules.draft_lengths) if rules.draft_lengths else None,
            },
            "name": rule_name(rules),
        }
        row |= {label: replay_rule(group, lengths, costs, skip_s, step_s) for label, group in groups.items()}
        results.append(row)
    return results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--exclude", default="data/mix/prompts.jsonl", help="comma-separated prompt JSONL files")
    parser.add_argument("--domains", default="reasoning:16,manpages:16", help="DOMAIN:N, comma-separated")
    parser.add_argument("--max-prompt-tokens", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--attention", default="packed_gqa", choices=("sdpa", "packed_gqa"))
    parser.add_argument("--pack-weights", action="store_true", help="the target's weights packed once (bench's flag)")
    parser.add_argument("--grid", default=None, help="CONFIDENCE:SKIP[:LENGTHS] points, comma-separated")


def check(args: argparse.Namespace) -> list:
    """The rules of ``--grid`` (default :data:`DEFAULT_GRID`), the flags checked."""
    return parse_grid(args.grid if args.grid is not None else DEFAULT_GRID)


def compare(args: argparse.Namespace, data: dict[str, Any], grid: list) -> tuple[dict[str, Any], dict[str, Any]]:
    """Replay the grid's rules on the unseen prompts' data and print the best; (the document's head, its rows)."""
    turns = [RulesTurn(**turn) for turn in data["turns"]]
    if not turns:
        raise SystemExit("The replay data holds no turns: expected at least one prompt's plain run and drafts.")
    costs, skip_s, step_s = replay.costs_from_json(data["forward_s"]), data["drafter_skip_s"], data["drafter_step_s"]
    results = rule_rows(turns, grid, costs, skip_s, step_s)
    ranked = sorted(results, key=lambda r: -r["all"]["speedup_est"])
    labels = [*sorted({t.domain for t in turns}), "all"]
    print(
        f"drafter: {1000 * skip_s:.2f} ms a skipped round, {1000 * step_s:.2f} ms a further step; forward ms by "
        f"context: {replay.cost_line(costs)}"
    )
    print("| rule | " + " | ".join(f"{lb} tau / speedup" for lb in labels) + " |")
    for row in [*ranked[:10], *results[:2]]:
        cells = " | ".join(f"{row[lb]['tau']:.2f} / {row[lb]['speedup_est']:.3f}x" for lb in labels)
        print(f"| {row['name']} | {cells} |")
    head = {
        "environment": environment_info(),
        "threads": args.threads,
        "prompts": {d: [t.prompt_id for t in turns if t.domain == d] for d in labels[:-1]},
        "decoded_tokens": sum(len(t.plain) - 1 for t in turns),
        "drafter_ms": {"skipped_round": 1000 * skip_s, "further_step": 1000 * step_s},
        "forward_ms": replay.milliseconds(costs),
        "pack_weights": data.get("pack_weights", False),  # replay data from before the flag: unpacked
    }
    return head, {"shipped": results[1], "k_every_round": results[0], "best": ranked[0], "rules": ranked}
