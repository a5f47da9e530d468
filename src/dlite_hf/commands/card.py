"""`dlite-hf card`: render a drafter's model card from its checkpoint and a bench result, and check cards.

    dlite-hf card --checkpoint drafters/dlite-smollm2-135m --bench-result benchmarks/results/RUN.json \\
        --repo-id ORG/dlite-smollm2-135m --out hub_cards/dlite-smollm2-135m.md
    dlite-hf card --check hub_cards/*.md

Bench result formats accepted by ``--bench-result`` (JSON):

1. the document ``dlite-hf bench`` writes (``benchmarks/README.md``): its ``summary`` rows are used
   (``workload``, ``method``, ``prompts``, ``mean_tau``, ``tok_s``, ``speedup``, ``lossless``);
2. a plain list of rows, or ``{"rows": [...]}``, each row ``{"workload": str, "method": str, "tau": float,
   "speedup": float}`` plus optionally ``prompts`` (int), ``tok_s`` (float) and ``lossless`` (bool).

The card names the file as the source of every number in its results table, and every number there is that
file's value rounded for display (``check_card`` verifies it). Figures quoted from the paper belong in a table
labelled as the paper's (``render_model_card(..., results_are_paper=True)``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from ..bench.results import BenchResult, RunMeta, SummaryRow, parse_result

__all__ = [
    "HUB_IDS",
    "PAPER_LABEL",
    "add_card_parser",
    "bench_rows",
    "card_from_checkpoint",
    "check_card",
    "fastest_decoding",
    "numbers_in",
    "read_bench_result",
]

# Registry names of dlite-hf's local targets -> the Hub repositories they were converted from (the card's base_model).
HUB_IDS = {
    "smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "qwen2.5-coder-0.5b": "Qwen/Qwen2.5-Coder-0.5B-Instruct",
}
PAPER_LABEL = "reported in the DLite paper"  # the phrase render_model_card puts above a paper-figures table
_SOURCE = re.compile(r"Source:\s*`([^`]+)`")
# A number as printed in a table cell: digits not glued to a word (so "Qwen3" and "K7" are not numbers), optional
# thousands separators, optional decimals.
_CELL_NUMBER = re.compile(r"(?<![\w.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_FILE_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_CARD_COLUMNS = ("workload", "method", "prompts", "tau", "tok/s", "speedup", "lossless")


# --------------------------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------------------------


def read_bench_result(document: Any, source: str = "the bench result") -> BenchResult:
    """A ``--bench-result`` document in either accepted format (see the module docstring), typed: the document
    ``dlite-hf bench`` writes is read with :func:`dlite_hf.bench.results.parse_result`; a list of rows (or
    ``{"rows": [...]}``) becomes a result whose summary is those rows.

    Raises:
        ValueError: the structure is neither format, or a row lacks workload, method, tau or speedup.
    """
    if isinstance(document, dict) and "summary" in document:
        return parse_result(document, source)
    meta = {}
    if isinstance(document, dict) and "rows" in document:
        rows, meta = document["rows"], document.get("meta", {})
    elif isinstance(document, list):
        rows = document
    else:
        raise ValueError(
            "The bench result must be the JSON `dlite-hf bench` writes (with a `summary` list), a list of rows, or "
            '{"rows": [...]}; each row needs workload, method, tau (or mean_tau) and speedup.'
        )
    summary = [_simple_row(i, row) for i, row in enumerate(rows)]
    return BenchResult(meta=RunMeta.from_dict(meta, "meta"), summary=summary)


def _simple_row(index: int, row: Any) -> SummaryRow:
    """A row of the simple format (``tau`` or ``mean_tau``) as a summary row."""
    tau = row.get("tau", row.get("mean_tau")) if isinstance(row, dict) else None
    if not isinstance(row, dict) or any(row.get(k) is None for k in ("workload", "method", "speedup")) or tau is None:
        raise ValueError(f"Bench row {index} is {row!r}: expected a dict with workload, method, tau and speedup.")
    fields = {k: v for k, v in row.items() if k != "tau"}
    return SummaryRow.from_dict({**fields, "mean_tau": tau}, f"bench row {index}")


def bench_rows(result: BenchResult, methods: list[str] | None = None) -> list[dict[str, Any]]:
    """Card rows (display strings) from a bench result's summary rows (:func:`read_bench_result` reads a file's).

    Raises:
        ValueError: no row (of ``methods``).
    """
    rows = [_card_row(row) for row in result.summary if not methods or row.method in methods]
    if not rows:
        raise ValueError("The bench result has no rows" + (f" for methods {methods}." if methods else "."))
    return rows


def _card_row(row: SummaryRow) -> dict[str, str]:
    out = {"workload": str(row.workload), "method": str(row.method)}
    if row.prompts is not None:
        out["prompts"] = str(int(row.prompts))
    out["tau"] = f"{float(row.mean_tau):.2f}"
    if row.tok_s is not None:
        out["tok/s"] = f"{float(row.tok_s):.2f}"
    out["speedup"] = f"{float(row.speedup):.2f}x"
    if row.lossless is not None:
        out["lossless"] = "yes" if row.lossless else "**NO**"
    return out


def _display_path(path: Path) -> str:
    """``path`` relative to the repository root (or the working directory) when it lies inside it."""
    resolved = path.resolve()
    for base in (Path(__file__).resolve().parents[2], Path.cwd()):
        try:
            return str(resolved.relative_to(base))
        except ValueError:
            continue
    return str(path)


def _num_parameters(checkpoint: Path) -> int | None:
    """Drafter parameters counted from the safetensors header (no weights loaded); integer tensors are buffers
    (the draft vocabulary's token ids), not parameters."""
    weights = checkpoint / "model.safetensors"
    if not weights.is_file():
        return None
    from safetensors import safe_open

    total = 0
    with safe_open(str(weights), framework="pt") as handle:
        for key in handle.keys():
            tensor = handle.get_slice(key)
            if not tensor.get_dtype().startswith(("F", "BF")):
                continue
            shape = tensor.get_shape()
            count = 1
            for dim in shape:
                count *= int(dim)
            total += count
    return total


def card_from_checkpoint(
    checkpoint: str | Path,
    bench_result: str | Path | None = None,
    *,
    repo_id: str | None = None,
    base_model: str | None = None,
    title: str | None = None,
    license: str = "apache-2.0",
    methods: list[str] | None = None,
    extra_limits: list[str] | None = None,
) -> str:
    """The card of the drafter in ``checkpoint`` (its config.json, dlite_training.json, weights header), with the
    rows of ``bench_result`` as its results table."""
    from ..cards import render_model_card
    from ..modeling.configuration_dlite import DLiteConfig

    checkpoint = Path(checkpoint)
    if not (checkpoint / "config.json").is_file():
        raise FileNotFoundError(f"No config.json in {checkpoint}: pass a drafter folder saved by `dlite-hf train`.")
    config = DLiteConfig.from_pretrained(checkpoint)
    target = (config.target_model or {}).get("name_or_path") or ""
    base_model = base_model or HUB_IDS.get(target) or target or None
    training = None
    training_file = checkpoint / "dlite_training.json"
    if training_file.is_file():
        training = json.loads(training_file.read_text(encoding="utf-8"))
    results = source = fastest = dtype = attention = None
    if bench_result is not None:
        path = Path(bench_result)
        document = json.loads(path.read_text(encoding="utf-8"))
        result = read_bench_result(document, str(path))
        results = bench_rows(result, methods)
        if isinstance(document, dict) and "summary" in document:  # a row list compares no decodings
            fastest = fastest_decoding(result)
        dtype, attention, source = _measured_mode(result, path)
    return render_model_card(
        config,
        base_model=base_model,
        repo_id=repo_id,
        title=title,
        license=license,
        training=training,
        results=results,
        results_columns=[c for c in _CARD_COLUMNS if results and any(c in r for r in results)] or None,
        results_source=source,
        num_parameters=_num_parameters(checkpoint),
        extra_limits=extra_limits,
        fastest=fastest,
        dtype=dtype,
        attention=attention,
    )


def _measured_mode(result: BenchResult, path: Path) -> tuple[str | None, str | None, str]:
    """(dtype, attention, the source line) of a bench result: how its numbers were measured, and where."""
    from ..attention import PACKED_GQA_SDPA

    meta = result.meta
    attention = "packed_gqa" if meta.attention == PACKED_GQA_SDPA else meta.attention
    source = f"`{_display_path(path)}`" + (f", written by `{meta.command}`" if meta.command else "")
    machine = meta.machine
    if machine is not None and machine.cpu:  # speedups are ratios on one CPU: another CPU gives other ratios
        cores = f", {machine.cpu_count} cores" if machine.cpu_count else ""
        source += f", on {machine.cpu}{cores}, {meta.value_or('threads', '?')} thread(s)"
    return meta.dtype, attention, source


def fastest_decoding(result: BenchResult) -> str | None:
    """``"hybrid"`` when a bench result's ``all`` row has the hybrid faster than the drafter alone, ``"dlite"``
    when the drafter alone was faster, None when the result does not compare the two."""
    speed = {r.method: r.speedup for r in result.summary if r.workload == "all"}
    if speed.get("hybrid") is None or speed.get("dlite") is None:
        return None
    return "hybrid" if speed["hybrid"] > speed["dlite"] else "dlite"


# --------------------------------------------------------------------------------------------------------------
# Checking
# --------------------------------------------------------------------------------------------------------------


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
    tables, before, current = [], [], None

    def close() -> None:
        tables.append(("\n".join(before), current[0], current[2:]))  # current[1] is the separator

    for line in section.splitlines():
        if line.lstrip().startswith("|"):
            if current is None:
                current = []
            current.append([cell.strip() for cell in line.strip().strip("|").split("|")])
            continue
        if current is not None:
            close()
            before, current = [], None
        before.append(line)
    if current is not None:
        close()
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
    """Problems of a card (empty list: valid).

    Checks: the front matter parses with huggingface_hub's ``ModelCard`` and has library_name transformers,
    base_model, pipeline_tag, license and tags; every section of ``cards.REQUIRED_SECTIONS`` is present; every
    results table is labelled as the paper's figures, or names a source file (``Source: `PATH` ``, relative to
    ``base_dir``; by default the repository root, then the working directory) in which every number of the table
    appears (after rounding to the decimals printed; for a JSON source and a table with workload and method
    columns, in the objects of that same workload and method).
    """
    from huggingface_hub import ModelCard

    from ..cards import REQUIRED_SECTIONS

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
    bases = [Path(base_dir)] if base_dir is not None else [Path(__file__).resolve().parents[2], Path.cwd()]
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


# --------------------------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------------------------


def add_card_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `card` subcommand."""
    parser = sub.add_parser(
        "card",
        help="Render a drafter's model card from its checkpoint and a bench result (or --check cards).",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--checkpoint", help="drafter folder (config.json, model.safetensors, dlite_training.json)")
    parser.add_argument("--bench-result", default=None, help="bench result JSON (see above); its path is cited")
    parser.add_argument("--repo-id", default=None, help="Hub repository of the drafter, e.g. ORG/dlite-smollm2-135m")
    parser.add_argument("--base-model", default=None, help="Hub id of the target (default: from the config)")
    parser.add_argument("--title", default=None)
    parser.add_argument("--license", default="apache-2.0")
    parser.add_argument("--methods", default=None, help="comma-separated methods to keep (default: all rows)")
    parser.add_argument(
        "--limit", action="append", default=[], help="an extra line for the Limits section (repeatable)"
    )
    parser.add_argument("--out", default=None, help="output file (default: CHECKPOINT/README.md; '-' = stdout)")
    parser.add_argument("--check", nargs="+", metavar="CARD", help="only check these cards; exit 1 on a problem")
    parser.set_defaults(func=cmd_card)


def cmd_card(args: argparse.Namespace) -> int:
    if args.check:
        failed = 0
        for name in args.check:
            problems = check_card(Path(name).read_text(encoding="utf-8"))
            failed += bool(problems)
            print(f"{name}: " + ("ok" if not problems else "\n  " + "\n  ".join(problems)))
        return 1 if failed else 0
    if not args.checkpoint:
        raise SystemExit("dlite-hf card needs --checkpoint DIR (or --check CARD ...).")
    card = card_from_checkpoint(
        args.checkpoint,
        args.bench_result,
        repo_id=args.repo_id,
        base_model=args.base_model,
        title=args.title,
        license=args.license,
        methods=args.methods.split(",") if args.methods else None,
        extra_limits=args.limit,
    )
    problems = check_card(card)
    if problems:
        raise SystemExit("The rendered card is invalid:\n  " + "\n  ".join(problems))
    if args.out == "-":
        sys.stdout.write(card)
        return 0
    out = Path(args.out) if args.out else Path(args.checkpoint) / "README.md"
    if not args.out and out.is_symlink():  # e.g. the shipped drafter's README is a link into hub_cards/
        raise SystemExit(
            f"{out} is a link to {out.resolve()}; writing the card there would overwrite that file. Pass "
            f"--out {out.resolve()} to update it on purpose, another --out path, or --out - to print the card."
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(card, encoding="utf-8")
    print(out)
    return 0
