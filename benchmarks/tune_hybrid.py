"""Choose the hybrid's selection rule (lookup_min_match m, and the cap N on a retrieved draft) on a tuning split.

The tuning split is disjoint from every benchmark prompt: training-split prompts of chat / code / math / tool
(`load_prompts(..., "train")`), two training-split ToolTalk conversations replayed turn by turn, and a coding
session over standard-library modules that no benchmark coding session reads (`TUNING_TASK`). Every variant runs
through the benchmark runner beside plain greedy (interleaved per prompt, 1 thread), so the figures are tau and
speedup measured in one run; outputs must be identical to plain.

    .venv/bin/python benchmarks/tune_hybrid.py --min-match 2,4,8 --lookup-tokens 8,16,32 \\
        --out benchmarks/results/smollm2-135m-tune-hybrid.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

TUNING_MODULES = ("fnmatch", "glob", "configparser")


def tuning_workloads(tokenizer, num_prompts: int, max_tokens: int, max_turns: int) -> dict[str, list[dict]]:
    from dlite_hf.data.prompts import load_prompts
    from dlite_hf.data.workloads import CODING_TASKS, CodingTask, coding_session, session_from_messages

    used = {m for task in CODING_TASKS for m in task.modules}
    if used & set(TUNING_MODULES):
        raise SystemExit(f"tuning modules {sorted(used & set(TUNING_MODULES))} are read by a benchmark session")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="smollm2-135m")
    parser.add_argument("--drafter", default="drafters/dlite-smollm2-135m")
    parser.add_argument("--min-match", default="2,4,8")
    parser.add_argument("--lookup-tokens", default="16", help="caps N to try (each with every --min-match)")
    parser.add_argument("--num-prompts", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--max-tokens", type=int, default=6144)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import torch
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    from dlite_hf.assets import resolve_model
    from dlite_hf.bench.methods import BenchMethod
    from dlite_hf.bench.results import as_result
    from dlite_hf.bench.runner import run_bench

    torch.set_num_threads(args.threads)
    os.environ["TRANSFORMERS_SDPA_FORCE_GQA"] = "1"
    folder = resolve_model(args.target)
    target = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    drafter = AutoModel.from_pretrained(args.drafter)
    methods = [BenchMethod("plain", "plain"), BenchMethod("dlite", "dlite", drafter, checkpoint=args.drafter)]
    for n in [int(x) for x in args.lookup_tokens.split(",")]:
        for m in [int(x) for x in args.min_match.split(",")]:
            methods.append(
                BenchMethod(
                    f"hybrid_m{m}_n{n}", "dlite", drafter, checkpoint=args.drafter, lookup_tokens=n, lookup_min_match=m
                )
            )
    workloads = tuning_workloads(tokenizer, args.num_prompts, args.max_tokens, args.max_turns)
    result = as_result(
        run_bench(
            target,
            tokenizer,
            methods,
            workloads,
            max_new_tokens=args.max_new_tokens,
            progress=False,
            meta={"command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]), "split": "tuning (train)"},
        )
    )
    rows = [
        {k: getattr(row, k) for k in ("workload", "method", "tau_pooled", "mean_tau", "speedup", "decode_speedup")}
        for row in result.summary
    ]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows, "ok": result.ok, "result": result.to_dict()}, indent=1))
    _print_table([m.name for m in methods], result)
    print("all outputs identical to plain:", result.ok)


def _print_table(names: list[str], result) -> None:
    """tau (pooled) / speedup of every method on every workload, a markdown table."""
    cell = result.rows_by_key()
    print("tau (pooled) / speedup over plain")
    print("| workload | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for label in dict.fromkeys(r.workload for r in result.summary):
        cells = [
            f"{cell[label, n].tau_pooled:.2f} / {cell[label, n].speedup:.2f}x" if (label, n) in cell else "-"
            for n in names
        ]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
