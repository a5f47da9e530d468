"""What a verification forward costs on this CPU, in each dtype, and where its extra cost goes.

A speculative round pays one target forward over the anchor plus the drafts (q = K + 1 tokens); plain decoding
pays one forward over one token. The ratio q=8 / q=1 is the break-even tau of any drafter. This script measures:

1. **the forward** over q new tokens on top of a cache of each length, per dtype, with transformers' default SDPA
   path and with `TRANSFORMERS_SDPA_FORCE_GQA=1` (read at every attention call, so the two are interleaved in one
   process), and with each `--attentions` (transformers' `sdpa`, or `packed_gqa`: `dlite_hf.attention`). The cache
   holds random keys and values of the right shape (a forward's cost does not depend on their values), so 16k
   contexts need no 16k-token prefill;
2. **the breakdown** of that forward (`--breakdown`), from forward hooks on the target's modules: the decoder's
   linear layers, the attention core (rotary, cache update, the GQA key/value repeat, SDPA), the MLP's activation,
   the norms, the lm_head, the preamble before the first layer (embedding, mask and position building) and the rest;
3. **generate()'s bookkeeping** (`--bookkeeping`): wall time of a `generate()` call outside the target's forwards,
   per decode step (plain) and per round (prompt lookup on a repetitive prompt, so drafts are long and accepted);
4. **linear-layer variants** (`--linear-variants`): one decoder weight and the lm_head on 1 and 8 rows, float32
   `F.linear`, float32 with the transposed weight taken once (`x @ W.T.contiguous()`), float32 through oneDNN
   (`torch.utils.mkldnn.to_mkldnn`), and bfloat16 `F.linear`: whether any float32 layout makes 8 rows as cheap as 1.

    .venv/bin/python benchmarks/verify_cost.py --threads 1 --dtypes float32,bfloat16 \\
        --attentions sdpa,packed_gqa --contexts 512,2048,8192,16384 --tokens 1,2,4,8,16 --repeats 5 \\
        --breakdown --bookkeeping --linear-variants \\
        --out benchmarks/results/smollm2-135m-verify-cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import defaultdict


def _random_cache(model, context: int, generator):
    """A DynamicCache holding `context` random keys/values per layer, in the model's dtype."""
    import torch
    from transformers import DynamicCache

    config = model.config
    heads = config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    cache = DynamicCache(config=config)
    for layer in range(config.num_hidden_layers):
        shape = (1, heads, context, head_dim)
        keys = torch.randn(shape, generator=generator).to(model.dtype)
        values = torch.randn(shape, generator=generator).to(model.dtype)
        cache.update(keys, values, layer)
    return cache


class _Breakdown:
    """Inclusive wall times of the target's modules during one forward, folded into exclusive components."""

    def __init__(self, model):
        from torch import nn

        self.model = model
        self.times: dict[str, float] = defaultdict(float)
        self.handles = []
        self._starts: dict[int, float] = {}
        decoder = model.get_decoder()
        layers = decoder.layers
        self._first_layer = layers[0]
        self._watch(model, "total")
        self._watch(model.get_output_embeddings(), "lm_head")
        self._watch(layers[0], "first_layer_start", pre_only=True)
        for layer in layers:
            self._watch(layer.self_attn, "attention")
            self._watch(layer.mlp, "mlp")
            in_attention = {id(m) for m in layer.self_attn.modules()}
            for module in layer.modules():
                if isinstance(module, nn.Linear):
                    self._watch(module, "linear_attention" if id(module) in in_attention else "linear_mlp")
            for name in ("input_layernorm", "post_attention_layernorm"):
                self._watch(getattr(layer, name), "norms")
        self._watch(decoder.norm, "norms")

    def _watch(self, module, label: str, pre_only: bool = False) -> None:
        key = id(module), label

        def pre(*_):
            now = time.perf_counter()
            if label == "first_layer_start":
                self.times["preamble"] += now - self._starts[id(self.model), "total"]
            else:
                self._starts[key] = now

        def post(*_):
            self.times[label] += time.perf_counter() - self._starts.pop(key)

        self.handles.append(module.register_forward_pre_hook(pre))
        if not pre_only:
            self.handles.append(module.register_forward_hook(post))

    def components(self) -> dict[str, float]:
        t = self.times
        linear = t["linear_attention"] + t["linear_mlp"]
        parts = {
            "linear": linear,
            "attention_core": t["attention"] - t["linear_attention"],
            "mlp_activation": t["mlp"] - t["linear_mlp"],
            "norms": t["norms"],
            "lm_head": t["lm_head"],
            "preamble": t["preamble"],
        }
        parts["rest"] = t["total"] - sum(parts.values())
        parts["total"] = t["total"]
        return parts

    def reset(self) -> None:
        self.times.clear()
        self._starts.clear()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _forward_costs(model, contexts, tokens, repeats, generator, breakdown: bool) -> tuple[list, list]:
    import torch

    rows, parts_rows = [], []
    modes = ("default", "sdpa_gqa")
    for context in contexts:
        cache = _random_cache(model, context, generator)
        times = {(n, mode): [] for n in tokens for mode in modes}
        for repeat in range(repeats + 1):
            # every block size and both modes interleaved within a repeat, so drift and background load hit the
            # q=1 and the q=8 forwards alike (their ratio is the result)
            for n in tokens:
                for mode in modes:
                    os.environ["TRANSFORMERS_SDPA_FORCE_GQA"] = "1" if mode == "sdpa_gqa" else "0"
                    new = torch.randint(100, 10000, (1, n), generator=generator)
                    start = time.perf_counter()
                    model(new, cache=cache, use_cache=True)
                    if repeat:  # the first round warms up
                        times[n, mode].append(1000 * (time.perf_counter() - start))
                    cache.crop(-n)
        os.environ.pop("TRANSFORMERS_SDPA_FORCE_GQA", None)
        for n in tokens:
            rows.append({"context": context, "new_tokens": n, **{m: statistics.median(times[n, m]) for m in modes}})
        for n in [n for n in (1, 8) if breakdown and n in tokens]:
            probe = _Breakdown(model)
            samples = []
            for _ in range(repeats):
                probe.reset()
                model(torch.randint(100, 10000, (1, n), generator=generator), cache=cache)
                cache.crop(-n)
                samples.append(probe.components())
            probe.remove()
            medians = {k: 1000 * statistics.median(s[k] for s in samples) for k in samples[0]}
            parts_rows.append({"context": context, "new_tokens": n, "ms": medians})
        del cache
    return rows, parts_rows


def _bookkeeping(model, contexts, repeats, generator) -> list[dict]:
    """generate()'s own time per step (plain) and per round (prompt lookup), outside the target's forwards."""
    import torch

    from dlite_hf.bench.runner import ForwardTimer

    rows = []
    timer = ForwardTimer(model)
    for context in contexts:
        unit = torch.randint(100, 10000, (1, 64), generator=generator)
        prompt = unit.repeat(1, context // 64)  # repetitive: prompt lookup drafts long blocks, and they are accepted
        for method, extra in (("plain", {}), ("prompt_lookup", {"prompt_lookup_num_tokens": 8})):
            per_unit = []
            for _ in range(max(2, repeats // 2)):
                timer.reset()
                start = time.perf_counter()
                out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=48,
                                     do_sample=False, **extra)  # fmt: skip
                wall = time.perf_counter() - start
                decode = timer.forwards[1:]
                overhead = wall - timer.total_s()
                per_unit.append(1000 * overhead / max(1, len(decode)))
            rows.append({
                "context": context, "method": method, "new_tokens": int(out.shape[1] - prompt.shape[1]),
                "forwards": len(timer.forwards), "overhead_ms_per_forward": statistics.median(per_unit),
            })  # fmt: skip
    timer.remove()
    return rows


def _lm_head_rows(model, counts: list[int], repeats: int) -> list[dict]:
    """The lm_head alone on n rows (ms, median): where a multi-token forward's extra cost comes from."""
    import torch

    head = model.get_output_embeddings()
    rows = []
    for n in counts:
        hidden = torch.randn(1, n, head.in_features).to(head.weight.dtype)
        head(hidden)  # warm-up
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            head(hidden)
            samples.append(1000 * (time.perf_counter() - start))
        rows.append({"rows": n, "ms": statistics.median(samples)})
    return rows


def _linear_variants(model, repeats) -> list[dict]:
    import torch
    import torch.nn.functional as F  # noqa: N812
    import torch.utils.mkldnn

    def median_us(fn) -> float:
        for _ in range(5):
            fn()
        samples = []
        for _ in range(max(50, 10 * repeats)):
            start = time.perf_counter()
            fn()
            samples.append(1e6 * (time.perf_counter() - start))
        return statistics.median(samples)

    layer = model.get_decoder().layers[0]
    weights = {
        "mlp.up_proj": layer.mlp.up_proj.weight,
        "mlp.down_proj": layer.mlp.down_proj.weight,
        "lm_head": model.get_output_embeddings().weight,
    }
    rows = []
    with torch.no_grad():
        for name, weight in weights.items():
            w32 = weight.detach().float()
            wt = w32.t().contiguous()
            w16 = w32.bfloat16()
            linear = torch.nn.Linear(w32.shape[1], w32.shape[0], bias=False)
            linear.weight.copy_(w32)
            onednn = torch.utils.mkldnn.to_mkldnn(linear)
            for n in (1, 8):
                x = torch.randn(n, w32.shape[1])
                xm, x16 = x.to_mkldnn(), x.bfloat16()
                variants = {
                    "float32 F.linear": median_us(lambda x=x, w=w32: F.linear(x, w)),
                    "float32 x @ W.T (transposed once)": median_us(lambda x=x, w=wt: x @ w),
                    "float32 oneDNN": median_us(lambda x=xm, m=onednn: m(x)),
                    "bfloat16 F.linear": median_us(lambda x=x16, w=w16: F.linear(x, w)),
                }
                same = torch.equal(F.linear(x, w32), x @ wt)
                rows.append({"weight": name, "shape": list(w32.shape), "rows": n, "us": variants,
                             "transposed_bitwise_equal": same})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="smollm2-135m")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument(
        "--attentions", default="sdpa", help="comma-separated: sdpa (transformers'), packed_gqa (dlite_hf.attention)"
    )
    parser.add_argument("--contexts", default="512,2048,8192,16384", help="cache lengths (tokens)")
    parser.add_argument("--tokens", default="1,2,8", help="new tokens per forward")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--breakdown", action="store_true", help="per-component times at q=1 and q=8")
    parser.add_argument("--bookkeeping", action="store_true", help="generate()'s time outside forwards")
    parser.add_argument("--linear-variants", action="store_true", help="float32 layouts vs bfloat16 F.linear")
    parser.add_argument(
        "--lm-head-rows",
        default="",
        help="also time the target's lm_head alone on this many rows each (e.g. 1,2,4,8), per dtype",
    )
    parser.add_argument("--out", default=None, help="write the JSON here")
    args = parser.parse_args()

    import torch

    from dlite_hf.assets import open_target

    torch.set_num_threads(args.threads)
    contexts = [int(x) for x in args.contexts.split(",")]
    tokens = [int(x) for x in args.tokens.split(",")]
    result = {"target": args.target, "threads": args.threads, "repeats": args.repeats, "dtypes": {}}
    modes = [(d, a) for d in args.dtypes.split(",") for a in args.attentions.split(",")]
    with torch.no_grad():
        for dtype, attention in modes:
            label = dtype if attention == "sdpa" else f"{dtype}, {attention}"
            model, _, _ = open_target(args.target, dtype=dtype, attention=attention)
            generator = torch.Generator().manual_seed(0)
            rows, parts = _forward_costs(model, contexts, tokens, args.repeats, generator, args.breakdown)
            entry = {"rows": rows}
            if parts:
                entry["breakdown"] = parts
            if args.bookkeeping:
                entry["bookkeeping"] = _bookkeeping(model, [c for c in contexts if c <= 2048], args.repeats,
                                                    generator)  # fmt: skip
            if args.lm_head_rows:
                entry["lm_head"] = _lm_head_rows(model, [int(n) for n in args.lm_head_rows.split(",")], args.repeats)
            result["dtypes"][label] = entry
            print(json.dumps({label: entry}), flush=True)
            if args.linear_variants and dtype == "float32" and "linear_variants" not in result:
                result["linear_variants"] = _linear_variants(model, args.repeats)
            del model
    print(markdown(result))
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)


def markdown(result: dict) -> str:
    """The tables of the README and benchmarks/README.md."""
    lines = [f"target {result['target']}, {result['threads']} thread(s), median of {result['repeats']}", ""]
    lines += ["| dtype | cache tokens | q=1 ms | q=8 ms | q=8 / q=1 | q=8 / q=1 with SDPA GQA |"]
    lines += ["|---|---:|---:|---:|---:|---:|"]
    for dtype, entry in result["dtypes"].items():
        by = {(r["context"], r["new_tokens"]): r for r in entry["rows"]}
        for context in sorted({r["context"] for r in entry["rows"]}):
            one, eight = by.get((context, 1)), by.get((context, 8))
            if one and eight:
                lines.append(
                    f"| {dtype} | {context} | {one['default']:.1f} | {eight['default']:.1f} "
                    f"| {eight['default'] / one['default']:.2f} | {eight['sdpa_gqa'] / one['sdpa_gqa']:.2f} |"
                )
    for dtype, entry in result["dtypes"].items():
        if not entry.get("breakdown"):
            continue
        parts = {(r["context"], r["new_tokens"]): r["ms"] for r in entry["breakdown"]}
        names = [k for k in next(iter(parts.values())) if k != "total"]
        lines += ["", f"{dtype}: where the time of a forward goes, ms at q=1 -> q=8 (hooks on the modules)", ""]
        lines += ["| cache | " + " | ".join(names) + " | total |", "|---:|" + "---:|" * (len(names) + 1)]
        for context in sorted({c for c, _ in parts}):
            one, eight = parts.get((context, 1)), parts.get((context, 8))
            if one and eight:
                cells = [f"{one[k]:.1f} -> {eight[k]:.1f}" for k in [*names, "total"]]
                lines.append(f"| {context} | " + " | ".join(cells) + " |")
    for dtype, entry in result["dtypes"].items():
        if entry.get("bookkeeping"):
            lines += ["", f"{dtype}: generate() time outside the target's forwards, ms per forward", ""]
            lines += ["| cache | method | ms |", "|---:|---|---:|"]
            lines += [f"| {r['context']} | {r['method']} | {r['overhead_ms_per_forward']:.2f} |" for r in
                      entry["bookkeeping"]]  # fmt: skip
    if result.get("linear_variants"):
        lines += ["", "Linear layers, microseconds (1 row -> 8 rows)", ""]
        variants = list(result["linear_variants"][0]["us"])
        lines += ["| weight | " + " | ".join(variants) + " |", "|---|" + "---:|" * len(variants)]
        by = defaultdict(dict)
        for r in result["linear_variants"]:
            by[r["weight"]][r["rows"]] = r["us"]
        for weight, rows in by.items():
            lines.append(
                f"| {weight} | " + " | ".join(f"{rows[1][v]:.0f} -> {rows[8][v]:.0f}" for v in variants) + " |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
