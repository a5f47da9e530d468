"""The data pipeline, from one registry of sources (:mod:`~dlite_hf.data.sources`) to prompts, sessions, mixes,
training rows, the repository's dataset and the target's features (docs/architecture.md). The inference code imports
none of it, the evaluation side never imports :mod:`~dlite_hf.data.mix`; nothing is re-exported here."""
