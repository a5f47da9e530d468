"""`dlite-hf features`: the target's training features computed by vLLM, ahead of `dlite-hf train`.

    dlite-hf features --rows data/regen.jsonl --cache ~/.cache/dlite-hf/work/features \\
        --drafter drafters/dlite-smollm2-135m --anchor-stride 4 --max-length 1024
    dlite-hf train ... --feature_cache_dir ~/.cache/dlite-hf/work/features --anchor_stride 4 --max_length 1024

Train with the same stride and max length, or the trainer refuses the cache or computes the missing entries itself.
`--cached-rows OUT` (same flags) computes nothing: it writes the rows whose entries the cache holds, in order, so a
run can train on them while (or instead of) computing the rest.
"""

from __future__ import annotations

import argparse
import json

from ..defaults import DEFAULT_TARGET
from .common import add_command, exit_on_error, parse_shard, positive_int


def cmd_features(args: argparse.Namespace) -> int:
    from transformers import AutoConfig

    from ..assets import resolve_model
    from ..data.features import cache
    from ..data.vllm_worker import vllm_dtype

    shard = parse_shard(args.shard)
    drafter = AutoConfig.from_pretrained(args.drafter, trust_remote_code=True)
    if getattr(drafter, "history_window", 0) != 0 and not args.all_positions:
        raise SystemExit(
            f"--drafter {args.drafter} attends to history (history_window={drafter.history_window}), but the cache "
            "asked for is the history-free layout, which a history-aware run cannot read. Add --all-positions (every "
            "position's states, the layout of the teacher, the KL warm-up and sliding-window drafters)."
        )
    layers = list(drafter.target_layer_ids)
    sizes = {"anchor_stride": args.anchor_stride, "max_length": args.max_length, "all_positions": args.all_positions}
    if not args.cached_rows:
        target_dir = resolve_model(args.target)
        target_name = getattr(AutoConfig.from_pretrained(target_dir), "_name_or_path", "") or str(target_dir)
    with exit_on_error("dlite-hf features", FileNotFoundError, ValueError, RuntimeError):
        if args.cached_rows:
            result = cache.cached_rows(args.rows, args.cache, args.cached_rows, layers, **sizes)
        else:
            result = cache.features_vllm(
                target_dir,
                target_name,
                args.drafter,
                layers,
                args.rows,
                args.cache,
                dtype=vllm_dtype(args.dtype),
                max_num_seqs=args.max_num_seqs,
                enforce_eager=args.enforce_eager,
                shard=shard,
                **sizes,
            )
    print(json.dumps(result))
    return 0


def add_features_parser(sub: argparse._SubParsersAction) -> None:
    summary = "Compute the target's training features with vLLM into a feature cache (ahead of train)."
    parser = add_command(sub, "features", summary, cmd_features)
    add = parser.add_argument
    add("--rows", required=True, help="training rows JSONL (regenerate, or dataset rebuild)")
    add("--cache", required=True, help="the feature cache folder (train's --feature_cache_dir)")
    add("--drafter", required=True, help="a DLite drafter folder: the tapped layers to write")
    add("--target", default=DEFAULT_TARGET)
    add("--anchor-stride", type=positive_int("--anchor-stride"), default=4, help="train's --anchor_stride (>= 1)")
    add("--max-length", type=positive_int("--max-length"), default=1024, help="train's --max_length")
    add(
        "--dtype",
        default="fastest",
        choices=["fastest", "bfloat16", "float16", "float32"],
        help="the target's dtype in vLLM (fastest: bfloat16 if native; a cache holds one dtype's features)",
    )
    add("--max-num-seqs", type=positive_int("--max-num-seqs"), default=16, help="sequences vLLM prefills at once")
    add("--shard", default="0/1", help="I/N: every N-th row from the I-th (N workers, one cache)")
    add("--all-positions", action="store_true", help="every position (history-aware stages)")
    add("--enforce-eager", action="store_true", help="vLLM without torch.compile (starts sooner)")
    add("--cached-rows", metavar="OUT", help="compute nothing: write the rows the cache holds to OUT")
