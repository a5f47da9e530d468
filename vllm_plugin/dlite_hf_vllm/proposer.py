"""`DLiteProposer`: vLLM's custom-class proposer for a DLite drafter folder.

vLLM builds it in each worker (`speculative_config.method == "custom_class"`, set by the plugin's config hook when
`speculative_config.model` is a DLite drafter folder). It loads the drafter with transformers from that folder (the
same files the Hub route loads, so the same drafting core as `generate()`), borrows the target's token embedding
and lm_head when vLLM hands it the loaded target, and drafts each round from the tapped states of each request's
newest committed position, which vLLM's target forward returns as auxiliary hidden states (`hooks.py` turns them
on). History-free: it keeps no drafter KV cache and nothing from one round to the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .compat import DLiteVLLMError
from .rounds import draft_batch, newest_rows

__all__ = ["DRAFTER_FOLDER", "DLiteProposer", "StepInputs", "TargetView"]

# the attribute of vLLM's SpeculativeConfig where the config hook keeps the drafter folder
DRAFTER_FOLDER = "dlite_drafter_folder"


@dataclass
class StepInputs:
    """What the runner hook hands the proposer for one round (from `propose_draft_token_ids`'s arguments)."""

    aux_hidden_states: list[torch.Tensor]
    query_start_loc: list[int]
    num_draft_tokens: list[int] | None
    temperatures: torch.Tensor | None  # None: every request is greedy
    req_ids: list[str]
    remaining: list[int | None] | None = None  # tokens each request may still generate (None: no max_tokens)


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
        layers = list(self.drafter.config.target_layer_ids)
        # vLLM's auxiliary state i is the residual stream entering layer i, i.e. the output of layer i - 1 (what
        # transformers' decoder layer i - 1 returns and DLite taps); vLLM returns them in ascending layer order
        self.aux_layers = tuple(sorted({i + 1 for i in layers}))
        self.order = [self.aux_layers.index(i + 1) for i in layers]
        self._step: StepInputs | None = None
        self._probs: torch.Tensor | None = None

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
        rows = newest_rows(step.query_start_loc, step.num_draft_tokens, sampled_token_ids)
        # drafts that could not be kept are not drafted: past max_model_len, or past max_tokens (a round commits
        # its accepted drafts plus the target's own token, so at most remaining - 1 drafts), as generate() does
        budgets = [min(self.num_tokens, self.max_model_len - int(num_tokens_no_spec[i])) for i in range(len(rows))]
        for i, left in enumerate(step.remaining or ()):
            if left is not None:
                budgets[i] = min(budgets[i], left - 1)
        live = [i for i, row in enumerate(rows) if row >= 0 and budgets[i] > 0]
        drafts: list[list[int]] = [[] for _ in rows]
        if not live:
            return drafts
        device = step.aux_hidden_states[0].device
        index = torch.tensor([rows[i] for i in live], device=device)
        states = torch.stack([step.aux_hidden_states[j].index_select(0, index) for j in self.order], 1)
        anchors = torch.tensor([sampled_token_ids[i][-1] for i in live], device=device)
        temperatures = None if step.temperatures is None else step.temperatures[torch.tensor(live)]
        tokens, probs = draft_batch(self.drafter, states, anchors, self.num_tokens, temperatures)
        for i, ids in zip(live, tokens):
            drafts[i] = ids[: budgets[i]]
        if probs is not None:
            full = probs.new_zeros(len(rows), *probs.shape[1:])
            full[torch.tensor(live, device=probs.device)] = probs
            self._probs = full
        return drafts
