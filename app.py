"""DLite speed demo: the target alone vs the target with a DLite drafter, side by side, streaming.

    python app.py [--target smollm2-135m|DIR] [--drafter DIR] [--dtype fastest|bfloat16|float32|float16|auto]
                  [--attention packed_gqa|sdpa] [--host 127.0.0.1] [--port 7860] [--threads N]

Each flag's default can also come from an environment variable (see --help; flags win). A missing target or
drafter is explained in the page, with the fix. The handlers live in `dlite_hf.demo`.
"""

from __future__ import annotations

from dlite_hf.commands.common import set_threads
from dlite_hf.demo import build_demo, parse_app_args

args = parse_app_args(__doc__)
set_threads(args.threads)
demo = build_demo(args.target, args.drafter, warm_up=not args.no_warm_up, dtype=args.dtype, attention=args.attention)

if __name__ == "__main__":
    # Concurrency 1: one generation at a time, so two visitors never share the cores (timings) or the models.
    demo.queue(default_concurrency_limit=1).launch(server_name=args.host, server_port=args.port)
