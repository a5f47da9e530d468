"""Write the four training prompt files of the shipped SmolLM2 drafter (deterministic; train split only).

Round 1 (``prompts.jsonl``, 692 prompts): ``training_mix(160, seed=0)`` over the sources that existed then (MT-bench,
HumanEval, ASDiv, BFCL, ToolTalk). Round 2 (``prompts2.jsonl``, 450 prompts): prompts not in round 1, drawn with
seed 11: 200 chat (most from the train-only FiQA / TruthfulQA / LiveQA questions), 150 code (most from standard-
library function stubs), 100 math (ASDiv). Round 3 (``prompts3.jsonl``, 450 prompts): prompts in neither, drawn
with seed 12, weighted towards the workloads the drafter was weakest on: 250 chat, 100 tool calls, 39 code (every
stdlib stub left), 61 math. Round 4 (``prompts4.jsonl``, 450 prompts): prompts in none of them, seed 13: 200 chat,
150 tool calls, 100 math (no code prompts are left in the train split). Round 5 (``prompts5.jsonl``, the GPU
burst of ``scripts/gpu_burst.sh``): every train-split prompt in none of them (266 chat, 1,867 math, 1,365 tool
calls, 233 agentic).
``sampled.jsonl``: every prompt of rounds 1-5 again with id suffix ``#s1``, and the chat and code ones a third time
(``#s2``), for responses sampled at temperature 0.7 / top-p 0.9 (more target-written contexts per prompt).

Usage: python scripts/smollm2_prompts.py RUN_DIR
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from dlite_hf.data import prompts as P
from dlite_hf.data.mix import training_mix
from dlite_hf.jsonl import write_jsonl

ROUND2_SOURCES = ("fiqa/", "truthfulqa/", "liveqa/", "stdlib/")  # added after round 1
ROUND2 = (("chat", 200), ("code", 150), ("math", 100))
ROUND3 = (("chat", 250), ("tool", 100), ("code", 39), ("math", 61))
ROUND4 = (("chat", 200), ("tool", 150), ("math", 100))
ROUND5 = tuple((w, 10**6) for w in ("chat", "code", "math", "tool", "agentic"))  # everything left


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
    first = training_mix(160, seed=0, exclude_id_prefixes=ROUND2_SOURCES)
    write_jsonl(first, Path(run_dir) / "prompts.jsonl")
    second = later_round({p["id"] for p in first}, ROUND2, seed=11)
    write_jsonl(second, Path(run_dir) / "prompts2.jsonl")
    third = later_round({p["id"] for p in first + second}, ROUND3, seed=12)
    write_jsonl(third, Path(run_dir) / "prompts3.jsonl")
    fourth = later_round({p["id"] for p in first + second + third}, ROUND4, seed=13)
    write_jsonl(fourth, Path(run_dir) / "prompts4.jsonl")
    taken = {p["id"] for p in first + second + third + fourth}
    fifth = later_round(taken, ROUND5, seed=14)
    write_jsonl(fifth, Path(run_dir) / "prompts5.jsonl")
    every = first + second + third + fourth + fifth
    sampled = [{**p, "id": p["id"] + "#s1"} for p in every]
    sampled += [{**p, "id": p["id"] + "#s2"} for p in every if p["workload"] in ("chat", "code")]
    write_jsonl(sampled, Path(run_dir) / "sampled.jsonl")


if __name__ == "__main__":
    main(sys.argv[1])
