"""`dlite-hf regenerate`: the target answers training prompts (resumable), the on-policy training rows."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..defaults import DEFAULT_TARGET, DTYPE_CHOICES
from .common import set_threads


def _regen_device(name: str):
    """The torch device of `regenerate --device` (`auto`: the first CUDA GPU when there is one, else the CPU)."""
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


def cmd_regenerate(args: argparse.Namespace) -> int:

    from ..assets import open_target
    from ..prompts import training_mix
    from ..rows import read_jsonl, write_jsonl
    from ..training.regenerate import regenerate

    if args.limit is not None and args.limit < 1:
        raise SystemExit(
            f"--limit {args.limit} is invalid: expected a positive number of prompts (leave it out for all)."
        )
    set_threads(args.threads)
    device = _regen_device(args.device)  # --dtype is checked by argparse (choices=DTYPE_CHOICES)
    if args.prompts is None:
        path = Path(args.out).with_suffix(".prompts.jsonl")
        if not path.exists():
            write_jsonl(training_mix(args.per_workload, seed=args.seed), path)
        args.prompts = str(path)
    prompts = read_jsonl(args.prompts)
    if args.limit is not None:
        prompts = prompts[: args.limit]
    target, tokenizer, _ = open_target(args.target, dtype=args.dtype)
    target = target.to(device)
    result = regenerate(
        target,
        tokenizer,
        prompts,
        args.out,
        max_new_tokens=args.max_new_tokens,
        max_prompt_tokens=args.max_prompt_tokens,
        batch_size=args.batch_size,
        do_sample=args.do_sample,
        seed=args.seed,
    )
    print(json.dumps(result))
    return 0


def add_regenerate_parser(sub: argparse._SubParsersAction) -> None:
    """Register the subcommand."""
    regen = sub.add_parser("regenerate", help="Regenerate training responses with the target (resumable).")
    regen.add_argument("--target", default=DEFAULT_TARGET)
    regen.add_argument("--prompts", default=None, help="prompt JSONL (default: build the training mix)")
    regen.add_argument("--out", required=True)
    regen.add_argument("--per-workload", type=int, default=160, help="training-mix prompts per workload")
    regen.add_argument("--limit", type=int, default=None)
    regen.add_argument("--max-new-tokens", type=int, default=256)
    regen.add_argument("--max-prompt-tokens", type=int, default=1024)
    regen.add_argument("--batch-size", type=int, default=8)
    regen.add_argument("--do-sample", action="store_true")
    regen.add_argument("--seed", type=int, default=0)
    regen.add_argument("--threads", type=int, default=None)
    regen.add_argument("--device", default="auto", help="auto (a CUDA GPU when there is one), cpu, cuda, cuda:N")
    regen.add_argument(
        "--dtype",
        default="float32",
        choices=DTYPE_CHOICES,
        help="target weights' dtype while generating (auto: the checkpoint's)",
    )
    regen.set_defaults(func=cmd_regenerate)
