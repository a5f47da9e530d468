"""dlite-hf's workers inside the vLLM environment, each run as `python -m dlite_hf_vllm.workers.<name>` by dlite-hf
(`dlite_hf.data.vllm_worker`) with a job file, writing its results and a JSON summary:

- `regenerate`: the target answers tokenized prompts (`dlite-hf regenerate --engine vllm`).
- `features`: the target's features for training, tapped by the serving plugin's proposer in a mode that drafts
  nothing (`dlite-hf features`).
"""
