"""Write the four training prompt files of the shipped SmolLM2 drafter (deterministic; train split only).

Round 1 (``prompts.jsonl``, 692 prompts): ``training_mix(160, seed=0)`` over the sources that existed then (MT-bench,
HumanEval, ASDiv, BFCL, ToolTalk). Round 2 (``prompts2.jsonl``, 450 prompts): prompts not in round 1, drawn with
seed 11: 200 chat (most from the train-only FiQA / TruthfulQA / LiveQA questions), 150 code (most from standard-
library function stubs), 100 math (ASDiv). Round 3 (``prompts3.jsonl``, 450 prompts): prompts in neither, drawn
with seed 12, weighted towards the workloads the drafter was weakest on: 250 chat, 100 tool calls, 39 code (every
stdlib stub left), 61 math. Round 4 (``prompts4.jsonl``, 450 prompts): prompts in none of them, seed 13: 200 chat,
150 tool calls, 100 math (no code prompts are left in the train split).

Usage: python scripts/smollm2_prompts.py RUN_DIR
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from dlite_hf import prompts as P

ROUND2_SOURCES = ("fiqa/", "truthfulqa/", "liveqa/", "stdlib/")  # added after round 1
ROUND2 = (("chat", 200), ("code", 150), ("math", 100))
ROUND3 = (("chat", 250), ("tool", 100), ("code", 39), ("math", 61))
ROUND4 = (("chat", 200), ("tool", 150), ("math", 100))


def later_round(taken: set[str], counts: tuple[tuple[str, int], ...], seed: int) -> list[dict]:
    """`count` train-split prompts per workload, none of them in `taken`, shuffled (deterministic per seed)."""
    rng = random.Random(seed)
    mix: list[dict] = []
    for workload, count in counts:
        candidates = [p for p in P.load_prompts(workload, "train") if p["id"] not in taken]
        mix += rng.sample(candidates, min(count, len(candidates)))
    rng.shuffle(mix)
    return mix


def main(run_dir: str) -> None:
    first = P.training_mix(160, seed=0, exclude_id_prefixes=ROUND2_SOURCES)
    P.write_jsonl(first, Path(run_dir) / "prompts.jsonl")
    second = later_round({p["id"] for p in first}, ROUND2, seed=11)
    P.write_jsonl(second, Path(run_dir) / "prompts2.jsonl")
    third = later_round({p["id"] for p in first + second}, ROUND3, seed=12)
    P.write_jsonl(third, Path(run_dir) / "prompts3.jsonl")
    fourth = later_round({p["id"] for p in first + second + third}, ROUND4, seed=13)
    P.write_jsonl(fourth, Path(run_dir) / "prompts4.jsonl")


if __name__ == "__main__":
    main(sys.argv[1])
