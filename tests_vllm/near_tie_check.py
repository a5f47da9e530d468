"""The project's near-tie checker (dlite_hf.neartie) on outputs made elsewhere, e.g. by vLLM (tests_vllm/).

Runs in the package's environment (.venv). Input: a JSON file `{"dtype", "cases": [{"prompt_ids", "plain",
"speculative"}]}` (token ids; plain and speculative are the new tokens of a plain and a speculative greedy run in
`dtype`). Output: one NearTieReport per case, as JSON, re-scored by a float32 copy of the target in that dtype.

    .venv/bin/python tests_vllm/near_tie_check.py --cases cases.json --out reports.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from dlite_hf.assets.loading import open_target
from dlite_hf.neartie import NearTieChecker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--target", default="smollm2-135m")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = json.loads(args.cases.read_text())
    target, _, _ = open_target(args.target, dtype=data["dtype"])
    checker = NearTieChecker(target)
    reports = []
    for case in data["cases"]:
        prompt = case["prompt_ids"]
        plain, other = (torch.tensor([prompt + case[key]]) for key in ("plain", "speculative"))
        report = checker.check(len(prompt), plain, other)
        reports.append(None if report is None else report.to_dict())
    args.out.write_text(json.dumps(reports) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
