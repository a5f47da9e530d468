"""Matrix products per dtype on this machine: whether its CPU computes bfloat16 natively.

torch's CPU kernels compute bfloat16 matrix products in hardware where the CPU has AVX512-BF16 or AMX, and emulate
them elsewhere (AVX2). `--dtype fastest` (`dlite_hf.defaults.resolve_dtype`) chooses by that; this measures what
it decides on: GFLOP/s of float32, bfloat16 and float16 products at the shapes a SmolLM2-135M layer runs (a prefill
or a training batch of M rows, and a one-token step), one thread, interleaved repeats, medians.

    .venv/bin/python benchmarks/matmul_dtypes.py --out benchmarks/results/matmul-dtypes-avx2.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

SHAPES = {"prefill, 512 rows x MLP up": (512, 576, 1536), "one-token step, MLP up": (1, 576, 1536)}
DTYPES = ("float32", "bfloat16", "float16")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.threads < 1 or args.repeats < 1:
        parser.error(f"--threads {args.threads} / --repeats {args.repeats}: expected at least 1 each.")
    torch.set_num_threads(args.threads)
    from dlite_hf.bench.measure import environment_info
    from dlite_hf.defaults import resolve_dtype

    results = {}
    for label, (m, k, n) in SHAPES.items():
        operands = {
            d: (torch.randn(m, k).to(getattr(torch, d)), torch.randn(k, n).to(getattr(torch, d))) for d in DTYPES
        }
        calls = max(1, int(2e9 // (2 * m * k * n)))  # about 2 GFLOP a timing in float32
        per_dtype = {d: calls if d == "float32" else max(1, calls // 10) for d in DTYPES}  # the others: far slower
        seconds: dict[str, list[float]] = {d: [] for d in DTYPES}
        for _ in range(args.repeats):
            for dtype in DTYPES:
                a, b = operands[dtype]
                a @ b  # warm
                start = time.perf_counter()
                for _ in range(per_dtype[dtype]):
                    a @ b
                seconds[dtype].append((time.perf_counter() - start) / per_dtype[dtype])
        gflops = {d: 2 * m * k * n / statistics.median(seconds[d]) / 1e9 for d in DTYPES}
        results[label] = {
            "shape": [m, k, n],
            "gflop_per_s": gflops,
            "float32_over_bfloat16": gflops["float32"] / gflops["bfloat16"],
        }
        print(label, {d: round(v, 2) for d, v in gflops.items()}, flush=True)
    summary = {
        "command": "benchmarks/matmul_dtypes.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "threads": args.threads,
        "machine": environment_info()["machine"],
        "fastest_resolves_to": resolve_dtype("fastest"),
        "shapes": results,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "shapes"}, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
