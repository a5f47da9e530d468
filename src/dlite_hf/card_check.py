"""Checks of a model card: its front matter, its sections, and that every number of its results table is labelled as
the paper's figures or traceable to the bench result it names (`dlite-hf card --check`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .cards import PAPER_LABEL, REQUIRED_SECTIONS
from .defaults import repo_root

__all__ = ["check_card", "numbers_in"]

_SOURCE = re.compile(r"Source:\s*`([^`]+)`")
# A number as printed in a table cell: digits not glued to a word (so "Qwen3" and "K7" are not numbers), optional
# thousands separators, optional decimals.
_CELL_NUMBER = re.compile(r"(?<![\w.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_FILE_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def numbers_in(text: str) -> list[str]:
    """The numbers of a markdown table cell, as printed (thousands separators removed)."""
    return [match.replace(",", "") for match in _CELL_NUMBER.findall(text)]


def _traceable(number: str, file_numbers: list[float]) -> bool:
    """True if some number of the source file, rounded to ``number``'s decimals, equals it."""
    decimals = len(number.split(".")[1]) if "." in number else 0
    value = float(number)
    return any(abs(round(x, decimals) - value) < 10 ** (-decimals) / 2 for x in file_numbers)


def _section(text: str, heading: str) -> str:
    start = text.find(heading + "\n")
    if start < 0:
        return ""
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


def _tables(section: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """``(text before the table, header cells, body rows as cells)`` for every markdown table in ``section``."""
    tables, before, current = [], [], []
    for line in [*section.splitlines(), ""]:  # the empty line closes a table that ends the section
        if line.lstrip().startswith("|"):
            current.append([cell.strip() for cell in line.strip().strip("|").split("|")])
            continue
        if current:
            tables.append(("\n".join(before), current[0], current[2:]))  # current[1] is the separator
            before, current = [], []
        before.append(line)
    return tables


def _keyed_rows(document: Any) -> list[dict[str, Any]]:
    """Every JSON object in ``document`` that has a workload and a method (bench summary rows, records, rows)."""
    found = []
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "workload" in item and "method" in item:
                found.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _check_table(index: int, header: list[str], rows: list[list[str]], source: Path) -> list[str]:
    """Every number of the table must come from ``source``: from the objects of the same workload and method when
    the table has those columns and the source is JSON, else from anywhere in the file."""
    text = source.read_text(encoding="utf-8")
    everything = [float(x) for x in _FILE_NUMBER.findall(text)]
    keyed = None
    if "workload" in header and "method" in header:
        try:
            keyed = _keyed_rows(json.loads(text))
        except ValueError:
            keyed = None
    problems = []
    for row in rows:
        cells = dict(zip(header, row))
        pool = everything
        if keyed is not None:
            same = [
                r for r in keyed if str(r["workload"]) == cells["workload"] and str(r["method"]) == cells["method"]
            ]
            if not same:
                problems.append(
                    f"results table {index}: no object with workload {cells['workload']!r} and method "
                    f"{cells['method']!r} in {source}"
                )
                continue
            pool = [float(x) for x in _FILE_NUMBER.findall(json.dumps(same))]
        for cell in row:
            for number in numbers_in(cell):
                if not _traceable(number, pool):
                    where = f"{cells.get('workload')}/{cells.get('method')} in " if keyed is not None else ""
                    problems.append(f"results table {index}: {number} (cell {cell!r}) is not in {where}{source}")
    return problems


def check_card(text: str, base_dir: str | Path | None = None) -> list[str]:
    """Problems of a card (empty list: valid): its front matter (``ModelCard``: library_name transformers,
    base_model, pipeline_tag, license, tags), the ``REQUIRED_SECTIONS``, and every results table labelled as the
    paper's figures or naming a source file (``Source: `PATH` ``, relative to ``base_dir``, by default the repository
    root then the working directory) that holds each of its numbers as printed (see :func:`_check_table`).
    """
    from huggingface_hub import ModelCard

    problems = []
    try:
        data = ModelCard(text).data.to_dict()
    except ValueError as error:
        return [f"front matter does not parse: {error}"]
    if data.get("library_name") != "transformers":
        problems.append(f"library_name is {data.get('library_name')!r}, expected 'transformers'")
    for key in ("base_model", "pipeline_tag", "license", "tags"):
        if not data.get(key):
            problems.append(f"front matter lacks {key}")
    for heading in REQUIRED_SECTIONS:
        if heading + "\n" not in text:
            problems.append(f"missing section {heading!r}")
    bases = [Path(base_dir)] if base_dir is not None else [repo_root(), Path.cwd()]
    for index, (before, header, rows) in enumerate(_tables(_section(text, "## Results")), 1):
        if PAPER_LABEL in before:
            continue
        sources = _SOURCE.findall(before)
        if not sources:
            problems.append(f"results table {index} is neither labelled as the paper's figures nor names a source")
            continue
        named = Path(sources[-1])
        candidates = [named] if named.is_absolute() else [base / named for base in bases]
        source = next((c for c in candidates if c.is_file()), None)
        if source is None:
            problems.append(f"results table {index}: source file {named} does not exist (looked in {bases})")
            continue
        problems += _check_table(index, header, rows, source)
    return problems
