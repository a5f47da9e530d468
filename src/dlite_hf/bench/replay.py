"""`dlite-hf bench replay hybrid | rules`: choose a drafting rule by replaying greedy decoding offline.

Greedy rounds are fixed by plain greedy's output, so one plain run and one teacher-forced forward per turn replay a
whole grid of rules with this machine's measured forward costs: ``hybrid``, the hybrid's selection rules on a tuning
split (:mod:`.replay_hybrid`); ``rules``, the adaptive-drafting thresholds on unseen prompts (:mod:`.replay_rules`).
``--replay-data FILE`` is written when missing and read (no model loaded) when present::

    dlite-hf bench replay hybrid --replay-data runs/hybrid-replay.json \\
        --out benchmarks/results/smollm2-135m-hybrid-rules.json
    dlite-hf bench replay rules --exclude data/mix/prompts.jsonl --domains reasoning:16,manpages:16 \\
        --max-new-tokens 128 --replay-data ~/.cache/dlite-hf/work/rules.json \\
        --out benchmarks/results/smollm2-135m-rules-avx2.json
"""

from __future__ import annotations

import argparse
import functools
import json
import shlex
import statistics
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache

from ..assets import load_drafter
from ..chat_template import chat_prompt_ids
from ..commands.common import add_command, command_flags, open_target_flagged, positive_int
from ..defaults import DEFAULT_DRAFTER, DEFAULT_TARGET
from ..modeling.drafting import history_inputs
from .measure import sdpa_gqa_forced


def replay_tau(drafter: Any, states: Any, tokens: list[int], prompt_length: int) -> tuple[int, int, list[int]]:
    """(new tokens, target forwards, accepted drafts per verify round) of a greedy run over ``tokens`` (prompt, then
    its greedy continuation from ``prompt_length`` >= 2) drafting K every round, as a float32 ``generate`` runs it.
    ``states``: the target's tapped states over ``tokens`` (:func:`teacher_states`; a history drafter's too)."""
    if prompt_length < 2 or prompt_length > len(tokens):
        raise ValueError(f"prompt_length must be in 2..{len(tokens)} (the text's length), got {prompt_length}.")
    if prompt_length == len(tokens):
        return 0, 0, []
    window = getattr(getattr(drafter, "config", None), "history_window", 0)
    position, accepted = prompt_length + 1, []  # the prefill commits tokens[prompt_length]
    while position < len(tokens):
        history = {}
        if window:  # the committed positions before the context (position - 2), the last `window` of them
            past = states[:, max(0, position - 2 - window) if window > 0 else 0 : position - 2]
            keywords = ("history_states", "history_valid", "history_positions")  # DLiteForSpeculation.draft's
            history = dict(zip(keywords, history_inputs(past, states.device)))
        context, anchor = states[:, position - 2], torch.tensor([tokens[position - 1]], device=states.device)
        drafts, _ = drafter.draft(context, anchor, confidence_threshold=0.0, skip_threshold=0.0, **history)
        draft = drafts[0].tolist()[: len(tokens) - position]
        run = min(accepted_prefix(draft, tokens, position), len(tokens) - position - 1)  # and the round's own token
        accepted.append(run)
        position += run + 1
    return len(tokens) - prompt_length, 1 + len(accepted), accepted  # a forward per round after the prefill's


def greedy_texts(target: Any, tokenizer: Any, prompts: Iterable[dict], max_new_tokens: int) -> Iterable[dict]:
    """Yield ``{"id", "workload", "prompt_length", "tokens"}``: each prompt's plain greedy continuation."""
    for prompt in prompts:
        ids = chat_prompt_ids(tokenizer, prompt["messages"])
        tokens = ids + plain_greedy(target, ids, max_new_tokens)
        yield {"id": prompt["id"], "workload": prompt["workload"], "prompt_length": len(ids), "tokens": tokens}


def replay_text(drafter: Any, target: Any, text: dict, states: Any = None) -> dict[str, Any]:
    """Replay one :func:`greedy_texts` row (on ``states``, default :func:`teacher_states`): ``{"id", "workload",
    "new_tokens", "forwards", "accepted"}``."""
    if states is None:
        states = teacher_states(target, drafter, text["tokens"])
    counts = replay_tau(drafter, states, text["tokens"], text["prompt_length"])
    return {"id": text["id"], "workload": text["workload"]} | dict(zip(("new_tokens", "forwards", "accepted"), counts))


def summarise(rows: list[dict[str, Any]], out_of_domain: Iterable[str] = ()) -> dict[str, Any]:
    """Tau per workload (pooled: new tokens / target forwards) and its means over all workloads, the out-of-domain
    ones and the others; and those means of the share of verify rounds whose first draft is accepted
    (``first_accepted_*``: a round accepts draft n only after drafts 1..n-1)."""
    by: dict[str, list[int]] = {}  # workload: [new tokens, forwards, rounds with a first draft accepted, rounds]
    for row in rows:
        counts = (row["new_tokens"], row["forwards"], sum(1 for a in row["accepted"] if a > 0), len(row["accepted"]))
        by[row["workload"]] = [a + b for a, b in zip(by.get(row["workload"], (0, 0, 0, 0)), counts)]
    tau = {w: t[0] / t[1] for w, t in by.items() if t[1]}
    first = {w: t[2] / t[3] for w, t in by.items() if t[3]}
    ood = [w for w in tau if w in set(out_of_domain)]
    ind = [w for w in tau if w not in set(out_of_domain)]

    def mean(values: dict[str, float], names: list[str]) -> float | None:
        names = [w for w in names if w in values]
        return sum(values[w] for w in names) / len(names) if names else None

    return {
        "tau_by_workload": tau,
        "mean_tau": mean(tau, list(tau)),
        "mean_tau_ood": mean(tau, ood),
        "mean_tau_in_domain": mean(tau, ind),
        "first_accepted_ood": mean(first, ood),
        "first_accepted_in_domain": mean(first, ind),
    }


def plain_greedy(target: Any, ids: list[int], max_new_tokens: int) -> list[int]:
    prompt = torch.tensor([ids], device=target.device)
    with torch.no_grad():
        return target.generate(prompt, max_new_tokens=max_new_tokens, do_sample=False)[0, len(ids) :].tolist()


def teacher_states(target: Any, drafter: Any, tokens: list[int]) -> Any:
    """The target's tapped states over ``tokens`` (one teacher-forced forward), ``[1, T, L, H_t]``."""
    from ..data.features.transformers import target_features

    with torch.no_grad():
        ids = torch.tensor([tokens], device=target.device)
        return target_features(target, ids, list(drafter.config.target_layer_ids))[0]


def forward_costs(target: Any, context: int, sizes: Sequence[int], repeats: int = 5) -> dict[int, float]:
    """Median seconds of a target forward over q new tokens on a cache of `context` tokens, for each q of `sizes`."""
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


def cost_tables(target: Any, turns: Sequence[Any], sizes: Sequence[int], repeats: int) -> dict[int, dict[int, float]]:
    """:func:`forward_costs` at the :func:`context_key` of every turn's prompt (``turn.ids``)."""
    return {c: forward_costs(target, c, sizes, repeats) for c in sorted({context_key(len(t.ids)) for t in turns})}


def cost_at(costs: dict[int, float], q: int) -> float:
    """The forward cost at q new tokens: measured, else interpolated linearly (outside the sizes: scaled)."""
    if q in costs:
        return costs[q]
    lower = max((s for s in costs if s < q), default=min(costs))
    upper = min((s for s in costs if s > q), default=max(costs))
    if upper == lower:
        return costs[lower] * q / lower
    return costs[lower] + (costs[upper] - costs[lower]) * (q - lower) / (upper - lower)


def context_key(prompt_tokens: int) -> int:
    """The context whose timed forwards price a turn of `prompt_tokens`: the nearest multiple of 512, 512..8192."""
    return min(8192, 512 * max(1, round(prompt_tokens / 512)))


def accepted_prefix(draft: Sequence[int], tokens: Sequence[int], position: int) -> int:
    """How many of `draft` greedy verification accepts at `position`: its common prefix with `tokens` there."""
    accepted = 0
    while accepted < len(draft) and draft[accepted] == tokens[position + accepted]:
        accepted += 1
    return accepted


def load_models(
    target: str, drafter: str, attention: str, threads: int, dtype: str, pack_weights: bool = False
) -> tuple[Any, Any, Any]:
    """(target in `dtype`, tokenizer, bound drafter) on `threads` threads (the replay forces GQA SDPA while it
    collects, as the README's runs); `pack_weights`: the target's linear layers on weights packed once (`dlite-hf
    bench --pack-weights`)."""
    torch.set_num_threads(threads)
    model, tokenizer, _ = open_target_flagged(target, dtype, attention, pack_weights)
    return model, tokenizer, load_drafter(drafter, model).bind_target(model)


def add_replay_parser(sub: argparse._SubParsersAction, kinds: Sequence[Any]) -> None:
    """Register ``replay`` under `dlite-hf bench`, a subcommand per kind module (``NAME``, ``HELP``,
    ``MAX_NEW_TOKENS``, ``DATA_KEYS``, ``add_arguments``, ``check``, ``collect`` and ``compare``)."""
    parser = add_command(sub, "replay", "replay greedy decoding offline to compare drafting rules", None, __doc__)
    subparsers = parser.add_subparsers(dest="replay_kind", required=True, metavar="{hybrid,rules}")
    for kind in kinds:
        kind_parser = subparsers.add_parser(kind.NAME, help=kind.HELP)
        kind_parser.add_argument("--target", default=DEFAULT_TARGET)
        kind_parser.add_argument("--drafter", default=DEFAULT_DRAFTER, help="a drafter folder or name")
        kind_parser.add_argument("--max-new-tokens", type=int, default=kind.MAX_NEW_TOKENS)
        kind_parser.add_argument("--threads", type=positive_int("--threads"), default=1)
        kind_parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="the target's")
        kind_parser.add_argument(
            "--replay-data",
            type=Path,
            default=None,
            help="JSON of what the replay needs (plain runs, drafts, forward costs): written when missing, read (no "
            "model loaded) when present",
        )
        kind_parser.add_argument("--out", type=Path, required=True, help="the result JSON")
        kind.add_arguments(kind_parser)
        flags = tuple(action.dest for action in kind_parser._actions if action.dest != "help")
        kind_parser.set_defaults(func=functools.partial(run_replay, kind), replay_flags=flags)


def run_replay(kind: Any, args: argparse.Namespace) -> int:
    """Replay the rule grid of `kind` (a kind module) on its replay data; print the best rules, write `--out`."""
    if args.max_new_tokens < 2:  # before any model loads
        raise SystemExit(f"--max-new-tokens {args.max_new_tokens} is invalid: expected an integer >= 2.")
    settings = kind.check(args)
    started = time.time()
    data = _replay_data(args, kind.DATA_KEYS, kind.collect)
    head, rules = kind.compare(args, data, settings)
    command = ["dlite-hf", "bench", "replay", args.replay_kind, *command_flags(vars(args), args.replay_flags)]
    # duration_s: this invocation (seconds when it read --replay-data); collect_s: the collection's, wherever it ran
    timing = {"duration_s": time.time() - started, "collect_s": data.get("collect_s")}
    write_json(args.out, {"command": shlex.join(command), **head, **timing, **rules}, indent=1)
    return 0


def _replay_data(args: argparse.Namespace, keys: tuple[str, ...], collect: Any) -> dict[str, Any]:
    """What the replay needs: read from --replay-data when it is there (no model loaded), which must hold `keys`;
    else ``collect(args)`` (loading the models) with its seconds (``collect_s``), written to --replay-data if given."""
    path = args.replay_data.expanduser() if args.replay_data is not None else None
    if path is None or not path.is_file():
        started = time.time()
        with sdpa_gqa_forced():
            data = {**collect(args), "collect_s": time.time() - started}
        if path is not None:
            write_json(path, data)
        return data
    try:
        data = json.loads(path.read_text())
    except ValueError as error:
        raise SystemExit(f"--replay-data {args.replay_data}: not JSON ({error}).") from None
    missing = [key for key in keys if not isinstance(data, dict) or key not in data]
    if missing:
        raise SystemExit(
            f"--replay-data {args.replay_data}: no {', '.join(missing)}; expected the replay data this kind of "
            "replay writes (another kind's, or another file?)."
        )
    return data


def write_json(path: Path, document: dict[str, Any], indent: int | None = None) -> None:
    """Write `document` through a temporary file (a kill leaves the old file or the new one)."""
    path = path.expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(document, indent=indent) + ("\n" if indent else ""))
    temporary.replace(path)


def costs_from_json(tables: dict) -> dict[int, dict[int, float]]:
    """Forward cost tables with int keys (JSON's are strings)."""
    return {int(c): {int(q): t for q, t in table.items()} for c, table in tables.items()}


def milliseconds(tables: dict[int, dict[int, float]]) -> dict[str, dict[str, float]]:
    """Forward cost tables in milliseconds, as the result documents hold them."""
    return {str(c): {str(q): 1000 * s for q, s in table.items()} for c, table in tables.items()}


def cost_line(tables: dict[int, dict[int, float]]) -> str:
    return "; ".join(f"{c}: " + ", ".join(f"q={q} {1000 * s:.1f}" for q, s in t.items()) for c, t in tables.items())
