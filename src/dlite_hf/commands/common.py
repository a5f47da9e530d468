"""Helpers shared by the subcommands."""

from __future__ import annotations


def set_threads(threads: int | None) -> None:
    """Pin torch's intra-op threads (`--threads N`); None leaves torch's default."""
    if threads is not None and threads < 1:
        raise SystemExit(f"--threads {threads} is invalid: expected a positive integer (or leave it out).")
    if threads:
        import torch

        torch.set_num_threads(threads)
