"""The target's training features, computed ahead of (or during) `dlite-hf train` and kept in a feature cache.

- :mod:`~dlite_hf.data.features.transformers`: transformers' forward of the target (the trainer's own).
- :mod:`~dlite_hf.data.features.cache`: the on-disk cache the trainer reads (:class:`FeatureCache`).
- :mod:`~dlite_hf.data.features.vllm`: the cache filled by vLLM's forward (`dlite-hf features`), in the vLLM
  environment's worker `dlite_hf_vllm.workers.features`.
"""
