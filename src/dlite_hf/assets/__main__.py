"""``python -m dlite_hf.assets [name ...]``: the same as ``dlite-hf assets fetch [name ...]``."""

import sys

from ..cli import main
from .registry import AssetError

if __name__ == "__main__":
    try:
        sys.exit(main(["assets", "fetch", *sys.argv[1:]]))
    except AssetError as error:
        sys.exit(f"dlite_hf.assets: {error}")
