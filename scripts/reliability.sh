#!/usr/bin/env bash
# The long randomised losslessness runs (issue 45) and their report, docs/reliability.md's tables:
#   generate(): SmolLM2-135M with the shipped drafter, float32 (exact identity) and bfloat16 (near-ties), seeded;
#   vLLM's engine: the plugin against the engine without speculation and vLLM's ngram, float32, DLite and hybrid;
#   vLLM's server: requests with faults, then greedy answers against a server without speculation.
# Resumable where the run is (the generate() verdict files are appended); the verdicts land in $OUT.
#   nohup bash scripts/reliability.sh > ~/.cache/dlite-hf/work/reliability/run.log 2>&1 &
# env: CASES (generate(), per dtype; default 1000), VLLM_RUNS (below), REQUESTS (server, 300). A finished vLLM or
# server file is kept; delete it to run it again.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${DLITE_WORK:-$HOME/.cache/dlite-hf/work}
OUT=${OUT:-benchmarks/results/reliability}
CASES=${CASES:-1000} REQUESTS=${REQUESTS:-300}
DLITE=${DLITE:-.venv/bin/dlite-hf}
VPY=${VPY:-.venv-vllm/bin/python}
mkdir -p "$OUT" "$WORK/reliability"
"$DLITE" reliability run --dtype float32 --cases "$CASES" --seed 0 --max-new-tokens 16 --out "$OUT/generate-fp32.jsonl" \
  2> "$WORK/reliability/generate-fp32.log" || true
"$DLITE" reliability run --dtype bfloat16 --cases "$CASES" --seed 1 --max-new-tokens 16 --out "$OUT/generate-bf16.jsonl" \
  2> "$WORK/reliability/generate-bf16.log" || true
PROMPTS=$WORK/reliability/vllm-prompts.json
[ -f "$PROMPTS" ] || .venv/bin/python benchmarks/vllm_prompts.py --out "$PROMPTS" --num-prompts 3 --max-new-tokens 16
# vLLM, 1,000 cases: SEED:CASES:MODE per run, each in a file of its own (written anew; a finished one is kept)
VLLM_RUNS=${VLLM_RUNS:-0:400:dlite 1:200:hybrid 2:200:dlite 3:200:hybrid}
for run in $VLLM_RUNS; do
  IFS=: read -r seed cases mode <<< "$run"
  name=vllm-$mode-fp32.jsonl; [ "$seed" -lt 2 ] || name=vllm-$mode-fp32-seed$seed.jsonl
  hybrid=(); [ "$mode" = dlite ] || hybrid=(--hybrid)
  [ -f "$OUT/$name" ] || (cd tests_vllm && "../$VPY" random_params.py --prompts "$PROMPTS" --cases "$cases" \
    --seed "$seed" --out "../$OUT/$name" ${hybrid[@]+"${hybrid[@]}"}) || true
done
[ -f "$OUT/server-faults.json" ] || (cd tests_vllm && "../$VPY" server_faults.py --prompts "$PROMPTS" \
  --requests "$REQUESTS" --out "../$OUT/server-faults.json" --log-dir "$WORK/reliability") || true
"$DLITE" reliability report "$OUT"/generate-*.jsonl "$OUT"/vllm-*.jsonl --out "$OUT/report.md"
