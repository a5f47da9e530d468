"""The demo's command-line flags, with defaults from the DLITE_* and GRADIO_* environment variables (app.py reads
them with :func:`parse_app_args`); a bad value in the environment stops the start with a message."""

from __future__ import annotations

import argparse
import os

from ..commands.common import ATTENTION_HELP, DTYPE_HELP
from ..defaults import ATTENTION_CHOICES, DEFAULT_ATTENTION, DEFAULT_DTYPE, DEFAULT_TARGET, DTYPE_CHOICES

GREEDY, SAMPLING = "greedy", "sampling"  # the page's decoding choices
TARGET_ENV = "DLITE_TARGET"
DRAFTER_ENV = "DLITE_DRAFTER"


def env_default(name: str, fallback: str | None) -> str | None:
    """``$name`` if set and non-empty, else ``fallback``."""
    return os.environ.get(name, "").strip() or fallback


def parse_app_args(description: str | None = None, argv: list[str] | None = None) -> argparse.Namespace:
    """The demo's flags; unknown arguments are ignored (so `gradio app.py` and hosted runners can import it)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add(
        "--target",
        default=env_default(TARGET_ENV, DEFAULT_TARGET),
        help=f"target model: a registry name or a local folder (env {TARGET_ENV}; default {DEFAULT_TARGET})",
    )
    add(
        "--drafter",
        default=env_default(DRAFTER_ENV, None),
        help=f"DLite drafter folder (env {DRAFTER_ENV}; default: the shipped drafters/dlite-smollm2-135m)",
    )
    # argparse checks `choices` only on the command line: a bad environment value is refused here
    for flag, env, default, choices, text in (
        ("--dtype", "DLITE_DTYPE", DEFAULT_DTYPE, DTYPE_CHOICES, DTYPE_HELP),
        ("--attention", "DLITE_ATTENTION", DEFAULT_ATTENTION, ATTENTION_CHOICES, ATTENTION_HELP),
    ):
        value = env_default(env, default)
        if value not in choices:
            raise SystemExit(f"{env}={value!r} is invalid: expected one of {', '.join(choices)} (or leave it unset).")
        add(flag, default=value, choices=choices, help=f"{text}; env {env}, default {default}")
    port = env_default("GRADIO_SERVER_PORT", "7860")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise SystemExit(f"GRADIO_SERVER_PORT={port!r} is invalid: expected a port number (1-65535), e.g. 7861.")
    add(
        "--host",
        default=env_default("GRADIO_SERVER_NAME", "127.0.0.1"),
        help="address to listen on (0.0.0.0 for every interface; env GRADIO_SERVER_NAME, gradio's convention)",
    )
    add("--port", type=int, default=int(port), help="port (env GRADIO_SERVER_PORT, gradio's convention; default 7860)")
    add("--threads", type=int, help="torch.set_num_threads (default: torch's choice; 1 = stable timings)")
    add("--no-warm-up", action="store_true", help="skip the short warm-up generation at start")
    return parser.parse_known_args(argv)[0]
