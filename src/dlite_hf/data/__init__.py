"""The data pipeline, from one registry of sources (:mod:`~dlite_hf.data.sources`): the workloads and their splits
(:mod:`~dlite_hf.data.prompts`), the bench's sessions (:mod:`~dlite_hf.data.workloads`), the broad mix's domains
(:mod:`~dlite_hf.data.domains`) and the mixes sampled from their train splits (:mod:`~dlite_hf.data.mix`); then the
target's training rows (:mod:`~dlite_hf.data.regenerate`), the dataset kept in the repository
(:mod:`~dlite_hf.data.dataset`) and the target's features for training (:mod:`~dlite_hf.data.features`).

The inference code imports none of these, and the evaluation side never imports :mod:`~dlite_hf.data.mix`. Modules
are imported directly: this package re-exports nothing.
"""
