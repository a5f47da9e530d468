#!/usr/bin/env bash
# Issue 27 on a lent H200 (docs/training-log.md): the shipped drafter's next version trained on the whole regenerated
# dataset, with the capacity study and the paper-claim pairs beside it on the same GPU, each arm on the same
# wall-clock budget (`--max_train_seconds`: a cosine over time). The target runs online (no feature cache).
# The device tool carries at most 64 MiB a call and re-syncs the checkout, so inputs travel into $W, outside it:
#
#   bash scripts/gpu_study.sh prepare  # here: .gpu_a (GGUF part 1, wheels), .gpu_b (GGUF part 2, rows, init, texts);
#                                      # then move drafters/, datasets/ and benchmarks/results/ aside
#   bash scripts/gpu_study.sh env      # carry .gpu_a: wheels installed, GGUF part 1 put aside, versions
#   bash scripts/gpu_study.sh study    # carry .gpu_b: GGUF checked and converted, the arms, replay, packing
#
# Arms (ARMS, default all): P (the product: the shipped drafter fine-tuned on every row, draft vocabulary chosen
# again, batch 64), and from scratch at batch 32: A (the shipped shape, stable stage: every pair's baseline), B
# (teacher, KL warm-up, stable: 1/4, 1/4, 1/2 of the budget), C and D (sliding windows of 128 and 512), E (no
# sequential head), F (width 576), G (7 layers), H (12 tapped layers).
set -euo pipefail
phase=${1:?usage: gpu_study.sh prepare|env|study}
W=${GPU_WORK:-/tmp/dlite_gpu_study}
OUT=${OUT:-$W/out}

if [ "$phase" = prepare ]; then
  # here, on the CPU machine: GGUF_FILE, WHEELS (transformers 5.24.0, gguf, regex for cp312), ROWS (data/regen.jsonl
  # rebuilt from the dataset), TEXTS (benchmarks/ood_tau.py's cached texts), INIT (the shipped drafter)
  rm -rf .gpu_a .gpu_b && mkdir -p .gpu_a .gpu_b/init
  split -b "${PART1_BYTES:-45000000}" "${GGUF_FILE:?}" .gpu_a/gguf.part
  mv .gpu_a/gguf.partab .gpu_b/gguf.partab
  cp ${WHEELS:?} .gpu_a/
  xz -T2 -6 -c "${ROWS:-data/regen.jsonl}" > .gpu_b/rows.jsonl.xz
  cp "${TEXTS:?}" .gpu_b/texts.jsonl
  .venv/bin/python - "${INIT:-drafters/dlite-smollm2-135m}" .gpu_b/init <<'EOF'
import sys
import torch
from dlite_hf import DLiteForSpeculation
DLiteForSpeculation.from_pretrained(sys.argv[1], dtype=torch.float32).to(torch.bfloat16).save_pretrained(sys.argv[2])
EOF
  du -sh .gpu_a .gpu_b
  exit 0
fi

source scripts/gpu_common.sh
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True OMP_NUM_THREADS=1

case $phase in
study)
  cat "$W"/gguf/gguf.part* .gpu_b/gguf.part* > "$GGUF"
  stamp "converting"
  "${DLITE[@]}" assets fetch smollm2-135m --gguf "$GGUF" 2>&1 | tail -n 3  # checks the pinned sha256
  D=$W/rows.jsonl
  xz -dc .gpu_b/rows.jsonl.xz > "$D"
  wc -l "$D"
  T=${TRAIN_S:-300}        # each arm's training budget (seconds of training, after its start-up)
  DEADLINE=${DEADLINE_S:-420}  # seconds after the start of this phase: any arm still running is stopped
  common=(--target smollm2-135m --target_dtype bfloat16 --bf16 "${BF16:-true}" --data "$D" --max_length "${MAXLEN:-2048}" --num_anchors 32
    --vocab_chunk_size 1024 --dataloader_num_workers 0 --report_to none --disable_tqdm true --seed 0
    --lr_scheduler_type cosine --warmup_steps 50 --weight_decay 0.0 --logging_steps 25 --max_steps 100000
    --eval_fraction 0.01 --eval_strategy steps --eval_steps "${EVAL_STEPS:-100}" --per_device_eval_batch_size 32
    --save_strategy steps --save_steps 200 --save_total_limit 1)
  source scripts/drafter_shapes.sh
  arch=("${SHIPPED_SHAPE[@]}")
  scratch=("${common[@]}" --per_device_train_batch_size "${BS:-32}" --learning_rate 1e-3)
  mkdir -p "$W/runs" "$OUT/logs"
  run() {  # run NAME ARGS...: one dlite-hf train, its log kept
    local name=$1
    shift
    "${DLITE[@]}" train "$@" --output_dir "$W/runs/$name" > "$OUT/logs/$name.log" 2>&1
  }
  arms=${ARMS:-P A B C D E F G H}
  for arm in $arms; do
    case $arm in
    P) run P "${common[@]}" --init .gpu_b/init --refresh_draft_vocab --draft_vocab_size 4096 \
      --per_device_train_batch_size "${BS_P:-64}" --learning_rate 5e-4 --max_train_seconds "$T" & ;;
    A) run A "${scratch[@]}" "${arch[@]}" --max_train_seconds "$T" & ;;
    B) (
      q=$(((T - 40) / 4 > 5 ? (T - 40) / 4 : 5))  # three start-ups (about 15 s each) come out of its share
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
  stamp "arms started: $arms"
  while [ $(($(date +%s) - T0)) -lt "$DEADLINE" ] && jobs -r | grep -q .; do
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader >> "$OUT/logs/gpu.csv" 2>/dev/null || true
    sleep 5
  done
  stamp "deadline or all done; still running: $(jobs -r | wc -l)"
  pkill -TERM -f "dlite_hf.cli train" || true
  sleep 5
  nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv || true
  for arm in $arms B1-teacher B2-warmup; do
    dir=$W/runs/$arm
    final=$(last_checkpoint "$dir")
    state=$(ls "$dir"/checkpoint-*/trainer_state.json 2>/dev/null | tail -1 || true)
    if [ -n "$state" ]; then cp "$state" "$OUT/logs/$arm-trainer_state.json"; fi
    if [ -n "$final" ]; then ln -sfn "$final" "$W/final-$arm"; fi
    echo "$arm: ${final:-no weights}"
  done
  python3 - "$OUT/logs" <<'EOF' || true
import json, sys
from pathlib import Path
for f in sorted(Path(sys.argv[1]).glob("*-trainer_state.json")):
    state = json.loads(f.read_text())
    evals = [(e["step"], round(e["eval_expected_tau_greedy"], 3)) for e in state["log_history"] if "eval_expected_tau_greedy" in e]
    runtime = [e["train_runtime"] for e in state["log_history"] if "train_runtime" in e]
    print(f.name.removesuffix("-trainer_state.json"), "steps", state["global_step"], "eval tau", evals[-5:], "runtime", runtime)
EOF
  stamp "replaying the held-out texts on the GPU (float32 target)"
  for arm in shipped $arms; do
    dir=$W/final-$arm
    [ "$arm" = shipped ] && dir=.gpu_b/init
    [ -e "$dir" ] || continue
    timeout "${REPLAY_S:-100}" python3 benchmarks/ood_tau.py --device "${DEVICE:-cuda}" --texts-only --texts .gpu_b/texts.jsonl \
      --drafters "$arm=$dir" --out "$OUT/logs/replay-$arm.json" > "$OUT/logs/replay-$arm.log" 2>&1 &
  done
  wait || true
  grep -h "OOD" "$OUT"/logs/replay-*.log || true
  stamp "packing"
  python3 - "$W" "$OUT" $arms <<'EOF'
import json, os, subprocess, sys
from pathlib import Path
import torch
from safetensors.torch import load_file, save_file
work, out, arms = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
score = {}
for arm in arms:
    f = out / "logs" / f"replay-{arm}.json"
    if f.is_file():
        d = json.loads(f.read_text())["drafters"][arm]
        score[arm] = d["mean_tau_ood"] + d["mean_tau_in_domain"]
order = ["P"] + sorted((a for a in arms if a != "P"), key=lambda a: -score.get(a, 0.0))
pack, total = work / "pack", 0
pack.mkdir(exist_ok=True)
for arm in order:
    final = work / f"final-{arm}"
    if not final.exists():
        continue
    tensors = load_file(final / "model.safetensors")
    if arm != "P":  # the product comes back as trained (float32); the study's arms in bfloat16, to fit
        tensors = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in tensors.items()}
    size = sum(v.numel() * v.element_size() for v in tensors.values())
    if total + size > 56_000_000:
        print("not returned (size):", arm, size)
        continue
    total += size
    (pack / arm).mkdir(exist_ok=True)
    save_file(tensors, pack / arm / "model.safetensors", metadata={"format": "pt"})
    for name in ("config.json", "dlite_training.json"):
        if (final / name).is_file():
            (pack / arm / name).write_bytes((final / name).read_bytes())
    print("returned:", arm, size)
subprocess.run(f"tar -C {pack} -cf {work}/weights.tar . && split -b 15000000 {work}/weights.tar {out}/weights.tar.part", shell=True, check=True)
subprocess.run(f"tar -C {out} -czf {out}/logs.tgz logs && rm -rf {out}/logs", shell=True, check=True)
os.system(f"ls -la {out}")
EOF
  stamp "done"
  ;;
*)
  echo "unknown phase $phase" >&2
  exit 2
  ;;
esac
