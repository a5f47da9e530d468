"""dlite-hf inside a vLLM environment (`.venv-vllm`, built by `make vllm`; docs/vllm.md):

* the serving plugin, vLLM's general plugin `dlite_hf`, with which a DLite drafter folder saved by dlite-hf is a
  speculative model: `LLM(model=TARGET, speculative_config={"model": DRAFTER_DIR, "num_speculative_tokens": 7})`;
* `workers/`, the regeneration and feature workers that dlite-hf runs as child processes.

It runs under vLLM's own transformers pin (< 5.20), so it imports nothing from `dlite_hf` (which needs 5.23 or later).
"""

__version__ = "0.1.0"


def register() -> None:
    """vLLM's general-plugin entry point: called in every vLLM process before it builds its config."""
    from .hooks import install

    install()
