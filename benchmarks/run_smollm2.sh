#!/usr/bin/env bash
# Reproduce benchmarks/results/ for SmolLM2-135M on one thread.
#
#   benchmarks/run_smollm2.sh DRAFTER [NOHEAD_DRAFTER] [HISTORY_CHECKPOINT]
#
# 1. main table: every workload, plain / prompt lookup / DLite (+ the ablations whose checkpoints are given);
# 2. scaling: drafter ms per round and tau against context length (long prompts of 1k..7.5k tokens, inside
#    SmolLM2's 8k window; 32 new tokens).
# Exits non-zero if any greedy output differs from plain greedy.
set -euo pipefail

DRAFTER=${1:?usage: $0 DRAFTER [NOHEAD_DRAFTER] [HISTORY_CHECKPOINT]}
NOHEAD=${2:-}
HISTORY=${3:-}
BENCH=${DLITE_HF:-dlite-hf}
OUT=${OUT:-benchmarks/results}

methods=plain,prompt_lookup,dlite
extra=(--drafter "$DRAFTER")
if [[ -n $NOHEAD ]]; then methods+=,dlite_nohead; extra+=(--drafter-nohead "$NOHEAD"); fi
if [[ -n $HISTORY ]]; then methods+=,history; extra+=(--drafter-history "$HISTORY"); fi

"$BENCH" bench --target smollm2-135m "${extra[@]}" --methods "$methods" \
    --workloads chat,code,math,tool,agentic,long --num-prompts 4 --max-new-tokens 128 \
    --long-lengths 1024,4096 --agentic-max-tokens 8192 --agentic-max-turns 8 --coding-sessions 1 \
    --threads 1 --out "$OUT" --name smollm2-135m-main

scaling=plain,dlite
[[ -n $HISTORY ]] && scaling+=,history
"$BENCH" bench --target smollm2-135m "${extra[@]}" --methods "$scaling" \
    --workloads long --num-prompts 2 --max-new-tokens 32 --long-lengths 1024,2048,4096,7680 \
    --threads 1 --out "$OUT" --name smollm2-135m-scaling
