"""Tau of several drafters on out-of-domain and in-domain workloads, replayed over fixed greedy texts.

Plain float32 greedy replies to eval-split prompts are generated once and cached (``--texts``, resumable); each
drafter is then replayed over them (``dlite_hf.bench.replay``: exact greedy tau with K drafts every round, one
target forward per text). Out of domain: ``legal`` (MultiLexSum), ``clinical`` (MTS-Dialog), ``long`` (essays,
``--long-tokens``); no training mix uses their sources. In domain: the training workloads and the broad mix's
prompt domains (their eval splits).

    .venv/bin/python benchmarks/ood_tau.py --threads 1 --per-workload 6 --max-new-tokens 96 \\
        --texts runs/ood/texts.jsonl --drafters shipped=drafters/dlite-smollm2-135m,text=runs/mix1/text \\
        --out benchmarks/results/smollm2-135m-ood-tau.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from dlite_hf.assets import load_drafter, open_target
from dlite_hf.bench.replay import greedy_texts, replay_text, summarise, teacher_states, write_json
from dlite_hf.data.prompts import OUT_OF_DOMAIN_WORKLOADS, TRAINING_WORKLOADS
from dlite_hf.jsonl import read_jsonl

OOD = OUT_OF_DOMAIN_WORKLOADS  # legal, clinical, long
MIX_DOMAINS = ("news", "writing", "story_qa", "dialogue_qa", "policy_agent", "reasoning", "code_tasks", "manpages")
IN_DOMAIN = (*TRAINING_WORKLOADS, *MIX_DOMAINS)


def _arguments() -> tuple[argparse.Namespace, dict[str, str]]:
    """The flags, and the drafters as ``{name: folder}`` (every folder checked)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="smollm2-135m")
    parser.add_argument("--drafters", required=True, help="name=folder,name=folder,...")
    parser.add_argument("--workloads", default=",".join(OOD + IN_DOMAIN))
    parser.add_argument("--per-workload", type=int, default=6, help="eval-split prompts per workload")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--long-tokens", type=int, default=1024, help="prompt length of the long workload")
    parser.add_argument("--texts", required=True, help="JSONL cache of the greedy texts (appended, resumable)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None)
    parser.add_argument("--device", default="cpu", help="where the target and drafters run (cuda on a GPU)")
    parser.add_argument(
        "--texts-only",
        action="store_true",
        help="replay every text already in --texts (no prompts are rebuilt: for a machine without the wheels)",
    )
    args = parser.parse_args()
    items = [item for item in args.drafters.split(",") if item]
    if not items or not all("=" in item and item.split("=", 1)[0] for item in items):
        raise SystemExit(f"--drafters {args.drafters!r}: expected name=folder,name=folder,...")
    drafters = dict(item.split("=", 1) for item in items)
    for name, folder in drafters.items():
        if not Path(folder).is_dir():
            raise SystemExit(f"--drafters {name}={folder}: no such folder (a drafter saved by dlite-hf train).")
    return args, drafters


def _texts(args: argparse.Namespace, target, tokenizer, workloads: list[str]) -> list[dict]:
    """The greedy texts of the prompts, from the --texts cache or generated (and appended to it)."""
    cache = Path(args.texts)
    if args.texts_only and not cache.is_file():
        raise SystemExit(f"--texts-only replays the texts in --texts, but {args.texts} does not exist.")
    cache.parent.mkdir(parents=True, exist_ok=True)
    cached = read_jsonl(cache) if cache.is_file() else []
    done = {row["id"]: row for row in cached if row.get("max_new_tokens") == args.max_new_tokens}
    if args.texts_only:  # every cached text of the workloads, in the file's order (read once, above)
        prompts = [t for t in done.values() if t["workload"] in workloads]
        if not prompts:
            raise SystemExit(f"--texts-only: no text in {args.texts} has max_new_tokens={args.max_new_tokens}.")
    else:
        from dlite_hf.data.domains import eval_prompts
        from dlite_hf.data.prompts import load_long

        prompts = []
        for workload in workloads:
            if workload == "long":
                prompts += load_long(args.long_tokens, tokenizer, "eval", args.per_workload)
            else:
                prompts += eval_prompts(workload, limit=args.per_workload)
    todo = [p for p in prompts if p["id"] not in done]
    start = time.perf_counter()
    with open(cache, "a", encoding="utf-8") as handle:
        for text in greedy_texts(target, tokenizer, todo, args.max_new_tokens):
            text["max_new_tokens"] = args.max_new_tokens
            done[text["id"]] = text
            handle.write(json.dumps(text) + "\n")
            handle.flush()
    print(
        f"{len(todo)} greedy texts generated in {time.perf_counter() - start:.0f} s ({len(done)} cached)", flush=True
    )
    return [done[p["id"]] for p in prompts]


def _replay(target, loaded: dict, texts: list[dict]) -> tuple[dict[str, list[dict]], dict[str, float]]:
    """Every drafter replayed over every text: ``({name: rows}, {name: replay seconds})``."""
    rows: dict[str, list[dict]] = {name: [] for name in loaded}
    seconds = dict.fromkeys(loaded, 0.0)
    for text in texts:  # one target forward per text and tapped-layer set, shared by the drafters
        states = {}
        for name, drafter in loaded.items():
            layers = tuple(drafter.config.target_layer_ids)
            if layers not in states:
                states[layers] = teacher_states(target, drafter, text["tokens"])
            start = time.perf_counter()
            rows[name].append(replay_text(drafter, target, text, states[layers]))
            seconds[name] += time.perf_counter() - start
    return rows, seconds


def main() -> None:
    args, drafters = _arguments()
    torch.set_num_threads(args.threads)
    target, tokenizer, _ = open_target(args.target, dtype="float32", attention="sdpa")
    target = target.to(args.device)
    workloads = args.workloads.split(",")
    texts = _texts(args, target, tokenizer, workloads)
    result = {
        "target": args.target,
        "threads": args.threads,
        "per_workload": args.per_workload,
        "max_new_tokens": args.max_new_tokens,
        "long_tokens": args.long_tokens,
        "texts": str(Path(args.texts)),
        "device": args.device,
        "out_of_domain": [w for w in workloads if w in OOD],
        "drafters": {},
    }
    loaded = {
        name: load_drafter(folder, target).to(args.device).bind_target(target) for name, folder in drafters.items()
    }
    rows, seconds = _replay(target, loaded, texts)
    for name, folder in drafters.items():
        summary = summarise(rows[name], out_of_domain=OOD)
        result["drafters"][name] = {"folder": folder, **summary, "replay_seconds": seconds[name], "rows": rows[name]}
        means = {k: v for k, v in summary.items() if k != "tau_by_workload"}  # None: no workload of that kind
        shown = {k: "n/a" if v is None else format(v, ".1%" if "first" in k else ".3f") for k, v in means.items()}
        tau = " ".join(f"{w} {v:.2f}" for w, v in summary["tau_by_workload"].items())
        print(
            f"{name}: OOD {shown['mean_tau_ood']}  in-domain {shown['mean_tau_in_domain']}  first draft accepted "
            f"{shown['first_accepted_ood']}/{shown['first_accepted_in_domain']}  | {tau}",
            flush=True,
        )
    if args.out:
        write_json(Path(args.out), result, indent=1)


if __name__ == "__main__":
    main()
