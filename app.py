"""DLite speed demo: the target alone vs the target with a DLite drafter, side by side, streaming.

    python app.py [--target smollm2-135m|DIR] [--drafter DIR] [--host 127.0.0.1] [--port 7860] [--threads N]

Defaults: the target `smollm2-135m` (fetched by `make assets`) and the shipped drafter
`drafters/dlite-smollm2-135m`; the environment variables DLITE_TARGET and DLITE_DRAFTER set them too (flags win).
A missing target or drafter is explained in the page, with the command that fixes it. The handlers live in
`dlite_hf.demo`; this file only reads the settings, builds the page and launches it.
"""

from __future__ import annotations

import argparse

from dlite_hf.demo import DEFAULT_TARGET, DRAFTER_ENV, TARGET_ENV, build_demo, env_default


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The demo's flags; unknown arguments are ignored (so `gradio app.py` and hosted runners can import it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--target",
        default=env_default(TARGET_ENV, DEFAULT_TARGET),
        help=f"target model: a registry name or a local folder (env {TARGET_ENV}; default {DEFAULT_TARGET})",
    )
    parser.add_argument(
        "--drafter",
        default=env_default(DRAFTER_ENV, None),
        help=f"DLite drafter folder (env {DRAFTER_ENV}; default: the shipped drafters/dlite-smollm2-135m)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0 for every interface)")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice; 1 = stable timings)"
    )
    parser.add_argument("--no-warm-up", action="store_true", help="skip the short warm-up generation at start")
    return parser.parse_known_args(argv)[0]


args = parse_args()
if args.threads:
    import torch

    torch.set_num_threads(args.threads)
demo = build_demo(args.target, args.drafter, warm_up=not args.no_warm_up)

if __name__ == "__main__":
    # Concurrency 1: one generation at a time, so two visitors never share the cores (timings) or the models.
    demo.queue(default_concurrency_limit=1).launch(server_name=args.host, server_port=args.port)
