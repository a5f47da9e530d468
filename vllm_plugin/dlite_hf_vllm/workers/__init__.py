"""dlite-hf's workers in the vLLM environment, each run by `dlite_hf.data.vllm_worker` as
`python -m dlite_hf_vllm.workers.<name>` with a job file, writing its results and a JSON summary: `regenerate`
(`dlite-hf regenerate --engine vllm`) and `features` (`dlite-hf features`)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


def read_job(path: str | Path, keys: set[str]) -> list[dict]:
    """The rows of a job file (JSONL, blank lines skipped); `SystemExit` where one lacks any of `keys`."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                row = json.loads(line)
                if not keys <= row.keys():
                    raise SystemExit(
                        f"{path}, line {number}: expected {' and '.join(sorted(keys))}, got {sorted(row)}."
                    )
                rows.append(row)
    return rows


def finished_per_step(engine: Any, requests: Iterable[tuple[str, list[int], Any]], in_flight: int) -> Iterator[list]:
    """Keep `in_flight` of `requests` (request id, prompt ids, SamplingParams) in vLLM's `engine` until they are
    done (a new one enters as soon as one finishes, so a long one never leaves the batch draining); yield each
    step's finished outputs."""
    from vllm.inputs import TokensPrompt

    requests = iter(requests)
    while True:
        room = in_flight - engine.get_num_unfinished_requests()
        for request_id, prompt_ids, params in itertools.islice(requests, room):
            engine.add_request(request_id, TokensPrompt(prompt_token_ids=prompt_ids), params)
        if not engine.has_unfinished_requests():
            return
        yield [output for output in engine.step() if output.finished]


def write_summary(path: str | None, summary: dict) -> None:
    """The worker's counts: printed, and written to `path` (dlite-hf reads them there)."""
    print(json.dumps(summary), flush=True)
    if path:
        Path(path).write_text(json.dumps(summary))
