"""`dlite-hf draft-vocab`: give a trained drafter another draft vocabulary, chosen from regenerated data.

    dlite-hf draft-vocab --drafter drafters/dlite-smollm2-135m --data runs/regen.jsonl --size 4096 --out DIR

A DLite drafter drafts among `config.draft_vocab_size` tokens: each drafted position reads those rows of the
target's lm_head. The drafter's own weights do not depend on which rows (they are the target's), so the
vocabulary can be changed after training. A smaller one makes every drafting round cheaper where reading the
lm_head slice dominates (a CPU whose cache holds 4,096 rows but not 8,192), at the price of the tokens it drops:
they can no longer be drafted (outputs stay identical to the target's; only acceptance can fall). The command
reports how much of the data's response tokens each vocabulary covers, so that price is known before
benchmarking.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

__all__ = ["add_draft_vocab_parser", "coverage", "resize_draft_vocab"]

RECORD = "dlite_training.json"


def coverage(counts, ids) -> float:
    """Fraction of the counted tokens (``counts`` ``[V]``, integer parts) that fall in the vocabulary ``ids``."""
    import torch

    whole = torch.floor(counts)  # response_token_counts adds a tie-breaker below one count
    return float(whole[ids].sum() / whole.sum())


def resize_draft_vocab(
    drafter_dir: str | Path, data: str | Path, size: int, out: str | Path, max_length: int = 1024
) -> dict[str, Any]:
    """Save the drafter of ``drafter_dir`` to ``out`` with the ``size`` most frequent response tokens of ``data``
    as its draft vocabulary; return what changed (sizes and coverage of ``data`` before and after).

    Raises:
        ValueError: ``out`` is ``drafter_dir``, the data's token ids do not fit the drafter's vocabulary, or a bad
            size (see :meth:`DLiteForSpeculation.set_draft_vocab`).
    """
    import torch

    from . import DLiteForSpeculation
    from .training.data import RegeneratedDataset, response_token_counts

    source, out = Path(drafter_dir), Path(out)
    if out.resolve() == source.resolve():
        raise ValueError(f"--out {out} is the drafter's own folder; write the resized drafter to a new folder.")
    drafter = DLiteForSpeculation.from_pretrained(source)
    counts = response_token_counts(RegeneratedDataset(data, max_length=max_length), drafter.config.vocab_size)
    before_size = drafter.config.draft_vocab_size
    before_ids = drafter.draft_vocab_ids if drafter.draft_vocab_ids is not None else torch.arange(counts.numel())
    before = coverage(counts, before_ids)
    ids = drafter.set_draft_vocab(counts, size=size)
    report = {
        "from": before_size,
        "to": size,
        "data": str(data),
        "response_tokens": int(torch.floor(counts).sum()),
        "coverage_before": round(before, 4),
        "coverage_after": round(coverage(counts, ids), 4),
    }
    drafter.save_pretrained(out)
    record = {}
    if (source / RECORD).is_file():
        record = json.loads((source / RECORD).read_text(encoding="utf-8"))
    record["draft_vocab_resized"] = report
    (out / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    if (source / "README.md").is_file() and not (out / "README.md").exists():
        shutil.copy(source / "README.md", out / "README.md")  # re-render it with `dlite-hf card` after benchmarking
    return report


def cmd_draft_vocab(args: argparse.Namespace) -> int:
    try:
        report = resize_draft_vocab(args.drafter, args.data, args.size, args.out, max_length=args.max_length)
    except ValueError as exc:
        raise SystemExit(f"dlite-hf draft-vocab: {exc}") from exc
    print(
        f"{args.out}: draft vocabulary {report['from'] or 'full'} -> {report['to']} tokens; coverage of the "
        f"{report['response_tokens']:,} response tokens of {args.data}: {report['coverage_before']:.2%} -> "
        f"{report['coverage_after']:.2%}"
    )
    return 0


def add_draft_vocab_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `draft-vocab` subcommand."""
    parser = sub.add_parser(
        "draft-vocab",
        help="Give a trained drafter another draft vocabulary (e.g. smaller: cheaper rounds on a CPU).",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--drafter", required=True, help="drafter folder")
    parser.add_argument("--data", required=True, help="`dlite-hf regenerate` rows of the drafter's target")
    parser.add_argument("--size", required=True, type=int, help="tokens in the new draft vocabulary")
    parser.add_argument("--out", required=True, help="new drafter folder")
    parser.add_argument(
        "--max-length", type=int, default=1024, help="tokens read per row (as `dlite-hf train --max_length`)"
    )
    parser.set_defaults(func=cmd_draft_vocab)
