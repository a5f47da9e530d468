"""The target's training features (:mod:`~dlite_hf.data.features.transformers`) and their on-disk cache, filled by
the trainer or by vLLM (:mod:`~dlite_hf.data.features.cache`)."""
