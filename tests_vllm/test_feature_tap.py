"""The feature tap without an engine: chunked prefills of two requests in one batch, vLLM's internal request ids,
and the entry written once a request's last position is in (the engine run: test_features.py)."""

from __future__ import annotations

import json

import torch
from dlite_hf_vllm.workers.features import FeatureTap
from safetensors.torch import load_file


def test_chunked_prefills_give_each_request_its_kept_positions(tmp_path):
    lengths, firsts = {"a": 10, "b": 6}, {"a": 4, "b": 2}
    positions = {"a": [3, 7], "b": [1, 3, 5]}
    job = tmp_path / "job.jsonl"
    job.write_text(
        "".join(
            json.dumps({"key": k, "input_ids": list(range(n)), "first": firsts[k], "state_positions": positions[k]})
            + "\n"
            for k, n in lengths.items()
        )
    )
    spec = tmp_path / "tap.json"
    spec.write_text(json.dumps({"cache": str(tmp_path / "cache"), "job": str(job)}))
    tap = FeatureTap(spec, order=[1, 0])  # the drafter's first tapped layer is aux state 1

    def states(key, pos, layer):  # a value that names the request, the position and the layer
        return (100 * (key == "b") + pos) + 0.25 * layer

    def step(chunks):  # chunks: (key, first position, count) in batch order
        rows = [(k, p) for k, start, n in chunks for p in range(start, start + n)]
        aux = [torch.tensor([[states(k, p, j)] * 4 for k, p in rows]) for j in range(2)]
        final = torch.tensor([[states(k, p, 9)] * 4 for k, p in rows])
        loc = [0]
        for _, _, n in chunks:
            loc.append(loc[-1] + n)
        tap.record([f"{k}-1a2b3c4d" for k, _, _ in chunks], loc, [s + n for _, s, n in chunks], aux, final)

    step([("a", 0, 6), ("b", 0, 3)])  # both prefills chunked
    assert tap.written == 0
    step([("a", 6, 4), ("b", 3, 3)])
    assert tap.written == 2 and not tap.buffers
    for key in lengths:
        entry = load_file(str(tap.path(key)))
        expected = [[states(key, p, 1), states(key, p, 0)] for p in positions[key]]
        assert entry["states"][..., 0].tolist() == expected
        assert entry["final"][:, 0].tolist() == [states(key, p, 9) for p in range(firsts[key], lengths[key])]
