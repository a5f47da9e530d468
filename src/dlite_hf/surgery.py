"""Drafter surgery: a drafter derived from another with a changed config (weights kept where they still fit),
grown by identity layers, or given another draft vocabulary without retraining.

Used by `dlite-hf train` (`--init` with `--no_sequential_head`, a teacher's weights for the warm-up drafter,
`--grow_layers`), `dlite-hf draft-vocab` and `dlite-hf interpolate` (a fine-tuned drafter's weights averaged with
those it started from, WiSE-FT: Wortsman et al., 2022).

A DLite drafter drafts among `config.draft_vocab_size` tokens: each drafted position reads those rows of the
target's lm_head. The drafter's own weights do not depend on which rows (they are the target's), so the
vocabulary can be changed after training. A smaller one makes every drafting round cheaper where reading the
lm_head slice dominates, at the price of the tokens it drops: they can no longer be drafted (outputs stay
identical to the target's; only acceptance can fall).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

__all__ = ["coverage", "derive_drafter", "grow_drafter", "interpolate_drafters", "resize_draft_vocab"]

RECORD = "dlite_training.json"
# config fields two drafters must share for their weights to be averaged (shapes alone miss the tapped layers)
SHARED_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                 "intermediate_size", "head_rank", "num_draft_tokens", "target_layer_ids", "use_sequential_head",
                 "history_window", "vocab_size", "target_hidden_size", "backbone_type")  # fmt: skip


def coverage(counts, ids) -> float:
    """Fraction of the counted tokens (``counts`` ``[V]``, integer parts) that fall in the vocabulary ``ids``."""
    import torch

    whole = torch.floor(counts)  # response_token_counts adds a tie-breaker below one count
    return float(whole[ids].sum() / whole.sum())


def resize_draft_vocab(
    drafter_dir: str | Path, data: str | Path, size: int, out: str | Path, max_length: int = 1024
) -> dict[str, Any]:
    """Save the drafter of ``drafter_dir`` to ``out`` with the ``size`` most frequent response tokens of ``data``
    as its draft vocabulary; return what changed (sizes and coverage of ``data`` before and after).

    Raises:
        ValueError: ``out`` is ``drafter_dir``, the data's token ids do not fit the drafter's vocabulary, or a bad
            size (see :meth:`DLiteForSpeculation.set_draft_vocab`).
    """
    import torch

    from . import DLiteForSpeculation
    from .training.data import RegeneratedDataset, response_token_counts

    source, out = Path(drafter_dir), Path(out)
    if out.resolve() == source.resolve():
        raise ValueError(f"--out {out} is the drafter's own folder; write the resized drafter to a new folder.")
    drafter = DLiteForSpeculation.from_pretrained(source)
    counts = response_token_counts(RegeneratedDataset(data, max_length=max_length), drafter.config.vocab_size)
    before_size = drafter.config.draft_vocab_size
    before_ids = drafter.draft_vocab_ids if drafter.draft_vocab_ids is not None else torch.arange(counts.numel())
    before = coverage(counts, before_ids)
    ids = drafter.set_draft_vocab(counts, size=size)
    report = {
        "from": before_size,
        "to": size,
        "data": str(data),
        "response_tokens": int(torch.floor(counts).sum()),
        "coverage_before": round(before, 4),
        "coverage_after": round(coverage(counts, ids), 4),
    }
    drafter.save_pretrained(out)
    record = {}
    if (source / RECORD).is_file():
        record = json.loads((source / RECORD).read_text(encoding="utf-8"))
    record["draft_vocab_resized"] = report
    (out / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    if (source / "README.md").is_file() and not (out / "README.md").exists():
        shutil.copy(source / "README.md", out / "README.md")  # re-render it with `dlite-hf card` after benchmarking
    return report


def derive_drafter(source, drop_prefix: str | None, new_prefixes: tuple[str, ...] = (), **changes):
    """A drafter with `source`'s config updated by `changes` and its weights minus those under `drop_prefix`;
    weights under `new_prefixes` (new modules) keep their fresh initialisation."""
    from . import DLiteConfig, DLiteForSpeculation

    config = source.config.to_dict()
    config.update(changes)
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
    import torch

    first = source.config.num_hidden_layers
    new = tuple(f"layers.{i}." for i in range(first, first + extra_layers))
    model = derive_drafter(source, None, new_prefixes=new, num_hidden_layers=first + extra_layers)
    with torch.no_grad():
        for layer in model.layers[first:]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return model


def interpolate_drafters(base_dir: str | Path, tuned_dir: str | Path, alpha: float, out: str | Path) -> dict[str, Any]:
    """Save ``(1 - alpha) * base + alpha * tuned`` (every floating-point weight) to ``out``, with the tuned drafter's
    config and draft vocabulary; return the record written beside it.

    ``tuned`` should be ``base`` fine-tuned (WiSE-FT): averaging keeps much of the base's skill on what the fine-tuning
    data lacked. The draft vocabulary is not a weight (it names rows of the target's lm_head), so the two drafters'
    vocabularies may differ.

    Raises:
        ValueError: ``alpha`` outside [0, 1], ``out`` is one of the inputs, or the drafters differ in a shared config
            field or in a weight's name or shape.
    """
    import math

    import torch

    from . import DLiteForSpeculation

    if not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be a number in [0, 1] (0: the base, 1: the tuned drafter), got {alpha!r}.")
    base_dir, tuned_dir, out = Path(base_dir), Path(tuned_dir), Path(out)
    if out.resolve() in (base_dir.resolve(), tuned_dir.resolve()):
        raise ValueError(f"--out {out} is one of the drafters averaged; write the result to a new folder.")
    base = DLiteForSpeculation.from_pretrained(base_dir, dtype=torch.float32)
    tuned = DLiteForSpeculation.from_pretrained(tuned_dir, dtype=torch.float32)
    for field in SHARED_FIELDS:
        left, right = getattr(base.config, field, None), getattr(tuned.config, field, None)
        if left != right:
            raise ValueError(f"{field} differs: {left!r} in {base_dir}, {right!r} in {tuned_dir}; average a drafter "
                             "with one fine-tuned from it.")  # fmt: skip
    base_state, tuned_state = base.state_dict(), tuned.state_dict()
    for key in sorted(set(base_state) | set(tuned_state)):
        if key == "draft_vocab_ids":
            continue
        if key not in base_state or key not in tuned_state or base_state[key].shape != tuned_state[key].shape:
            raise ValueError(f"weight {key} differs in name or shape between {base_dir} and {tuned_dir}.")
    merged = {
        key: torch.lerp(base_state[key], value, float(alpha))
        if value.is_floating_point() and key != "draft_vocab_ids" else value
        for key, value in tuned_state.items()
    }  # fmt: skip
    tuned.load_state_dict(merged)
    tuned.save_pretrained(out)
    record = {}
    if (tuned_dir / RECORD).is_file():
        record = json.loads((tuned_dir / RECORD).read_text(encoding="utf-8"))
    record["interpolated"] = {"base": str(base_dir), "tuned": str(tuned_dir), "alpha": float(alpha)}
    (out / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record
