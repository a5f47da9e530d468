"""Drafters derived from others: a changed config (weights kept where they still fit), identity layers grown on
(`dlite-hf train`), or two drafters' weights averaged (`dlite-hf interpolate`, WiSE-FT: Wortsman et al., 2022).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

RECORD = "dlite_training.json"
# config fields two drafters must share for their weights to be averaged (shapes alone miss the tapped layers)
SHARED_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size")
SHARED_FIELDS += ("head_rank", "num_draft_tokens", "target_layer_ids", "use_sequential_head", "history_window")
SHARED_FIELDS += ("vocab_size", "target_hidden_size", "backbone_type")


def extend_record(source: Path, out: Path, key: str, value: dict[str, Any]) -> dict[str, Any]:
    """Write `out`'s training record: `source`'s (if any) with `key` set to `value`; return it."""
    record = json.loads((source / RECORD).read_text(encoding="utf-8")) if (source / RECORD).is_file() else {}
    record[key] = value
    (out / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def derive_drafter(source, drop_prefix: str | None, new_prefixes: tuple[str, ...] = (), **changes):
    """A drafter with `source`'s config updated by `changes` and its weights minus those under `drop_prefix`;
    weights under `new_prefixes` (new modules) keep their fresh initialisation."""
    from . import DLiteConfig, DLiteForSpeculation

    config = {**source.config.to_dict(), **changes}
    for key in ("model_type", "transformers_version", "auto_map", "architectures"):
        config.pop(key, None)
    model = DLiteForSpeculation(DLiteConfig(**config))
    dropped = (drop_prefix,) if drop_prefix else ()
    kept = {k: v for k, v in source.state_dict().items() if not k.startswith(dropped)}
    missing, unexpected = model.load_state_dict(kept, strict=False)
    stray = [k for k in missing if not k.startswith((*dropped, *new_prefixes))] + list(unexpected)
    if stray:
        raise RuntimeError(f"Deriving a drafter ({changes}) left weights unmatched: {stray}")
    return model


def grow_drafter(source, extra_layers: int):
    """`source` with `extra_layers` backbone layers appended whose attention and MLP output projections are zero:
    each new layer is the identity on the residual stream, so the grown drafter drafts exactly as `source` does
    until training moves those projections (their gradients are not zero, the rest of each new layer follows)."""
    first = source.config.num_hidden_layers
    new = tuple(f"layers.{i}." for i in range(first, first + extra_layers))
    model = derive_drafter(source, None, new_prefixes=new, num_hidden_layers=first + extra_layers)
    with torch.no_grad():
        for layer in model.layers[first:]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return model


def interpolate_drafters(base_dir: str | Path, tuned_dir: str | Path, alpha: float, out: str | Path) -> dict[str, Any]:
    """Save ``(1 - alpha) * base + alpha * tuned`` (every floating-point weight) to ``out`` with the tuned drafter's
    config and draft vocabulary (it names lm_head rows, not weights, so the two may differ); return the record
    written beside it. ``tuned`` should be ``base`` fine-tuned (WiSE-FT)."""
    from . import DLiteForSpeculation

    if not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be a number in [0, 1] (0: the base, 1: the tuned drafter), got {alpha!r}.")
    base_dir, tuned_dir, out = Path(base_dir), Path(tuned_dir), Path(out)
    if out.resolve() in (base_dir.resolve(), tuned_dir.resolve()):
        raise ValueError(f"--out {out} is one of the drafters averaged; write the result to a new folder.")
    base, tuned = (DLiteForSpeculation.from_pretrained(d, dtype=torch.float32) for d in (base_dir, tuned_dir))
    for field in SHARED_FIELDS:
        left, right = getattr(base.config, field, None), getattr(tuned.config, field, None)
        if left != right:
            raise ValueError(
                f"{field} differs: {left!r} in {base_dir}, {right!r} in {tuned_dir}; average a drafter "
                "with one fine-tuned from it."
            )
    base_state, tuned_state = base.state_dict(), tuned.state_dict()
    for key in sorted((set(base_state) | set(tuned_state)) - {"draft_vocab_ids"}):
        if key not in base_state or key not in tuned_state or base_state[key].shape != tuned_state[key].shape:
            raise ValueError(f"weight {key} differs in name or shape between {base_dir} and {tuned_dir}.")
    merged = {
        key: torch.lerp(base_state[key], value, float(alpha))
        if value.is_floating_point() and key != "draft_vocab_ids"
        else value
        for key, value in tuned_state.items()
    }
    tuned.load_state_dict(merged)
    tuned.save_pretrained(out)
    return extend_record(
        tuned_dir, out, "interpolated", {"base": str(base_dir), "tuned": str(tuned_dir), "alpha": float(alpha)}
    )
