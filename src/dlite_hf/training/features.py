"""Target features for training: the tapped layers' states and the final hidden states from one frozen forward."""

from __future__ import annotations

import torch
from torch import nn

from ..modeling.tapping import TappedStateRecorder, find_decoder_layers


def find_final_norm(target: nn.Module, layers: nn.ModuleList) -> nn.Module:
    """The norm applied after the last decoder layer (its output is what the lm_head projects)."""
    for module in target.modules():
        if getattr(module, "layers", None) is layers and isinstance(getattr(module, "norm", None), nn.Module):
            return module.norm
    raise ValueError(
        f"Could not find the final norm of {type(target).__name__} (a `norm` module beside its decoder `layers`); "
        "DLite training reads the target's distribution from it."
    )


@torch.no_grad()
def target_features(
    target: nn.Module,
    input_ids: torch.Tensor,
    layer_ids: list[int],
    attention_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the frozen target once; return its tapped states and its final (normed) hidden states.

    The states are read with the same forward hooks the generate() integration uses, so the drafter sees
    identical features in training and at inference. The vocabulary projection is left to the caller, who
    applies the lm_head only at the rows it needs (memory stays bounded for long sequences).

    Returns:
        `states` `[B, T, L, H_t]` and `final_hidden` `[B, T, H_t]`.
    """
    config = target.config.get_text_config() if hasattr(target.config, "get_text_config") else target.config
    layers = find_decoder_layers(target, config.num_hidden_layers)
    norm = find_final_norm(target, layers)
    captured: list[torch.Tensor] = []
    handle = norm.register_forward_hook(lambda module, args, output: captured.append(output))
    recorder = TappedStateRecorder(layers, layer_ids, rows_to_keep=0)
    try:
        target(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, logits_to_keep=1)
        states = recorder.rows(0, input_ids.shape[1])
    finally:
        recorder.remove()
        handle.remove()
    return states, captured[-1]


@torch.no_grad()
def vocab_stats(
    lm_head: nn.Module, hidden: torch.Tensor, rows_per_chunk: int = 512
) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's full-vocabulary logsumexp and argmax at every row of `hidden` `[..., H_t]`.

    With these two numbers per position, the target's log-probabilities of any token subset (the draft
    vocabulary) need only that subset's rows of the lm_head: `log p(v) = logit(v) - logsumexp`. Rows are
    projected `rows_per_chunk` at a time, so memory stays bounded for long sequences.

    Returns:
        `lse` `[...]` float32 and `top1` `[...]` long.
    """
    flat = hidden.reshape(-1, hidden.shape[-1])
    lse, top1 = [], []
    for chunk in torch.split(flat, rows_per_chunk):
        logits = lm_head(chunk.to(lm_head.weight.dtype)).float()
        lse.append(logits.logsumexp(dim=-1))
        top1.append(logits.argmax(dim=-1))
    shape = hidden.shape[:-1]
    if not lse:
        return hidden.new_zeros(shape, dtype=torch.float32), torch.zeros(shape, dtype=torch.long, device=hidden.device)
    return torch.cat(lse).view(shape), torch.cat(top1).view(shape)


class FeatureCache:
    """On-disk cache of one target forward per training sequence, reused across epochs and stages.

    Each sequence (keyed by the sha1 of its token ids) stores its tapped states `[T, L, H_t]` and final hidden
    states `[T, H_t]` in float16 safetensors, plus the target's full-vocabulary logsumexp and argmax per position
    (`vocab_stats` of the stored, float16-rounded final states), so a draft-vocabulary training step reads only
    the draft vocabulary's rows of the lm_head. Entries written before the stats existed get them on first read.
    The target's forward dominates a CPU training step, so a run of E epochs over several stages pays for it once.
    A manifest pins the target and the tapped layers: a cache built for another target or other layers raises
    instead of feeding wrong features.
    """

    def __init__(self, directory: str, target_name: str, layer_ids: list[int], dtype: torch.dtype = torch.float16):
        import json
        from pathlib import Path

        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.dtype = dtype
        manifest = {"target": target_name, "layer_ids": list(layer_ids), "dtype": str(dtype)}
        path = self.directory / "manifest.json"
        if path.exists():
            found = json.loads(path.read_text())
            if found != manifest:
                raise ValueError(
                    f"Feature cache {self.directory} was built for {found}, but this run needs {manifest}. Use "
                    "another feature_cache_dir (or delete this one)."
                )
        else:
            path.write_text(json.dumps(manifest))
        self.layer_ids = list(layer_ids)

    @staticmethod
    def key(ids: torch.Tensor) -> str:
        import hashlib

        return hashlib.sha1(ids.to(torch.int64).cpu().numpy().tobytes()).hexdigest()

    def _path(self, key: str):
        return self.directory / key[:2] / f"{key}.safetensors"

    def _write(self, key: str, entry: dict[str, torch.Tensor]) -> None:
        from safetensors.torch import save_file

        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        save_file(entry, str(tmp))
        tmp.replace(path)  # atomic: a killed run leaves either the old entry or the new one

    def features(
        self, target: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Like `target_features` on a right-padded batch, served from the cache where possible.

        Returns:
            `states` `[B, T, L, H_t]`, `final_hidden` `[B, T, H_t]` (float32) and `{"lse", "top1"}` `[B, T]`
            (see `vocab_stats`; zeros on padding).
        """
        from safetensors.torch import load_file

        lm_head = target.get_output_embeddings()
        lengths = attention_mask.sum(1).tolist()
        keys = [self.key(input_ids[b, : lengths[b]]) for b in range(input_ids.shape[0])]
        cached = [load_file(self._path(k)) if self._path(k).exists() else None for k in keys]
        fresh = None
        if any(entry is None for entry in cached):
            fresh = target_features(target, input_ids, self.layer_ids, attention_mask)
        for b, entry in enumerate(cached):
            if entry is None:
                n = lengths[b]
                entry = {
                    "states": fresh[0][b, :n].to(self.dtype).contiguous(),
                    "final": fresh[1][b, :n].to(self.dtype).contiguous(),
                }
            if "lse" not in entry:  # new entry, or one written before the stats existed
                device = lm_head.weight.device
                lse, top1 = vocab_stats(lm_head, entry["final"].to(device=device, dtype=torch.float32))
                entry = {**entry, "lse": lse.cpu().contiguous(), "top1": top1.cpu().contiguous()}
                self._write(keys[b], entry)
            cached[b] = entry
        batch, width = input_ids.shape
        first = cached[0]
        states = first["states"].new_zeros(batch, width, *first["states"].shape[1:])
        final = first["final"].new_zeros(batch, width, first["final"].shape[-1])
        lse = torch.zeros(batch, width, dtype=torch.float32)
        top1 = torch.zeros(batch, width, dtype=torch.long)
        for b, entry in enumerate(cached):
            n = entry["states"].shape[0]
            states[b, :n] = entry["states"]
            final[b, :n] = entry["final"]
            lse[b, :n] = entry["lse"]
            top1[b, :n] = entry["top1"]
        device = input_ids.device
        stats = {"lse": lse.to(device), "top1": top1.to(device)}
        return states.to(device=device, dtype=torch.float32), final.to(device=device, dtype=torch.float32), stats
