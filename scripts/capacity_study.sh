#!/usr/bin/env bash
# The capacity study (issue 27, part 5): drafters of several shapes trained from scratch on the same rows, cache and
# steps (scripts/train_at_scale.sh, one after the other), then held-out tau of each beside the shipped drafter
# (benchmarks/ood_tau.py). Resumable.
#   ROWS=<training rows> nohup bash scripts/capacity_study.sh > ~/.cache/dlite-hf/work/capacity.log 2>&1 &
# env: ROWS (required), TAG=scratch, EPOCHS=2, LR=1e-3, ARMS="w256 w576" (also l7: 7 layers, nohead: no head)
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${DLITE_WORK:-$HOME/.cache/dlite-hf/work}
: "${ROWS:?set ROWS to the training rows (JSONL)}"
TAG=${TAG:-scratch} EPOCHS=${EPOCHS:-2} LR=${LR:-1e-3}
ARMS=${ARMS:-w256 w576}
source scripts/drafter_shapes.sh
declare -A SHAPES=(
  [w256]=""  # the shipped drafter's shape (train_at_scale.sh builds SHIPPED_SHAPE, then ARCH)
  [w576]="${WIDTH_576[*]}"
  [l7]="${LAYERS_7[*]}"
  [nohead]="--no_sequential_head"  # the head ablation at this scale
)
DRAFTERS="shipped=drafters/dlite-smollm2-135m"
for arm in $ARMS; do
  run="$WORK/runs/$TAG-$arm"
  ROWS="$ROWS" RUN="$run" INIT="" ARCH="${SHAPES[$arm]}" EPOCHS="$EPOCHS" LR="$LR" bash scripts/train_at_scale.sh
  DRAFTERS="$DRAFTERS,$arm=$run"
done
mkdir -p "$WORK/ood"
taskset -c 1 .venv/bin/python benchmarks/ood_tau.py --threads 1 --per-workload 6 --max-new-tokens 96 \
  --texts "$WORK/ood/texts.jsonl" --drafters "$DRAFTERS" --out "$WORK/ood/capacity-$TAG.json"
