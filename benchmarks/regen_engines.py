"""Regeneration throughput, transformers' batched generate() against vLLM, on the same prompts (issue 27, part 1).

Both engines answer the same seeded sample of the broad mix (greedy, bfloat16, one core each: `torch` with one thread
here, vLLM binding one core itself), one after the other, each at its batch size; tokens/s counts response tokens
over generation time (loading reported apart). A float32 transformers run of the same prompts is the reference for
how far each engine's responses are from the HF target's own greedy output: the share of identical responses and
the mean shared prefix. Run it with nothing else on the machine.

    .venv/bin/python benchmarks/regen_engines.py --prompts ~/.cache/dlite-hf/work/mix/prompts.jsonl \
        --num-prompts 96 --hf-batch-sizes 16,64 --out benchmarks/results/regen-engines.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch


def _sample(prompts: list[dict], n: int, seed: int) -> list[dict]:
    by_domain = defaultdict(list)
    for prompt in prompts:
        by_domain[prompt.get("workload")].append(prompt)
    rng = random.Random(seed)
    for rows in by_domain.values():
        rng.shuffle(rows)
    picked, domains = [], sorted(by_domain, key=str)
    while len(picked) < n and any(by_domain.values()):  # round robin: every domain in the sample
        for domain in domains:
            if by_domain[domain] and len(picked) < n:
                picked.append(by_domain[domain].pop())
    return picked


def _responses(path: Path) -> dict[str, list[int]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {r["id"]: r["input_ids"][r["prompt_tokens"] :] for r in rows}


def _hf(model_dir, tokenizer, prompts, dtype: str, batch: int, args, work: Path) -> dict:
    from transformers import AutoModelForCausalLM

    from dlite_hf.training.regenerate import regenerate

    started = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
    loaded = time.perf_counter()
    out = work / f"hf-{dtype}-b{batch}.jsonl"
    regenerate(model, tokenizer, prompts, out, max_new_tokens=args.max_new_tokens,
               max_prompt_tokens=args.max_prompt_tokens, batch_size=batch, progress=False)  # fmt: skip
    generate_s = time.perf_counter() - loaded
    responses = _responses(out)
    tokens = sum(len(r) for r in responses.values())
    return {"engine": f"transformers {dtype} batch {batch}", "load_s": loaded - started, "generate_s": generate_s,
            "tokens": tokens, "tokens_per_s": tokens / generate_s, "responses": responses}  # fmt: skip


def _vllm(model_dir, tokenizer, prompts, args, work: Path) -> dict:
    from dlite_hf.training.regenerate_vllm import regenerate_vllm

    out = work / "vllm-bfloat16.jsonl"
    summary = regenerate_vllm(
        model_dir, tokenizer, prompts, out, max_new_tokens=args.max_new_tokens,
        max_prompt_tokens=args.max_prompt_tokens, chunk=len(prompts), dtype="bfloat16",
    )  # fmt: skip
    responses = _responses(out)
    tokens = sum(len(r) for r in responses.values())
    return {"engine": f"{summary['engine']} bfloat16", "load_s": summary["load_s"],
            "generate_s": summary["generate_s"], "tokens": tokens, "tokens_per_s": tokens / summary["generate_s"],
            "responses": responses}  # fmt: skip


def _distance(responses: dict[str, list[int]], reference: dict[str, list[int]]) -> dict:
    identical, prefix = 0, []
    for key, ref in reference.items():
        got = responses.get(key, [])
        identical += got == ref
        shared = 0
        while shared < min(len(got), len(ref)) and got[shared] == ref[shared]:
            shared += 1
        prefix.append(shared / max(1, len(ref)))
    return {"identical": identical, "of": len(reference), "mean_shared_prefix": sum(prefix) / max(1, len(prefix))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="smollm2-135m")
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--num-prompts", type=int, default=96)
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--max-prompt-tokens", type=int, default=2048)
    parser.add_argument("--hf-batch-sizes", default="16,64")
    parser.add_argument("--reference-prompts", type=int, default=32, help="float32 HF reference on the first N")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from transformers import AutoTokenizer

    from dlite_hf.assets import resolve_model
    from dlite_hf.rows import read_jsonl

    torch.set_num_threads(1)
    model_dir = resolve_model(args.target)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = _sample(read_jsonl(args.prompts), args.num_prompts, args.seed)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        runs.append(_vllm(model_dir, tokenizer, prompts, args, work))
        for batch in [int(b) for b in args.hf_batch_sizes.split(",")]:
            runs.append(_hf(model_dir, tokenizer, prompts, "bfloat16", batch, args, work))
        reference = _hf(model_dir, tokenizer, prompts[: args.reference_prompts], "float32", 16, args, work)
    for run in runs:
        run["vs_hf_float32_greedy"] = _distance(run["responses"], reference["responses"])
    fastest_hf = max((r for r in runs if r["engine"].startswith("transformers")), key=lambda r: r["tokens_per_s"])
    result = {
        "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "threads": "1 core each (torch 1 thread; vLLM binds one core)",
        "prompts": len(prompts),
        "domains": sorted({p.get("workload") for p in prompts}, key=str),
        "runs": [{k: v for k, v in r.items() if k != "responses"} for r in runs],
        "vllm_over_best_hf": runs[0]["tokens_per_s"] / fastest_hf["tokens_per_s"],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print("| engine | tokens | load s | generate s | tokens/s | identical to HF float32 greedy | shared prefix |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in result["runs"]:
        d = r["vs_hf_float32_greedy"]
        print(f"| {r['engine']} | {r['tokens']} | {r['load_s']:.0f} | {r['generate_s']:.0f} | {r['tokens_per_s']:.1f} "
              f"| {d['identical']}/{d['of']} | {d['mean_shared_prefix']:.2f} |")  # fmt: skip
    print(f"vLLM / fastest transformers: {result['vllm_over_best_hf']:.2f}x")


if __name__ == "__main__":
    main()
