"""A benchmark run's journal: every finished session appended to ``<out>/<name>.partial.jsonl``, so a run that is
killed (a crash, the end of a machine's session) goes on from its last finished session when the same command runs
again, and nothing measured is lost.

The first line is the run's fingerprint (the command, every method with its weights' sha256, the sessions, the
settings); a journal with another fingerprint is refused, never mixed in. Each further line is one session: its log,
its records and its lossless failures. A last line cut short by a kill is dropped (that session runs again). The
finished run deletes its journal after writing its results; the results document counts the sessions it reused
(``meta.resumed_sessions``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .results import Mismatch, Record, SessionLog

Entry = tuple[SessionLog, list[Record], list[Mismatch]]


class Journal:
    """The finished sessions of one run, keyed by (workload, session id), read from and appended to ``path``."""

    def __init__(self, path: str | Path, fingerprint: dict[str, Any]) -> None:
        self.path, self.reused = Path(path), 0
        self.finished: dict[tuple[str, str], Entry] = {}
        header = json.loads(json.dumps(fingerprint))  # as it reads back from the file
        if not self.path.is_file():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._write({"fingerprint": header})
            return
        lines = self.path.read_text(encoding="utf-8").splitlines()
        first = json.loads(lines[0]) if lines else {}
        if first.get("fingerprint") != header:
            raise ValueError(
                f"{self.path} is the journal of another run (another command, weights or sessions): a run resumes "
                "only with the same command. Delete the file to start afresh, or pass another --name."
            )
        for number, line in enumerate(lines[1:], start=2):
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                if number == len(lines):
                    break  # cut short by a kill mid-write: that session runs again
                raise ValueError(f"{self.path}, line {number}: not JSON; delete the file to start afresh.") from None
            where = f"{self.path}, line {number}"
            self.finished[(item["workload"], item["session"])] = (
                SessionLog.from_dict(item["log"], where),
                [Record.from_dict(r, where) for r in item["records"]],
                [Mismatch.from_dict(m, where) for m in item["mismatches"]],
            )

    def take(self, workload: str, session_id: str) -> Entry | None:
        """The session's entry when an earlier invocation finished it (counted in ``reused``), else None."""
        entry = self.finished.get((workload, session_id))
        self.reused += entry is not None
        return entry

    def append(self, workload: str, session_id: str, entry: Entry) -> None:
        log, records, mismatches = entry
        item = {"workload": workload, "session": session_id, "log": log.to_dict()}
        item.update(records=[r.to_dict() for r in records], mismatches=[m.to_dict() for m in mismatches])
        self._write(item)

    def _write(self, item: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(item, separators=(",", ":")) + "\n")
            out.flush()
            os.fsync(out.fileno())

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
