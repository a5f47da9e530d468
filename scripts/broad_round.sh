#!/usr/bin/env bash
# One CPU round of broad data for the SmolLM2 drafter (docs/training-log.md, "Broad data and out-of-domain tau"):
# a sample of the broad mix, its prompts regenerated in bfloat16 and its texts labelled, then the shipped drafter
# fine-tuned on each kind of row (two arms side by side, one core each). Resumable. Evaluate the checkpoints with
# benchmarks/ood_tau.py.   scripts/broad_round.sh [RUN_DIR]   (env: PER_DOMAIN=40 TEXTS=500 STEPS=200 LR=5e-4)
set -euo pipefail
RUN=${1:-runs/mix1}
DLITE=${DLITE:-.venv/bin/dlite-hf}
PER_DOMAIN=${PER_DOMAIN:-40} TEXTS=${TEXTS:-500} STEPS=${STEPS:-200} LR=${LR:-5e-4}
mkdir -p "$RUN"
[ -f "$RUN/mix.json" ] || "$DLITE" mix build --out "$RUN" --prompts-per-domain "$PER_DOMAIN" --texts-per-domain "$TEXTS" --seed 0
taskset -c 0 "$DLITE" regenerate --prompts "$RUN/prompts.jsonl" --out "$RUN/regen.jsonl" --dtype bfloat16 --threads 1 \
  --batch-size 8 --max-new-tokens 192 --max-prompt-tokens 1024 2>&1 | tee -a "$RUN/regen.log"
"$DLITE" label-text --texts "$RUN/texts.jsonl" --out "$RUN/text_rows.jsonl" --max-tokens 768
"$DLITE" mix table "$RUN/regen.jsonl" "$RUN/text_rows.jsonl" | tee "$RUN/table.md"

arm() {  # name, rows, core
  local start; start=$(date +%s)
  taskset -c "$3" "$DLITE" train --stage stable --init drafters/dlite-smollm2-135m --target smollm2-135m \
    --data "$2" --threads 1 --max_length 768 --per_device_train_batch_size 8 --num_anchors 32 \
    --max_steps "$STEPS" --learning_rate "$LR" --lr_scheduler_type cosine --warmup_steps 10 --weight_decay 0.0 \
    --logging_steps 10 --save_steps 50 --save_total_limit 3 --dataloader_num_workers 0 --seed 0 --disable_tqdm true \
    --vocab_chunk_size 4096 --bf16 true --use_cpu true --target_dtype bfloat16 --output_dir "$RUN/$1" \
    > "$RUN/$1.log" 2>&1
  echo "{\"arm\": \"$1\", \"seconds\": $(( $(date +%s) - start ))}" >> "$RUN/times.jsonl"
}
arm regen "$RUN/regen.jsonl" 0 &
arm text "$RUN/text_rows.jsonl" 1 &
wait
