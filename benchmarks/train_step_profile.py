"""Where a training step's time goes on this CPU (issue 27, part 4): the target's forward against the drafter's.

Builds the stable stage exactly as `dlite-hf train` does (DLiteTrainer, the shipped drafter, its draft vocabulary,
bfloat16 autocast for the drafter) on rows written by `dlite-hf regenerate`, and times, per batch:

* the frozen target's forward that labels the batch (`target_features`), in float32 (what the trainer runs) and
  in bfloat16, per token of the batch;
* one training step with the features cached (`--feature_cache_dir`): the cache read and gathers (`_blocks`),
  the drafter's forward and the loss (`compute_loss` less `_blocks`), the backward (`training_step` less
  `compute_loss`), and the optimizer step;
* the feature cache's bytes per response token (the stable stage's history-free layout: final states of the
  responses, tapped states at the `--anchor-stride` anchors only).

Then extrapolates to the rows given: the target's single pass over them, and a step of the drafter alone.

    .venv/bin/python benchmarks/train_step_profile.py --rows ROWS.jsonl --threads 1 --batches 4 \\
        --out benchmarks/results/train-step-profile.json
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


def _timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def _optimizer_step(optimizer) -> None:
    optimizer.step()
    optimizer.zero_grad()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", required=True, help="rows JSONL written by `dlite-hf regenerate`")
    parser.add_argument("--drafter", default=str(ROOT / "drafters" / "dlite-smollm2-135m"))
    parser.add_argument("--target", default="smollm2-135m")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--num-anchors", type=int, default=32)
    parser.add_argument("--anchor-stride", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=1280)
    parser.add_argument("--sample-rows", type=int, default=256, help="rows drawn (seeded) to form the batches")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from dlite_hf import DLiteForSpeculation
    from dlite_hf.assets import open_target
    from dlite_hf.rows import read_jsonl
    from dlite_hf.training.arguments import DLiteTrainingArguments
    from dlite_hf.training.data import RegeneratedDataset
    from dlite_hf.training.features import target_features
    from dlite_hf.training.trainer import DLiteTrainer

    rows = read_jsonl(args.rows)
    generator = torch.Generator().manual_seed(0)
    picked = [rows[i] for i in torch.randperm(len(rows), generator=generator)[: args.sample_rows].tolist()]
    target, _, _ = open_target(args.target, dtype="float32")
    target_bf16, _, _ = open_target(args.target, dtype="bfloat16")
    drafter = DLiteForSpeculation.from_pretrained(args.drafter)
    layers = list(drafter.config.target_layer_ids)
    cache = tempfile.mkdtemp(prefix="dlite-profile-cache-")
    training_args = DLiteTrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="dlite-profile-"), stage="stable", num_anchors=args.num_anchors,
        max_length=args.max_length, per_device_train_batch_size=args.batch_size, bf16=True, report_to=[],
        feature_cache_dir=cache, anchor_stride=args.anchor_stride, learning_rate=1e-3, max_steps=args.batches,
        use_cpu=True, seed=0,
    )  # fmt: skip
    dataset = RegeneratedDataset(picked, max_length=args.max_length)
    trainer = DLiteTrainer(model=drafter, target=target, args=training_args, train_dataset=dataset)
    trainer.create_optimizer_and_scheduler(num_training_steps=args.batches)
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's own loop, which this drives step by step
    model = trainer.model
    model.train()
    compute_loss, blocks = trainer.compute_loss, trainer._blocks
    split: dict[str, float] = {}

    def timed_blocks(*a, **k):
        out, split["blocks"] = _timed(blocks, *a, **k)
        return out

    def timed_loss(*a, **k):
        out, split["compute_loss"] = _timed(compute_loss, *a, **k)
        return out

    trainer._blocks, trainer.compute_loss = timed_blocks, timed_loss
    per_batch = []
    loader = trainer.get_train_dataloader()
    for index, inputs in zip(range(args.batches), loader):
        inputs = trainer._prepare_inputs(inputs)
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        tokens = int(mask.sum())
        response_tokens = int((mask.sum(1) - inputs["response_start"]).clamp(min=0).sum())
        with torch.no_grad():
            _, fp32 = _timed(target_features, target, ids, layers, mask)
            _, bf16 = _timed(target_features, target_bf16, ids, layers, mask)
        _, cold = _timed(trainer.training_step, model, inputs)  # fills the cache: the target runs
        trainer.optimizer.zero_grad()
        _, warm = _timed(trainer.training_step, model, inputs)  # served from the cache
        _, optimizer = _timed(_optimizer_step, trainer.optimizer)
        row = {
            "batch": index, "tokens": tokens, "response_tokens": response_tokens, "width": int(ids.shape[1]),
            "target_fp32_s": fp32, "target_bf16_s": bf16, "step_uncached_s": cold, "step_cached_s": warm,
            "cache_read_and_gather_s": split["blocks"],
            "drafter_forward_and_loss_s": split["compute_loss"] - split["blocks"],
            "backward_s": warm - split["compute_loss"], "optimizer_s": optimizer,
        }  # fmt: skip
        per_batch.append(row)
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    cache_bytes = sum(p.stat().st_size for p in Path(cache).rglob("*.safetensors"))
    cached_responses = sum(r["response_tokens"] for r in per_batch)

    def median(key: str) -> float:
        return statistics.median(r[key] for r in per_batch)

    tokens_per_s_fp32 = sum(r["tokens"] for r in per_batch) / sum(r["target_fp32_s"] for r in per_batch)
    tokens_per_s_bf16 = sum(r["tokens"] for r in per_batch) / sum(r["target_bf16_s"] for r in per_batch)
    all_tokens = sum(min(len(r["input_ids"]), args.max_length) for r in rows)
    all_responses = sum(max(min(len(r["input_ids"]), args.max_length) - r["prompt_tokens"], 0) for r in rows)
    summary = {
        "command": "benchmarks/train_step_profile.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "threads": args.threads, "batch": f"{args.batch_size} sequences x {args.num_anchors} anchors",
        "max_length": args.max_length, "anchor_stride": args.anchor_stride, "rows": len(rows),
        "tokens_in_rows": all_tokens, "response_tokens_in_rows": all_responses,
        "target_tokens_per_s_fp32": tokens_per_s_fp32, "target_tokens_per_s_bf16": tokens_per_s_bf16,
        "median_s": {k: median(k) for k in ("target_fp32_s", "step_uncached_s", "step_cached_s",
                                             "cache_read_and_gather_s", "drafter_forward_and_loss_s", "backward_s",
                                             "optimizer_s")},
        "cache_bytes_per_response_token": cache_bytes / cached_responses,
        "one_target_pass_over_rows_h": all_tokens / tokens_per_s_fp32 / 3600,
        "one_target_pass_over_rows_bf16_h": all_tokens / tokens_per_s_bf16 / 3600,
        "cache_gb_for_rows": all_responses * cache_bytes / cached_responses / 1e9,
        "per_batch": per_batch,
    }  # fmt: skip
    print(json.dumps({k: v for k, v in summary.items() if k != "per_batch"}, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
