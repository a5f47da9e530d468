# The prompts of the Qwen dataset (issue 43), sourced by scripts/regenerate_qwen.sh and scripts/train_qwen.sh: the
# broad mix at 1,000 prompts a domain (mix-qwen), extended to 2,000 a domain (mix-qwen-2, whose first 11,604 prompts
# are mix-qwen's, in order); every row of datasets/dlite-qwen2.5-coder-0.5b-regen rebuilds from mix-qwen-2.
# The extension keeps story_qa at 1,000 (weight 0.5): its answers average 31 tokens after prompts of about 700.
QWEN_WEIGHTS=code=3,code_tasks=3,coding_agent=1
qwen_mix() {  # WORK folder, dlite-hf command: builds the mixes not there yet; the one to use is $WORK/mix-qwen-2
  [ -f "$1/mix-qwen/mix.json" ] || "$2" mix build --out "$1/mix-qwen" --prompts-per-domain 1000 \
    --texts-per-domain 500 --seed 0 --weights "$QWEN_WEIGHTS" > /dev/null
  [ -f "$1/mix-qwen-2/mix.json" ] || "$2" mix build --out "$1/mix-qwen-2" --prompts-per-domain 2000 \
    --texts-per-domain 500 --seed 0 --weights "$QWEN_WEIGHTS,story_qa=0.5" --extend "$1/mix-qwen" > /dev/null
}
