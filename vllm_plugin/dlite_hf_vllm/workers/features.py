"""Training features from vLLM's forward: what a history-free DLite block reads, in dlite-hf's feature-cache layout.

dlite-hf's trainer reads, per training sequence, the target's tapped states at its anchors' contexts and its final
(normed) hidden states from the first label on (`dlite_hf.data.features.cache.FeatureCache`, history-free layout).
transformers' forward on this CPU is the slow part of training; vLLM runs the same target several times faster.
So `dlite-hf features` writes a job (each sequence's token ids, its cache key and the positions its layout keeps)
and runs this module in the vLLM environment:

    python -m dlite_hf_vllm.workers.features --model TARGET --drafter DRAFTER --job JOB.jsonl --cache CACHE_DIR

Each sequence goes to the engine as a prompt with `max_tokens=1` (a prefill) beside a DLite speculative config, so
the plugin's runner hook hands the proposer the target's hidden states. In this mode (`FEATURE_TAP` set in the
environment) the proposer drafts nothing: its tap (`dlite_hf_vllm.feature_tap`) writes each request's entry. The
trainer adds the target's logsumexp and argmax on first read, with its own lm_head. Entries already in the cache are
skipped, and a kill loses only the requests in flight (entries are written whole, by rename).

The states are vLLM's, in the engine's dtype (bfloat16 here), rounded to float16: the features a bfloat16 engine
serves the drafter, not transformers' float32 ones (`tests_vllm/test_features.py` bounds the difference).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ..feature_tap import FEATURE_TAP

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write DLite training features with vLLM (see the module doc).")
    parser.add_argument("--model", required=True, help="the target's folder")
    parser.add_argument("--drafter", required=True, help="a DLite drafter folder: its tapped layers are written")
    parser.add_argument("--job", required=True, help="JSONL: key, input_ids, first, state_positions per sequence")
    parser.add_argument("--cache", required=True, help="the feature cache folder (dlite-hf's FeatureCache)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--max-model-len", type=int, required=True)
    parser.add_argument("--max-num-seqs", type=int, default=16)
    parser.add_argument("--memory", type=float, default=0.3, help="gpu_memory_utilization (CPU: share of memory)")
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--summary", default=None, help="write the counts as JSON here")
    args = parser.parse_args(argv)

    cache = Path(args.cache)
    todo = []
    with open(args.job, encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if not (cache / row["key"][:2] / f"{row['key']}.safetensors").exists():
                todo.append((row["key"], row["input_ids"]))
    spec = Path(args.job).with_suffix(".tap.json")
    spec.write_text(json.dumps({"cache": str(cache), "job": str(Path(args.job).resolve())}))
    os.environ[FEATURE_TAP] = str(spec)  # read by the proposer in the engine's worker processes
    summary = {"todo": len(todo), "tokens": sum(len(ids) for _, ids in todo)}
    if todo:
        from vllm import EngineArgs, LLMEngine, SamplingParams, TokensPrompt

        engine = LLMEngine.from_engine_args(
            EngineArgs(
                model=args.model,
                dtype=args.dtype,
                max_model_len=args.max_model_len,
                max_num_seqs=args.max_num_seqs,
                gpu_memory_utilization=args.memory,
                enable_prefix_caching=False,  # every position must be computed, not read from a cached prefix
                enforce_eager=args.enforce_eager,
                speculative_config={"model": args.drafter, "num_speculative_tokens": 1},
            )
        )
        params = SamplingParams(max_tokens=1, temperature=0.0)
        begin = time.perf_counter()
        pending, done, tokens = list(todo), 0, 0
        while pending or engine.has_unfinished_requests():
            while pending and engine.get_num_unfinished_requests() < 4 * args.max_num_seqs:
                key, ids = pending.pop(0)
                engine.add_request(key, TokensPrompt(prompt_token_ids=ids), params)
                tokens += len(ids)
            for output in engine.step():
                if output.finished:
                    done += 1
                    if done % 256 == 0:
                        rate = tokens / (time.perf_counter() - begin)
                        print(f"[dlite-features] {done}/{len(todo)} sequences, {rate:.0f} tokens/s", flush=True)
        summary["seconds"] = time.perf_counter() - begin
        summary["tokens_per_s"] = summary["tokens"] / summary["seconds"]
    missing = [key for key, _ in todo if not (cache / key[:2] / f"{key}.safetensors").exists()]
    summary["missing"] = len(missing)
    print(json.dumps(summary), flush=True)
    if args.summary:
        Path(args.summary).write_text(json.dumps(summary))
    if missing:
        print(f"[dlite-features] {len(missing)} sequences have no entry (e.g. {missing[:3]})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
