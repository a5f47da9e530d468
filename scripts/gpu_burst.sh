#!/usr/bin/env bash
# The one GPU burst of the SmolLM2 drafter (docs/training-log.md), run on a lent H200 through a device tool that
# carries at most 64 MiB a call and re-syncs the checkout between calls: the target's GGUF travels in parts into a
# folder outside the checkout ($W, kept while the machine stays warm), and the work takes three calls:
#
#   bash scripts/gpu_burst.sh env     # carries .gpu_a (GGUF part aa + wheels: transformers, gguf, regex)
#   bash scripts/gpu_burst.sh regen   # carries .gpu_b (GGUF parts ab, ac + gzipped prompts5 / sampled / regen):
#                                     #   GGUF checked and converted, regenerate, a 20-step training probe
#   STEPS=750 bash scripts/gpu_burst.sh train   # carries .gpu_c/init (the shipped drafter): the stable stage
#   bash scripts/gpu_burst.sh broad   # after env: the broad mix, regenerate + train in one call (not yet run)
#
# Inputs: `python scripts/smollm2_prompts.py RUN` (prompts5.jsonl, sampled.jsonl) and runs/smollm2/regen.jsonl.
# On a machine of your own, any `dlite-hf regenerate --device cuda` / `dlite-hf train` run on a GPU does the same.
set -euo pipefail
phase=${1:?usage: gpu_burst.sh env|regen|train|broad}
W=${GPU_WORK:-/tmp/dlite_gpu_work}
OUT=${OUT:-$W/out}
source scripts/gpu_common.sh
regen() {  # regen SECONDS PROMPTS OUT ARGS...: a time-boxed `dlite-hf regenerate` on the GPU, progress bars dropped
  timeout "$1" "${DLITE[@]}" regenerate --target smollm2-135m --prompts "$2" --out "$3" --max-new-tokens 256 \
    --max-prompt-tokens 1024 --batch-size "${REGEN_BS:-512}" --device "${DEVICE:-cuda}" "${@:4}" 2>&1 |
    tr '\r' '\n' | grep -v "it/s\]$" || true
}
TRAIN=(--stage stable --target smollm2-135m --num_anchors 32 --per_device_train_batch_size "${BS:-32}" --bf16 true
  --report_to none --disable_tqdm true --vocab_chunk_size 8192 --dataloader_num_workers 0)

case $phase in
regen)
  cat "$W"/gguf/gguf.part* .gpu_b/gguf.part* > "$GGUF"
  stamp "converting"
  "${DLITE[@]}" assets fetch smollm2-135m --gguf "$GGUF"  # checks the pinned sha256, converts into the cache
  python3 -c "from dlite_hf import assets; print('weights sha256', assets.sha256_file(assets.fetch_model('smollm2-135m') / 'model.safetensors'))"
  mkdir -p "$W/data"
  for f in .gpu_b/*.jsonl.gz; do gunzip -c "$f" > "$W/data/$(basename "$f" .gz)"; done
  stamp "regenerating (greedy, new prompts)"
  regen "${REGEN_GREEDY_S:-150}" "$W/data/prompts5.jsonl" "$W/data/regen_gpu.jsonl"
  stamp "regenerating (sampled, every prompt)"
  regen "${REGEN_SAMPLED_S:-150}" "$W/data/sampled.jsonl" "$W/data/regen_gpu.jsonl" --do-sample --seed 1
  wc -l "$W/data/regen_gpu.jsonl"
  gzip -c "$W/data/regen_gpu.jsonl" > "$OUT/regen_gpu.jsonl.gz"
  cat "$W/data/regen.jsonl" "$W/data/regen_gpu.jsonl" > "$W/data/all.jsonl"
  stamp "training probe (20 steps, from a fresh drafter: only the step time matters)"
  # shellcheck disable=SC2086
  timeout 120 "${DLITE[@]}" train "${TRAIN[@]}" --data "$W/data/all.jsonl" --output_dir "$W/probe" \
    --max_steps "${PROBE_STEPS:-20}" --max_length 1280 --learning_rate 1e-3 --logging_steps 5 --save_strategy no \
    --num_tapped_layers 6 --drafter_hidden_size 256 --drafter_layers 5 --drafter_heads 4 --drafter_kv_heads 2 \
    --drafter_intermediate_size 768 --head_rank 128 --num_draft_tokens 7 ${EXTRA_TRAIN:-} 2>&1 | tail -n 30 || true
  stamp "done"
  ;;
broad)
  # the broad mix (dlite_hf.data.mix): carries .gpu_b/mix_prompts.jsonl.gz and mix_texts.jsonl.gz (gzipped output of
  # `dlite-hf mix build --out M --prompts-per-domain 4000 --texts-per-domain 4000`) and the GGUF parts as in
  # `regen`; regenerates in bfloat16 for at most REGEN_S seconds (resumable), then trains from .gpu_c/init
  if [ ! -f "$GGUF" ]; then cat "$W"/gguf/gguf.part* .gpu_b/gguf.part* > "$GGUF"; fi
  [ -d "$DLITE_HF_CACHE/models/smollm2-135m" ] || "${DLITE[@]}" assets fetch smollm2-135m --gguf "$GGUF"
  mkdir -p "$W/data"
  for f in mix_prompts mix_texts; do gunzip -c ".gpu_b/$f.jsonl.gz" > "$W/data/$f.jsonl"; done
  stamp "regenerating the broad mix (bfloat16, at most ${REGEN_S:-300} s)"
  regen "${REGEN_S:-300}" "$W/data/mix_prompts.jsonl" "$W/data/mix_regen.jsonl" --dtype bfloat16
  data=$W/data/mix_regen.jsonl
  if [ -n "${WITH_TEXT:-}" ]; then  # target-labelled text rows lowered in-domain tau on the CPU (docs/training-log.md)
    "${DLITE[@]}" label-text --texts "$W/data/mix_texts.jsonl" --out "$W/data/mix_text_rows.jsonl" --max-tokens 1024
    data=$data,$W/data/mix_text_rows.jsonl
  fi
  "${DLITE[@]}" mix table ${data//,/ } | tee "$OUT/mix_table.md"
  stamp "training (at most ${TRAIN_S:-360} s)"
  timeout "${TRAIN_S:-360}" "${DLITE[@]}" train "${TRAIN[@]}" --target_dtype bfloat16 --data "$data" \
    --init .gpu_c/init --output_dir "$W/gpu_broad" --max_steps "${STEPS:-600}" --max_length 1024 \
    --learning_rate 5e-4 --lr_scheduler_type cosine --warmup_steps 30 --weight_decay 0.0 --logging_steps 25 \
    --save_steps 100 --save_total_limit 1 --seed 0 2>&1 | tee "$OUT/train.log" | tail -n 40 || true
  tar -C "$(last_checkpoint "$W/gpu_broad")" -cf "$OUT/broad.tar" config.json model.safetensors
  gzip -c "$W/data/mix_regen.jsonl" | split -b 15000000 - "$OUT/mix_regen.jsonl.gz.part"
  stamp "done"
  ;;
train)
  stamp "training"
  STEPS=${STEPS:?set STEPS}
  # shellcheck disable=SC2086
  timeout "${TRAIN_S:-480}" "${DLITE[@]}" train "${TRAIN[@]}" --data "$W/data/all.jsonl" --init .gpu_c/init \
    --refresh_draft_vocab --draft_vocab_size 8192 --output_dir "$W/gpu_stable" --max_steps "$STEPS" --max_length 1280 \
    --learning_rate 1e-3 --lr_scheduler_type cosine --warmup_steps 50 --weight_decay 0.0 --logging_steps 25 \
    --save_steps 200 --save_total_limit 1 --seed 0 ${EXTRA_TRAIN:-} 2>&1 | tee "$OUT/train.log" |
    grep -v "^\s*$" | tail -n 60 || true
  stamp "packing"
  ck=$(last_checkpoint "$W/gpu_stable")
  echo "returning $ck"
  files=()
  for f in config.json model.safetensors dlite_training.json README.md trainer_state.json; do
    [ -f "$ck/$f" ] && files+=("$f")
  done
  tar -C "$ck" -cf "$W/ck.tar" "${files[@]}"
  split -b 15000000 "$W/ck.tar" "$OUT/ck.tar.part"
  ls -la "$OUT"
  ;;
*)
  echo "unknown phase $phase" >&2
  exit 2
  ;;
esac
