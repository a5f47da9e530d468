#!/usr/bin/env bash
# Reproduce benchmarks/results/ for SmolLM2-135M-Instruct on one thread; exits non-zero if any greedy output differs
# from plain greedy (in bfloat16: other than at a float32-verified near-tie).
#
#   benchmarks/run_smollm2.sh [DRAFTER] [HISTORY_CHECKPOINT]
#   ABLATION="WITH_HEAD NO_HEAD" benchmarks/run_smollm2.sh     # also the matched no-head ablation, e.g.
#   ABLATION="runs/smollm2/stable3/checkpoint-400 runs/smollm2/nohead3/checkpoint-400" (scripts/train_smollm2.sh)
set -euo pipefail

DRAFTER=${1:-drafters/dlite-smollm2-135m}
HISTORY=${2:-drafters/dlite-smollm2-135m-teacher}
BENCH=${DLITE_HF:-dlite-hf}
OUT=${OUT:-benchmarks/results}
COMMON=(--target smollm2-135m --threads 1 --sdpa-gqa --out "$OUT" --no-progress)
every_method() {  # the main methods' comparison, then the run's own flags
    "$BENCH" bench "${COMMON[@]}" --drafter "$DRAFTER" --methods plain,prompt_lookup,dlite,dlite_fixed,hybrid "$@"
}

# 1. main: every workload (general, agentic multi-turn: ToolTalk + a coding session, long 1k/4k): plain / prompt
#    lookup / DLite (adaptive drafting) / DLite with K drafts every round / the hybrid (DLite plus a suffix index of
#    the session), then plain / the history-based drafter (the history-aware teacher)
MAIN=(--workloads agentic,long,chat,code,math,tool --num-prompts 3 --max-new-tokens 96 --long-lengths 1024,4096
      --agentic-max-tokens 6144 --agentic-max-turns 4 --coding-sessions 1 --bfcl-sessions 0)
every_method "${MAIN[@]}" --name smollm2-135m-main
# the same in bfloat16 (near-tie-exact: every divergence re-scored in float32), and both dtypes with the packed
# grouped-query attention of dlite_hf.attention (the README's table: bfloat16 + packed_gqa, the fastest mode);
# the development machine ran each pair side by side, one core each (taskset -c 0 / -c 1)
every_method "${MAIN[@]}" --dtype bfloat16 --name smollm2-135m-main-bf16
# (these two with a prefix cache across the turns of a multi-turn session, as a serving stack keeps one)
for DTYPE in float32 bfloat16; do
    SUFFIX=$([[ $DTYPE == float32 ]] && echo packed || echo bf16-packed)
    every_method "${MAIN[@]}" --dtype "$DTYPE" --attention packed_gqa --prefix-cache --name "smollm2-135m-main-$SUFFIX"
done
# the README's table: the bfloat16 + packed run alone on the machine, every turn measured twice with every method
# (the fastest kept, the method order rotated per turn); -r2 and -r3 are earlier runs of this command
every_method "${MAIN[@]}" --dtype bfloat16 --attention packed_gqa --prefix-cache --repeats 2 \
    --name smollm2-135m-main-bf16-packed-r4
# out of domain (no training mix uses these sources): the same methods, both modes (side by side, one core each)
OOD=(--workloads legal,clinical,long --num-prompts 3 --max-new-tokens 96 --long-lengths 1024)
every_method "${OOD[@]}" --name smollm2-135m-ood
every_method "${OOD[@]}" --dtype bfloat16 --attention packed_gqa --name smollm2-135m-ood-bf16-packed
# greedy tau out of domain and in domain, replayed over cached float32 greedy texts: the drafter and its draft
# vocabulary re-chosen from broad-mix rows (VOCAB_ROWS: `dlite-hf regenerate` / `label-text` rows)
TEXTS=${TEXTS:-runs/ood/texts.jsonl}
DRAFTERS=base=$DRAFTER
if [[ -n ${VOCAB_ROWS:-} ]]; then
    for N in 2048 4096 8192 16384; do
        "$BENCH" draft-vocab --drafter "$DRAFTER" --data "$VOCAB_ROWS" --size $N --out "runs/vocab/v$N"
        DRAFTERS+=",v$N=runs/vocab/v$N"
    done
fi
python benchmarks/ood_tau.py --threads 1 --per-workload 6 --max-new-tokens 96 --texts "$TEXTS" \
    --drafters "$DRAFTERS" --out "$OUT/smollm2-135m-ood-tau.json"
# the history-based drafter on the same sessions (its rounds take seconds at 4k: about 3/4 of the old joint run)
"$BENCH" bench "${COMMON[@]}" --drafter-history "$HISTORY" --methods plain,history "${MAIN[@]}" \
    --name smollm2-135m-main-history
# 2. scaling: drafter ms per round and tau against context length (1k..16k tokens; past SmolLM2's 8k window its
#    output is not meaningful text, but speed and losslessness are)
"$BENCH" bench "${COMMON[@]}" --drafter "$DRAFTER" --drafter-history "$HISTORY" \
    --methods plain,dlite,dlite_fixed,history --workloads long --num-prompts 1 --max-new-tokens 32 \
    --long-lengths 1024,2048,4096,8192,16384 --name smollm2-135m-scaling

# 3. ablation (ABLATION set): two drafters from the same init, data, steps and seed, with and without the head
if [[ -n ${ABLATION:-} ]]; then
    read -r WITH_HEAD NO_HEAD <<< "$ABLATION"
    "$BENCH" bench "${COMMON[@]}" --drafter "$WITH_HEAD" --drafter-nohead "$NO_HEAD" \
        --methods plain,dlite,dlite_nohead --workloads chat,code,math,tool --num-prompts 3 --max-new-tokens 96 \
        --name smollm2-135m-ablation-head
fi

# 4. classic assisted decoding across vocabularies: SmolLM2-135M assisting Qwen2.5-Coder-0.5B-Instruct
"$BENCH" bench --target qwen2.5-coder-0.5b --assistant smollm2-135m --threads 1 --sdpa-gqa --out "$OUT" \
    --no-progress --methods plain,prompt_lookup,assisted --workloads code,math --num-prompts 2 --max-new-tokens 64 \
    --name qwen2.5-coder-0.5b-assisted

# 5. agentic sessions past 8k tokens (plain / prompt lookup / DLite / hybrid; the history drafter would take
#    minutes a round)
"$BENCH" bench "${COMMON[@]}" --drafter "$DRAFTER" \
    --methods plain,prompt_lookup,dlite,hybrid --workloads agentic --num-prompts 1 --max-new-tokens 64 \
    --agentic-max-tokens 12288 --agentic-max-turns 7 --coding-sessions 1 --bfcl-sessions 0 --name smollm2-135m-agentic-long

# 6. BFCL v4 multi-turn sessions (tool results from BFCL's executable backends), contexts 3k-6k tokens, plus one
#    ToolTalk conversation (the history drafter is left out: seconds per round at these lengths, see scaling)
every_method --workloads agentic --num-prompts 1 --bfcl-sessions 3 --coding-sessions 0 --max-new-tokens 64 \
    --agentic-max-tokens 8192 --agentic-max-turns 6 --name smollm2-135m-agentic-bfcl
# 7. the same on BFCL's long-context scenarios (large files and lists in the tool results), to 12k tokens
"$BENCH" bench "${COMMON[@]}" --drafter "$DRAFTER" --methods plain,prompt_lookup,dlite,hybrid \
    --workloads agentic --num-prompts 1 --bfcl-sessions 4 --bfcl-category multi_turn_long_context --coding-sessions 0 \
    --max-new-tokens 64 --agentic-max-tokens 12288 --agentic-max-turns 6 --name smollm2-135m-agentic-bfcl-long

# the benchmark issues' performance goals (benchmark policy, dlite_hf.bench.goals), added to each run's JSON and table
"$BENCH" bench goals "$OUT"/smollm2-135m-main*.json "$OUT"/smollm2-135m-ood*.json \
    "$OUT"/smollm2-135m-scaling.json "$OUT"/smollm2-135m-agentic-bfcl*.json

# 8. the shipped drafter's card, from the main run in the default mode, with its measured out-of-domain limits
"$BENCH" card --checkpoint "$DRAFTER" --bench-result "$OUT/smollm2-135m-main-bf16-packed-r4.json" \
    --repo-id dlite-hf/dlite-smollm2-135m --out hub_cards/dlite-smollm2-135m.md \
    --limit "Out of domain (text unlike its training data: MultiLexSum case documents, MTS-Dialog clinical notes, essays) its greedy tau at K drafts every round is 1.38-1.48, mean 1.44, against 1.96 on the in-domain workloads (dlite-hf's benchmarks/results/smollm2-135m-scale34k.json). The speed table out of domain (smollm2-135m-ood-bf16-packed) was measured with an earlier drafter." \
    --limit "What limits tau: the first draft, accepted in about 33% of rounds on those texts. No data scale tried (66k to all 10.0M regenerated response tokens), domain balance, draft vocabulary or weight averaging has raised it. In drafters trained from scratch on this CPU, neither a window of 128 past positions, the teacher and KL warm-up stages, nor a larger drafter (width 576, 7 layers or 12 tapped layers) beat this shape at equal training time, while more steps of it did: the bound is training compute (dlite-hf's docs/training-log.md)." \
    --limit "On chat (MT-bench) its tau is 1.43: the shipped decoding is 1.17x plain there in bfloat16 on a 2-core CPU in this run, against 1.13x for the previous drafter and drafting round (tau 1.39); chat's three prompts vary from run to run by about as much." \
    --limit "These speeds are an Intel Xeon's with AMX, which computes bfloat16 natively. On a CPU without it (AVX2 only) torch emulates bfloat16 and every drafting method is slower than plain in it; run float32 there, where this drafter measured 1.12x plain over chat, code, math and tool and 0.93x on chat (dlite-hf's benchmarks/results/smollm2-135m-dtype-fp32-packed-avx2.json)."
