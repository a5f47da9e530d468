"""Reading the target's hidden states at the tapped layers with forward hooks on the forwards it runs anyway,
keeping only the rows the drafter can need (so memory does not grow with the context). Plain torch."""

from __future__ import annotations

import functools
import threading
from typing import Any

import torch
from torch import nn

__all__ = ["TappedStateRecorder", "find_decoder_layers"]


def find_decoder_layers(model: nn.Module, num_layers: int) -> nn.ModuleList:
    """The `nn.ModuleList` of the target's decoder layers (works through PEFT and multimodal wrappers)."""
    candidates = []
    getter = getattr(model, "get_decoder", None)
    if callable(getter):
        try:
            decoder = getter()
        except (AttributeError, NotImplementedError, ValueError):
            decoder = None
        if isinstance(getattr(decoder, "layers", None), nn.ModuleList):
            candidates.append(decoder.layers)
    candidates += [m for name, m in model.named_modules() if name.endswith("layers") and isinstance(m, nn.ModuleList)]
    for layers in candidates:
        if len(layers) == num_layers:
            return layers
    raise ValueError(
        f"Could not find the {num_layers} decoder layers of {type(model).__name__} (looked for an nn.ModuleList "
        "named `layers`). DLite reads hidden states from the target's decoder layers; this architecture is not "
        "supported yet."
    )


class TappedStateRecorder:
    """Forward hooks on the tapped target layers. `rows_to_keep` > 0 keeps, of a forward over `n` positions, all rows
    if `n <= rows_to_keep` (verification) else the last (a prefill); 0 keeps every row (history variants). Only
    forwards on the creating thread are recorded, so concurrent generations cannot corrupt each other's states."""

    def __init__(self, layers: nn.ModuleList, layer_ids: list[int], rows_to_keep: int):
        self.layer_ids = list(layer_ids)
        self.rows_to_keep = rows_to_keep
        self.thread = threading.get_ident()
        self.states: dict[int, torch.Tensor] = {}
        self.offset = 0  # index, in the last forward, of the first kept row
        self.forward_rows = 0
        self._handles = [
            layers[i].register_forward_hook(functools.partial(self._hook, position))
            for position, i in enumerate(self.layer_ids)
        ]

    def _hook(self, position: int, module: nn.Module, args: Any, output: Any) -> None:
        if threading.get_ident() != self.thread:
            return
        hidden = output[0] if isinstance(output, (tuple, list)) else output
        rows = hidden.shape[1]
        if self.rows_to_keep and rows > self.rows_to_keep:
            kept, offset = hidden[:, -1:].detach().clone(), rows - 1  # a view would keep the whole prefill alive
        else:
            kept, offset = hidden.detach(), 0
        self.states[position] = kept
        self.offset, self.forward_rows = offset, rows

    def rows(self, start: int, stop: int) -> torch.Tensor:
        """Rows `[start, stop)` of the last forward as `[B, stop - start, L, H_t]`."""
        if len(self.states) != len(self.layer_ids):
            raise RuntimeError(
                "The target's forward did not run through its tapped layers (no hidden states were recorded); "
                "DLite needs the target's decoder layers to run on this thread."
            )
        if start < self.offset or stop > self.offset + self.states[0].shape[1]:
            raise RuntimeError(f"Internal error: rows [{start}, {stop}) of the last target forward were not kept.")
        return torch.stack(
            [self.states[p][:, start - self.offset : stop - self.offset] for p in range(len(self.states))], 2
        )

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.states = {}


LIVE_RECORDERS = "_dlite_live_recorders"  # target attribute: {thread id: [TappedStateRecorder]} of running calls


def track_recorder(target: nn.Module, recorder: TappedStateRecorder) -> None:
    """Register `recorder` as belonging to the call running on this thread (removed when the call ends)."""
    target.__dict__.setdefault(LIVE_RECORDERS, {}).setdefault(threading.get_ident(), []).append(recorder)


def remove_thread_recorders(target: nn.Module) -> None:
    """Remove the forward hooks of the calls that ran on this thread (their call has ended)."""
    live = target.__dict__.get(LIVE_RECORDERS)
    for recorder in live.pop(threading.get_ident(), []) if live else []:
        recorder.remove()
