"""The feature cache: one target forward per training sequence, on disk, reused across epochs and stages; the
trainer fills what it lacks with transformers' forward, or `dlite-hf features` (:func:`features_vllm`) fills it ahead
of training with vLLM's, several times faster here."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...jsonl import read_jsonl, write_jsonl
from ..stdlib import held_out_row
from ..vllm_worker import require_python, run_worker, worker_command
from .transformers import target_features, vocab_stats


class FeatureCache:
    """On-disk cache of one target forward per training sequence (keyed by the sha1 of its ids), float16 safetensors:
    the tapped states `[*, L, H_t]`, the final hidden states `[*, H_t]` and the target's full-vocabulary logsumexp and
    argmax (`vocab_stats`), so a draft-vocabulary step reads only the draft vocabulary's rows of the lm_head.

    Layouts: every position (`history_free=False`), or only what a history-free block reads: the final states from
    `response_start - 1` on and the tapped states at `a - 1` of the anchors `a % anchor_stride == 0` (a history-free
    reader uses an every-position cache as it is; the reverse raises). A manifest pins the target, the tapped layers,
    the layout and who wrote the entries (`producer`): a cache built otherwise raises, and so does reading a position
    the layout did not keep, never a zero. A run tapping a subset of the manifest's layers reads them from the entries.
    """

    def __init__(
        self,
        directory: str,
        target_name: str,
        layer_ids: list[int],
        history_free: bool = False,
        anchor_stride: int = 1,
        producer: str = "transformers",
    ):
        if not isinstance(anchor_stride, int) or anchor_stride < 1:
            raise ValueError(f"anchor_stride must be an int >= 1, got {anchor_stride!r}.")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.dtype = torch.float16
        self.history_free = bool(history_free)
        self.anchor_stride = anchor_stride if self.history_free else 1
        layout = {"positions": "history-free" if self.history_free else "all", "anchor_stride": self.anchor_stride}
        manifest = {"target": target_name, "layer_ids": list(layer_ids), "dtype": str(self.dtype), "layout": layout}
        path = self.directory / "manifest.json"
        if path.exists():
            found = json.loads(path.read_text())
            found.setdefault("layout", {"positions": "all", "anchor_stride": 1})
            if self.history_free and found["layout"] == {"positions": "all", "anchor_stride": 1}:
                self.history_free, self.anchor_stride = False, 1  # a superset of the history-free layout
                manifest["layout"] = found["layout"]
            self.producer = found.pop("producer", "transformers")
            if set(layer_ids) <= set(found.get("layer_ids", [])):  # a superset of the tapped layers: read a subset
                manifest["layer_ids"] = found["layer_ids"]
            if found != manifest:
                raise ValueError(
                    f"Feature cache {self.directory} was built for {found}, but this run needs {manifest}. Use "
                    "another feature_cache_dir (or delete this one)."
                )
        else:
            self.producer = producer
            path.write_text(json.dumps({**manifest, "producer": producer}))
        self.layer_ids = manifest["layer_ids"]  # what the entries hold; `take` picks this run's layers from them
        self.take = [self.layer_ids.index(layer) for layer in layer_ids]

    @staticmethod
    def key(ids: torch.Tensor) -> str:
        return hashlib.sha1(ids.to(torch.int64).cpu().numpy().tobytes()).hexdigest()

    def entry_key(self, ids: torch.Tensor, first: int) -> str:
        """The key of one sequence's entry: the sha1 of its ids, and in the history-free layout the first kept
        position (`kept(...)[0]`), since the same ids with another response start keep other positions."""
        return f"{self.key(ids)}-{first}" if self.history_free else self.key(ids)

    def row_entry(self, ids: list[int], response_start: int) -> tuple[str, int, torch.Tensor]:
        """One training row's entry as the trainer reads it: its key (`entry_key`), its first kept position and the
        positions whose tapped states are kept (`kept`)."""
        first, positions = self.kept(len(ids), response_start)
        return self.entry_key(torch.tensor(ids), first), first, positions

    def has(self, key: str) -> bool:
        return self._path(key).exists()

    def _path(self, key: str):
        return self.directory / key[:2] / f"{key}.safetensors"

    def _write(self, key: str, entry: dict[str, torch.Tensor]) -> None:
        from safetensors.torch import save_file

        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # one temporary file per writer: runs sharing a cache may write the same entry at once
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        save_file(entry, str(tmp))
        tmp.replace(path)  # atomic: a killed run leaves either the old entry or the new one

    def kept(self, length: int, response_start: int) -> tuple[int, torch.Tensor]:
        """The layout for one sequence: the first position whose final states are kept, and the positions whose
        tapped states are kept."""
        if not self.history_free:
            return 0, torch.arange(length)
        first = min(max(response_start - 1, 0), length)
        anchors = torch.arange(max(first, 1), length)
        return first, anchors[anchors % self.anchor_stride == 0] - 1

    def features(
        self,
        target: nn.Module,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        response_start: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Like `target_features` on a right-padded batch, served from the cache where possible (`response_start`
        `[B]`, each row's first label position, is required by the history-free layout).

        Returns `states` `[B, T, L, H_t]`, `final_hidden` `[B, T, H_t]` (float32) and `{"lse", "top1", "kept"}`
        `[B, T]`, `kept` marking the positions whose tapped states are real (the rest are zeros).
        """
        from safetensors.torch import load_file

        if self.history_free and response_start is None:
            raise ValueError(
                "This feature cache keeps only what history-free blocks read, so it needs each row's response_start "
                "(DLiteCollator returns it); use a cache built with history_free=False for other batches."
            )
        lm_head = target.get_output_embeddings()
        batch, width = input_ids.shape
        lengths = attention_mask.sum(1).tolist()
        starts = response_start.tolist() if response_start is not None else [0] * batch
        layouts = [self.kept(lengths[b], int(starts[b])) for b in range(batch)]
        keys = [self.entry_key(input_ids[b, : lengths[b]], layouts[b][0]) for b in range(batch)]
        cached = [load_file(self._path(k)) if self._path(k).exists() else None for k in keys]
        missing = any(entry is None for entry in cached)
        fresh = target_features(target, input_ids, self.layer_ids, attention_mask) if missing else None
        for b, entry in enumerate(cached):
            first, state_positions = layouts[b]
            if entry is None:
                entry = {
                    "states": fresh[0][b, state_positions].to(self.dtype).contiguous(),
                    "final": fresh[1][b, first : lengths[b]].to(self.dtype).contiguous(),
                }
            if "lse" not in entry:  # new entry, or one written before the stats existed
                device = lm_head.weight.device
                lse, top1 = vocab_stats(lm_head, entry["final"].to(device=device, dtype=torch.float32))
                entry = {**entry, "lse": lse.cpu().contiguous(), "top1": top1.cpu().contiguous()}
                self._write(keys[b], entry)
            cached[b] = entry
        sample = cached[0]
        states = sample["states"].new_zeros(batch, width, len(self.take), sample["states"].shape[-1])
        final = sample["final"].new_zeros(batch, width, sample["final"].shape[-1])
        lse = torch.zeros(batch, width, dtype=torch.float32)
        top1 = torch.zeros(batch, width, dtype=torch.long)
        kept = torch.zeros(batch, width, dtype=torch.bool)
        for b, entry in enumerate(cached):
            first, state_positions = layouts[b]
            if entry["states"].shape[0] != state_positions.numel() or entry["final"].shape[0] != lengths[b] - first:
                raise ValueError(
                    f"Feature cache entry {self._path(keys[b])} holds {entry['states'].shape[0]} tapped and "
                    f"{entry['final'].shape[0]} final positions, but its layout needs {state_positions.numel()} and "
                    f"{lengths[b] - first}: the entry is corrupt; delete it (or the cache)."
                )
            states[b, state_positions] = entry["states"][:, self.take]  # this run's layers, in its order
            kept[b, state_positions] = True
            final[b, first : lengths[b]] = entry["final"]
            lse[b, first : lengths[b]] = entry["lse"]
            top1[b, first : lengths[b]] = entry["top1"]
        device = input_ids.device
        stats = {"lse": lse.to(device), "top1": top1.to(device), "kept": kept.to(device)}
        return states.to(device=device, dtype=torch.float32), final.to(device=device, dtype=torch.float32), stats


def cached_rows(
    rows: str | Path,
    cache_dir: str | Path,
    out: str | Path,
    layer_ids: list[int],
    anchor_stride: int = 1,
    max_length: int = 1024,
    all_positions: bool = False,
) -> dict[str, Any]:
    """Write to `out` the rows of the file `rows` whose entries `cache_dir` holds, in order, looked up as the trainer
    reads them (its truncation, the manifest's layout and keys); returns the counts."""
    from ...training.data import RegeneratedDataset  # here: the trainer imports this module

    manifest = Path(cache_dir) / "manifest.json"
    if not manifest.is_file():
        raise ValueError(f"--cache {cache_dir} has no manifest.json: expected a folder `dlite-hf features` filled.")
    target = json.loads(manifest.read_text())["target"]
    cache = FeatureCache(str(cache_dir), target, layer_ids, not all_positions, anchor_stride)
    raw = [row for row in read_jsonl(rows) if not held_out_row(str(row.get("id", "")))]  # as the trainer drops them
    dataset = RegeneratedDataset(raw, max_length=max_length)
    if len(dataset.rows) != len(raw):
        raise ValueError(f"{rows}: {len(raw)} rows, {len(dataset.rows)} pass the trainer's filter; expected all.")
    keys = [cache.row_entry(row["input_ids"], row["loss_mask"].index(1))[0] for row in dataset.rows]
    kept = [source for source, key in zip(raw, keys) if cache.has(key)]
    Path(out).write_text("".join(json.dumps(row, separators=(",", ":")) + "\n" for row in kept), encoding="utf-8")
    return {"rows": len(raw), "cached": len(kept), "out": str(out)}


def features_vllm(
    target_dir: str | Path,
    target_name: str,
    drafter_dir: str | Path,
    layer_ids: list[int],
    rows: str | Path | list[dict[str, Any]],
    cache_dir: str | Path,
    anchor_stride: int = 1,
    max_length: int = 1024,
    dtype: str = "bfloat16",
    max_num_seqs: int = 16,
    enforce_eager: bool = False,
    python: str | Path | None = None,
    shard: tuple[int, int] = (0, 1),
    all_positions: bool = False,
) -> dict[str, Any]:
    """Write the cache entries of `rows` that `cache_dir` lacks, keyed and laid out as the trainer reads them
    (`row_entry`), through the vLLM worker; returns its counts. `target_name` is the name the trainer's target reports
    (`config._name_or_path`), `shard=(i, n)` takes every n-th sequence from the i-th on, and `all_positions` writes
    every position (the history-aware layout) instead of the history-free one."""
    from ...training.data import RegeneratedDataset  # here: the trainer imports this module

    index, count = shard
    if not 0 <= index < count:
        raise ValueError(f"shard {index}/{count} is invalid: expected I/N with 0 <= I < N, e.g. 0/2 and 1/2.")
    python = require_python(python, "without vLLM, `dlite-hf train --feature_cache_dir` fills the cache itself")
    dataset = RegeneratedDataset(rows, max_length=max_length)
    history_free, producer = not all_positions, f"vllm-{dtype}"
    cache = FeatureCache(str(cache_dir), target_name, layer_ids, history_free, anchor_stride, producer)
    rows_here = dataset.rows[index::count]
    todo = []
    for row in rows_here:
        key, first, positions = cache.row_entry(row["input_ids"], row["loss_mask"].index(1))
        if not cache.has(key):
            todo.append(
                {"key": key, "input_ids": row["input_ids"], "first": first, "state_positions": positions.tolist()}
            )
    if cache.producer != producer or todo and cache.layer_ids != list(layer_ids):  # one forward; the drafter's layers
        raise ValueError(
            f"Feature cache {cache_dir} holds entries from {cache.producer} of layers {cache.layer_ids}; this pass "
            f"writes {producer}'s of the --drafter's layers {layer_ids}. Use another folder for these features."
        )
    job = write_jsonl(todo, Path(cache_dir) / f"vllm-job-{index}of{count}.jsonl")
    summary_path = job.with_suffix(".summary.json")
    if todo:
        options = {
            "model": target_dir,
            "drafter": drafter_dir,
            "job": job,
            "cache": cache_dir,
            "dtype": dtype,
            "max-model-len": max(len(item["input_ids"]) for item in todo) + 2,
            "max-num-seqs": max_num_seqs,
            "summary": summary_path,
        }
        command = worker_command(python, "features", options, *(["enforce-eager"] if enforce_eager else []))
        summary = run_worker(command, summary_path, "feature worker", "Entries")
    else:
        summary = {"todo": 0, "tokens": 0, "missing": 0}
    job.unlink(missing_ok=True)
    present = len(rows_here) - len(todo)
    return {**summary, "sequences": len(rows_here), "already_cached": present, "producer": cache.producer}
