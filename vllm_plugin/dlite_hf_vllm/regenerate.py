"""The vLLM worker of `dlite-hf regenerate --engine vllm`: the target answers tokenized prompts, rows appended.

Runs inside the vLLM environment, started by `dlite_hf.training.regenerate_vllm` (the dlite-hf side tokenizes the
prompts with the target's chat template, drops the ids already written and cuts a torn last line first). Input: a
job JSONL, one `{"id", "workload", "prompt_ids"}` per line. Output: the same rows as `--engine transformers`
(`{"id", "workload", "input_ids", "loss_mask", "prompt_tokens", "finished"}`) plus `"engine"` and `"sampling"`,
appended chunk by chunk and fsync'ed, so a kill loses at most the chunk in flight and duplicates nothing.

    python -m dlite_hf_vllm.regenerate --model DIR --job JOB --out OUT [--samples N --temperature T --top-p P]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlite_hf_vllm.regenerate", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="the target's HF folder")
    parser.add_argument("--job", required=True, help="job JSONL (id, workload, prompt_ids)")
    parser.add_argument("--out", required=True, help="rows JSONL, appended")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--chunk", type=int, default=256, help="prompts per engine call (one fsync each)")
    parser.add_argument("--samples", type=int, default=0, help="0: greedy; N: N sampled responses per prompt")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-p", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--summary", default=None, help="write the final counts (JSON) here")
    parser.add_argument("--memory-fraction", type=float, default=0.3, help="vLLM gpu_memory_utilization (CPU: RAM)")
    args = parser.parse_args(argv)
    if args.chunk < 1 or args.max_new_tokens < 1 or args.samples < 0:
        raise SystemExit(
            f"--chunk {args.chunk}, --max-new-tokens {args.max_new_tokens}: expected >= 1; "
            f"--samples {args.samples}: expected >= 0."
        )
    job = _read_job(Path(args.job))
    engine = _engine_version()
    tag = _sampling_tag(args)
    if not job:
        _write_summary(args.summary, {"written": 0, "tokens": 0})
        return 0

    from vllm import LLM, SamplingParams

    started = time.perf_counter()
    llm = LLM(
        model=args.model,
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.memory_fraction,
        seed=args.seed,
    )
    loaded = time.perf_counter()
    print(f"[dlite-vllm] {engine} loaded {args.model} in {loaded - started:.1f} s; {len(job)} prompts", flush=True)
    written = tokens = 0
    gen_time = 0.0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a", encoding="utf-8") as handle:
        for start in range(0, len(job), args.chunk):
            chunk = job[start : start + args.chunk]
            prompts, params, meta = [], [], []
            for row in chunk:
                for sample in range(max(1, args.samples)):
                    prompts.append({"prompt_token_ids": row["prompt_ids"]})
                    if args.samples:
                        # one seed per (prompt, sample): a resumed run draws the same response again
                        seed = (args.seed * 1_000_003 + start + len(meta)) % (2**31)
                        params.append(
                            SamplingParams(
                                max_tokens=args.max_new_tokens,
                                temperature=args.temperature,
                                top_p=args.top_p,
                                seed=seed,
                            )
                        )
                        meta.append((f"{row['id']}#{sample}", row))
                    else:
                        params.append(SamplingParams(max_tokens=args.max_new_tokens, temperature=0.0))
                        meta.append((row["id"], row))
            t0 = time.perf_counter()
            outputs = llm.generate(prompts, params, use_tqdm=False)
            gen_time += time.perf_counter() - t0
            lines = []
            for (row_id, row), output in zip(meta, outputs):
                completion = output.outputs[0]
                response = [int(t) for t in completion.token_ids]
                ids = [int(t) for t in row["prompt_ids"]]
                lines.append(
                    json.dumps(
                        {
                            "id": row_id,
                            "workload": row.get("workload"),
                            "input_ids": ids + response,
                            "loss_mask": [0] * len(ids) + [1] * len(response),
                            "prompt_tokens": len(ids),
                            "finished": completion.finish_reason == "stop",
                            "engine": f"{engine}:{args.dtype}",
                            "sampling": tag,
                        },
                        separators=(",", ":"),
                    )
                    + "\n"
                )
                tokens += len(response)
            handle.write("".join(lines))
            handle.flush()
            os.fsync(handle.fileno())
            written += len(lines)
            print(
                f"[dlite-vllm] {written} rows, {tokens} response tokens, {tokens / gen_time:.1f} tokens/s", flush=True
            )
    _write_summary(
        args.summary,
        {
            "written": written,
            "tokens": tokens,
            "generate_s": round(gen_time, 2),
            "load_s": round(loaded - started, 2),
            "tokens_per_s": round(tokens / gen_time, 2),
            "engine": engine,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
