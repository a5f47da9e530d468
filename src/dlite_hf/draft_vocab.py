"""A drafter's draft vocabulary, chosen from data: at training (`dlite-hf train`) or after it (`dlite-hf draft-vocab`,
whose help says what a smaller one costs and buys)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from .derived_drafters import extend_record


@torch.no_grad()
def set_draft_vocab(drafter: Any, token_counts: torch.Tensor, size: int | None = None) -> torch.Tensor:
    """Give `drafter` the draft vocabulary of the `size` (default: `config.draft_vocab_size`, which a new size
    updates) most frequent tokens of `token_counts` `[V]`; returns its ids. No retraining is needed."""
    config = drafter.config
    if drafter.draft_vocab_ids is None and size is None:
        raise ValueError(
            "This drafter drafts over the full vocabulary (config.draft_vocab_size=None): pass `size` to give it "
            "a draft vocabulary."
        )
    if token_counts.shape != (config.vocab_size,):
        raise ValueError(f"token_counts has shape {tuple(token_counts.shape)}; expected ({config.vocab_size},).")
    if size is not None and (
        isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= config.vocab_size
    ):
        raise ValueError(
            f"size={size!r}: expected an integer in [1, {config.vocab_size}] (the target's vocabulary), "
            "or None to keep config.draft_vocab_size."
        )
    keep = config.draft_vocab_size if size is None else size
    return drafter.use_draft_vocab(torch.topk(token_counts.float(), keep).indices.sort().values)


def coverage(counts: torch.Tensor, ids: torch.Tensor) -> float:
    """Fraction of the counted tokens (``counts`` ``[V]``, integer parts) that fall in the vocabulary ``ids``."""
    whole = torch.floor(counts)  # response_token_counts adds a tie-breaker below one count
    return float(whole[ids].sum() / whole.sum())


def resize_draft_vocab(
    drafter_dir: str | Path, data: str | Path, size: int, out: str | Path, max_length: int = 1024
) -> dict[str, Any]:
    """Save the drafter of ``drafter_dir`` to ``out`` with the ``size`` most frequent response tokens of ``data``
    as its draft vocabulary; return what changed (sizes and coverage of ``data`` before and after)."""
    from . import DLiteForSpeculation
    from .training.data import RegeneratedDataset, response_token_counts

    source, out = Path(drafter_dir), Path(out)
    if out.resolve() == source.resolve():
        raise ValueError(f"--out {out} is the drafter's own folder; write the resized drafter to a new folder.")
    drafter = DLiteForSpeculation.from_pretrained(source)
    counts = response_token_counts(RegeneratedDataset(data, max_length=max_length), drafter.config.vocab_size)
    before_size = drafter.config.draft_vocab_size
    before_ids = drafter.draft_vocab_ids if drafter.draft_vocab_ids is not None else torch.arange(counts.numel())
    ids = set_draft_vocab(drafter, counts, size=size)
    report = {
        "from": before_size,
        "to": size,
        "data": str(data),
        "response_tokens": int(torch.floor(counts).sum()),
        "coverage_before": round(coverage(counts, before_ids), 4),
        "coverage_after": round(coverage(counts, ids), 4),
    }
    drafter.save_pretrained(out)
    extend_record(source, out, "draft_vocab_resized", report)
    if (source / "README.md").is_file() and not (out / "README.md").exists():
        shutil.copy(source / "README.md", out / "README.md")  # re-render it with `dlite-hf card` after benchmarking
    return report
