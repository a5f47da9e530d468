#!/usr/bin/env bash
# The paper's pairs (c) and (d) on this CPU at a small scale (issue 27, part 6; docs/training-log.md): drafters of the
# shipped shape trained from scratch on the same rows, one core per arm, from a feature cache of every position
# (`dlite-hf features --all-positions`). Arms: A, the stable stage, history-free (both pairs' baseline); W<N>, a
# sliding window of the target's last N positions (pair d); B, teacher, KL warm-up, then stable, on a quarter, a
# quarter and a half of BUDGET seconds (pair c; its baseline is arm A with the same BUDGET). Capacity variants are
# arm A with scripts/drafter_shapes.sh flags in TRAIN_ARGS (last wins), e.g. TRAIN_ARGS="--drafter_layers 7".
#   ROWS=rows.jsonl CACHE=features-all ARM=A STEPS=600 CORE=0 RUN=runs/A bash scripts/history_study.sh
# env: ROWS, CACHE, ARM, RUN (required); STEPS or BUDGET (seconds of training; B: BUDGET only); CORE=0, LR=1e-3,
#      MAX_LENGTH=1024, SAVE_STEPS=100 (checkpoints kept for benchmarks/ood_tau.py), BF16=true (false: float32),
#      ANCHORS=32, TRAIN_ARGS (more train flags, last wins)
set -euo pipefail
cd "$(dirname "$0")/.."
DLITE=${DLITE:-.venv/bin/dlite-hf}
: "${ROWS:?set ROWS}" "${CACHE:?set CACHE}" "${ARM:?set ARM to A, W<N> or B}" "${RUN:?set RUN}"
CORE=${CORE:-0} LR=${LR:-1e-3} MAX_LENGTH=${MAX_LENGTH:-1024} SAVE_STEPS=${SAVE_STEPS:-100} ANCHORS=${ANCHORS:-32}
BF16=${BF16:-true}  # the study's autocast; false on a CPU that emulates bfloat16 (docs/benchmark-machines.md)
case $CORE in '' | *[!0-9]*) echo "CORE=$CORE is invalid: expected a core number (0 or 1 here)." >&2 && exit 2 ;; esac
case $ARM in
A | B | W[1-9] | W[1-9]*[0-9]) ;;
*) echo "ARM=$ARM is invalid: expected A, W<N> (a window of N > 0 positions) or B." >&2 && exit 2 ;;
esac
source scripts/drafter_shapes.sh  # SHIPPED_SHAPE; TRAIN_ARGS may follow it with a variant's flags
COMMON=(--target smollm2-135m --data "$ROWS" --threads 1 --max_length "$MAX_LENGTH" --per_device_train_batch_size 8
  --num_anchors "$ANCHORS" --feature_cache_dir "$CACHE" --target_dtype bfloat16 --learning_rate "$LR"
  --lr_scheduler_type cosine --warmup_steps 20 --weight_decay 0.0 --logging_steps 10 --save_steps "$SAVE_STEPS"
  --save_total_limit 20 --dataloader_num_workers 0 --seed 0 --disable_tqdm true --vocab_chunk_size 4096 --bf16 "$BF16"
  --use_cpu true --report_to none)
train() {  # train OUTPUT ARGS...: one dlite-hf train on CORE, its log beside its folder
  local out=$1
  shift
  taskset -c "$CORE" "$DLITE" train "${COMMON[@]}" "$@" ${TRAIN_ARGS:-} --output_dir "$out" > "$out.log" 2>&1
}
if [ -n "${STEPS:-}" ]; then
  LENGTH=(--max_steps "$STEPS")
elif [ -n "${BUDGET:-}" ]; then  # by time: the cosine follows the budget's elapsed seconds (pair c's baseline)
  LENGTH=(--max_steps 100000 --max_train_seconds "$BUDGET")
elif [ "$ARM" != B ]; then
  echo "set STEPS (or BUDGET, seconds) for arm $ARM" >&2 && exit 2
fi
case $ARM in
A) train "$RUN" --stage stable "${SHIPPED_SHAPE[@]}" "${LENGTH[@]}" ;;
W*) train "$RUN" --stage stable "${SHIPPED_SHAPE[@]}" --sliding_window "${ARM#W}" "${LENGTH[@]}" ;;
B)
  : "${BUDGET:?set BUDGET (seconds of training, the same as the baseline A) for arm B}"
  q=$((BUDGET / 4))
  train "$RUN-teacher" --stage teacher --history_window -1 "${SHIPPED_SHAPE[@]}" --max_steps 100000 --max_train_seconds "$q"
  train "$RUN-warmup" --stage warmup --teacher_path "$RUN-teacher" --max_steps 100000 --max_train_seconds "$q"
  train "$RUN" --stage stable --init "$RUN-warmup" --max_steps 100000 --max_train_seconds "$((BUDGET - 2 * q))"
  ;;
esac
