"""The training rows whose history-free feature-cache entries exist, so a run can train on them while (or instead of)
computing the rest: `dlite-hf features` fills a cache row by row, and a trainer given a row without its entry runs the
target's forward for it, hundreds of times slower on a CPU.

    .venv/bin/python scripts/cached_rows.py --rows data/regen.jsonl \\
        --cache ~/.cache/dlite-hf/work/features/stride4-2560 --max-length 2560 --anchor-stride 4 \\
        --out ~/.cache/dlite-hf/work/rows/cached.jsonl

Rows keep their order; the row is checked exactly as the trainer would read it (`RegeneratedDataset`'s truncation,
the cache manifest's layout and key)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dlite_hf.data.features.cache import FeatureCache
from dlite_hf.jsonl import read_jsonl
from dlite_hf.training.data import RegeneratedDataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", required=True)
    parser.add_argument("--cache", required=True, help="a feature cache folder (its manifest.json names the target)")
    parser.add_argument("--max-length", type=int, required=True, help="the --max_length it was filled for")
    parser.add_argument("--anchor-stride", type=int, required=True, help="its --anchor_stride")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    manifest_path = Path(args.cache) / "manifest.json"
    if not manifest_path.is_file():
        raise SystemExit(f"--cache {args.cache} has no manifest.json: expected a folder `dlite-hf features` filled.")
    manifest = json.loads(manifest_path.read_text())
    cache = FeatureCache(
        args.cache,
        manifest["target"],
        manifest["layer_ids"],
        history_free=True,
        anchor_stride=args.anchor_stride,
        producer=manifest.get("producer"),
    )
    # (FeatureCache refuses a cache of another layout)
    raw = read_jsonl(args.rows)
    dataset = RegeneratedDataset(raw, max_length=args.max_length)
    if len(dataset.rows) != len(raw):
        raise SystemExit(f"{args.rows}: {len(raw)} rows, {len(dataset.rows)} pass the trainer's filter; expected all.")
    kept = [
        source
        for source, row in zip(raw, dataset.rows)
        if cache.has(cache.row_entry(row["input_ids"], row["loss_mask"].index(1))[0])
    ]
    Path(args.out).write_text("".join(json.dumps(row, separators=(",", ":")) + "\n" for row in kept), encoding="utf-8")
    print(json.dumps({"rows": len(raw), "cached": len(kept), "out": args.out}))


if __name__ == "__main__":
    main()
