# The drafter shapes the training scripts build from scratch, as `dlite-hf train` flags (sourced, not run).
# SHIPPED_SHAPE is drafters/dlite-smollm2-135m's (tests/test_drafter_shapes.py checks it against its config.json);
# QWEN_SHAPE is scripts/train_qwen.sh's: 17.5M parameters, 35 MB in bfloat16, the draft vocabulary chosen later.
# The capacity study's variants (issue 27, part 5) follow it on the command line and override what they name.
# shellcheck disable=SC2034  # used by the scripts that source this file
SHIPPED_SHAPE=(--drafter_hidden_size 256 --drafter_heads 4 --drafter_kv_heads 2 --drafter_intermediate_size 768
  --drafter_layers 5 --num_tapped_layers 6 --head_rank 128 --num_draft_tokens 7 --draft_vocab_size 4096)
WIDTH_576=(--drafter_hidden_size 576 --drafter_heads 9 --drafter_kv_heads 3 --drafter_intermediate_size 1536)
LAYERS_7=(--drafter_layers 7)
TAPS_12=(--num_tapped_layers 12)
QWEN_SHAPE=(--drafter_hidden_size 512 --drafter_heads 8 --drafter_kv_heads 4 --drafter_intermediate_size 1536
  --drafter_layers 5 --num_tapped_layers 6 --head_rank 128 --num_draft_tokens 7 --draft_vocab_size 0)
