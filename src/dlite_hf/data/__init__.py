"""The data pipeline: the prompt sets, the benchmark's sessions and the training mixes, from one registry of sources;
then the target's answers to the mix, the dataset kept in the repository, and the target's features for training.

Nothing here is imported by the inference code (:mod:`dlite_hf.modeling`, :mod:`dlite_hf.attention`); the bench
and ``dlite-hf compare`` import the evaluation side only, never :mod:`~dlite_hf.data.mix`.

Modules, one job each (import them directly; this package re-exports nothing):

- :mod:`~dlite_hf.data.sources`: the registry: every file or folder read, with its package (a pinned wheel fetched
  by :mod:`dlite_hf.assets`, or on disk), path, license and split rule; reading a source by name.
- :mod:`~dlite_hf.data.common`: the prompt dict, the split constants, shared helpers.
- :mod:`~dlite_hf.data.prompts`: the workloads (chat, code, math, tool, agentic, long, legal, clinical) and their
  eval/train splits (:func:`~dlite_hf.data.prompts.load_prompts`); :mod:`~dlite_hf.data.tooltalk` and
  :mod:`~dlite_hf.data.long_context` build two of them.
- :mod:`~dlite_hf.data.user_prompts`: a user's own JSONL prompt file (``--prompts``).
- :mod:`~dlite_hf.data.workloads` and :mod:`~dlite_hf.data.bfcl`: the bench's sessions (multi-turn replays).
- :mod:`~dlite_hf.data.domains`: the broad mix's domains and their splits (:func:`~dlite_hf.data.domains.eval_prompts`
  for a workload or a domain); their builders: :mod:`~dlite_hf.data.packaged` (wheels),
  :mod:`~dlite_hf.data.stdlib` and :mod:`~dlite_hf.data.manpages` (on disk), :mod:`~dlite_hf.data.puzzles`
  (generated).
- :mod:`~dlite_hf.data.mix`: training mixes sampled from the train splits (``dlite-hf mix build``, ``regenerate``).

The pipeline's steps, after the prompts (``dlite_hf.training`` reads what they write):

- :mod:`~dlite_hf.data.regenerate`: the target answers the prompts (``dlite-hf regenerate``), one module per engine
  (``transformers``, ``vllm``).
- :mod:`~dlite_hf.data.text_rows`: rows from existing text, labelled by the target in training (``label-text``).
- :mod:`~dlite_hf.data.dataset`: the regenerated dataset in the repository (``dlite-hf dataset``).
- :mod:`~dlite_hf.data.features`: the target's features and their cache (``dlite-hf features``, the trainer).
- :mod:`~dlite_hf.data.vllm_worker`: running a worker of the vLLM environment (``dlite_hf_vllm.workers``).
"""
