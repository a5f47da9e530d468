"""``python -m dlite_hf.assets [name ...]``: fetch registry models (default: smollm2-135m) and print their folders.

The package's ``python -m`` entry, a thin loop over :func:`~dlite_hf.assets.download.fetch_model` that logs to
stderr and exits 1 on an :class:`~dlite_hf.assets.registry.AssetError`; ``dlite-hf assets fetch``
(:mod:`dlite_hf.commands.assets`) is the full command.
"""

from __future__ import annotations

import logging
import sys

from .download import fetch_model
from .registry import AssetError

logger = logging.getLogger(__name__)


def _main(argv: list[str] | None = None) -> int:
    """``python -m dlite_hf.assets [name ...]``: fetch models (default: smollm2-135m) and print their folders."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    names = (sys.argv[1:] if argv is None else argv) or ["smollm2-135m"]
    try:
        for name in names:
            print(fetch_model(name))
    except AssetError as exc:
        logger.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main())
