"""`DLiteProposer`: vLLM's custom-class proposer for a DLite drafter folder.

vLLM builds it in each worker (`speculative_config.method == "custom_class"`, set by the plugin's config hook when
`speculative_config.model` is a DLite drafter folder). It loads the drafter with transformers from that folder (the
same files the Hub route loads, so the same drafting core as `generate()`), borrows the target's token embedding
and lm_head when vLLM hands it the loaded target, and drafts each round from the tapped states of each request's
newest committed position, which vLLM's target forward returns as auxiliary hidden states (`hooks.py` turns them
on). History-free: it keeps no drafter KV cache and nothing from one round to the next.

Hybrid drafting (`prompt_lookup_max=N` in speculative_config, as `prompt_lookup_num_tokens=N` in `generate()`):
each request also gets a suffix index of its tokens (the drafter's own `suffix_index.py`), and each round the
core's `select_proposal` (the drafter's `drafting.py`, the rule `generate()` applies) picks a retrieved
continuation of up to N tokens or the drafter's block. The index is per request (not shared across requests, as
`generate()`'s `DraftSession` can be) and dropped when the request leaves the batch.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .compat import DLiteVLLMError
from .feature_tap import FEATURE_TAP, FeatureTap
from .rounds import draft_batch, newest_rows

__all__ = ["DRAFTER_FOLDER", "LOOKUP", "DLiteProposer", "StepInputs", "TargetView"]

# the attributes of vLLM's SpeculativeConfig where the config hook keeps the drafter folder and the hybrid's
# (prompt_lookup_max, prompt_lookup_min) (None: DLite alone)
DRAFTER_FOLDER = "dlite_drafter_folder"
LOOKUP = "dlite_lookup"


@dataclass
class StepInputs:
    """What the runner hook hands the proposer for one round (from `propose_draft_token_ids`'s arguments)."""

    aux_hidden_states: list[torch.Tensor]
    query_start_loc: list[int]
    num_draft_tokens: list[int] | None
    temperatures: torch.Tensor | None  # None: every request is greedy
    req_ids: list[str]
    remaining: list[int | None] | None = None  # tokens each request may still generate (None: no max_tokens)
    # vLLM's draft length for this step: num_speculative_tokens, or its entry of the batch-size schedule
    # (speculative_config's num_speculative_tokens_per_batch_size); 0 skips the drafter. None: no limit given
    scheduled_tokens: int | None = None
    # requests scheduled for the first time this step (a request id may be reused once its request finished)
    new_req_ids: frozenset[str] = frozenset()
    # feature-tap mode only (`feature_tap.py`): the final hidden states of every scheduled token, and each request's
    # sequence length after this step
    hidden_states: torch.Tensor | None = None
    seq_lens: list[int] | None = None


class TargetView(nn.Module):
    """The part of vLLM's loaded target a DLite drafter borrows: its config, token embedding and lm_head, as plain
    torch modules over the same storage (nothing is copied)."""

    def __init__(self, target: nn.Module, hf_config: Any):
        super().__init__()
        self.config = hf_config
        text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
        vocab = text.vocab_size
        embed = getattr(getattr(target, "model", None), "embed_tokens", None)
        head = getattr(target, "lm_head", None)
        if embed is None or head is None or not hasattr(embed, "weight") or not hasattr(head, "weight"):
            raise DLiteVLLMError(
                f"vLLM's {type(target).__name__} has no model.embed_tokens and lm_head with weights; the DLite "
                "drafter borrows both from the target."
            )
        if embed.weight.shape[0] < vocab or head.weight.shape[0] < vocab:
            raise DLiteVLLMError(
                f"vLLM's {type(target).__name__} holds {head.weight.shape[0]} lm_head rows for a vocabulary of "
                f"{vocab}: a tensor-parallel shard. The DLite plugin runs with tensor_parallel_size=1."
            )
        self.embed_tokens = nn.Embedding.from_pretrained(embed.weight.data[:vocab], freeze=True)
        self.lm_head = nn.Linear(
            text.hidden_size, vocab, bias=False, device=head.weight.device, dtype=head.weight.dtype
        )
        self.lm_head.weight = nn.Parameter(head.weight.data[:vocab], requires_grad=False)

    def get_input_embeddings(self) -> nn.Module:
        return self.embed_tokens

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head


class DLiteProposer:
    """A DLite drafter in vLLM's engine (see the module docstring)."""

    def __init__(self, vllm_config: Any):
        spec = vllm_config.speculative_config
        folder = getattr(spec, DRAFTER_FOLDER, None)
        if folder is None:
            raise DLiteVLLMError(
                "DLiteProposer needs a DLite drafter folder: pass it as speculative_config={'model': DRAFTER_DIR, "
                "'num_speculative_tokens': K}, with the dlite-hf-vllm plugin installed (pip install -e vllm_plugin), "
                "not the class path."
            )
        from transformers import AutoModel  # vLLM's own transformers: the drafter's code needs nothing newer

        self.folder = folder
        self.num_tokens = int(spec.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        self.hf_config = vllm_config.model_config.hf_config
        dtype = vllm_config.model_config.dtype
        self.drafter = AutoModel.from_pretrained(folder, trust_remote_code=True, dtype=dtype).eval()
        # the drafter drafts at most its trained K; vLLM's K may be larger when the hybrid retrieves longer drafts
        self.drafter_tokens = min(self.num_tokens, int(self.drafter.config.num_draft_tokens))
        self.lookup_tokens, self.rule, self._indexes = None, None, {}
        # the drafter folder's own core modules (loaded by transformers beside its model), resolved once
        package = type(self.drafter).__module__.rpartition(".")[0]
        self._drafting = importlib.import_module(f"{package}.drafting")
        self._suffix_index = importlib.import_module(f"{package}.suffix_index")
        lookup = getattr(spec, LOOKUP, None)
        if lookup is not None:
            config = self.drafter.config
            self.lookup_tokens = int(lookup[0])
            self.rule = self._drafting.HybridRule(
                min_match=int(lookup[1] if lookup[1] is not None else config.lookup_min_match),
                length_factor=float(config.lookup_length_factor),
                fallback_min_match=int(config.lookup_fallback_min_match),
            )
        layers = list(self.drafter.config.target_layer_ids)
        # vLLM's auxiliary state i is the residual stream entering layer i, i.e. the output of layer i - 1 (what
        # transformers' decoder layer i - 1 returns and DLite taps); vLLM returns them in ascending layer order
        self.aux_layers = tuple(sorted({i + 1 for i in layers}))
        self.order = [self.aux_layers.index(i + 1) for i in layers]
        self._step: StepInputs | None = None
        self._probs: torch.Tensor | None = None
        # `python -m dlite_hf_vllm.workers.features`: write training features, draft nothing
        tap = os.environ.get(FEATURE_TAP)
        self.tap = FeatureTap(tap, self.order) if tap else None

    def _matches(self, live: list[int], step: StepInputs, num_tokens_no_spec: Any, token_ids: Any) -> dict:
        """Each live request's suffix-index answer for this round; the indexes follow the requests' tokens."""
        index_class = self._suffix_index.SuffixIndex
        for req in step.new_req_ids:  # a request id seen before belonged to another, finished request
            self._indexes.pop(req, None)
        kept, matches = {}, {}
        for i in live:
            req, length = step.req_ids[i], int(num_tokens_no_spec[i])
            index, covered = self._indexes.get(req, (None, 0))
            if index is None or covered > length:  # new (or rewound) request: index its whole context
                index = index_class()
                index.start_stream(token_ids[i, :length].tolist())
            elif covered < length:
                index.append(token_ids[i, covered:length].tolist())
            kept[req] = (index, length)
            matches[i] = index.lookup(self.lookup_tokens)
        for req in step.req_ids:  # requests in the batch without a round this step keep their index
            if req not in kept and req in self._indexes:
                kept[req] = self._indexes[req]
        self._indexes = kept
        return matches

    def load_model(self, target_model: nn.Module) -> None:
        """Called by vLLM's runner once the target is loaded: bind the drafter to the target's embeddings."""
        self.drafter.bind_target(TargetView(target_model, self.hf_config))
        device = target_model.lm_head.weight.device
        self.drafter.to(device)

    def stage(self, step: StepInputs) -> None:
        """The runner hook's inputs for the round about to be proposed."""
        self._step = step

    def take_probs(self) -> torch.Tensor | None:
        """q `[num_reqs, K, V]` of the last round when some request sampled (else None), then forget it."""
        probs, self._probs = self._probs, None
        return probs

    @torch.inference_mode()
    def propose(
        self,
        sampled_token_ids: list[list[int]],
        num_tokens_no_spec: Any,
        token_ids_cpu: Any,
        slot_mappings: Any = None,
    ) -> list[list[int]]:
        """vLLM's custom-class proposer call: one draft list per request (empty: no speculation this round)."""
        step, self._step = self._step, None
        if step is None:
            raise DLiteVLLMError(
                "DLiteProposer.propose ran without the target's hidden states: the dlite-hf-vllm plugin's runner "
                "hook is not installed in this worker (is the package installed in the engine's environment, and "
                "VLLM_PLUGINS unset or listing 'dlite_hf'?)."
            )
        if self.tap is not None:
            self.tap.record(
                step.req_ids, step.query_start_loc, step.seq_lens, step.aux_hidden_states, step.hidden_states
            )
            return [[] for _ in step.req_ids]
        rows = newest_rows(step.query_start_loc, step.num_draft_tokens, sampled_token_ids)
        drafts: list[list[int]] = [[] for _ in rows]
        # vLLM's batch-size schedule may shorten this step's drafts, or turn speculation off (0): then the drafter
        # does not run at all, and the step costs what a step without speculation costs, plus vLLM's bookkeeping
        num_tokens = self.num_tokens if step.scheduled_tokens is None else min(self.num_tokens, step.scheduled_tokens)
        if num_tokens <= 0:
            return drafts
        # drafts that could not be kept are not drafted: past max_model_len, or past max_tokens (a round commits
        # its accepted drafts plus the target's own token, so at most remaining - 1 drafts), as generate() does
        budgets = [min(num_tokens, self.max_model_len - int(num_tokens_no_spec[i])) for i in range(len(rows))]
        for i, left in enumerate(step.remaining or ()):
            if left is not None:
                budgets[i] = min(budgets[i], left - 1)
        live = [i for i, row in enumerate(rows) if row >= 0 and budgets[i] > 0]
        if not live:
            return drafts
        retrieved: set[int] = set()  # requests whose draft is a retrieved continuation (q one-hot)
        matches = {}
        if self.rule is not None:
            select = self._drafting.select_proposal
            matches = self._matches(live, step, num_tokens_no_spec, token_ids_cpu)
            for i in live:
                proposal = select(matches[i], self.rule, None)  # the rule's lookup choice, before any drafting
                if proposal.source == "lookup":
                    drafts[i] = list(proposal.tokens[: budgets[i]])
                    retrieved.add(i)
        drafted = [i for i in live if i not in retrieved]
        probs = None
        if drafted:
            device = step.aux_hidden_states[0].device
            index = torch.tensor([rows[i] for i in drafted], device=device)
            states = torch.stack([step.aux_hidden_states[j].index_select(0, index) for j in self.order], 1)
            anchors = torch.tensor([sampled_token_ids[i][-1] for i in drafted], device=device)
            temperatures = None if step.temperatures is None else step.temperatures[torch.tensor(drafted)]
            tokens, probs = draft_batch(
                self.drafter, states, anchors, min(num_tokens, self.drafter_tokens), temperatures
            )
            for i, ids in zip(drafted, tokens):
                drafts[i] = ids[: budgets[i]]
                if self.rule is not None and self.rule.fallback_min_match:  # the core's fallback: drafter skipped
                    proposal = self._drafting.select_proposal(
                        matches[i], self.rule, lambda done=(drafts[i], None): done
                    )
                    if proposal.fallback:
                        drafts[i] = list(proposal.tokens[: budgets[i]])
                        retrieved.add(i)
        if probs is not None:
            # vLLM reads row r's first len(draft) positions: the drafter's q, one-hot for retrieved drafts
            full = probs.new_zeros(len(rows), num_tokens, probs.shape[-1])
            full[torch.tensor(drafted, device=probs.device), : probs.shape[1]] = probs
            for i in retrieved:
                full[i].zero_()
                full[i, torch.arange(len(drafts[i]), device=probs.device), torch.tensor(drafts[i])] = 1.0
            self._probs = full
        return drafts
