"""The target's training features (:mod:`~dlite_hf.data.features.transformers`), their on-disk cache
(:mod:`~dlite_hf.data.features.cache`) and the cache filled by vLLM (:mod:`~dlite_hf.data.features.vllm`)."""
