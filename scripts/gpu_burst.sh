#!/usr/bin/env bash
# The one GPU burst of the SmolLM2 drafter (README, "Training"), run on a lent H200 through the workplace's device
# tool. Each call there carries at most 64 MiB (the checkout plus named folders) and the checkout is re-synced
# between calls, so the target's GGUF (98 MB) travels in parts into a folder outside the checkout ($W, kept while
# the machine stays warm) and the work takes three calls:
#
#   bash scripts/gpu_burst.sh env     # carries .gpu_a (GGUF part aa + wheels: transformers 5.24, gguf, regex):
#                                     #   versions, GPU, wheel install, the part put aside
#   bash scripts/gpu_burst.sh regen   # carries .gpu_b (GGUF parts ab, ac + gzipped prompts5 / sampled / regen):
#                                     #   reassemble and sha256-check the GGUF, convert it (the weights' sha256 is
#                                     #   printed: it equals the CPU conversion's), regenerate, a 20-step probe
#   STEPS=750 bash scripts/gpu_burst.sh train   # carries .gpu_c/init (the shipped drafter's config + weights):
#                                     #   the stable stage on every row, from the shipped drafter
#   bash scripts/gpu_burst.sh broad   # after env: the broad mix (see the phase), regenerate + train in one
#                                     #   call (not yet run on a GPU: no GPU was lent since it was written)
#
# The big drafters' weights were moved out of the checkout during the calls (the 64 MiB). Inputs prepared here:
# `python scripts/smollm2_prompts.py RUN` (prompts5.jsonl: every train prompt not used yet, greedy; sampled.jsonl:
# every prompt again, sampled), runs/smollm2/regen.jsonl (the 1,811 CPU-regenerated rows). The machine's python3 has
# torch 2.11 + CUDA and transformers 5.17; the project's transformers pin and gguf travel as wheels.
# On a machine of your own, run the three phases in order with the parts in place (or skip the parts: any
# `dlite-hf regenerate --device cuda` / `dlite-hf train` run on a GPU does the same).
set -euo pipefail
phase=${1:?usage: gpu_burst.sh env|regen|train|broad}
W=${GPU_WORK:-/tmp/dlite_gpu_work}  # outside the checkout: the device tool re-syncs the checkout between calls
OUT=${OUT:-$W/out}
source scripts/gpu_common.sh

case $phase in
env)
  # shellcheck disable=SC2086
  gpu_env ${WHEELS:-.gpu_a/*.whl}
  ;;
regen)
  cat "$W"/gguf/gguf.part* .gpu_b/gguf.part* > "$GGUF"
  stamp "converting"
  "${DLITE[@]}" assets fetch smollm2-135m --gguf "$GGUF"  # checks the pinned sha256, converts into the cache
  python3 -c "from dlite_hf import assets; print('weights sha256', assets.sha256_file(assets.fetch_model('smollm2-135m') / 'model.safetensors'))"
  mkdir -p "$W/data"
  for f in .gpu_b/*.jsonl.gz; do gunzip -c "$f" > "$W/data/$(basename "$f" .gz)"; done
  stamp "regenerating (greedy, new prompts)"
  timeout "${REGEN_GREEDY_S:-150}" "${DLITE[@]}" regenerate --target smollm2-135m --prompts "$W/data/prompts5.jsonl" \
    --out "$W/data/regen_gpu.jsonl" --max-new-tokens 256 --max-prompt-tokens 1024 --batch-size "${REGEN_BS:-512}" --device "${DEVICE:-cuda}" \
    2>&1 | tr '\r' '\n' | grep -v "it/s\]$" || true
  stamp "regenerating (sampled, every prompt)"
  timeout "${REGEN_SAMPLED_S:-150}" "${DLITE[@]}" regenerate --target smollm2-135m --prompts "$W/data/sampled.jsonl" \
    --out "$W/data/regen_gpu.jsonl" --max-new-tokens 256 --max-prompt-tokens 1024 --batch-size "${REGEN_BS:-512}" --device "${DEVICE:-cuda}" \
    --do-sample --seed 1 2>&1 | tr '\r' '\n' | grep -v "it/s\]$" || true
  wc -l "$W/data/regen_gpu.jsonl"
  gzip -c "$W/data/regen_gpu.jsonl" > "$OUT/regen_gpu.jsonl.gz"
  cat "$W/data/regen.jsonl" "$W/data/regen_gpu.jsonl" > "$W/data/all.jsonl"
  stamp "training probe (20 steps, from a fresh drafter: only the step time matters)"
  timeout 120 "${DLITE[@]}" train --stage stable --target smollm2-135m --data "$W/data/all.jsonl" \
    --output_dir "$W/probe" --max_steps "${PROBE_STEPS:-20}" --num_anchors 32 --per_device_train_batch_size "${BS:-32}" --max_length 1280 \
    --learning_rate 1e-3 --logging_steps 5 --save_strategy no --bf16 true --report_to none --disable_tqdm true \
    --num_tapped_layers 6 --drafter_hidden_size 256 --drafter_layers 5 --drafter_heads 4 --drafter_kv_heads 2 \
    --drafter_intermediate_size 768 --head_rank 128 --num_draft_tokens 7 --vocab_chunk_size 8192 \
    --dataloader_num_workers 0 ${EXTRA_TRAIN:-} 2>&1 | tail -n 30 || true
  stamp "done"
  ;;
broad)
  # the broad mix (dlite_hf.data.mix) on the GPU: carries .gpu_b/mix_prompts.jsonl.gz and .gpu_b/mix_texts.jsonl.gz,
  # written here by `dlite-hf mix build --out M --prompts-per-domain 4000 --texts-per-domain 4000` (gzip each); the
  # GGUF parts as in `regen`. Regenerates the prompts in bfloat16 for at most REGEN_S seconds (resumable: a second
  # call goes on), then trains the stable stage from the shipped drafter (.gpu_c/init) on the regenerated rows.
  if [ ! -f "$GGUF" ]; then cat "$W"/gguf/gguf.part* .gpu_b/gguf.part* > "$GGUF"; fi
  [ -d "$DLITE_HF_CACHE/models/smollm2-135m" ] || "${DLITE[@]}" assets fetch smollm2-135m --gguf "$GGUF"
  mkdir -p "$W/data"
  for f in mix_prompts mix_texts; do gunzip -c ".gpu_b/$f.jsonl.gz" > "$W/data/$f.jsonl"; done
  stamp "regenerating the broad mix (bfloat16, at most ${REGEN_S:-300} s)"
  timeout "${REGEN_S:-300}" "${DLITE[@]}" regenerate --target smollm2-135m --prompts "$W/data/mix_prompts.jsonl" \
    --out "$W/data/mix_regen.jsonl" --max-new-tokens 256 --max-prompt-tokens 1024 --batch-size "${REGEN_BS:-512}" \
    --device "${DEVICE:-cuda}" --dtype bfloat16 2>&1 | tr '\r' '\n' | grep -v "it/s\]$" || true
  # target-labelled text rows only with WITH_TEXT=1: on the CPU they lowered in-domain tau (docs/training-log.md)
  data=$W/data/mix_regen.jsonl
  if [ -n "${WITH_TEXT:-}" ]; then
    "${DLITE[@]}" label-text --texts "$W/data/mix_texts.jsonl" --out "$W/data/mix_text_rows.jsonl" --max-tokens 1024
    data=$data,$W/data/mix_text_rows.jsonl
  fi
  "${DLITE[@]}" mix table ${data//,/ } | tee "$OUT/mix_table.md"
  stamp "training (at most ${TRAIN_S:-360} s)"
  timeout "${TRAIN_S:-360}" "${DLITE[@]}" train --stage stable --target smollm2-135m --target_dtype bfloat16 \
    --data "$data" --init .gpu_c/init --output_dir "$W/gpu_broad" \
    --max_steps "${STEPS:-600}" --num_anchors 32 --per_device_train_batch_size "${BS:-32}" --max_length 1024 \
    --learning_rate 5e-4 --lr_scheduler_type cosine --warmup_steps 30 --weight_decay 0.0 --logging_steps 25 \
    --save_steps 100 --save_total_limit 1 --bf16 true --report_to none --disable_tqdm true --seed 0 \
    --vocab_chunk_size 8192 --dataloader_num_workers 0 2>&1 | tee "$OUT/train.log" | tail -n 40 || true
  ck=$W/gpu_broad
  [ -f "$ck/model.safetensors" ] || ck=$(ls -d "$W"/gpu_broad/checkpoint-* | sort -t- -k2 -n | tail -1)
  tar -C "$ck" -cf "$OUT/broad.tar" config.json model.safetensors
  gzip -c "$W/data/mix_regen.jsonl" | split -b 15000000 - "$OUT/mix_regen.jsonl.gz.part"
  stamp "done"
  ;;
train)
  stamp "training"
  STEPS=${STEPS:?set STEPS}
  timeout "${TRAIN_S:-480}" "${DLITE[@]}" train --stage stable --target smollm2-135m --data "$W/data/all.jsonl" \
    --init .gpu_c/init --refresh_draft_vocab --draft_vocab_size 8192 --output_dir "$W/gpu_stable" \
    --max_steps "$STEPS" --num_anchors 32 --per_device_train_batch_size "${BS:-32}" --max_length 1280 --learning_rate 1e-3 \
    --lr_scheduler_type cosine --warmup_steps 50 --weight_decay 0.0 --logging_steps 25 --save_steps 200 \
    --save_total_limit 1 --bf16 true --report_to none --disable_tqdm true --seed 0 --vocab_chunk_size 8192 \
    --dataloader_num_workers 0 ${EXTRA_TRAIN:-} 2>&1 | tee "$OUT/train.log" | grep -v "^\s*$" | tail -n 60 || true
  stamp "packing"
  ck=$W/gpu_stable
  [ -f "$ck/model.safetensors" ] || ck=$(ls -d "$W"/gpu_stable/checkpoint-* | sort -t- -k2 -n | tail -1)
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
