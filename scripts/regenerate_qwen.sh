#!/usr/bin/env bash
# Qwen2.5-Coder-0.5B-Instruct's training rows (issue 43): the broad mix, code and coding-agent sessions weighted up,
# prompts up to 8k tokens, answered greedily by the target with vLLM. A resumable background job, as
# scripts/regenerate_mix.sh (which it runs): kill it and run it again, and it goes on.
#   nohup bash scripts/regenerate_qwen.sh > ~/.cache/dlite-hf/work/regen-qwen.log 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${DLITE_WORK:-$HOME/.cache/dlite-hf/work}
export DLITE_WORK=$WORK
export TARGET=${TARGET:-qwen2.5-coder-0.5b}
# MIX: the prompts' folder; by default the dataset's own mix (scripts/qwen_mix.sh), built where missing
if [ -z "${MIX:-}" ]; then
  source scripts/qwen_mix.sh
  qwen_mix "$WORK" "${DLITE:-.venv/bin/dlite-hf}"
  MIX=$WORK/mix-qwen-2
fi
export MIX
export REGEN=${REGEN:-$WORK/regen-qwen}
# PER_DOMAIN and MIX_OPTIONS: a MIX folder given and not there yet is built so
export PER_DOMAIN=${PER_DOMAIN:-1000}
export MIX_OPTIONS=${MIX_OPTIONS:---weights code=3,code_tasks=3,coding_agent=1}
export MAX_NEW=${MAX_NEW:-512}
export MAX_PROMPT=${MAX_PROMPT:-8192}
# rows already in the repository's Qwen dataset are not regenerated (a fresh machine extends it)
export DATASET=${DATASET-datasets/dlite-qwen2.5-coder-0.5b-regen}
# stages of growing limits: the worker sorts its prompts by token ids (shared prefixes prefilled once), so a
# stage cut short holds a skewed share of domains; each finished stage holds the mix's first N, balanced (the first
# 11,604 are mix-qwen's, the rest the extension's)
export STAGES=${STAGES:-greedy:3000 greedy:6000 greedy:9000 greedy:11604 greedy:13000 greedy:14500 greedy}
exec bash scripts/regenerate_mix.sh
