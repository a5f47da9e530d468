"""Does the drafter's extra memory grow with the context? (issue 2, part 6)

For each prompt length, in a fresh subprocess per (length, method) so peak RSS is comparable:
  - peak RSS of `generate()` with plain greedy and with the DLite drafter;
  - bytes of target hidden states the DLite candidate generator keeps (instrumented hook), against what
    `output_hidden_states=[tapped layers]` would keep for the whole prompt (L x T x H x 4 bytes).

Usage: .venv/bin/python benchmarks/memory_context.py --drafter DIR [--lengths 1024,16384] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys


def child(method: str, length: int, drafter_dir: str, new_tokens: int) -> dict:
    import torch

    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import dlite_hf
    from dlite_hf.assets import fetch_model
    from dlite_hf.data.long_context import load_long
    from dlite_hf.modeling import tapping
    from dlite_hf.rows import chat_prompt_ids

    folder = fetch_model("smollm2-135m", progress=False)
    target = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompt = load_long(length, tokenizer, split="eval", limit=1)[0]
    ids = torch.tensor([chat_prompt_ids(tokenizer, prompt["messages"])])
    kept = {"max_bytes": 0}
    original = tapping.TappedStateRecorder._hook

    def counting_hook(self, position, module, args, output):
        original(self, position, module, args, output)
        kept["max_bytes"] = max(kept["max_bytes"], sum(t.numel() * t.element_size() for t in self.states.values()))

    tapping.TappedStateRecorder._hook = counting_hook
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kwargs = {"max_new_tokens": new_tokens, "do_sample": False}
    if method == "dlite":
        drafter = dlite_hf.DLiteForSpeculation.from_pretrained(drafter_dir).eval()
        kwargs["assistant_model"] = drafter
    with torch.no_grad():
        target.generate(ids, **kwargs)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = {
        "method": method,
        "prompt_tokens": ids.shape[1],
        "peak_rss_mb": peak / 1024,
        "rss_growth_in_generate_mb": (peak - before) / 1024,
    }
    if method == "dlite":
        config = drafter.config
        result["kept_state_bytes"] = kept["max_bytes"]
        result["output_hidden_states_bytes"] = config.num_tapped_layers * ids.shape[1] * config.target_hidden_size * 4
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drafter", required=True)
    parser.add_argument("--lengths", default="1024,16384")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", nargs=2, metavar=("METHOD", "LENGTH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.drafter, args.new_tokens)))
        return 0
    rows = []
    for length in [int(x) for x in args.lengths.split(",")]:
        for method in ("plain", "dlite"):
            command = [
                sys.executable,
                __file__,
                "--drafter",
                args.drafter,
                "--new-tokens",
                str(args.new_tokens),
                "--child",
                method,
                str(length),
            ]
            output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(output.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    report = {
        "command": " ".join(sys.argv),
        "machine": platform.processor() or platform.machine(),
        "threads": int(os.environ.get("THREADS", "2")),
        "rows": rows,
    }
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(report, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
