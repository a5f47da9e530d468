#!/usr/bin/env bash
# The broad mix answered by the target with vLLM (issue 27): a resumable background job. Its working state lives
# outside the work tree ($DLITE_WORK, default ~/.cache/dlite-hf/work); run it again after a kill and it goes on.
# Finished rows become the dataset's parquet shards with `dlite-hf dataset export` (see datasets/README.md).
#   nohup bash scripts/regenerate_mix.sh > ~/.cache/dlite-hf/work/regen.log 2>&1 &
# Another target: `bash scripts/regenerate_qwen.sh` (TARGET, MIX, REGEN, MIX_OPTIONS, DATASET and STAGES below).
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${DLITE_WORK:-$HOME/.cache/dlite-hf/work}
DLITE=${DLITE:-.venv/bin/dlite-hf}
PER_DOMAIN=${PER_DOMAIN:-6000}
MAX_NEW=${MAX_NEW:-512}
MAX_PROMPT=${MAX_PROMPT:-2048}
# TARGET: the model that answers (registry name or folder; empty: dlite-hf's default, SmolLM2-135M); MIX and REGEN:
# the mix's folder and the rows' folder; MIX_OPTIONS: more `mix build` options (e.g. --weights code=3)
TARGET=${TARGET:-}
MIX=${MIX:-$WORK/mix}
REGEN=${REGEN:-$WORK/regen}
read -r -a MIX_OPTS <<< "${MIX_OPTIONS:-}"
TARGET_OPTS=()
if [ -n "$TARGET" ]; then TARGET_OPTS=(--target "$TARGET"); fi
# rows already shipped in the repository's dataset are not regenerated (a fresh machine extends it); DATASET= (empty)
# for a target with no dataset yet
DATASET=${DATASET-datasets/dlite-smollm2-135m-regen}
SKIP_OPTS=()
if [ -n "$DATASET" ]; then SKIP_OPTS=(--skip-dataset "$DATASET"); fi
mkdir -p "$REGEN"
[ -f "$MIX/mix.json" ] || "$DLITE" mix build --out "$MIX" --prompts-per-domain "$PER_DOMAIN" --texts-per-domain 500 --seed 0 ${MIX_OPTS[@]+"${MIX_OPTS[@]}"}
# greedy and sampled rows in stages, so that both kinds grow from the first session on: greedy answers to the first
# 8,192 prompts, one sampled answer (temperature 0.7, top-p 0.9) to the first 2,048, then greedy and sampled for all.
# TOP_P: the sampled rows' nucleus (each row records its own). 1.0 from 2026-12-05 on: with top-p 0.9 a sampled worker
# spent 49% of its time in vLLM's CPU top-p (a sort of the 49,152-id vocabulary per row per step; py-spy, 20 s) and
# wrote 100 tokens/s against greedy's 320 on the same core; the drafter learns the target's full distribution anyway.
# Each stage resumes where a kill left it; a finished stage is skipped (a marker under $WORK/regen).
# WORKERS=N runs N vLLM workers at once, one core each (VLLM_CPU_OMP_THREADS_BIND and taskset), on disjoint shards
# of the prompts (`--shard I/N`, by id), each appending to its own file (greedy.s0of2.jsonl, ...); export each.
WORKERS=${WORKERS:-1}
TOP_P=${TOP_P:-1.0}
if ! [[ "$WORKERS" =~ ^[1-9][0-9]*$ ]]; then
  echo "WORKERS=$WORKERS: expected a positive number of vLLM workers (one core each), e.g. WORKERS=2" >&2; exit 2
fi
rows_file() {  # kind, shard index
  if [ "$WORKERS" = 1 ]; then echo "$REGEN/$1.jsonl"; else echo "$REGEN/$1.s$2of$WORKERS.jsonl"; fi
}
greedy() {  # shard index, then extra options
  local i=$1; shift
  "$DLITE" regenerate --engine vllm ${TARGET_OPTS[@]+"${TARGET_OPTS[@]}"} --prompts "$MIX/prompts.jsonl" --out "$(rows_file greedy "$i")" \
    --shard "$i/$WORKERS" --dtype bfloat16 --max-new-tokens "$MAX_NEW" --max-prompt-tokens "$MAX_PROMPT" --seed 0 \
    ${SKIP_OPTS[@]+"${SKIP_OPTS[@]}"} "$@"
}
sampled() {
  local i=$1; shift
  "$DLITE" regenerate --engine vllm ${TARGET_OPTS[@]+"${TARGET_OPTS[@]}"} --prompts "$MIX/prompts.jsonl" --out "$(rows_file sampled "$i")" \
    --shard "$i/$WORKERS" --dtype bfloat16 --max-new-tokens "$MAX_NEW" --max-prompt-tokens "$MAX_PROMPT" --seed 1 \
    --samples 1 --temperature 0.7 --top-p "$TOP_P" ${SKIP_OPTS[@]+"${SKIP_OPTS[@]}"} "$@"
}
stage() {  # kind, then extra options: every worker on its core; the stage ends when all have
  local kind=$1; shift
  # a stage whose workers all finished is marked, so that a restart skips it without reading the shipped shards and
  # tokenizing the mix again (about a minute a stage); a killed or failed stage is not marked and resumes
  local marker
  marker="$REGEN/.done-$kind$(printf '%s' "$*" | tr -c 'A-Za-z0-9' '_')-w$WORKERS"
  if [ -f "$marker" ]; then echo "stage $kind $*: done before ($marker)"; return 0; fi
  local pids=() i
  for ((i = 0; i < WORKERS; i++)); do
    if [ "$WORKERS" = 1 ]; then
      "$kind" "$i" "$@" &
    else  # the subshell pins itself to core i; the worker it starts inherits it
      (taskset -p -c "$i" "$BASHPID" > /dev/null && VLLM_CPU_OMP_THREADS_BIND=$i "$kind" "$i" "$@") &
    fi
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done  # set -e: a worker's failure ends the script here, unmarked
  touch "$marker"
}
# STAGES: the stages in order, KIND or KIND:LIMIT (the first LIMIT prompts of the mix)
STAGES=${STAGES:-greedy:8192 sampled:2048 greedy sampled}
for item in $STAGES; do
  kind=${item%%:*}
  if [ "$kind" != greedy ] && [ "$kind" != sampled ]; then
    echo "STAGES item $item: expected greedy or sampled, optionally with :LIMIT (e.g. STAGES='greedy:4096 greedy')" >&2
    exit 2
  fi
  if [ "$item" = "$kind" ]; then stage "$kind"; else stage "$kind" --limit "${item#*:}"; fi
done
