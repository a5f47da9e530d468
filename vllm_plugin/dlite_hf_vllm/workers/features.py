"""Training features from vLLM's forward, in dlite-hf's history-free feature-cache layout (docs/vllm.md, "Training
features from vLLM's forward"): each sequence of the job that `dlite-hf features` writes is a prompt with
`max_tokens=1` beside a DLite speculative config, and with `FEATURE_TAP` set the proposer drafts nothing: its
`FeatureTap` writes each sequence's entry, whole, by rename. Entries already in the cache are skipped. The states
are the engine's (in its dtype), rounded to float16: the features a bfloat16 engine serves, not transformers' float32.

    python -m dlite_hf_vllm.workers.features --model TARGET --drafter DRAFTER --job JOB.jsonl --cache CACHE_DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from . import finished_per_step, read_job, write_summary

FEATURE_TAP = "DLITE_HF_VLLM_FEATURE_TAP"  # environment: the tap's spec file (set by main for its engine workers)


def _entry(cache: Path, key: str) -> Path:
    return cache / key[:2] / f"{key}.safetensors"


class FeatureTap:
    """Collects each job request's kept positions from the target's forward and writes its cache entry."""

    def __init__(self, spec_path: str | Path, order: list[int]):
        spec = json.loads(Path(spec_path).read_text())
        self.cache = Path(spec["cache"])
        self.order = list(order)  # aux state index of each tapped layer, in the drafter's layer order
        self.rows: dict[str, tuple[int, int, torch.Tensor]] = {}
        for row in read_job(spec["job"], {"key", "input_ids", "first", "state_positions"}):
            positions = torch.tensor(row["state_positions"], dtype=torch.long)
            self.rows[row["key"]] = (len(row["input_ids"]), int(row["first"]), positions)
        self.buffers: dict[str, dict[str, torch.Tensor]] = {}
        self.written = 0

    def path(self, key: str) -> Path:
        return _entry(self.cache, key)

    def record(
        self,
        req_ids: list[str],
        query_start_loc: list[int],
        seq_lens: list[int],
        aux_hidden_states: list[torch.Tensor],
        hidden_states: torch.Tensor,
    ) -> None:
        """One engine step (of chunked prefills): request r's scheduled tokens are rows `query_start_loc[r] .. [r + 1]`
        of the step's states, at positions `seq_lens[r] - n .. seq_lens[r] - 1`."""
        for r, req_id in enumerate(req_ids):
            begin, end = query_start_loc[r], query_start_loc[r + 1]
            # vLLM's internal request id is the caller's id plus "-" and 8 random characters (vLLM 0.32)
            key = req_id if req_id in self.rows else req_id.rsplit("-", 1)[0]
            if end <= begin or key not in self.rows:
                continue
            length, first, positions = self.rows[key]
            stop = min(int(seq_lens[r]), length)
            start = stop - (end - begin)
            buffer = self.buffers.get(key)
            if buffer is None:
                width = hidden_states.shape[-1]
                buffer = self.buffers[key] = {
                    "states": torch.zeros(positions.numel(), len(self.order), width, dtype=torch.float16),
                    "final": torch.zeros(length - first, width, dtype=torch.float16),
                }
            inside = (positions >= start) & (positions < stop)
            if bool(inside.any()):
                rows = positions[inside] - start + begin
                stacked = torch.stack([aux_hidden_states[j][rows] for j in self.order], 1)
                buffer["states"][inside] = stacked.to(torch.float16).cpu()
            lo = max(first, start)
            if stop > lo:
                buffer["final"][lo - first : stop - first] = (
                    hidden_states[begin + lo - start : begin + stop - start].to(torch.float16).cpu()
                )
            if stop >= length:
                self._write(key, self.buffers.pop(key))

    def _write(self, key: str, entry: dict[str, torch.Tensor]) -> None:
        from safetensors.torch import save_file

        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # the process's own name: two workers never share one
        save_file({name: tensor.contiguous() for name, tensor in entry.items()}, str(tmp))
        tmp.replace(path)  # atomic: a killed worker leaves the old entry or the new one, never half of one
        self.written += 1


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
    job = read_job(args.job, {"key", "input_ids"})
    todo = [(row["key"], row["input_ids"]) for row in job if not _entry(cache, row["key"]).exists()]
    spec = Path(args.job).with_suffix(".tap.json")
    spec.write_text(json.dumps({"cache": str(cache), "job": str(Path(args.job).resolve())}))
    os.environ[FEATURE_TAP] = str(spec)  # read by the proposer in the engine's worker processes
    summary = {"todo": len(todo), "tokens": sum(len(ids) for _, ids in todo)}
    if todo:
        from vllm import EngineArgs, LLMEngine, SamplingParams

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
        done = tokens = 0
        requests = ((key, ids, params) for key, ids in todo)
        for finished in finished_per_step(engine, requests, 4 * args.max_num_seqs):
            for output in finished:
                done += 1
                tokens += len(output.prompt_token_ids)
                if done % 256 == 0:
                    rate = tokens / (time.perf_counter() - begin)
                    print(f"[dlite-features] {done}/{len(todo)} sequences, {rate:.0f} tokens/s", flush=True)
        summary["seconds"] = time.perf_counter() - begin
        summary["tokens_per_s"] = summary["tokens"] / summary["seconds"]
    missing = [key for key, _ in todo if not _entry(cache, key).exists()]
    summary["missing"] = len(missing)
    write_summary(args.summary, summary)
    if missing:
        print(f"[dlite-features] {len(missing)} sequences have no entry (e.g. {missing[:3]})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
