"""JSONL rows and chat templating, shared by prompts, regeneration, label-text, training and the benchmarks.

Light on purpose (no torch import): the prompt files, the rows `regenerate` and `label-text` write, and the token
ids of a chat prompt all go through here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "chat_prompt_ids",
    "completed_ids",
    "OutputBusyError",
    "exclusive_writer",
    "read_jsonl",
    "token_ids",
    "write_jsonl",
]


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file, one per non-empty line.

    Raises:
        FileNotFoundError: no file at `path`.
        ValueError: a line is not JSON or not an object; the message names the file and line.
    """
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


def completed_ids(out_path: Path) -> set[str]:
    """Ids already regenerated; truncates a torn (unterminated or unparsable) last line in place."""
    if not out_path.exists():
        return set()
    data = out_path.read_bytes()
    keep = data.rfind(b"\n") + 1  # everything after the last newline is a torn write
    ids: set[str] = set()
    offset = 0
    for raw in data[:keep].split(b"\n")[:-1]:
        try:
            ids.add(json.loads(raw)["id"])
        except (json.JSONDecodeError, KeyError) as error:
            raise ValueError(
                f"{out_path}: line at byte {offset} is not a regenerated sample ({error}). The file is corrupt; "
                "delete it (or the bad line) and run regenerate again."
            ) from error
        offset += len(raw) + 1
    if keep != len(data):
        logger.warning(
            "%s: dropping a torn last line (%d bytes) left by an interrupted run", out_path, len(data) - keep
        )
        with open(out_path, "r+b") as handle:
            handle.truncate(keep)
    return ids


class OutputBusyError(RuntimeError):
    """Another process holds the output file's lock (`exclusive_writer`)."""


@contextmanager
def exclusive_writer(out_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `out_path`'s rows while a job appends to them (`<out>.lock`, released on exit, a
    crash or a kill). Raises `OutputBusyError` when another process holds it: two jobs appending to one file would tear
    each other's lines, so each worker (`regenerate --shard I/N`) needs its own output file."""
    import fcntl  # POSIX: imported here so that the rest of this module imports anywhere

    lock_path = Path(out_path).with_suffix(".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputBusyError(
                f"Another process is writing {out_path} (it holds {lock_path}); wait for it or stop it, or give this "
                "job its own output file (e.g. one --out per --shard I/N)."
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def token_ids(encoded: Any) -> list[int]:
    """The flat token ids of what ``apply_chat_template(..., tokenize=True)`` returned (a list, a batch of one, or
    a dict with ``input_ids``, depending on the tokenizer and transformers version)."""
    if hasattr(encoded, "keys"):
        encoded = encoded["input_ids"]
    if encoded and isinstance(encoded[0], list):
        encoded = encoded[0]
    return [int(t) for t in encoded]


def chat_prompt_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of `messages` with the generation prompt; Qwen3-style thinking is switched off."""
    return token_ids(
        tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, enable_thinking=False, return_dict=False
        )
    )


def write_jsonl(prompts: Iterable[dict[str, Any]], path: str | Path) -> Path:
    """Write rows (prompts, items) one JSON object per line (UTF-8), creating parent folders; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for prompt in prompts:
            handle.write(json.dumps(prompt, ensure_ascii=False) + "\n")
    return path
