#!/usr/bin/env bash
# The stable stage at the regenerated dataset's scale on this CPU (issue 27, part 4), resumable: the target's features
# come once from vLLM's forward (`dlite-hf features`) into the trainer's history-free cache (anchors every STRIDE-th
# position), then the drafter is trained from that cache, one core each. Run it again after a kill.
#   nohup bash scripts/train_at_scale.sh > ~/.cache/dlite-hf/work/train-at-scale.log 2>&1 &
# env: ROWS (default the regeneration's greedy rows), RUN, EPOCHS=1 or STEPS, LR=3e-4, MAX_LENGTH=2560, STRIDE=4,
#      CORE=1, SAVE_STEPS=100, SAVE_LIMIT=2, INIT (default the shipped drafter; empty: a new drafter of the shipped
#      shape, then ARCH's flags, e.g. ARCH="--drafter_layers 7"), TRAIN_ARGS (more train flags, e.g.
#      "--refresh_draft_vocab --draft_vocab_size 4096"), TARGET (default smollm2-135m; scripts/train_qwen.sh sets it)
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${DLITE_WORK:-$HOME/.cache/dlite-hf/work}
DLITE=${DLITE:-.venv/bin/dlite-hf}
ROWS=${ROWS:-$WORK/regen/greedy.jsonl}
RUN=${RUN:-$WORK/runs/stable-scale}
EPOCHS=${EPOCHS:-1} LR=${LR:-3e-4} MAX_LENGTH=${MAX_LENGTH:-2560} STRIDE=${STRIDE:-4} CORE=${CORE:-1}
SAVE_STEPS=${SAVE_STEPS:-100} SAVE_LIMIT=${SAVE_LIMIT:-2} TARGET=${TARGET:-smollm2-135m}
LENGTH=(--num_train_epochs "$EPOCHS"); if [ -n "${STEPS:-}" ]; then LENGTH=(--max_steps "$STEPS"); fi
CACHE=${CACHE:-$WORK/features/stride$STRIDE-$MAX_LENGTH}
INIT=${INIT-drafters/dlite-smollm2-135m}
source scripts/drafter_shapes.sh  # new drafters: the shipped shape, then ARCH's flags, which override it
if [ -n "$INIT" ]; then START=(--init "$INIT"); else read -r -a EXTRA <<< "${ARCH:-}"; START=("${SHIPPED_SHAPE[@]}" ${EXTRA[@]+"${EXTRA[@]}"}); fi
VLLM_CPU_OMP_THREADS_BIND=$CORE taskset -c "$CORE" "$DLITE" features --rows "$ROWS" --cache "$CACHE" \
  --target "$TARGET" --drafter "${INIT:-drafters/dlite-smollm2-135m}" --anchor-stride "$STRIDE" --max-length "$MAX_LENGTH"
taskset -c "$CORE" "$DLITE" train --stage stable "${START[@]}" --target "$TARGET" \
  --data "$ROWS" --threads 1 --max_length "$MAX_LENGTH" --per_device_train_batch_size 8 --num_anchors 32 \
  --anchor_stride "$STRIDE" --feature_cache_dir "$CACHE" --target_dtype bfloat16 \
  "${LENGTH[@]}" --learning_rate "$LR" --lr_scheduler_type cosine --warmup_steps 20 --weight_decay 0.0 \
  --logging_steps 10 --save_steps "$SAVE_STEPS" --save_total_limit "$SAVE_LIMIT" --dataloader_num_workers 0 --seed 0 \
  --disable_tqdm true \
  --vocab_chunk_size 4096 --bf16 true --use_cpu true --output_dir "$RUN" ${TRAIN_ARGS:-}
