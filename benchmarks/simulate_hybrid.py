"""Replay greedy decoding offline to compare hybrid selection rules on the tuning split, then time the best ones.

For greedy decoding, what a round accepts is fixed by plain greedy's output: the longest common prefix of the
draft with the tokens plain greedy produced there. So one plain run per turn, plus one teacher-forced target
forward for the tapped states at every position, lets any selection rule be replayed exactly (the drafter's
drafts come from teacher-forced states, which match the verification forwards' up to rounding). A round's cost is
the measured target forward over `q` new tokens at the turn's context, plus the drafter's measured time when it
drafts; the estimated speedup is plain's cost over the rule's. The tuning split (`tune_hybrid.tuning_workloads`)
shares no prompt with any benchmark.

Rules: the hybrid rule of the engine-neutral core (`dlite_hf.modeling.drafting.HybridRule`, `select_proposal`:
the code `generate()` runs), over a grid of its settings. A round drafts the retrieved continuation when the
matched suffix has at least `m` tokens, `min(N, f x match length)` of them (at least 1); with `fallback` F, a
round whose drafter proposes nothing (its first draft is below the checkpoint's
`draft_skip_threshold`) drafts the retrieved continuation of a match of at least F tokens instead of a plain
one-token step. Otherwise the drafter drafts (its checkpoint's adaptive decoding). `--cost-dtype bfloat16
--cost-attention packed_gqa` re-measures the forward costs in that mode (the replayed texts stay float32 greedy).
`--replay-data FILE` keeps what the replay needs,
so a second run compares rules without loading a model.

    .venv/bin/python benchmarks/simulate_hybrid.py --replay-data runs/hybrid-replay.json \
        --out benchmarks/results/smollm2-135m-hybrid-rules.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


COST_SIZES = [1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 33]  # block sizes (q new tokens) whose forward is timed


def _forward_costs(target, context: int, sizes: list[int], repeats: int = 5) -> dict[int, float]:
    """Median seconds of a target forward over q new tokens on a cache of `context` tokens."""
    import torch
    from transformers import DynamicCache

    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, 10000, (1, context), generator=generator)
    cache = DynamicCache()
    with torch.no_grad():
        target(prompt, past_key_values=cache, use_cache=True)
        costs = {}
        for q in sizes:
            times = []
            for _ in range(repeats):
                new = torch.randint(100, 10000, (1, q), generator=generator)
                started = time.perf_counter()
                target(new, past_key_values=cache, use_cache=True, logits_to_keep=q)
                times.append(time.perf_counter() - started)
                cache.crop(-q)
            costs[q] = statistics.median(times)
    return costs


def _cost(costs: dict[int, float], q: int) -> float:
    """Linear interpolation of the measured forward costs."""
    sizes = sorted(costs)
    if q in costs:
        return costs[q]
    lower = max(s for s in sizes if s < q) if any(s < q for s in sizes) else sizes[0]
    upper = min(s for s in sizes if s > q) if any(s > q for s in sizes) else sizes[-1]
    if upper == lower:
        return costs[lower] * q / lower
    return costs[lower] + (costs[upper] - costs[lower]) * (q - lower) / (upper - lower)


class Turn:
    """One turn's plain output and the drafter's drafts after every committed position (from teacher-forced
    states: one target forward over the prompt and plain's reply)."""

    def __init__(self, ids: list[int], plain: list[int], drafts: dict[int, list[int]], draft_s: list[float]):
        self.ids, self.plain, self.tokens = ids, plain, ids + plain
        self._drafts, self.draft_s = drafts, draft_s

    @classmethod
    def measure(cls, target, drafter, ids: list[int], plain: list[int]) -> Turn:
        import torch

        from dlite_hf.training.features import target_features

        tokens = ids + plain
        with torch.no_grad():
            states, _ = target_features(target, torch.tensor([tokens]), drafter.config.target_layer_ids)
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
    def from_json(cls, data: dict) -> Turn:
        return cls(data["ids"], data["plain"], {int(k): v for k, v in data["drafts"].items()}, [])

    def dlite(self, position: int, budget: int) -> list[int]:
        """The drafter's drafts after `position` committed tokens (context: the state that predicted the last)."""
        return self._drafts.get(position, [])[:budget]


def replay(turns_by_session, rule, costs_by_turn, drafter_s: float, lookup_s: float, max_new: int):
    """Tau and estimated cost of `rule` over sessions of turns; a session shares one index across its turns.

    `rule` is `(lookup_tokens, HybridRule)`, or `(None, None)` for the drafter alone. Each round's choice is the
    engine-neutral core's own (`dlite_hf.modeling.drafting.select_proposal`, the one `generate()` and the vLLM
    plugin call), fed with the replayed suffix index and the drafter's replayed drafts."""
    from dlite_hf.modeling.drafting import select_proposal
    from dlite_hf.modeling.suffix_index import SuffixIndex

    lookup_tokens, hybrid = rule
    tokens = forwards = 0
    cost = plain_cost = 0.0
    for session in turns_by_session:
        index = SuffixIndex()
        for turn in session:
            costs = costs_by_turn[id(turn)]
            index.start_stream(turn.ids)
            p = len(turn.ids)
            end = len(turn.ids) + len(turn.plain)
            # the prefill commits the first token
            index.append([turn.tokens[p]])
            p += 1
            forwards += 1
            while p < end:
                budget = min(end - p, max_new)  # never draft past what plain produced
                match = index.lookup(lookup_tokens) if hybrid is not None else None
                proposal = select_proposal(match, hybrid, lambda t=turn, p=p, b=budget: (t.dlite(p, b), None))
                round_cost = (lookup_s if hybrid is not None else 0.0) + (
                    drafter_s if proposal.source == "dlite" or proposal.fallback else 0.0
                )
                draft = list(proposal.tokens)
                draft = draft[: budget - 1] if budget > 1 else []
                accepted = 0
                while accepted < len(draft) and draft[accepted] == turn.tokens[p + accepted]:
                    accepted += 1
                committed = min(accepted + 1, end - p)
                cost += round_cost + _cost(costs, len(draft) + 1)
                index.append(turn.tokens[p : p + committed])
                p += committed
                forwards += 1
            tokens += len(turn.plain)
            plain_cost += len(turn.plain) * costs[1]
    return {"tau": tokens / forwards, "speedup_est": plain_cost / cost if cost else 0.0}


def _collect(args) -> tuple[dict, dict, float]:
    """Plain runs, drafts at every position and forward costs of the tuning split (needs the models)."""
    import torch
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer
    from tune_hybrid import tuning_workloads

    from dlite_hf.assets import resolve_model
    from dlite_hf.data.workloads import as_session
    from dlite_hf.rows import chat_prompt_ids

    torch.set_num_threads(1)
    os.environ["TRANSFORMERS_SDPA_FORCE_GQA"] = "1"
    folder = resolve_model(args.target)
    target = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    drafter = AutoModel.from_pretrained(args.drafter).bind_target(target)
    workloads = tuning_workloads(tokenizer, args.num_prompts, args.max_tokens, args.max_turns)
    sessions: dict[str, list[list[Turn]]] = {}
    for label, items in workloads.items():
        for item in items:
            session = as_session(dict(item), label)
            history: list[dict[str, str]] = []
            turns = []
            for index, turn in enumerate(session["turns"][: session.get("max_turns") or None]):
                messages = history + list(turn)
                ids = chat_prompt_ids(tokenizer, messages)
                if session.get("max_tokens") and len(ids) > session["max_tokens"]:
                    break
                out = target.generate(torch.tensor([ids]), max_new_tokens=args.max_new_tokens, do_sample=False)
                out = out[0, len(ids) :].tolist()
                turns.append(Turn.measure(target, drafter, ids, out))
                reply = tokenizer.decode(out, skip_special_tokens=True).strip()
                history = messages + [{"role": "assistant", "content": reply}]
                print(f"{label} {session['id']} turn {index}: {len(ids)} + {len(out)} tokens", flush=True)
            sessions.setdefault(label, []).append(turns)
    contexts = sorted({_context_key(t) for s in sessions.values() for ts in s for t in ts})
    cost_tables = {c: _forward_costs(target, c, COST_SIZES) for c in contexts}
    drafter_s = statistics.median(d for s in sessions.values() for ts in s for t in ts for d in t.draft_s)
    return sessions, cost_tables, drafter_s


def _remeasure_costs(args, contexts: list[int]) -> dict[int, dict[int, float]]:
    """The forward cost tables again, with the target in `--cost-dtype` and `--cost-attention`."""
    import torch

    from dlite_hf.assets import load_target, resolve_model

    torch.set_num_threads(1)
    target, _ = load_target(resolve_model(args.target), dtype=args.cost_dtype, attention=args.cost_attention)
    return {c: _forward_costs(target, c, COST_SIZES) for c in contexts}


def _context_key(turn: Turn) -> int:
    return min(8192, 512 * max(1, round(len(turn.ids) / 512)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="smollm2-135m")
    parser.add_argument("--drafter", default="drafters/dlite-smollm2-135m")
    parser.add_argument("--num-prompts", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--max-tokens", type=int, default=6144)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument(
        "--replay-data",
        default=None,
        help="JSON of the plain runs, drafts and forward costs: written when missing, read (no model loaded) when "
        "present, so rules can be compared again in seconds",
    )
    parser.add_argument(
        "--cost-dtype", default=None, choices=("float32", "bfloat16"), help="re-measure the forward costs so"
    )
    parser.add_argument("--cost-attention", default="sdpa", choices=("sdpa", "packed_gqa"))
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    started = time.time()
    data = Path(args.replay_data) if args.replay_data else None
    if data is not None and data.is_file():
        saved = json.loads(data.read_text())
        sessions = {k: [[Turn.from_json(t) for t in ts] for ts in v] for k, v in saved["sessions"].items()}
        cost_tables = {int(c): {int(q): t for q, t in tb.items()} for c, tb in saved["forward_s"].items()}
        drafter_s = saved["drafter_s"]
    else:
        sessions, cost_tables, drafter_s = _collect(args)
        if data is not None:
            data.write_text(
                json.dumps(
                    {
                        "sessions": {k: [[t.to_json() for t in ts] for ts in v] for k, v in sessions.items()},
                        "forward_s": cost_tables,
                        "drafter_s": drafter_s,
                    }
                )
            )
    if args.cost_dtype is not None:
        cost_tables = _remeasure_costs(args, sorted(cost_tables))
    costs_by_turn = {id(t): cost_tables[_context_key(t)] for s in sessions.values() for ts in s for t in ts}
    lookup_s = 10e-6  # benchmarks/lookup_cost.py: a few microseconds a round, at every context length

    from dlite_hf.modeling.drafting import HybridRule

    rules = [(None, None)]  # the drafter alone
    for m, n, f in itertools.product((2, 3, 4, 6, 8), (8, 16, 32), (0.5, 1.0, 2.0, 1e9)):
        for fallback in range(0, m):
            rules.append((n, HybridRule(min_match=m, length_factor=f, fallback_min_match=fallback)))
    results = []
    for rule in rules:
        lookup_tokens, hybrid = rule
        row = {
            "rule": {"min_match": None, "lookup_tokens": None, "length_factor": None, "fallback": None}
            if hybrid is None
            else {
                "min_match": hybrid.min_match,
                "lookup_tokens": lookup_tokens,
                "length_factor": hybrid.length_factor,
                "fallback": hybrid.fallback_min_match or None,
            }
        }
        for label, turns in sessions.items():
            row[label] = replay(turns, rule, costs_by_turn, drafter_s, lookup_s, args.max_new_tokens)
        row["all"] = replay(
            [t for s in sessions.values() for t in s], rule, costs_by_turn, drafter_s, lookup_s, args.max_new_tokens
        )
        results.append(row)
    results.sort(key=lambda r: -r["all"]["speedup_est"])
    labels = [*sessions, "all"]
    print(f"drafter {1000 * drafter_s:.1f} ms/call; forward costs (ms) by context:")
    for c, table in cost_tables.items():
        print(f"  {c}: " + ", ".join(f"q={q} {1000 * t:.1f}" for q, t in table.items()))
    print("| rule | " + " | ".join(labels) + " |")
    for row in [*results[:15], next(r for r in results if r["rule"]["min_match"] is None)]:
        rule = row["rule"]
        name = (
            "drafter only"
            if rule["min_match"] is None
            else f"m{rule['min_match']} N{rule['lookup_tokens']} f{rule['length_factor']:g}"
            + (f" fallback>={rule['fallback']}" if rule["fallback"] else "")
        )
        print(f"| {name} | " + " | ".join(f"{row[lb]['tau']:.2f} / {row[lb]['speedup_est']:.2f}x" for lb in labels))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps(
            {
                "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
                "split": "tuning (train split prompts, tuning coding session)",
                "cost_mode": f"{args.cost_dtype or 'float32'}, {args.cost_attention if args.cost_dtype else 'sdpa'}",
                "threads": 1,
                "drafter_ms_per_call": 1000 * drafter_s,
                "forward_ms": {str(c): {str(q): 1000 * t for q, t in tb.items()} for c, tb in cost_tables.items()},
                "turns": {label: sum(len(s) for s in ss) for label, ss in sessions.items()},
                "duration_s": time.time() - started,
                "rules": results,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
