"""The drafter's linear layers on weights packed once, for drafting on a CPU in bfloat16.

There `nn.Linear` hands oneDNN a plain weight, repacked into its blocked layout by every call: for a drafting round's
few rows the repacking costs about what the product does. :class:`PackedLinear` packs once (again when the weight
changes) and computes the same bits (`tests/test_packed_linear.py`), under `torch.no_grad()`, for bfloat16 on a CPU
whose oneDNN computes it natively; elsewhere (training, float32, CUDA, a torch without the ops) it is `nn.Linear`.
Parameters and state dicts stay `nn.Linear`'s. A target's layers gain as much (`pack_linears`, opt-in).
"""

from __future__ import annotations

import functools
import weakref

import torch
from torch import nn


@functools.lru_cache(maxsize=1)
def packing_supported() -> bool:
    """Whether this torch and CPU pack bfloat16 linear weights for oneDNN (the ops of inductor's CPU freezing)."""
    ops = torch.ops.mkldnn
    try:
        found = hasattr(ops, "_linear_pointwise") and hasattr(ops, "_reorder_linear_weight")
        return torch.backends.mkldnn.is_available() and found and bool(ops._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch built without the oneDNN ops
        return False


class PackedWeight:
    """One weight's packed copy, rebuilt when the weight is another tensor or was written to; not copied or pickled."""

    def __init__(self) -> None:
        self.source, self.key, self.packed = None, None, None

    def __deepcopy__(self, memo: dict) -> PackedWeight:
        return PackedWeight()

    def __reduce__(self):
        return PackedWeight, ()

    def get(self, weight: torch.Tensor, rows: int) -> torch.Tensor:
        version = None if weight.is_inference() else weight._version  # inference tensors keep no counter
        key = (weight.data_ptr(), version, weight.dtype, tuple(weight.shape))
        if self.source is None or self.source() is not weight or self.key != key:
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), rows)  # tuned for `rows`, any read
            self.source, self.key = weakref.ref(weight), key
        return self.packed


def packed_linear(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, packing: PackedWeight):
    """`nn.functional.linear(inputs, weight, bias)`, on `packing`'s copy of `weight` where it applies."""
    plain = torch.is_grad_enabled() or inputs.device.type != "cpu" or inputs.dim() < 2
    if plain or inputs.dtype != torch.bfloat16 or weight.dtype != torch.bfloat16 or not packing_supported():
        return nn.functional.linear(inputs, weight, bias)
    packed = packing.get(weight, max(1, inputs.numel() // inputs.shape[-1]))
    return torch.ops.mkldnn._linear_pointwise(inputs, packed, bias, "none", [], "")


class PackedLinear(nn.Linear):
    """`nn.Linear` whose bfloat16 inference on a CPU multiplies by a weight packed once (`packed_linear`)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._packing = PackedWeight()

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return packed_linear(inputs, self.weight, self.bias, self._packing)


def pack_linears(module: nn.Module, check: bool = False) -> nn.Module:
    """Make every `nn.Linear` under `module` (that class exactly: no subclass, quantised or adapter layer) a
    :class:`PackedLinear` sharing its parameters; returns `module`. `check`: first refuse a module that would never
    take the packed path (not bfloat16 on a CPU, or no packing here), so asking for it cannot silently do nothing.
    The drafter packs its own layers; a target's (`dlite_hf.pack_linears(model)`, `--pack-weights`) is opt-in."""
    if check:
        weights = {(p.dtype, p.device.type) for p in module.parameters()}
        if weights != {(torch.bfloat16, "cpu")} or not packing_supported():
            raise ValueError(
                f"Packed weights apply to bfloat16 on a CPU whose oneDNN computes bfloat16 natively; got weights "
                f"{sorted(f'{d} on {t}' for d, t in weights)} (packing supported here: {packing_supported()}). "
                "Load the model in bfloat16 on the CPU, or leave its weights unpacked."
            )
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                layer = PackedLinear(child.in_features, child.out_features, child.bias is not None, device="meta")
                layer.weight, layer.bias = child.weight, child.bias
                setattr(parent, name, layer)
    return module
