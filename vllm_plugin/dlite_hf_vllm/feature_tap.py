"""The proposer's feature-tap mode (`python -m dlite_hf_vllm.workers.features`): it drafts nothing, and copies the
kept positions of the target's tapped and final hidden states into dlite-hf's feature-cache entries.

Each engine step hands the proposer the target's auxiliary hidden states (the drafter's tapped layers) and its final
hidden states for every scheduled token; `FeatureTap.record` copies the positions each request's layout keeps (the
job file says which), chunk by chunk as the prefill is scheduled, and writes the entry (float16 safetensors,
`states` and `final`) when the request's last position is in.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

__all__ = ["FEATURE_TAP", "FeatureTap"]

FEATURE_TAP = "DLITE_HF_VLLM_FEATURE_TAP"  # environment: the tap's spec file (set by main for its engine workers)


def _external_id(req_id: str) -> str:
    """vLLM's internal request id is the caller's id plus "-" and 8 random characters (vLLM 0.32)."""
    return req_id.rsplit("-", 1)[0]


class FeatureTap:
    """Collects each job request's kept positions from the target's forward and writes its cache entry."""

    def __init__(self, spec_path: str | Path, order: list[int]):
        spec = json.loads(Path(spec_path).read_text())
        self.cache = Path(spec["cache"])
        self.order = list(order)  # aux state index of each tapped layer, in the drafter's layer order
        self.rows: dict[str, tuple[int, int, torch.Tensor]] = {}
        with open(spec["job"], encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                positions = torch.tensor(row["state_positions"], dtype=torch.long)
                self.rows[row["key"]] = (len(row["input_ids"]), int(row["first"]), positions)
        self.buffers: dict[str, dict[str, torch.Tensor]] = {}
        self.written = 0

    def path(self, key: str) -> Path:
        return self.cache / key[:2] / f"{key}.safetensors"

    def record(
        self,
        req_ids: list[str],
        query_start_loc: list[int],
        seq_lens: list[int],
        aux_hidden_states: list[torch.Tensor],
        hidden_states: torch.Tensor,
    ) -> None:
        """One engine step: request r's scheduled tokens are rows `query_start_loc[r] .. [r + 1]` of the step's
        states, at positions `seq_lens[r] - n .. seq_lens[r] - 1`."""
        for r, req_id in enumerate(req_ids):
            begin, end = query_start_loc[r], query_start_loc[r + 1]
            key = req_id if req_id in self.rows else _external_id(req_id)
            if end <= begin or key not in self.rows:
                continue
            length, first, positions = self.rows[key]
            stop = min(int(seq_lens[r]), length)
            start = stop - (end - begin)
            buffer = self.buffers.get(key)
            if buffer is None:
                width = hidden_states.shape[-1]
                buffer = self.buffers[key] = {
                    "states": torch.zeros(positions.numel(), len(self.order), width, dtype=torch.float16),
                    "final": torch.zeros(length - first, width, dtype=torch.float16),
                }
            inside = (positions >= start) & (positions < stop)
            if bool(inside.any()):
                rows = positions[inside] - start + begin
                stacked = torch.stack([aux_hidden_states[j][rows] for j in self.order], 1)
                buffer["states"][inside] = stacked.to(torch.float16).cpu()
            lo = max(first, start)
            if stop > lo:
                buffer["final"][lo - first : stop - first] = (
                    hidden_states[begin + lo - start : begin + stop - start].to(torch.float16).cpu()
                )
            if stop >= length:
                self._write(key, self.buffers.pop(key))

    def _write(self, key: str, entry: dict[str, torch.Tensor]) -> None:
        from safetensors.torch import save_file

        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # the process's own name: two workers never share one
        save_file({name: tensor.contiguous() for name, tensor in entry.items()}, str(tmp))
        tmp.replace(path)  # atomic: a killed worker leaves the old entry or the new one, never half of one
        self.written += 1
