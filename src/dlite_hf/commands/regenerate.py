"""`dlite-hf regenerate`: the target answers training prompts (resumable), the on-policy training rows."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..defaults import DEFAULT_TARGET, DTYPE_CHOICES, resolve_dtype
from .common import add_command, exit_on_error, parse_shard, positive_int, set_threads


def _regen_device(name: str):
    """The torch device of `--device` (`auto`: a CUDA GPU when there is one, else the CPU)."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise SystemExit(
            f"--device {name!r} is not a torch device ({error}); use auto, cpu, cuda or cuda:N."
        ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {name!r}: this machine has no CUDA GPU torch can use; use --device cpu (or auto).")
    return device


def _shipped_ids(folder: str | None) -> frozenset[str]:
    """The row ids of the dataset at `folder` (`--skip-dataset`), not regenerated."""
    if folder is None:
        return frozenset()
    from ..data.dataset import read_shards

    if not any(Path(folder, "data").glob("*.parquet")):
        raise SystemExit(
            f"--skip-dataset {folder!r}: no parquet shards under {Path(folder, 'data')}; expected a dataset folder "
            "written by `dlite-hf dataset export` (e.g. datasets/dlite-smollm2-135m-regen)."
        )
    return frozenset(row["id"] for row in read_shards(folder))


def cmd_regenerate(args: argparse.Namespace) -> int:
    from ..data.mix import training_mix
    from ..data.regenerate import OutputBusyError, shard_prompts
    from ..jsonl import read_jsonl, write_jsonl

    set_threads(args.threads)
    device = _regen_device(args.device)  # --dtype is checked by argparse (choices=DTYPE_CHOICES)
    if args.prompts is None:
        path = Path(args.out).with_suffix(".prompts.jsonl")
        if not path.exists():
            write_jsonl(training_mix(args.per_workload, seed=args.seed), path)
        args.prompts = str(path)
    prompts = shard_prompts(read_jsonl(args.prompts)[: args.limit], *parse_shard(args.shard))
    if args.samples < 0:
        raise SystemExit(
            f"--samples {args.samples} is invalid: expected 0 (greedy) or a number of samples per prompt."
        )
    if (args.samples or args.do_sample) and not (args.temperature > 0 and 0 < args.top_p <= 1):
        raise SystemExit(
            f"--temperature {args.temperature} --top-p {args.top_p}: sampling needs a temperature above 0 and a top-p "
            "in (0, 1] (1.0 keeps the whole distribution); use --samples 0 without --do-sample for greedy rows."
        )
    options = {
        "max_new_tokens": args.max_new_tokens,
        "max_prompt_tokens": args.max_prompt_tokens,
        "seed": args.seed,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "skip_ids": _shipped_ids(args.skip_dataset),
    }
    engine = _regenerate_vllm if args.engine == "vllm" else _regenerate_transformers
    with exit_on_error("dlite-hf regenerate", OutputBusyError):  # the library locks --out while it appends to it
        print(json.dumps(engine(args, prompts, options, device)))
    return 0


def _regenerate_transformers(args: argparse.Namespace, prompts: list, options: dict, device: Any) -> dict:
    from ..assets import open_target
    from ..data.regenerate import regenerate

    if args.samples > 1:
        raise SystemExit(f"--samples {args.samples} needs --engine vllm (transformers: one sample with --do-sample).")
    dtype = resolve_dtype(args.dtype, "cuda" if str(device).startswith("cuda") else "cpu")  # fastest: that device's
    target, tokenizer, _ = open_target(args.target, dtype=dtype)
    batch_size, do_sample = args.batch_size or 8, args.do_sample or args.samples == 1
    return regenerate(
        target.to(device), tokenizer, prompts, args.out, batch_size=batch_size, do_sample=do_sample, **options
    )


def _regenerate_vllm(args: argparse.Namespace, prompts: list, options: dict, device: Any) -> dict:
    from transformers import AutoTokenizer

    from ..assets import resolve_model
    from ..data.regenerate import regenerate_vllm
    from ..data.vllm_worker import vllm_dtype

    if args.device not in ("auto", "cpu", "cuda"):
        raise SystemExit(f"--device {args.device!r} with --engine vllm: vLLM picks its own device; leave it out.")
    dtype = "bfloat16" if args.dtype == "auto" else vllm_dtype(args.dtype)
    model_dir = resolve_model(args.target)
    samples, chunk = args.samples or int(args.do_sample), args.batch_size or 256
    with (
        exit_on_error("dlite-hf regenerate --engine vllm (the default)", FileNotFoundError),
        exit_on_error("dlite-hf regenerate --engine vllm", ValueError, RuntimeError),
    ):
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        return regenerate_vllm(
            model_dir, tokenizer, prompts, args.out, samples=samples, dtype=dtype, chunk=chunk, **options
        )


def add_regenerate_parser(sub: argparse._SubParsersAction) -> None:
    summary = "Regenerate training responses with the target (resumable)."
    regen = add_command(sub, "regenerate", summary, cmd_regenerate)
    regen.add_argument("--target", default=DEFAULT_TARGET)
    regen.add_argument("--prompts", default=None, help="prompt JSONL (default: build the training mix)")
    regen.add_argument("--out", required=True)
    regen.add_argument("--per-workload", type=int, default=160, help="training-mix prompts per workload")
    regen.add_argument("--limit", type=positive_int("--limit", "a positive number of prompts (leave it out for all)"))
    regen.add_argument("--shard", default="0/1", help="I/N: the prompts whose id hashes to I mod N (one --out each)")
    regen.add_argument("--skip-dataset", metavar="FOLDER", help="a dataset folder whose rows count as done")
    regen.add_argument("--max-new-tokens", type=int, default=256)
    regen.add_argument("--max-prompt-tokens", type=int, default=1024)
    regen.add_argument(
        "--engine",
        default="vllm",
        choices=["transformers", "vllm"],
        help="vLLM in .venv-vllm (`make vllm`; 4.3x faster: benchmarks/results/regen-engines.json) or generate()",
    )
    regen.add_argument(
        "--batch-size",
        type=positive_int("--batch-size", "a positive number"),
        help="transformers: sequences per generate() (default 8); vllm: finished rows per fsync (default 256)",
    )
    regen.add_argument("--do-sample", action="store_true")
    regen.add_argument("--samples", type=int, default=0, help="vllm: N sampled responses per prompt (0: greedy)")
    regen.add_argument("--temperature", type=float, default=0.7, help="sampling temperature")
    regen.add_argument("--top-p", type=float, default=0.9, help="sampling top-p")
    regen.add_argument("--seed", type=int, default=0)
    regen.add_argument("--threads", type=int, default=None)
    regen.add_argument("--device", default="auto", help="auto (a CUDA GPU when there is one), cpu, cuda, cuda:N")
    regen.add_argument(
        "--dtype", default="float32", choices=DTYPE_CHOICES, help="the target's dtype (fastest: bfloat16 if native)"
    )
