"""Write the training prompt files of the shipped SmolLM2 drafter (deterministic; train split only).

Round 1 (``prompts.jsonl``): ``training_mix(160, seed=0)`` over the sources that existed then; rounds 2-4
(``prompts2.jsonl`` .. ``prompts4.jsonl``): prompts in no earlier round, per workload counts below, seeds 11-13;
round 5 (``prompts5.jsonl``, for ``scripts/gpu_burst.sh`` of commit c0342c4, now ``scripts/gpu_study.sh`` with
PROMPTS): every train-split prompt left. ``sampled.jsonl``: every prompt again with id suffix ``#s1``, chat and code a
third time (``#s2``), for sampled responses (docs/training-log.md has the counts).

Usage: python scripts/smollm2_prompts.py RUN_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from dlite_hf.data.mix import training_mix
from dlite_hf.data.prompts import TRAINING_WORKLOADS
from dlite_hf.jsonl import write_jsonl

ROUND2_SOURCES = ("fiqa/", "truthfulqa/", "liveqa/", "stdlib/")  # added after round 1
ROUND2 = {"chat": 200, "code": 150, "math": 100}
ROUND3 = {"chat": 250, "tool": 100, "code": 39, "math": 61}
ROUND4 = {"chat": 200, "tool": 150, "math": 100}
ROUND5 = dict.fromkeys(TRAINING_WORKLOADS, 10**6)  # everything left


def main(run_dir: str) -> None:
    rounds = [training_mix(160, seed=0, exclude_id_prefixes=ROUND2_SOURCES)]
    for counts, seed in ((ROUND2, 11), (ROUND3, 12), (ROUND4, 13), (ROUND5, 14)):
        rounds.append(training_mix(counts, seed, exclude_ids={p["id"] for done in rounds for p in done}))
    for number, prompts in enumerate(rounds, 1):
        write_jsonl(prompts, Path(run_dir) / f"prompts{number if number > 1 else ''}.jsonl")
    every = [p for prompts in rounds for p in prompts]
    sampled = [{**p, "id": p["id"] + "#s1"} for p in every]
    sampled += [{**p, "id": p["id"] + "#s2"} for p in every if p["workload"] in ("chat", "code")]
    write_jsonl(sampled, Path(run_dir) / "sampled.jsonl")


if __name__ == "__main__":
    main(sys.argv[1])
