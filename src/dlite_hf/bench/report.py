"""Summaries, the markdown table and the files of a benchmark run, from its typed results (:mod:`.results`), and
the subcommands that work on a results document after the run: `dlite-hf bench report` (the summary, goals, table
and plots recomputed from the stored records, re-timing nothing), `goals` (:mod:`.goals`) and `tables` (the
README's speed tables: plain's tokens/s, then `mean tau / speedup` per method, the fastest in bold;
`tests/test_readme_figures.py` checks the README against them)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..commands.common import exit_on_error
from .goals import evaluate_goals
from .plots import write_plots
from .results import BenchResult, Goal, Machine, ResultsError, RunMeta, SummaryRow, as_parts, as_result, load_result
from .summary import CONTEXT_STARTS, context_rows, summarize

RESULTS = Path("benchmarks") / "results"  # where `dlite-hf bench` writes by default (--out)
README_METHODS = ("prompt_lookup", "dlite", "dlite_fixed", "hybrid")  # the SmolLM2 tables' columns
QWEN_METHODS = ("prompt_lookup", "assisted", "dlite", "dlite_fixed", "hybrid")  # SmolLM2's columns and assisted
CONTEXT_METHODS = ("prompt_lookup", "assisted", "dlite", "hybrid")
_ALIGN = "\n|---|---:|---:|---:|---:|---:|"  # the second line of a README table of six columns
_DLITE_COLUMNS = "| DLite (shipped) | DLite, K every round | **hybrid** |"
README_HEADER = "| workload | plain tok/s | prompt lookup " + _DLITE_COLUMNS + _ALIGN
QWEN_HEADER = "| workload | plain tok/s | prompt lookup | assisted (SmolLM2-135M) " + _DLITE_COLUMNS + _ALIGN + "---:|"
# the long-session table: the turns by context bucket (summary.context_rows), each cell tau / decode speedup (with a
# prefix cache plain and DLite prefill a turn's new tokens only, prompt lookup and assisted the whole context)
_CONTEXT_COLUMNS = "| prompt lookup | assisted (SmolLM2-135M) | DLite | **hybrid** |"
CONTEXT_HEADER = "| context (turns) | plain ms/token " + _CONTEXT_COLUMNS + _ALIGN
# README label of each workload (a `{n}` is the row's prompt count)
README_LABELS: dict[str, dict[str, str]] = {
    "main": {
        "chat": "chat (MT-bench)",
        "code": "code (HumanEval)",
        "math": "math (ASDiv)",
        "tool": "tool (BFCL)",
        "agentic": "agentic (ToolTalk, coding session; {n} turns)",
        "long-1024": "long 1k (essays)",
        "long-4096": "long 4k",
        "all": "all ({n})",
    },
    "context": {label: label.removeprefix("ctx ") + " ({n})" for label in CONTEXT_STARTS},
    "ood": {
        "legal": "legal (MultiLexSum)",
        "clinical": "clinical (MTS-Dialog)",
        "long-1024": "long 1k (essays; this run)",
        "all": "all ({n})",
    },
}
README_LABELS["qwen"] = README_LABELS["main"]
# each README table: (header, the methods of its columns, the speedup field of its cells)
README_TABLES = {
    "main": (README_HEADER, README_METHODS, "speedup"),
    "ood": (README_HEADER, README_METHODS, "speedup"),
    "qwen": (QWEN_HEADER, QWEN_METHODS, "speedup"),
    "context": (CONTEXT_HEADER, CONTEXT_METHODS, "decode_speedup"),
}


def _fmt(value: Any, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _lossless_cell(row: SummaryRow) -> str:
    failures = row.value_or("lossless_failures", row.mismatches)
    if failures:
        return f"**NO ({failures}/{row.prompts})**"
    if row.method == "plain" or not row.mismatches:
        return "yes"
    return f"near-ties ({row.mismatches}/{row.prompts} differ)"


def _setup_lines(meta: RunMeta) -> list[str]:
    """The table's heading and the run's setup, one bullet per line."""
    machine = meta.machine if meta.machine is not None else Machine(_keys=())
    exactness, cache, repeats, resumed = " (token-exact)", "", "", ""
    gqa = "yes" if meta.sdpa_force_gqa else "no"
    if meta.near_tie_epsilon:
        exactness = (
            " (near-tie-exact: a divergence from plain passes only if float32 re-scoring shows a top-2 margin below "
            f"epsilon = {meta.near_tie_epsilon} logits, `dlite_hf.neartie`)"
        )
    if meta.prefix_cache:
        cache = "; prefix cache across the turns of a session (each method keeps its KV cache: a turn prefills only"
        cache += " its new tokens)"
    if meta.repeats > 1:
        repeats = f"; every turn measured {meta.repeats} times with every method (interleaved, each from the same "
        repeats += "state), the fastest repeat kept; method order rotated by one per turn"
    if meta.extra.get("resumed_sessions"):
        resumed = " (this invocation; sessions measured by an earlier one, killed, from the journal: "
        resumed += f"{meta.extra['resumed_sessions']})"
    return [
        f"# Benchmark: {meta.value_or('target', '?')}",
        "",
        f"- command: `{meta.value_or('command', '(Python API)')}`",
        f"- machine: {machine.value_or('cpu', '?')}, {machine.value_or('cpu_count', '?')} CPUs, "
        f"{machine.value_or('memory_gb', '?')} GB; load average at start {machine.load_average_at_start}",
        f"- dtype {meta.dtype}{exactness}",
        f"- attention {meta.attention}{cache}{'; the target on weights packed once' if meta.pack_weights else ''}",
        f"- threads {meta.threads}, SDPA GQA forced (TRANSFORMERS_SDPA_FORCE_GQA) {gqa}, torch {meta.torch}, "
        f"transformers {meta.transformers}, dlite-hf {meta.dlite_hf}, python {meta.python}",
        f"- greedy, max_new_tokens {meta.max_new_tokens}; started {meta.started_utc}, "
        f"took {_fmt(meta.duration_s, '.0f')} s{repeats}{resumed}",
        "- speedup = the method's tokens/s / plain's, over the same prompts in this run (prefill included; with"
        " identical outputs, plain's wall time / the method's); decode speedup excludes the prefill forward;"
        " tau = new tokens / target forwards (plain = 1);"
        " drafter ms/round = drafting time / drafting calls (rounds the drafter ran, skipped ones included)",
    ]


def _summary_lines(summary: Sequence[SummaryRow]) -> list[str]:
    header = [
        "| workload | method | prompts | prompt tokens | mean tau | tok/s | speedup | decode speedup "
        "| drafter ms/round | target ms/round | drafter share | lossless |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    return header + [
        f"| {row.workload} | {row.method} | {row.prompts} | {row.mean_prompt_tokens:.0f} "
        f"| {row.mean_tau:.2f} | {row.tok_s:.2f} | {row.speedup:.2f}x | {row.decode_speedup:.2f}x "
        f"| {_fmt(row.drafter_ms_per_round, '.1f')} | {_fmt(row.target_ms_per_round, '.1f')} "
        f"| {_fmt(row.drafter_share, '.0%')} | {_lossless_cell(row)} |"
        for row in summary
    ]


def _check_lines(result: BenchResult) -> list[str]:
    """The lossless failures, then every divergence of a reduced-precision run (empty when there are none)."""
    lines = []
    if result.mismatches:
        lines += ["", f"**{len(result.mismatches)} greedy output(s) differ from plain:**", ""]
        lines += [
            f"- {m.method} on {m.workload} {m.prompt_id}: first difference at new token {m.first_mismatch}"
            for m in result.mismatches
        ]
    if result.divergences:
        count = len(result.divergences)
        lines += ["", f"{count} output(s) diverge from plain; each divergence re-scored in float32:", ""]
        lines += ["| method | workload | prompt | first divergence | top-2 margin | max gap after | ok |"]
        lines += ["|---|---|---|---:|---:|---:|---|"]
        lines += [
            f"| {d.method} | {d.workload} | {d.prompt_id} | {d.first_mismatch} "
            f"| {_fmt(d.top2_margin, '.3f')} | {_fmt(d.max_gap, '.3f')} | {'yes' if d.ok else '**NO**'} |"
            for d in result.divergences
        ]
    return lines


def _session_lines(result: BenchResult) -> list[str]:
    agentic = [s for s in result.sessions if s.turns_measured > 1]
    if not agentic:
        return []
    lines = ["", "Multi-turn sessions:", "", "| session | turns measured | last context tokens | stopped by |"]
    lines.append("|---|---:|---:|---|")
    return lines + [
        f"| {s.id} | {s.turns_measured}/{s.turns_available} | {s.last_context_tokens} | {s.stop_reason} |"
        for s in agentic
    ]


def _context_lines(result: BenchResult) -> list[str]:
    """The multi-turn sessions' turns by context length (:func:`~.summary.context_rows`), when they span two or
    more buckets."""
    rows = context_rows(result.records, list(result.methods))
    if len({row.workload for row in rows}) < 2:
        return []
    heading = "By context length (the turns of the multi-turn sessions, bucketed by their prompt tokens):"
    return ["", heading, "", *_summary_lines(rows)]


def markdown_table(result: BenchResult | Mapping[str, Any]) -> str:
    """The run as markdown: setup lines, then one row per workload x method, the checks, goals and sessions."""
    result = as_result(result)
    lines = [*_setup_lines(result.meta), "", *_summary_lines(result.summary), *_check_lines(result)]
    if result.goals:
        lines += ["", "Performance goals (from this run's rows; `dlite-hf bench goals`):", ""]
        lines += goals_markdown(result.goals)
    lines += _session_lines(result) + _context_lines(result)
    return "\n".join(lines) + "\n"


def write_outputs(
    result: BenchResult | Mapping[str, Any], out_dir: str | Path, name: str | None = None, plots: bool = False
) -> dict[str, Path]:
    """Write ``<name>.json`` and ``<name>.md`` (with `plots`, also ``<name>_<plot>.png``) into ``out_dir`` and
    record them in the document (``files``); returns {kind: path}."""
    result = as_result(result)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = name or "bench-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    files: dict[str, Path] = {"json": out / f"{name}.json", "markdown": out / f"{name}.md"}
    if plots:
        files.update({f"plot_{k}": v for k, v in write_plots(result, out / name).items()})
    result.files = {k: str(v) for k, v in files.items()}
    _save(result, files["json"])
    return files


def _save(result: BenchResult, path: Path) -> None:
    """Write ``result`` to ``path`` and its table beside it (``NAME.md``)."""
    path.write_text(json.dumps(result.to_dict(), indent=1) + "\n", encoding="utf-8")
    path.with_suffix(".md").write_text(markdown_table(result), encoding="utf-8")


def goals_markdown(goals: Sequence[Goal | Mapping[str, Any]]) -> list[str]:
    """Markdown lines: one table row per goal (as `dlite-hf bench goals` adds them)."""
    verdict = {True: "met", False: "**not met**", None: "not measured"}
    lines = ["| goal | result | measured |", "|---|---|---|"]
    lines += [f"| {g.goal} | {verdict[g.met]} | {g.measured} |" for g in as_parts(goals, Goal, "goals")]
    return lines


def add_postprocess_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``report``, ``goals`` and ``tables`` under `dlite-hf bench`."""
    report = sub.add_parser("report", help="recompute results documents' summaries from their records")
    report.add_argument("--plot", action="store_true", help="also redraw the PNG plots beside each document")
    goals = sub.add_parser("goals", help="add the benchmark's performance goals to results documents")
    for parser, func in ((report, cmd_report), (goals, cmd_goals)):
        parser.add_argument("results", nargs="+", help="NAME.json files written by `dlite-hf bench --out DIR`")
        parser.set_defaults(func=func)
    tables = sub.add_parser("tables", help="print a README speed table from a results document")
    tables.add_argument("table", choices=tuple(README_LABELS))
    tables.add_argument("run", help="a run name in --results (or a path to its JSON)")
    tables.add_argument("--results", default=str(RESULTS), help="the folder of the run names")
    tables.set_defaults(func=cmd_tables)


def cmd_report(args: argparse.Namespace) -> int:
    """Rewrite each results document: its summary from its records, its goals if it has some, its table (with
    --plot, its PNGs)."""
    for name in args.results:
        path = Path(name)
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise SystemExit(f"{path}: not a readable results document ({error}).") from None
        if not isinstance(document, dict) or "records" not in document or "workloads" not in document:
            raise SystemExit(f"{path}: not a `dlite-hf bench` results document (it has no records or workloads).")
        document["summary"] = summarize(document["records"], list(document["methods"]), list(document["workloads"]))
        if "goals" in document:
            context = context_rows(document["records"], list(document["methods"]))
            document["goals"] = evaluate_goals(document["summary"], context)
        write_outputs(document, path.parent, path.stem, plots=args.plot)
        print(f"{name}: summary recomputed")
    return 0


def cmd_goals(args: argparse.Namespace) -> int:
    """Evaluate the goals on each results document, store them in it and re-render its table."""
    for name in args.results:
        path = Path(name)
        try:
            result = load_result(path)
        except ResultsError as error:
            raise SystemExit(str(error)) from None
        except OSError as error:
            raise SystemExit(
                f"{path}: not a `dlite-hf bench` results document ({error!r}); pass NAME.json of a run."
            ) from None
        goals = evaluate_goals(result.summary, context_rows(result.records, list(result.methods)))
        result.goals = [Goal.from_dict(goal, "goals") for goal in goals]
        _save(result, path)
        print(f"{name}:", *goals_markdown(goals), sep="\n")
    return 0


def cmd_tables(args: argparse.Namespace) -> int:
    with exit_on_error("", OSError, ValueError):
        rendered = readme_rows(load_run(args.run, args.results), args.table)
    print(README_TABLES[args.table][0])  # the table's header
    print("\n".join(rendered.values()))
    return 0


def load_run(run: str, results: str | Path = RESULTS) -> BenchResult:
    """A result document by run name (`RESULTS/RUN.json`) or path, typed and checked."""
    path = Path(run) if run.endswith(".json") else Path(results) / f"{run}.json"  # names may hold dots (qwen2.5-...)
    if not path.is_file():
        raise FileNotFoundError(f"No bench result {path}: pass a run name from {results}/ or a JSON path.")
    return load_result(path)


def readme_rows(result: BenchResult | Mapping[str, Any], table: str) -> dict[str, str]:
    """`{workload: README row}` of `table` ("main", "ood", "qwen" or "context") for the workloads (context buckets)
    the run measured."""
    if table not in README_LABELS:
        raise ValueError(f"table={table!r}: expected one of {sorted(README_LABELS)}.")
    result = as_result(result)
    if table == "context":
        summary = {(r.workload, r.method): r for r in context_rows(result.records, list(result.methods))}
        if not summary:
            raise ValueError(
                "The run has no multi-turn session: table context buckets their turns; pass an agentic run."
            )
    else:
        summary = result.rows_by_key()
    measured = {method for _, method in summary}
    _, columns, speed = README_TABLES[table]
    missing = [m for m in columns if m not in measured]
    if missing:
        raise ValueError(f"The run has no {', '.join(missing)} rows; table {table} compares {', '.join(columns)}.")
    out = {}
    for workload, label in README_LABELS[table].items():
        if (workload, "plain") not in summary:
            continue
        methods = [summary[(workload, m)] for m in columns]
        fastest = max(range(len(methods)), key=lambda index: getattr(methods[index], speed))
        cells = [
            f"{s.mean_tau:.2f} / " + ("**{:.2f}x**" if index == fastest else "{:.2f}x").format(getattr(s, speed))
            for index, s in enumerate(methods)
        ]
        plain = summary[(workload, "plain")]
        first = f"{plain.target_ms_per_round:.0f}" if table == "context" else f"{plain.tok_s:.2f}"
        out[workload] = f"| {label.format(n=plain.prompts)} | {first} | " + " | ".join(cells) + " |"
    if not out:
        raise ValueError(
            f"The run has none of table {table}'s rows ({', '.join(README_LABELS[table])}): it measured no such "
            "workloads."
        )
    return out
