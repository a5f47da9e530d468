"""`dlite-hf bench replay hybrid`: the hybrid's selection rule, replayed offline (:mod:`.replay`) on a tuning split
(:func:`tuning_workloads`, no prompt of any benchmark). A round costs the measured target forward over `q` new tokens
at the turn's context, plus the drafter's time when it drafts. The rules are the core's (`drafting.HybridRule`,
`select_proposal`, as `generate()` runs them) over a grid (:func:`hybrid_grid`) of min match `m`, cap `N`, length
factor `f` and fallback match `F`.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from typing import Any

import torch

from ..chat_template import chat_prompt_ids
from ..data.prompts import load_prompts
from ..data.workloads import CODING_TASKS, CodingTask, as_session, coding_session, session_from_messages
from ..modeling.drafting import HybridRule, select_proposal
from ..modeling.suffix_index import SuffixIndex
from . import replay

NAME, HELP = "hybrid", "the hybrid's selection rules, on the tuning split"
MAX_NEW_TOKENS = 96
DATA_KEYS = ("sessions", "forward_s", "drafter_s")
COST_SIZES = [1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 33]  # block sizes (q new tokens) whose forward is timed
LOOKUP_S = 10e-6  # a suffix-index lookup: a few microseconds a round at every context length (docs/design.md)
TUNING_MODULES = ("fnmatch", "glob", "configparser")


class HybridTurn:
    """One turn's plain output and the drafter's drafts after every committed position (from teacher-forced
    states: one target forward over the prompt and plain's reply)."""

    def __init__(self, ids: list[int], plain: list[int], drafts: dict[int, list[int]], draft_s: list[float]):
        self.ids, self.plain, self.tokens = ids, plain, ids + plain
        self._drafts, self.draft_s = drafts, draft_s

    @classmethod
    def measure(cls, target: Any, drafter: Any, ids: list[int], plain: list[int]) -> HybridTurn:
        tokens = ids + plain
        states = replay.teacher_states(target, drafter, tokens)
        drafts, times = {}, []
        for position in range(len(ids) + 1, len(tokens)):  # every position a round can start from
            started = time.perf_counter()
            out, _ = drafter.draft(states[:, position - 2], torch.tensor([tokens[position - 1]]))
            times.append(time.perf_counter() - started)
            drafts[position] = out[0].tolist()
        return cls(ids, plain, drafts, times)

    def to_json(self) -> dict:
        return {"ids": self.ids, "plain": self.plain, "drafts": {str(k): v for k, v in self._drafts.items()}}

    @classmethod
    def from_json(cls, data: dict) -> HybridTurn:
        return cls(data["ids"], data["plain"], {int(k): v for k, v in data["drafts"].items()}, [])

    def dlite(self, position: int, budget: int) -> list[int]:
        """The drafter's drafts after `position` committed tokens."""
        return self._drafts.get(position, [])[:budget]


def replay_rule(sessions, rule, costs_by_turn, drafter_s: float, lookup_s: float, max_new: int) -> dict[str, float]:
    """Tau and estimated speedup of `rule` (`(lookup_tokens, HybridRule)`, or `(None, None)`: the drafter alone)
    over sessions of turns, one suffix index per session; `costs_by_turn[id(turn)]`: the turn's forward costs.
    Each round chooses with the core's `select_proposal`, fed with the replayed index and drafts."""
    lookup_tokens, hybrid = rule
    tokens = forwards = 0
    cost = plain_cost = 0.0
    for session in sessions:
        index = SuffixIndex()
        for turn in session:
            costs = costs_by_turn[id(turn)]
            index.start_stream(turn.ids)
            p, end = len(turn.ids), len(turn.ids) + len(turn.plain)
            index.append([turn.tokens[p]])  # the prefill commits the first token
            p, forwards = p + 1, forwards + 1
            while p < end:
                budget = min(end - p, max_new)  # never draft past what plain produced
                match = index.lookup(lookup_tokens) if hybrid is not None else None
                proposal = select_proposal(match, hybrid, lambda t=turn, p=p, b=budget: (t.dlite(p, b), None))
                round_cost = (lookup_s if hybrid is not None else 0.0) + (
                    drafter_s if proposal.source == "dlite" or proposal.fallback else 0.0
                )
                draft = list(proposal.tokens)[: budget - 1] if budget > 1 else []
                committed = min(replay.accepted_prefix(draft, turn.tokens, p) + 1, end - p)
                cost += round_cost + replay.cost_at(costs, len(draft) + 1)
                index.append(turn.tokens[p : p + committed])
                p, forwards = p + committed, forwards + 1
            tokens += len(turn.plain)
            plain_cost += len(turn.plain) * costs[1]
    return {"tau": tokens / forwards, "speedup_est": plain_cost / cost if cost else 0.0}


def tuning_workloads(tokenizer: Any, num_prompts: int, max_tokens: int, max_turns: int) -> dict[str, list[dict]]:
    """The tuning split: `num_prompts` training-split prompts of chat, code, math and tool, and agentic sessions
    of at most `max_turns` turns and `max_tokens` tokens of context."""
    used = {m for task in CODING_TASKS for m in task.modules}
    if used & set(TUNING_MODULES):
        raise ValueError(f"tuning modules {sorted(used & set(TUNING_MODULES))} are read by a benchmark session")
    workloads = {w: load_prompts(w, "train", num_prompts) for w in ("chat", "code", "math", "tool")}
    conversations: dict[str, dict] = {}
    for prompt in load_prompts("agentic", "train"):  # the longest prefix of each training conversation
        key = prompt["id"].rsplit("/", 1)[0]
        if key not in conversations or len(prompt["messages"]) > len(conversations[key]["messages"]):
            conversations[key] = prompt
    keys = sorted(conversations)
    chosen = [conversations[keys[i * len(keys) // num_prompts]] for i in range(num_prompts)]
    sessions = [session_from_messages(p, "agentic", max_tokens) for p in chosen]
    task = CodingTask(
        id="tune-glob",
        request="`glob.glob` misses hidden files matched by our patterns in the vendored copy. Read the modules, "
        "run the tests and fix it.",
        modules=TUNING_MODULES,
        frames=(("glob", "glob"), ("glob", "iglob"), ("fnmatch", "fnmatch")),
        error="AssertionError: assert ['.env'] == []",
        follow_up="Write the complete patch as a unified diff.",
    )
    sessions.append(coding_session(task, tokenizer, max_tokens, 1500))
    for session in sessions:
        session["max_turns"] = max_turns
    workloads["agentic"] = sessions
    return workloads


def collect(args: Any) -> dict[str, Any]:
    """The replay data of the tuning split, loading the models: its turns (plain runs, the drafts at every
    position), the forward costs by context, and the drafter's median seconds a call."""
    target, tokenizer, drafter = replay.load_models(args.target, args.drafter, "sdpa", args.threads, args.dtype)
    sessions: dict[str, list[list[HybridTurn]]] = {}
    for label, items in tuning_workloads(tokenizer, args.num_prompts, args.max_tokens, args.max_turns).items():
        for item in items:
            session = as_session(dict(item), label)
            history: list[dict[str, str]] = []
            turns = []
            for index, turn in enumerate(session["turns"][: session.get("max_turns") or None]):
                messages = history + list(turn)
                ids = chat_prompt_ids(tokenizer, messages)
                if session.get("max_tokens") and len(ids) > session["max_tokens"]:
                    break
                out = replay.plain_greedy(target, ids, args.max_new_tokens)
                turns.append(HybridTurn.measure(target, drafter, ids, out))
                reply = tokenizer.decode(out, skip_special_tokens=True).strip()
                history = messages + [{"role": "assistant", "content": reply}]
                print(f"{label} {session['id']} turn {index}: {len(ids)} + {len(out)} tokens", flush=True)
            sessions.setdefault(label, []).append(turns)
    turns = [t for s in sessions.values() for ts in s for t in ts]
    return {
        "sessions": {label: [[t.to_json() for t in ts] for ts in s] for label, s in sessions.items()},
        "forward_s": replay.cost_tables(target, turns, COST_SIZES, repeats=5),
        "drafter_s": statistics.median(d for t in turns for d in t.draft_s),
    }


def hybrid_grid() -> list[tuple[int | None, Any]]:
    """The rules compared: the drafter alone, then every (m, N, f) of the grid with every fallback below m."""
    rules: list[tuple[int | None, Any]] = [(None, None)]  # the drafter alone
    for m, n, f in itertools.product((2, 3, 4, 6, 8), (8, 16, 32), (0.5, 1.0, 2.0, 1e9)):
        for fallback in range(0, m):
            rules.append((n, HybridRule(min_match=m, length_factor=f, fallback_min_match=fallback)))
    return rules


def rule_rows(sessions: dict, tables: dict, drafter_s: float, max_new: int) -> list[dict[str, Any]]:
    """Every rule of :func:`hybrid_grid` replayed per workload and over all of them, fastest (estimated) first."""
    costs_by_turn = {id(t): tables[replay.context_key(len(t.ids))] for s in sessions.values() for ts in s for t in ts}
    groups = {**sessions, "all": [t for s in sessions.values() for t in s]}
    results = []
    for lookup_tokens, hybrid in hybrid_grid():
        fields = (None, None, None, None)  # the drafter alone
        if hybrid is not None:
            fields = (hybrid.min_match, lookup_tokens, hybrid.length_factor, hybrid.fallback_min_match or None)
        row: dict[str, Any] = {"rule": dict(zip(("min_match", "lookup_tokens", "length_factor", "fallback"), fields))}
        for label, turns in groups.items():
            row[label] = replay_rule(turns, (lookup_tokens, hybrid), costs_by_turn, drafter_s, LOOKUP_S, max_new)
        results.append(row)
    results.sort(key=lambda r: -r["all"]["speedup_est"])
    return results


def rule_label(rule: dict[str, Any]) -> str:
    """A row's rule, as the printed table names it."""
    if rule["min_match"] is None:
        return "drafter only"
    fallback = f" fallback>={rule['fallback']}" if rule["fallback"] else ""
    return f"m{rule['min_match']} N{rule['lookup_tokens']} f{rule['length_factor']:g}{fallback}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-prompts", type=int, default=3, help="prompts per workload, agentic sessions")
    parser.add_argument("--max-tokens", type=int, default=6144, help="agentic sessions stop past this context")
    parser.add_argument("--max-turns", type=int, default=4, help="turns per agentic session")
    parser.add_argument(
        "--cost-dtype",
        default=None,
        choices=("float32", "bfloat16"),
        help="re-measure the forward costs in this dtype (and --cost-attention); the replayed texts stay float32",
    )
    parser.add_argument("--cost-attention", default="sdpa", choices=("sdpa", "packed_gqa"))


def check(args: argparse.Namespace) -> None:
    if min(args.num_prompts, args.max_turns) < 1 or args.max_tokens < 256:
        raise SystemExit("--num-prompts and --max-turns must be >= 1 and --max-tokens >= 256.")


def compare(args: argparse.Namespace, data: dict[str, Any], _settings: None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Replay the rule grid on the tuning split's data and print the best rules; (the document's head, its rows)."""
    sessions = {k: [[HybridTurn.from_json(t) for t in ts] for ts in v] for k, v in data["sessions"].items()}
    tables, drafter_s = replay.costs_from_json(data["forward_s"]), data["drafter_s"]
    if args.cost_dtype is not None:  # the forward costs again, the target in --cost-dtype and --cost-attention
        from ..assets import open_target

        torch.set_num_threads(args.threads)
        target, _, _ = open_target(args.target, dtype=args.cost_dtype, attention=args.cost_attention)
        tables = {c: replay.forward_costs(target, c, COST_SIZES) for c in sorted(tables)}
    results = rule_rows(sessions, tables, drafter_s, args.max_new_tokens)
    labels = [*sessions, "all"]
    print(f"drafter {1000 * drafter_s:.1f} ms/call; forward costs (ms) by context:")
    print(*(f"  {replay.cost_line({c: table})}" for c, table in tables.items()), sep="\n")
    print("| rule | " + " | ".join(labels) + " |")
    for row in [*results[:15], next(r for r in results if r["rule"]["min_match"] is None)]:
        cells = " | ".join(f"{row[lb]['tau']:.2f} / {row[lb]['speedup_est']:.2f}x" for lb in labels)
        print(f"| {rule_label(row['rule'])} | {cells}")
    head = {
        "split": "tuning (train split prompts, tuning coding session)",
        "cost_mode": f"{args.cost_dtype or 'float32'}, {args.cost_attention if args.cost_dtype else 'sdpa'}",
        "threads": args.threads,
        "drafter_ms_per_call": 1000 * drafter_s,
        "forward_ms": replay.milliseconds(tables),
        "turns": {label: sum(len(s) for s in ss) for label, ss in sessions.items()},
    }
    return head, {"rules": results}
