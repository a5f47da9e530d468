"""A sliding-window drafter's training step on this CPU: each block's history cut to what it reads, against one
uncut pass over the whole window (the code before the cut), in one process on the same batches.

A windowed block reads the target's last N positions before its context; a block whose context is shorter than N
leads with invalid rows, masked as keys. `encode_block` now runs a batch's blocks in `WINDOW_GROUPS` groups ordered
by history length, each cut to the longest history one of its blocks reads (exact: a masked key changes nothing;
`tests/test_modeling.py` checks logits and gradients). This times both on real batches of the history study (its
rows and its every-position feature cache), pair (d)'s set-up: a new drafter of the shipped shape per window, 8 rows
x 8 anchors a step, one thread, in the drafter's autocast dtype (the study's bfloat16, or float32 where the CPU
has no native bfloat16: `--dtype fastest`). Each batch is read once first (the trainer adds the target's
vocabulary statistics to a cache entry on first read), then the variants alternate, forward and backward only (no
optimizer step, so both see the same weights).

    .venv/bin/python benchmarks/window_step_cost.py --rows ROWS --cache CACHE --windows 128,512 --batches 8 \\
        --out benchmarks/results/smollm2-135m-window-step-cost.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _windows(text: str) -> list[int]:
    try:
        windows = [int(part) for part in text.split(",")]
    except ValueError:
        windows = []
    if not windows or any(w <= 0 for w in windows):
        raise argparse.ArgumentTypeError(f"--windows {text!r}: expected window sizes > 0, comma-separated (128,512).")
    return windows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", required=True, help="the study's rows (JSONL of `dlite-hf dataset rebuild`)")
    parser.add_argument("--cache", required=True, help="their `features --all-positions` cache")
    parser.add_argument("--drafter", default=str(ROOT / "drafters" / "dlite-smollm2-135m"), help="shape, vocabulary")
    parser.add_argument("--target", default="smollm2-135m")
    parser.add_argument("--windows", type=_windows, default=[128, 512])
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2, help="timed steps per variant and batch (median kept)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--num-anchors", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--dtype",
        default="fastest",
        choices=["fastest", "bfloat16", "float32"],
        help="the drafter's autocast (the study's: bfloat16; fastest: bfloat16 where this CPU computes it natively)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.batches < 1 or args.repeats < 1:
        parser.error(f"--batches {args.batches} / --repeats {args.repeats}: expected at least 1 each.")
    torch.set_num_threads(args.threads)

    from dlite_hf import DLiteConfig, DLiteForSpeculation
    from dlite_hf.assets import open_target
    from dlite_hf.defaults import resolve_dtype
    from dlite_hf.rows import read_jsonl
    from dlite_hf.training.arguments import DLiteTrainingArguments
    from dlite_hf.training.data import RegeneratedDataset
    from dlite_hf.training.trainer import DLiteTrainer

    rows = read_jsonl(args.rows)
    dtype = resolve_dtype(args.dtype)
    target, _, _ = open_target(args.target, dtype=dtype)  # the study: bfloat16 target, bfloat16 autocast
    shipped = DLiteForSpeculation.from_pretrained(args.drafter)
    results = {}
    for window in args.windows:
        config = DLiteConfig.from_dict({**shipped.config.to_dict(), "history_window": window})
        torch.manual_seed(0)
        model = DLiteForSpeculation(config)
        counts = torch.zeros(config.vocab_size)
        counts[shipped.draft_vocab_ids] = 1.0
        model.set_draft_vocab(counts)  # the shipped drafter's 4,096 ids: the arms' size
        training_args = DLiteTrainingArguments(
            output_dir=tempfile.mkdtemp(prefix="dlite-window-cost-"), stage="stable", num_anchors=args.num_anchors,
            max_length=args.max_length, per_device_train_batch_size=args.batch_size, bf16=dtype == "bfloat16",
            report_to=[],
            feature_cache_dir=args.cache, learning_rate=1e-3, max_steps=args.batches, use_cpu=True, seed=0,
            dataloader_num_workers=0,
        )  # fmt: skip
        trainer = DLiteTrainer(
            model=model, target=target, args=training_args, train_dataset=RegeneratedDataset(rows, args.max_length)
        )
        trainer.create_optimizer_and_scheduler(num_training_steps=args.batches)
        trainer.current_gradient_accumulation_steps = 1
        model = trainer.model
        model.train()
        rows_seen: list[int] = []
        backbone = model._run_backbone

        def counting(hidden, *rest, _backbone=backbone, _seen=rows_seen):
            _seen.append(hidden.shape[0] * hidden.shape[1])
            return _backbone(hidden, *rest)

        model._run_backbone = counting
        cut = model._encode_blocks_windowed

        def uncut(hidden, positions, states, valid, history_positions, _model=model):
            return _model._encode_group_windowed(hidden, positions, states, valid, history_positions)

        per_batch = []
        for index, inputs in zip(range(args.batches), trainer.get_train_dataloader()):
            inputs = trainer._prepare_inputs(inputs)
            trainer.training_step(model, inputs)  # first read of these entries: the trainer adds their stats
            model.zero_grad()
            times = {"uncut": [], "cut": []}
            rows_of = {}
            for _ in range(args.repeats):
                for name, encode in (("uncut", uncut), ("cut", cut)):
                    model._encode_blocks_windowed = encode
                    rows_seen.clear()
                    start = time.perf_counter()
                    trainer.training_step(model, inputs)
                    times[name].append(time.perf_counter() - start)
                    rows_of[name] = sum(rows_seen)
                    model.zero_grad()
            row = {
                "batch": index,
                "uncut_s": statistics.median(times["uncut"]),
                "cut_s": statistics.median(times["cut"]),
                "uncut_backbone_rows": rows_of["uncut"],
                "cut_backbone_rows": rows_of["cut"],
            }
            per_batch.append(row)
            print(json.dumps({"window": window, **{k: round(v, 3) for k, v in row.items()}}), flush=True)
        model._encode_blocks_windowed = cut
        uncut_s = sum(r["uncut_s"] for r in per_batch)
        cut_s = sum(r["cut_s"] for r in per_batch)
        results[str(window)] = {
            "uncut_s_per_step": uncut_s / len(per_batch),
            "cut_s_per_step": cut_s / len(per_batch),
            "speedup": uncut_s / cut_s,
            "backbone_rows_ratio": sum(r["cut_backbone_rows"] for r in per_batch)
            / sum(r["uncut_backbone_rows"] for r in per_batch),
            "per_batch": per_batch,
        }
    summary = {
        "command": "benchmarks/window_step_cost.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "threads": args.threads,
        "autocast": dtype,
        "batch": f"{args.batch_size} rows x {args.num_anchors} anchors, max_length {args.max_length}",
        "rows": len(rows),
        "windows": results,
    }
    print(json.dumps({w: {k: v for k, v in r.items() if k != "per_batch"} for w, r in results.items()}, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
