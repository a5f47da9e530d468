#!/usr/bin/env bash
# The capacity study (issue 27, part 5): new drafters of two widths trained from scratch on the same rows, the same
# feature cache and the same steps (stable stage, scripts/train_at_scale.sh), then held-out tau of each beside the
# shipped drafter (benchmarks/ood_tau.py). One core (1); resumable: a finished arm's trainer resumes or skips, the
# tau texts are cached. Arms run one after the other.
#   ROWS=<training rows> nohup bash scripts/capacity_study.sh > ~/.cache/dlite-hf/work/capacity.log 2>&1 &
# env: ROWS (required), TAG (names the runs, default scratch), EPOCHS=2, LR=1e-3, ARMS (default "w256 w576"; also
#      l7: 7 layers, nohead: no sequential head)
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
