"""The serving benchmark (issue 26): DLite in vLLM against plain vLLM and vLLM's own proposers, by concurrency.

Runs in the vLLM environment (.venv-vllm) on prompts from `benchmarks/vllm_prompts.py`, every engine alive at once,
each cell (concurrency, workload) `--repeats` rounds with the methods in a rotated order; what is measured and how:
benchmarks/README.md, "Serving with vLLM".

    VLLM_CPU_OMP_THREADS_BIND=1 .venv-vllm/bin/python benchmarks/serve_vllm.py --prompts prompts.json \\
        --out benchmarks/results/serve-vllm.json   # `make bench-vllm`; the plot: --report RESULTS --plot PNG (.venv)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUFFIX_PATH = Path.home() / ".cache" / "dlite-hf" / "suffix-decoding"  # build_suffix_decoding.sh's $OUT
DRAFTER = str(ROOT / "drafters" / "dlite-smollm2-135m")  # _methods: the prompts file's (vllm_prompts.py --drafter)
METHODS = {
    "plain": None,
    "ngram": {"method": "ngram", "num_speculative_tokens": 7, "prompt_lookup_max": 4, "prompt_lookup_min": 2},
    # vLLM's defaults (tree depth and up to 24 tokens, spec factor 1) without the global tree of past responses: the
    # benchmark sends the same prompts again (rounds, levels), which that tree would answer from memory
    "suffix": {"method": "suffix", "suffix_decoding_max_cached_requests": 0},
    "dlite": {"model": DRAFTER, "num_speculative_tokens": 7},
    # DLite with vLLM's batch-size schedule: K = 7 for one or two requests in the batch, no drafting above
    "dlite-sched": {
        "model": DRAFTER,
        "num_speculative_tokens": 7,
        "num_speculative_tokens_per_batch_size": [[1, 2, 7], [3, 1024, 0]],
    },
    # the hybrid: DLite plus a suffix index of each request (retrieved drafts up to 16 tokens)
    "hybrid": {"model": DRAFTER, "num_speculative_tokens": 16, "prompt_lookup_max": 16},
}


def run_workload(engine, tally, prompts: list[list[int]], concurrency: int, max_tokens: int) -> dict:
    """Answer `prompts` greedily with at most `concurrency` requests in flight; `tally` is the engine's
    `SpecDecodeTally` (each engine counts its own drafts: vLLM's Prometheus counters are the newest engine's)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    before = dict(tally.counts)
    pending, started, latencies, tokens = list(enumerate(prompts)), {}, [], 0
    begin = time.perf_counter()
    while pending or engine.has_unfinished_requests():
        while pending and len(started) < concurrency:
            index, ids = pending.pop(0)
            engine.add_request(str(index), TokensPrompt(prompt_token_ids=ids), params)
            started[str(index)] = time.perf_counter()
        for output in engine.step():
            if output.finished:
                latencies.append(time.perf_counter() - started.pop(output.request_id))
                tokens += len(output.outputs[0].token_ids)
    wall = time.perf_counter() - begin
    after = dict(tally.counts)
    accepted = after["num_accepted_tokens"] - before["num_accepted_tokens"]
    return {
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "tau": tau(tokens, accepted),
        "drafted": after["num_draft_tokens"] - before["num_draft_tokens"],
        "accepted": accepted,
        "latencies": latencies,
    }


def tau(tokens: int, accepted: int) -> float:
    """Output tokens per target forward: each verification step emits its accepted drafts plus one token."""
    return tokens / (tokens - accepted) if tokens > accepted else float("nan")


def level_map(option: str, text: str, levels: list[int]) -> dict[int, int]:
    """`--requests` / `--repeats` as {concurrency: count}, with every level of `--concurrency` given."""
    try:
        pairs = {int(k): int(v) for k, v in (pair.split(":") for pair in text.split(",") if pair)}
    except ValueError:
        raise SystemExit(
            f"{option} {text!r}: expected CONCURRENCY:COUNT pairs separated by commas, e.g. 1:3,4:2."
        ) from None
    missing = [level for level in levels if level not in pairs]
    bad = [f"{k}:{v}" for k, v in pairs.items() if v < 1]
    if missing or bad:
        raise SystemExit(
            f"{option} {text!r}: "
            + (f"no count for concurrency {missing} (--concurrency); " if missing else "")
            + (f"counts must be >= 1, got {bad}; " if bad else "")
            + "give one CONCURRENCY:COUNT pair per level."
        )
    return pairs


def measure_cell(engines: dict, methods: list[str], prompts: list, level: int, max_tokens: int, repeats: int):
    """Every method on the same requests, `repeats` rounds in a rotated order (no method always runs first): per method
    the median tokens/s, the median of its per-round ratio to plain's, tau and the latencies over all rounds."""
    runs: dict[str, list[dict]] = {m: [] for m in methods}
    for rep in range(repeats):
        shift = rep % len(methods)
        for method in methods[shift:] + methods[:shift]:
            runs[method].append(run_workload(*engines[method], prompts, level, max_tokens))
    rows = []
    for method in methods:
        mine = runs[method]
        tokens, accepted = sum(r["tokens"] for r in mine), sum(r["accepted"] for r in mine)
        latencies = sorted(x for r in mine for x in r["latencies"])
        speedups = [r["tokens_per_s"] / p["tokens_per_s"] for r, p in zip(mine, runs["plain"])]
        rows.append(
            {
                "method": method,
                "tokens_per_s": statistics.median(r["tokens_per_s"] for r in mine),
                "speedup": statistics.median(speedups),
                "speedups": speedups,
                "tau": tau(tokens, accepted),
                "tokens": tokens,
                "wall_s": sum(r["wall_s"] for r in mine),
                "repeats": repeats,
                "drafted": sum(r["drafted"] for r in mine),
                "accepted": accepted,
                "latency_mean_s": statistics.fmean(latencies),
                "latency_p90_s": latencies[min(len(latencies) - 1, int(0.9 * len(latencies)))],
            }
        )
    return rows


def write_results(path: Path | None, meta: dict, results: list[dict]) -> None:
    """Write the results so far through a temporary file (a kill leaves the previous version or this one)."""
    if path is None:
        return
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    partial.replace(path)


def target_work(row: dict) -> float:
    """Positions the target verifies per output token (one per step plus every draft token): once batching fills the
    core, a method's tokens/s against plain's tends to 1 / this."""
    return (row["tokens"] / row["tau"] + row["drafted"]) / row["tokens"]


def report(results: list[dict]) -> str:
    """The full table: per workload and concurrency, plain's tokens/s, then each method's speedup / tau / target
    work (`target_work`), and per-request latency (mean / p90, seconds) of plain and DLite."""
    methods = list(dict.fromkeys(r["method"] for r in results))
    others, latency = [m for m in methods if m != "plain"], ["plain", "dlite"] if "dlite" in methods else []
    head = ["workload", "concurrency", "plain tok/s", *[f"{m}: speedup / tau / work" for m in others]]
    head += [f"latency {m} (mean / p90)" for m in latency]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
    for workload, level in sorted({(r["workload"], r["concurrency"]) for r in results}):
        rows = {r["method"]: r for r in results if r["workload"] == workload and r["concurrency"] == level}
        if "plain" in rows:
            cells = [workload, str(level), f"{rows['plain']['tokens_per_s']:.1f}"]
            cells += [f"{rows[m]['speedup']:.2f}x / {rows[m]['tau']:.2f} / {target_work(rows[m]):.2f}" for m in others]
            cells += [f"{rows[m]['latency_mean_s']:.2f} / {rows[m]['latency_p90_s']:.2f}" for m in latency]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=Path, help="benchmarks/vllm_prompts.py output")
    parser.add_argument("--report", type=Path, help="print the markdown table of a results file and stop")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--workloads", default="chat,code,math,agentic")
    parser.add_argument("--concurrency", default="1,4,16,64")
    parser.add_argument("--requests", default="1:4,4:8,16:16,64:64", help="requests per run, by concurrency")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", default="1:3,4:2,16:1,64:1", help="rounds per cell by concurrency (rotated)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--memory", type=float, default=0.08, help="gpu_memory_utilization of each engine")
    variant_help = (
        "one more method NAME: DLite (K = 7) from FOLDER, e.g. a git worktree's drafter folder (the plugin runs the "
        "code a folder carries): another commit's round, side by side; repeatable"
    )
    parser.add_argument("--drafter-variant", action="append", default=[], metavar="NAME=FOLDER", help=variant_help)
    return parser


def _methods(args: argparse.Namespace, drafter: str) -> tuple[dict, list[str]]:
    """The speculative configs by method name, DLite's with `drafter` (the drafter variants added), and the methods
    to run."""
    specs = {name: {**spec, "model": drafter} if spec and "model" in spec else spec for name, spec in METHODS.items()}
    for variant in args.drafter_variant:
        name, _, folder = variant.partition("=")
        if not name or not folder or name in specs or not Path(folder, "config.json").is_file():
            raise SystemExit(
                f"--drafter-variant {variant!r}: expected NAME=FOLDER, NAME not one of {', '.join(specs)}, and "
                "FOLDER a drafter folder (with its config.json)."
            )
        specs[name] = {"model": str(Path(folder).resolve()), "num_speculative_tokens": 7}
    methods = [m for m in args.methods.split(",") if m]
    if any(m not in specs for m in methods) or "plain" not in methods:
        raise SystemExit(f"--methods {args.methods}: expected 'plain' and any of {', '.join(specs)}.")
    if any((specs[m] or {}).get("model") == drafter for m in methods) and not Path(drafter, "config.json").is_file():
        raise SystemExit(
            f"--prompts names the drafter {drafter}, which has no config.json: expected a drafter folder; make the "
            "prompts again with `benchmarks/vllm_prompts.py --drafter FOLDER`."
        )
    return specs, methods


def _levels(text: str) -> list[int]:
    try:
        levels = [int(c) for c in text.split(",") if c]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        raise SystemExit(f"--concurrency {text!r}: expected integers >= 1 separated by commas, e.g. 1,4,16.")
    return levels


def _load_engines(specs: dict, methods: list[str], target: str, args, max_seqs: int, warm: list) -> tuple[dict, dict]:
    """Every method's engine with its `SpecDecodeTally` (speculative config: `specs[method]`, None for plain), warmed
    up on two prompts: ``({method: (engine, tally)}, {method: load seconds})``."""
    from dlite_hf_vllm.compat import SpecDecodeTally
    from vllm import EngineArgs, LLMEngine

    engines, load_s = {}, {}
    for method in methods:
        begin = time.perf_counter()
        engine_args = EngineArgs(
            model=target,
            dtype=args.dtype,
            gpu_memory_utilization=args.memory,
            max_model_len=4096,
            max_num_seqs=max_seqs,
            seed=0,
            disable_log_stats=False,
            speculative_config=specs[method],
        )
        tally = SpecDecodeTally()
        engines[method] = LLMEngine.from_engine_args(engine_args, stat_loggers=[tally.factory]), tally
        run_workload(*engines[method], warm[:2], 2, 16)  # warm-up
        load_s[method] = time.perf_counter() - begin
        print(f"loaded {method} in {load_s[method]:.0f} s", flush=True)
    return engines, load_s


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.plot and not all(importlib.util.find_spec(name) for name in ("matplotlib", "dlite_hf")):
        parser.error(
            "--plot draws with dlite_hf.bench.plots (matplotlib), which the vLLM environment lacks: plot afterwards "
            "from .venv with `.venv/bin/python benchmarks/serve_vllm.py --report RESULTS --plot PNG`."
        )
    if args.report is not None:  # any environment with dlite-hf (the package's .venv) for --plot
        results = json.loads(args.report.read_text())["results"]
    elif args.prompts is None:
        parser.error("--prompts is required (or --report RESULTS)")
    else:
        results = _run(args, argv)
    print(report(results))
    if args.plot:
        from dlite_hf.bench.plots import plot_serving

        plot_serving(results, args.plot)
    return 0


def _run(args: argparse.Namespace, argv: list[str] | None) -> list[dict]:
    """Measure every cell (concurrency, workload), the results written to --out after each one."""
    data = json.loads(args.prompts.read_text())
    specs, methods = _methods(args, str(Path(data["meta"].get("drafter", DRAFTER)).resolve()))
    levels = _levels(args.concurrency)
    per_level = level_map("--requests", args.requests, levels)
    repeats = level_map("--repeats", args.repeats, levels)
    by_workload: dict[str, list[list[int]]] = {}
    for row in data["prompts"]:
        by_workload.setdefault(row["workload"], []).append(row["prompt_ids"])
    workloads = [w for w in args.workloads.split(",") if w]
    # vLLM's suffix proposer imports arctic_inference.suffix_decoding (`make bench-vllm` puts it on PYTHONPATH)
    if "suffix" in methods and importlib.util.find_spec("arctic_inference") is None:
        raise SystemExit(
            "--methods suffix: arctic_inference.suffix_decoding is not importable. Build it with "
            f"`bash scripts/build_suffix_decoding.sh` and run with PYTHONPATH={SUFFIX_PATH}, or leave suffix out of "
            "--methods."
        )
    warm = by_workload[workloads[0]]
    engines, load_s = _load_engines(specs, methods, data["meta"]["target"], args, max(levels), warm)
    meta = {
        "command": "benchmarks/serve_vllm.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "threads": "engines bind VLLM_CPU_OMP_THREADS_BIND=" + os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto"),
        "dtype": args.dtype,
        "max_tokens": args.max_tokens,
        "load_s": load_s,
        "prompts": data["meta"],
    }
    results = []
    for level in levels:
        wanted = per_level.get(level, level)
        for method in methods:  # the first batch of this size for every engine, unmeasured
            run_workload(*engines[method], warm[:level], level, 16)
        for workload in workloads:
            pool = by_workload[workload]  # repeated when a level asks for more requests than there are prompts
            prompts = (pool * (wanted // len(pool) + 1))[:wanted]
            for row in measure_cell(engines, methods, prompts, level, args.max_tokens, repeats.get(level, 1)):
                row.update(workload=workload, concurrency=level, requests=len(prompts))
                results.append(row)
                print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
            write_results(args.out, {**meta, "finished": False}, results)  # a kill keeps every finished cell
    write_results(args.out, {**meta, "finished": True}, results)
    return results


if __name__ == "__main__":
    raise SystemExit(main())
