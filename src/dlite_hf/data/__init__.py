"""The data pipeline: prompt sets, the bench's sessions and the training mixes, from one registry of sources
(:mod:`~dlite_hf.data.sources`); then the target's answers to the mix (:mod:`~dlite_hf.data.regenerate`), rows from
existing text (:mod:`~dlite_hf.data.text_rows`), the dataset kept in the repository (:mod:`~dlite_hf.data.dataset`)
and the target's features for training (:mod:`~dlite_hf.data.features`).

The workloads and their splits are :mod:`~dlite_hf.data.prompts`, the bench's multi-turn sessions
:mod:`~dlite_hf.data.workloads`, the broad mix's domains :mod:`~dlite_hf.data.domains` and the mixes sampled from
their train splits :mod:`~dlite_hf.data.mix`. The inference code imports none of these, and the evaluation side never
imports :mod:`~dlite_hf.data.mix`. Modules are imported directly: this package re-exports nothing.
"""
