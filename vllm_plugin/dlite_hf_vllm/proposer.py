"""`DLiteProposer`, vLLM's custom-class proposer for a DLite drafter folder, and its round (docs/vllm.md): the
drafter, loaded from its folder (the same drafting core as `generate()`), drafts from the tapped states of each
request's newest committed position and keeps nothing between rounds. Nothing here imports vLLM, so the tests
check it against `DLiteForSpeculation` directly.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .compat import DLiteVLLMError
from .workers.features import FEATURE_TAP, FeatureTap

# where the config hook keeps, on vLLM's SpeculativeConfig, the drafter folder and the hybrid's (max, min) lookup
DRAFTER_FOLDER = "dlite_drafter_folder"
LOOKUP = "dlite_lookup"
GREEDY_EPS = 1e-5  # vLLM's _SAMPLING_EPS: a request at or below this temperature is greedy


@dataclass
class StepInputs:
    """What the runner hook hands the proposer for one round (from `propose_draft_token_ids`'s arguments)."""

    aux_hidden_states: list[torch.Tensor]
    query_start_loc: list[int]
    num_draft_tokens: list[int] | None
    temperatures: torch.Tensor | None  # None: every request is greedy
    req_ids: list[str]
    remaining: list[int | None] | None = None  # tokens each request may still generate (None: no max_tokens)
    # vLLM's draft length this step (K, or its batch-size schedule's entry; 0 skips the drafter); None: no limit
    scheduled_tokens: int | None = None
    # requests scheduled for the first time this step (a request id may be reused once its request finished)
    new_req_ids: frozenset[str] = frozenset()
    # feature-tap mode only: the final hidden states of every scheduled token, and each request's sequence length
    hidden_states: torch.Tensor | None = None
    seq_lens: list[int] | None = None


def newest_rows(
    query_start_loc: Sequence[int], num_draft_tokens: Sequence[int] | None, sampled: Sequence[Sequence[int]]
) -> list[int]:
    """For each request, the row of the last target forward that holds its newest committed position (whose logits
    gave the anchor); -1 where the request sampled nothing (a partial prefill chunk, a discarded request).

    A request scheduled rows `[s, s + q)` with `d` draft tokens sampled the accepted drafts plus the target's own
    token, so its last `d + 1 - len(sampled)` rows held rejected drafts.
    """
    rows = []
    for i, tokens in enumerate(sampled):
        if not tokens:
            rows.append(-1)
            continue
        drafts = int(num_draft_tokens[i]) if num_draft_tokens is not None else 0
        rejected = drafts + 1 - len(tokens)
        if not 0 <= rejected <= drafts:
            raise RuntimeError(
                f"Internal error: request {i} sampled {len(tokens)} tokens after {drafts} draft tokens."
            )
        rows.append(int(query_start_loc[i + 1]) - 1 - rejected)
    return rows


class TemperatureScale:
    """The logits processor of sampled drafting: q is the drafter's distribution at each request's temperature (any
    q keeps speculative sampling exact; one nearer the target's is accepted more often)."""

    def __init__(self, temperatures: torch.Tensor):
        self.temperatures = temperatures

    def __call__(self, seen: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        return logits / self.temperatures.to(logits.dtype)[:, None]


def _one_hot(probs: torch.Tensor, drafts: list[list[int]], rows: Sequence[int]) -> None:
    """q of the rows vLLM verifies by argmax, or whose draft was retrieved: one-hot at each draft, zeros past it."""
    hot = [(row, position, token) for row in rows for position, token in enumerate(drafts[row])]
    probs[torch.tensor(list(rows), dtype=torch.long, device=probs.device)] = 0.0
    if hot:
        row_ids, positions, token_ids = torch.tensor(hot, device=probs.device).unbind(1)
        probs[row_ids, positions, token_ids] = 1.0


def draft_batch(
    drafter: Any,
    states: torch.Tensor,
    anchors: torch.Tensor,
    num_tokens: int,
    temperatures: torch.Tensor | None = None,
) -> tuple[list[list[int]], torch.Tensor | None]:
    """Up to `num_tokens` drafts per row with `drafter.draft` (the shared core and its rules).

    Greedy rows (no `temperatures`, or one <= GREEDY_EPS) draft the argmax in one call, sampled rows draw from
    `softmax(logits / T)` in another. Each row keeps the drafts the core's rules give it alone
    (`drafter.draft_row_lengths`): vLLM verifies each request's own draft, so none pays for its neighbours' drafts.
    Returns the drafts and, when some row sampled, q `[N, num_tokens, V]` float32 (one-hot for greedy rows, zeros
    past a row's drafts), else None.
    """
    rows = states.shape[0]
    drafts: list[list[int]] = [[] for _ in range(rows)]
    greedy = torch.ones(rows, dtype=torch.bool) if temperatures is None else temperatures.cpu() <= GREEDY_EPS
    probs = None
    for sampled in (False, True):
        index = (~greedy if sampled else greedy).nonzero().flatten()
        if not index.numel():
            continue
        if sampled:
            chosen = anchors[index]
            scale = TemperatureScale(temperatures[index.to(temperatures.device)])
            tokens, logits = drafter.draft(
                states[index], chosen, num_tokens, do_sample=True, logits_processor=scale, prefix_ids=chosen[:, None]
            )
            probs = torch.zeros(rows, num_tokens, logits.shape[-1], dtype=torch.float32, device=logits.device)
            if tokens.shape[1]:
                probs[index.to(logits.device), : tokens.shape[1]] = torch.softmax(logits.float(), dim=-1)
        else:
            tokens, logits = drafter.draft(states[index], anchors[index], num_tokens)
        kept = drafter.draft_row_lengths(tokens, logits)
        for row, ids, length in zip(index.tolist(), tokens.tolist(), kept):
            drafts[row] = ids[:length]
    if probs is not None:
        _one_hot(probs, drafts, greedy.nonzero().flatten().tolist())
    return drafts, probs


class TargetView(nn.Module):
    """The part of vLLM's loaded target a DLite drafter borrows: its config, token embedding and lm_head, as plain
    torch modules over the same storage (nothing is copied; vLLM's padding rows dropped)."""

    def __init__(self, target: nn.Module, hf_config: Any):
        super().__init__()
        self.config = hf_config
        text = hf_config.get_text_config()
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
        if (folder := getattr(spec, DRAFTER_FOLDER, None)) is None:
            raise DLiteVLLMError(
                "DLiteProposer needs a DLite drafter folder: pass it as speculative_config={'model': DRAFTER_DIR, "
                "'num_speculative_tokens': K}, with the dlite-hf-vllm plugin installed (pip install -e vllm_plugin), "
                "not the class path."
            )
        from transformers import AutoModel  # vLLM's own transformers: the drafter's code needs nothing newer

        self.num_tokens = int(spec.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        self.hf_config = vllm_config.model_config.hf_config
        dtype = vllm_config.model_config.dtype
        self.drafter = AutoModel.from_pretrained(folder, trust_remote_code=True, dtype=dtype).eval()
        config = self.drafter.config
        # the drafter drafts at most its trained K; vLLM's K may be larger when the hybrid retrieves longer drafts
        self.drafter_tokens = min(self.num_tokens, int(config.num_draft_tokens))
        self.lookup_tokens, self.rule, self._indexes = None, None, {}
        # the drafter folder's own core modules, loaded by transformers beside its model
        package = type(self.drafter).__module__.rpartition(".")[0]
        self._drafting = importlib.import_module(f"{package}.drafting")
        self._suffix_index = importlib.import_module(f"{package}.suffix_index")
        if (lookup := getattr(spec, LOOKUP, None)) is not None:
            self.lookup_tokens = int(lookup[0])
            self.rule = self._drafting.HybridRule(
                min_match=int(lookup[1] if lookup[1] is not None else config.lookup_min_match),
                length_factor=float(config.lookup_length_factor),
                fallback_min_match=int(config.lookup_fallback_min_match),
            )
        layers = list(config.target_layer_ids)
        # vLLM's auxiliary state i is the residual stream entering layer i, i.e. the output of layer i - 1 (what
        # transformers' decoder layer i - 1 returns and DLite taps); vLLM returns them in ascending layer order
        self.aux_layers = tuple(sorted({i + 1 for i in layers}))
        self.order = [self.aux_layers.index(i + 1) for i in layers]
        self._step: StepInputs | None = None
        self._probs: torch.Tensor | None = None
        tap = os.environ.get(FEATURE_TAP)  # the feature worker's engine: write training features, draft nothing
        self.tap = FeatureTap(tap, self.order) if tap else None

    def _matches(self, live: list[int], step: StepInputs, num_tokens_no_spec: Any, token_ids: Any) -> dict:
        """Each live request's suffix-index answer for this round; the indexes follow the requests' tokens."""
        for req in step.new_req_ids:  # a request id seen before belonged to another, finished request
            self._indexes.pop(req, None)
        kept, matches = {}, {}
        for i in live:
            req, length = step.req_ids[i], int(num_tokens_no_spec[i])
            index, covered = self._indexes.get(req, (None, 0))
            if index is None or covered > length:  # new (or rewound) request: index its whole context
                index = self._suffix_index.SuffixIndex()
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
        self.drafter.to(target_model.lm_head.weight.device)

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
        # vLLM's batch-size schedule may shorten this step's drafts, or turn speculation off (0: the drafter does
        # not run, and the step costs what one without speculation costs, plus vLLM's bookkeeping)
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
            matches = self._matches(live, step, num_tokens_no_spec, token_ids_cpu)
            for i in live:
                proposal = self._drafting.select_proposal(matches[i], self.rule, None)  # lookup, before drafting
                if proposal.source == "lookup":
                    drafts[i] = list(proposal.tokens[: budgets[i]])
                    retrieved.add(i)
        drafted = [i for i in live if i not in retrieved]
        if not drafted:
            return drafts
        device = step.aux_hidden_states[0].device
        index = torch.tensor([rows[i] for i in drafted], device=device)
        states = torch.stack([step.aux_hidden_states[j].index_select(0, index) for j in self.order], 1)
        anchors = torch.tensor([sampled_token_ids[i][-1] for i in drafted], device=device)
        temperatures = None if step.temperatures is None else step.temperatures[torch.tensor(drafted)]
        tokens, probs = draft_batch(self.drafter, states, anchors, min(num_tokens, self.drafter_tokens), temperatures)
        for i, ids in zip(drafted, tokens):
            drafts[i] = ids[: budgets[i]]
            if self.rule is not None and self.rule.fallback_min_match:  # the core's fallback: drafter skipped
                proposal = self._drafting.select_proposal(matches[i], self.rule, lambda done=(drafts[i], None): done)
                if proposal.fallback:
                    drafts[i] = list(proposal.tokens[: budgets[i]])
                    retrieved.add(i)
        if probs is not None:  # vLLM reads row r's first len(draft) positions
            self._probs = probs.new_zeros(len(rows), num_tokens, probs.shape[-1])
            self._probs[torch.tensor(drafted, device=probs.device), : probs.shape[1]] = probs
            _one_hot(self._probs, drafts, sorted(retrieved))
        return drafts
