"""The subcommands of `dlite-hf` (`dlite_hf.cli`), one module each; every one imports its heavy dependencies
lazily, so `dlite-hf --help` is fast."""
