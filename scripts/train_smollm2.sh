#!/usr/bin/env bash
# Train the shipped DLite drafter for SmolLM2-135M-Instruct on a CPU, all three stages, resumably: regenerate skips
# finished prompts, each stage resumes from its last checkpoint and a finished stage (model.safetensors in its
# folder) is skipped. Logs and per-stage wall times go to $RUN/.
#   scripts/train_smollm2.sh [RUN_DIR]   (env: THREADS, *_EPOCHS, *_STEPS, DATA, ABLATION)
set -euo pipefail
RUN=${1:-runs/smollm2}
THREADS=${THREADS:-2}
DATA=${DATA:-$RUN/regen.jsonl}
TEACHER_EPOCHS=${TEACHER_EPOCHS:-2}
WARMUP_EPOCHS=${WARMUP_EPOCHS:-1}
STABLE_EPOCHS=${STABLE_EPOCHS:-5}
STABLE3_STEPS=${STABLE3_STEPS:-1600}
STABLE4_STEPS=${STABLE4_STEPS:-1500}
STABLE5_STEPS=${STABLE5_STEPS:-1000}
STABLE6_STEPS=${STABLE6_STEPS:-600}
STABLE7_STEPS=${STABLE7_STEPS:-900}
DLITE=${DLITE:-.venv/bin/dlite-hf}
PYTHON=${PYTHON:-.venv/bin/python}
mkdir -p "$RUN"

# data: four training prompt files (train split only; scripts/smollm2_prompts.py), answered greedily by the target
if [ ! -f "$RUN/prompts4.jsonl" ]; then "$PYTHON" scripts/smollm2_prompts.py "$RUN"; fi
for prompts in "$RUN/prompts.jsonl" "$RUN/prompts2.jsonl" "$RUN/prompts3.jsonl" "$RUN/prompts4.jsonl"; do
  "$DLITE" regenerate --target smollm2-135m --prompts "$prompts" --out "$DATA" --threads "$THREADS" \
    --max-new-tokens 256 --max-prompt-tokens 1024 --batch-size 8 2>&1 | tee -a "$RUN/regen.log"
done

COMMON=(--target smollm2-135m --data "$DATA" --threads "$THREADS" --max_length 768
        --feature_cache_dir "$RUN/features" --per_device_train_batch_size 8 --logging_steps 5
        --save_steps 20 --save_total_limit 2 --lr_scheduler_type cosine --warmup_steps 10 --weight_decay 0.0
        --dataloader_num_workers 0 --seed 0 --disable_tqdm true)
source scripts/drafter_shapes.sh  # the shipped shape; the stages before its vocabulary was narrowed draft over 8,192
ARCH=("${SHIPPED_SHAPE[@]}" --draft_vocab_size 8192)

stage() {  # name, then arguments
  local name=$1; shift
  if [ -f "$RUN/$name/model.safetensors" ]; then echo "stage $name: done, skipping"; return; fi
  local start; start=$(date +%s)
  "$DLITE" train "$@" --output_dir "$RUN/$name" 2>&1 | tee -a "$RUN/$name.log"
  echo "{\"stage\": \"$name\", \"seconds\": $(( $(date +%s) - start ))}" >> "$RUN/times.jsonl"
}

stage teacher --stage teacher --history_window -1 --num_anchors 4 --num_train_epochs "$TEACHER_EPOCHS" \
  --learning_rate 1e-3 "${COMMON[@]}" "${ARCH[@]}"
stage warmup --stage warmup --teacher "$RUN/teacher" --num_anchors 8 \
  --num_train_epochs "$WARMUP_EPOCHS" --learning_rate 1e-3 "${COMMON[@]}"
stage stable --stage stable --init "$RUN/warmup" --num_anchors 32 --num_train_epochs "$STABLE_EPOCHS" \
  --learning_rate 1e-3 "${COMMON[@]}"
# later stable chunks, each started from the one before as the data grew (docs/training-log.md): all the rows so far,
# draft-vocabulary losses in bfloat16 autocast (the target stays float32); stable3 holds 5% of the rows out for eval
LATER=(--stage stable --num_anchors 32 --learning_rate 1e-3 "${COMMON[@]}" --logging_steps 20 --vocab_chunk_size 4096
       --bf16 true --use_cpu true --warmup_steps 50)
EVAL=(--eval_fraction 0.05 --eval_strategy steps --eval_steps 200 --per_device_eval_batch_size 8)
stage stable3 --init "$RUN/stable" --max_steps "$STABLE3_STEPS" "${LATER[@]}" --save_steps 200 --save_total_limit 12 \
  "${EVAL[@]}"
stage stable4 --init "$RUN/stable3" --max_steps "$STABLE4_STEPS" "${LATER[@]}" --save_steps 250 --save_total_limit 8
stage stable5 --init "$RUN/stable4" --max_steps "$STABLE5_STEPS" "${LATER[@]}" --save_steps 250 --save_total_limit 8
# stable5 is drafters/dlite-smollm2-135m's CPU stage; stable6 (more steps) and stable7 (draft vocabulary chosen again
# at 16,384 ids, two backbone layers added as identities) were not shipped
stage stable6 --init "$RUN/stable5" --max_steps "$STABLE6_STEPS" "${LATER[@]}" --save_steps 200 --save_total_limit 8
stage stable7 --init "$RUN/stable5" --refresh_draft_vocab --draft_vocab_size 16384 --grow_layers 2 \
  --max_steps "$STABLE7_STEPS" "${LATER[@]}" --save_steps 100 --save_total_limit 10
# the history-based baseline of the benchmarks (drafters/dlite-smollm2-135m-teacher): the stage-0 teacher trained on
# all the rows, 8 anchors per sequence (full-history training shares one history pass per sequence: ~1.8 s a step)
stage teacher2 --stage teacher --init "$RUN/teacher" --history_window -1 --num_anchors 8 --max_steps 900 \
  --learning_rate 1e-3 "${COMMON[@]}" --save_steps 100 --save_total_limit 4 --logging_steps 20 --bf16 true \
  --use_cpu true --warmup_steps 50

# optional: the matched no-head ablation (benchmarks/run_smollm2.sh ABLATION=...): the first stable run minus its
# head, trained with stable3's exact schedule, data order and seed, stopped after checkpoint-400; compare it with
# stable3/checkpoint-400
if [ -n "${ABLATION:-}" ] && [ ! -f "$RUN/nohead3/checkpoint-400/model.safetensors" ]; then
  "$DLITE" train --init "$RUN/stable" --no_sequential_head --max_steps "$STABLE3_STEPS" "${LATER[@]}" --save_steps 200 \
    --save_total_limit 12 "${EVAL[@]}" --output_dir "$RUN/nohead3" >> "$RUN/nohead3.log" 2>&1 &
  pid=$!
  until [ -f "$RUN/nohead3/checkpoint-400/model.safetensors" ] || ! kill -0 $pid 2>/dev/null; do sleep 10; done
  sleep 20
  kill $pid 2>/dev/null || true
fi
