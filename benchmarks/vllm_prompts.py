"""Real prompts for the vLLM side (tests_vllm/, benchmarks/serve_vllm.py), with dlite-hf's own generate() result.

Runs in the package's environment (.venv): the benchmark workloads' eval splits, each session's first turn under the
target's chat template, as token ids and messages (made at run time, never committed: the texts are third-party).
With `--hf-stats`, also DLite's greedy `target.generate(..., assistant_model=drafter)` output and draft counts on
each prompt, which the vLLM tests compare with vLLM's spec-decode metrics.

    .venv/bin/python benchmarks/vllm_prompts.py --out prompts.json --num-prompts 2 --max-new-tokens 64 --hf-stats
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from dlite_hf.assets.loading import load_drafter, open_target
from dlite_hf.chat_template import chat_prompt_ids
from dlite_hf.data.workloads import build_workloads

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workloads", default="chat,code,math,tool,agentic,long")
    parser.add_argument("--num-prompts", type=int, default=2, help="prompts (sessions) per workload")
    parser.add_argument("--long-lengths", default="1024")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--hf-stats", action="store_true", help="also DLite's generate() output and draft counts")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--target", default="smollm2-135m")
    parser.add_argument("--drafter", default=str(ROOT / "drafters" / "dlite-smollm2-135m"))
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    target, tokenizer, folder = open_target(args.target, dtype=args.dtype)
    lengths = [int(x) for x in args.long_lengths.split(",") if x]
    workloads = build_workloads(args.workloads.split(","), tokenizer, args.num_prompts, long_lengths=lengths)
    drafter = load_drafter(args.drafter, target) if args.hf_stats else None
    rows = []
    for label, sessions in workloads.items():
        for session in sessions[: args.num_prompts]:
            ids = chat_prompt_ids(tokenizer, session["turns"][0])
            row = {"workload": label, "id": session["id"], "source": session["source"], "prompt_ids": ids}
            row["messages"] = session["turns"][0]
            if drafter is not None:
                inputs = torch.tensor([ids])
                out = target.generate(
                    inputs,
                    attention_mask=torch.ones_like(inputs),
                    assistant_model=drafter,
                    do_sample=False,
                    max_new_tokens=args.max_new_tokens,
                )
                names = ("rounds", "drafted", "accepted", "tokens_per_forward", "drafted_per_forward")
                stats = {name: getattr(drafter.last_generation_stats, name) for name in names}
                row["hf"] = {"output_ids": out[0, len(ids) :].tolist(), **stats}
            rows.append(row)
            output = len(row.get("hf", {}).get("output_ids", []))
            print(label, session["id"], len(ids), output, file=sys.stderr, flush=True)
    meta = {
        "target": str(folder),
        "dtype": args.dtype,
        "max_new_tokens": args.max_new_tokens,
        "drafter": args.drafter,
        "command": " ".join(["benchmarks/vllm_prompts.py", *(argv or sys.argv[1:])]),
    }
    args.out.write_text(json.dumps({"meta": meta, "prompts": rows}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
