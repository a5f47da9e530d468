"""JSONL files: prompt files, the rows `regenerate` and `label-text` write, and resuming an appended one."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file, one per non-empty line."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"No JSONL file at {path}: pass the path of a file with one JSON object per line.")
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"{path}, line {number}: not valid JSON ({error.msg} at column {error.colno}); expected one JSON "
                    "object per line. Fix or delete that line."
                ) from None
            if not isinstance(row, dict):
                raise ValueError(
                    f"{path}, line {number}: got a JSON {type(row).__name__}, expected an object (a row such as "
                    '{"id": ..., "messages": [...]}).'
                )
            rows.append(row)
    return rows


def completed_ids(out_path: Path, key: str = "id") -> set[Any]:
    """The `key` of every record already written; truncates a torn (unterminated) last line in place."""
    if not out_path.exists():
        return set()
    data = out_path.read_bytes()
    keep = data.rfind(b"\n") + 1  # everything after the last newline is a torn write
    ids: set[str] = set()
    offset = 0
    for raw in data[:keep].split(b"\n")[:-1]:
        try:
            ids.add(json.loads(raw)[key])
        except (json.JSONDecodeError, KeyError) as error:
            raise ValueError(
                f"{out_path}: line at byte {offset} is not a record with {key!r} ({error}). The file is corrupt; "
                "delete it (or the bad line) and run again."
            ) from error
        offset += len(raw) + 1
    if keep != len(data):
        logger.warning("%s: dropping the torn last line of an interrupted run (%d bytes)", out_path, len(data) - keep)
        with open(out_path, "r+b") as handle:
            handle.truncate(keep)
    return ids


def write_jsonl(prompts: Iterable[dict[str, Any]], path: str | Path) -> Path:
    """Write rows one JSON object per line (UTF-8), creating parent folders; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for prompt in prompts:
            handle.write(json.dumps(prompt, ensure_ascii=False) + "\n")
    return path
