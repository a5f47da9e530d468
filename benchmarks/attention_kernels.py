"""One layer's bfloat16 attention for short queries on this CPU: SDPA against hand-written alternatives.

The query heads of each key/value head are packed into rows, as `dlite_hf.attention` does (3 rows: a decode step
of SmolLM2-135M, 9 query heads over 3 key/value heads; 24 rows: a verification over 8 tokens). Each variant's
time (median, ms) and its largest error against a float64 reference:

- `sdpa`: `scaled_dot_product_attention` (what `dlite_hf.attention` calls);
- `sdpa_math`: the same under `sdpa_kernel(SDPBackend.MATH)`;
- `manual_bf16_scores`: `softmax(q @ k.T)` with bfloat16 scores, then `@ v`;
- `manual_fp32_scores`: the same with the scores computed in float32 (q and k upcast every call).

    .venv/bin/python benchmarks/attention_kernels.py --threads 1 --contexts 2048,8192
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--contexts", default="2048,8192")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()

    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)

    def median_ms(fn) -> float:
        for _ in range(3):
            fn()
        samples = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            fn()
            samples.append(1000 * (time.perf_counter() - start))
        return statistics.median(samples)

    rows_out = []
    for context in [int(c) for c in args.contexts.split(",")]:
        k = torch.randn(1, 3, context, 64, generator=generator).bfloat16()
        v = torch.randn(1, 3, context, 64, generator=generator).bfloat16()
        for rows in (3, 24):
            q = rows // 3
            x = (2 * torch.randn(1, 3, rows, 64, generator=generator)).bfloat16()
            allowed = (torch.arange(q)[:, None] + context - q >= torch.arange(context)[None]).repeat(3, 1)[None, None]
            additive = torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))
            reference = F.scaled_dot_product_attention(x.double(), k.double(), v.double(), attn_mask=allowed)

            def sdpa(x=x, m=allowed, k=k, v=v):
                return F.scaled_dot_product_attention(x, k, v, attn_mask=m)

            def sdpa_math(x=x, m=allowed, k=k, v=v):
                with sdpa_kernel(SDPBackend.MATH):
                    return F.scaled_dot_product_attention(x, k, v, attn_mask=m)

            def manual_bf16_scores(x=x, a=additive, k=k, v=v):
                scores = torch.matmul(x, k.transpose(-1, -2)).float() * 0.125 + a
                return torch.matmul(torch.softmax(scores, -1).bfloat16(), v)

            def manual_fp32_scores(x=x, a=additive, k=k, v=v):
                scores = torch.matmul(x.float(), k.float().transpose(-1, -2)) * 0.125 + a
                return torch.matmul(torch.softmax(scores, -1).bfloat16(), v)

            for fn in (sdpa, sdpa_math, manual_bf16_scores, manual_fp32_scores):
                error = float((fn().double() - reference).abs().max())
                row = {"context": context, "rows": rows, "variant": fn.__name__, "ms": median_ms(fn), "error": error}
                rows_out.append(row)
                print(f"context {context:>6}  rows {rows:>2}  {fn.__name__:<20} {row['ms']:.3f} ms  error {error:.1e}")
    print(json.dumps({"threads": args.threads, "rows": rows_out}))


if __name__ == "__main__":
    main()
