"""Who computes the trainer's target features fastest here (issue 27, part 4): vLLM against transformers.

On the same training rows (a seeded sample of a `dlite-hf regenerate` file, truncated as the trainer truncates),
one core each, nothing else running:

* vLLM: `dlite-hf features` (the plugin's feature tap, bfloat16, torch.compile), its tokens/s once loaded and its
  wall time with loading, once per cache layout (`--anchor-strides`: 1 keeps every position's tapped states, 4 is
  what `scripts/train_at_scale.sh` trains from);
* transformers: `target_features` (the trainer's own forward) in float32 (what `dlite-hf train` runs) and in
  bfloat16, on batches of `--batch-size` rows of similar length.

Run it on a quiet machine:

    VLLM_CPU_OMP_THREADS_BIND=1 taskset -c 1 .venv/bin/python benchmarks/features_engines.py \\
        --rows ROWS --num-rows 48 --max-length 2560 --out benchmarks/results/features-engines.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", required=True, type=Path)
    parser.add_argument("--num-rows", type=int, default=48)
    parser.add_argument("--max-length", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--drafter", default=str(ROOT / "drafters" / "dlite-smollm2-135m"))
    parser.add_argument("--target", default="smollm2-135m")
    parser.add_argument("--anchor-strides", default="1,4", help="vLLM runs, one per cache layout (--anchor-stride)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    from transformers import AutoConfig

    from dlite_hf.assets import open_target
    from dlite_hf.bench.measure import environment_info
    from dlite_hf.rows import read_jsonl
    from dlite_hf.training.data import RegeneratedDataset
    from dlite_hf.training.features import target_features

    rows = read_jsonl(args.rows)
    picked = [rows[i] for i in torch.randperm(len(rows), generator=torch.Generator().manual_seed(0))[: args.num_rows]]
    dataset = RegeneratedDataset(picked, max_length=args.max_length).rows
    tokens = sum(len(r["input_ids"]) for r in dataset)
    work = Path(tempfile.mkdtemp(prefix="dlite-features-bench-"))
    sample = work / "rows.jsonl"
    sample.write_text("".join(json.dumps(r) + "\n" for r in picked))

    strides = [int(s) for s in args.anchor_strides.split(",") if s]
    if not strides or min(strides) < 1:
        raise SystemExit(f"--anchor-strides {args.anchor_strides!r}: expected comma-separated ints >= 1, e.g. 1,4.")
    vllm_runs = {}
    for stride in strides:  # one cache each: the layout (what the tap copies out and writes) is the difference
        begin = time.perf_counter()
        command = [sys.executable, "-m", "dlite_hf.cli", "features", "--rows", str(sample), "--cache"]
        command += [str(work / f"c{stride}"), "--drafter", args.drafter, "--target", args.target]
        command += ["--max-length", str(args.max_length), "--anchor-stride", str(stride)]
        done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - begin
        found = json.loads(done.stdout.strip().splitlines()[-1])
        vllm_runs[stride] = {"tokens_per_s": found["tokens_per_s"], "seconds": found["seconds"], "wall_s": wall}
        print(json.dumps({f"vllm_bfloat16_stride{stride}": vllm_runs[stride]}), flush=True)

    layers = list(AutoConfig.from_pretrained(args.drafter, trust_remote_code=True).target_layer_ids)
    order = sorted(range(len(dataset)), key=lambda i: len(dataset[i]["input_ids"]))
    results = {}
    for dtype in ("float32", "bfloat16"):
        target, _, _ = open_target(args.target, dtype=dtype)
        seconds = 0.0
        for start in range(0, len(order), args.batch_size):
            batch = [dataset[i]["input_ids"] for i in order[start : start + args.batch_size]]
            width = max(len(ids) for ids in batch)
            ids = torch.zeros(len(batch), width, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for b, row in enumerate(batch):
                ids[b, : len(row)], mask[b, : len(row)] = torch.tensor(row), 1
            begin = time.perf_counter()
            target_features(target, ids, layers, mask)
            seconds += time.perf_counter() - begin
        results[dtype] = {"seconds": seconds, "tokens_per_s": tokens / seconds}
        print(json.dumps({dtype: results[dtype]}), flush=True)
    summary = {
        "command": "benchmarks/features_engines.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "threads": "1 (torch.set_num_threads; vLLM binds one core)",
        "machine": environment_info()["machine"],
        "rows": len(dataset), "tokens": tokens, "max_length": args.max_length, "batch_size": args.batch_size,
        "vllm_bfloat16": {f"anchor_stride_{k}": v for k, v in vllm_runs.items()},
        "transformers_float32": results["float32"], "transformers_bfloat16": results["bfloat16"],
        "vllm_over_transformers_float32": {
            f"anchor_stride_{k}": v["tokens_per_s"] / results["float32"]["tokens_per_s"] for k, v in vllm_runs.items()
        },
        "vllm_wall_over_transformers_float32": {
            f"anchor_stride_{k}": results["float32"]["seconds"] / v["wall_s"] for k, v in vllm_runs.items()
        },
    }  # fmt: skip
    print(json.dumps(summary, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
