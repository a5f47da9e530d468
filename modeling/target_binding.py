"""What a DLite drafter borrows from its target: the check that it is the right target, its token embedding, and
the lm_head rows the drafter projects onto. A mixin of `DLiteForSpeculation` (reads `config`, `out_proj`,
`draft_vocab_ids`, `dtype`)."""

from __future__ import annotations

import torch
from torch import nn


class TargetBindingMixin:
    """The target binding of a DLite drafter (see the module docstring)."""

    _target_embeddings: tuple[nn.Module, nn.Module] | None = None
    _draft_head: tuple[torch.Tensor, torch.Tensor | None] | None = None
    _inference_head_cache: tuple[tuple, tuple[torch.Tensor, torch.Tensor | None]] | None = None

    def check_target(self, target: nn.Module) -> None:
        """Raise `ValueError` if `target` is not the kind of model this drafter was trained for."""
        config = target.config.get_text_config() if hasattr(target.config, "get_text_config") else target.config
        expected = self.config.target_model.get("name_or_path") or "its target"
        problems = []
        if config.num_hidden_layers != self.config.num_target_layers:
            problems.append(
                f"{config.num_hidden_layers} layers (the drafter taps layers {self.config.target_layer_ids} "
                f"of a {self.config.num_target_layers}-layer target)"
            )
        if config.hidden_size != self.config.target_hidden_size:
            problems.append(f"hidden size {config.hidden_size} (expected {self.config.target_hidden_size})")
        output = target.get_output_embeddings()
        vocab = output.weight.shape[0] if output is not None else config.vocab_size
        if vocab != self.config.vocab_size:
            problems.append(f"a vocabulary of {vocab} tokens (expected {self.config.vocab_size})")
        if problems:
            name = getattr(target.config, "_name_or_path", "") or type(target).__name__
            raise ValueError(
                f"This DLite drafter was trained for {expected} "
                f"({self.config.target_model.get('architecture', '?')}), but the target {name!r} has "
                + "; ".join(problems)
                + ". A drafter only works with the target it was trained on: load the matching drafter, or train "
                "one for this target with `dlite-hf train`."
            )

    def bind_target(self, target: nn.Module):
        """Check `target` (`check_target`), then borrow its token embedding and lm_head (not copied, not saved).
        Returns self."""
        self.check_target(target)
        embeddings, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
        if embeddings is None or lm_head is None:
            raise ValueError(
                f"The target {type(target).__name__} exposes no input/output embeddings "
                "(get_input_embeddings() / get_output_embeddings()); DLite needs both."
            )
        self._target_embeddings = (embeddings, lm_head)
        self._draft_head = self._inference_head_cache = None  # the old lm_head slices, rebuilt on first use
        return self

    def use_draft_vocab(self, ids: torch.Tensor) -> torch.Tensor:
        """Draft among the sorted, distinct token ids `ids` from now on (the columns of `draft_step`'s logits;
        `config.draft_vocab_size` follows); returns the new buffer."""
        vocab = self.config.vocab_size
        sorted_ids = ids.dim() == 1 and ids.numel() > 0 and bool((ids[1:] > ids[:-1]).all())
        if not sorted_ids or int(ids[0]) < 0 or int(ids[-1]) >= vocab:
            raise ValueError(
                f"use_draft_vocab needs sorted, distinct token ids in [0, {vocab}) (a 1-D tensor), got a tensor of "
                f"shape {tuple(ids.shape)}."
            )
        ids = ids.to(device=self.device, dtype=torch.long)
        self.config.draft_vocab_size = ids.numel()
        self.draft_vocab_ids = ids
        self._draft_head = self._inference_head_cache = None  # the old lm_head slices, rebuilt on first use
        return self.draft_vocab_ids

    def _embeddings(self) -> tuple[nn.Module, nn.Module]:
        if self._target_embeddings is None:
            raise RuntimeError(
                "This DLite drafter is not bound to a target model. It borrows the target's token embedding and "
                "lm_head: call `drafter.bind_target(target)` first, or use it through "
                "`target.generate(..., assistant_model=drafter)`, which binds it automatically."
            )
        return self._target_embeddings

    def embed_tokens(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Target token embeddings `[..., H_t]` in the drafter's dtype."""
        return self._embeddings()[0](token_ids).to(self.dtype)

    def draft_vocab_head(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The draft vocabulary's rows of the target's lm_head (weight `[V_draft, H_t]`, bias or None), detached
        and built once per binding."""
        if self.draft_vocab_ids is None:
            raise ValueError("This drafter drafts over the full vocabulary (config.draft_vocab_size=None).")
        if self._draft_head is None:
            lm_head = self._embeddings()[1]
            ids = self.draft_vocab_ids.to(lm_head.weight.device)
            bias = lm_head.bias[ids].detach() if getattr(lm_head, "bias", None) is not None else None
            self._draft_head = (lm_head.weight[ids].detach().contiguous(), bias)
        return self._draft_head

    def project(self, outputs: torch.Tensor, restrict: bool = False, compact: bool = False) -> torch.Tensor:
        """Normed head outputs `[..., H]` -> float32 logits `[..., V]` through the target's lm_head. `restrict`
        (with a draft vocabulary): only its rows are read, -inf elsewhere; `compact` as well: `[..., V_draft]`."""
        lm_head = self._embeddings()[1]
        projected = self.out_proj(outputs).to(lm_head.weight.dtype)
        if not restrict or self.draft_vocab_ids is None:
            return lm_head(projected).float()
        weight, bias = self.draft_vocab_head()
        sub = nn.functional.linear(projected, weight, bias).float()
        return sub if compact else self.expand_draft_logits(sub)

    def draft_columns(self) -> torch.Tensor | None:
        """The token id of each column of `draft_step`'s logits (the draft vocabulary, sorted), or None when the
        columns are the whole vocabulary."""
        return self.draft_vocab_ids

    def expand_draft_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary `[..., V_draft]` -> `[..., V]`, -inf (probability 0) for every other
        token; returned as they are by a drafter over the full vocabulary."""
        if self.draft_vocab_ids is None:
            return logits
        full = logits.new_full((*logits.shape[:-1], self.config.vocab_size), float("-inf"))
        return full.index_copy_(-1, self.draft_vocab_ids.to(logits.device), logits)

    def _inference_head(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What `draft_step` projects onto: the draft vocabulary's lm_head rows (the whole lm_head without one)
        times `out_proj`, one `[C, H]` matrix (formed in float32, rounded once to the lm_head's dtype) and the bias.

        `(W_vocab W_out) h` costs H multiply-adds per column instead of H_t. Cached, keyed on the storage, version
        and dtype of the weights, so an optimizer step, `load_state_dict`, `.to()` or a rebinding rebuilds it.
        """
        lm_head = self._embeddings()[1]
        out_weight = getattr(self.out_proj, "weight", None)  # None: out_proj is the identity (H = H_t)
        tensors = [t for t in (lm_head.weight, out_weight, self.draft_vocab_ids) if t is not None]
        key = tuple((t.data_ptr(), t._version, t.dtype, t.device) for t in tensors)
        if self._inference_head_cache is not None and self._inference_head_cache[0] == key:
            return self._inference_head_cache[1]
        with torch.no_grad():
            if self.draft_vocab_ids is not None:
                weight, bias = self.draft_vocab_head()
            else:
                weight, bias = lm_head.weight.detach(), getattr(lm_head, "bias", None)
                bias = bias.detach() if bias is not None else None
            if out_weight is not None:
                weight = (weight.float() @ out_weight.detach().float()).to(lm_head.weight.dtype)
        self._inference_head_cache = (key, (weight.contiguous(), bias))
        return self._inference_head_cache[1]
