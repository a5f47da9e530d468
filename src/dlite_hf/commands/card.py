"""`dlite-hf card`: render a drafter's model card from its checkpoint and a bench result, and check cards.

    dlite-hf card --checkpoint drafters/dlite-smollm2-135m --bench-result benchmarks/results/RUN.json \\
        --repo-id ORG/dlite-smollm2-135m --out hub_cards/dlite-smollm2-135m.md
    dlite-hf card --check hub_cards/*.md

--bench-result: the JSON `dlite-hf bench` writes (its ``summary`` rows), or a list of rows (or ``{"rows": [...]}``),
each ``{"workload", "method", "tau", "speedup"}`` plus optional ``prompts``, ``tok_s`` and ``lossless``. The card
cites that file as the source of its results table, every number there its value rounded (``check_card`` checks).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from ..attention import PACKED_GQA_SDPA
from ..bench.results import BenchResult, RunMeta, SummaryRow, parse_result
from ..cards import check_card, render_model_card
from ..defaults import repo_root
from ..modeling.configuration_dlite import DLiteConfig
from .common import add_command

# Registry names of dlite-hf's local targets -> the Hub repositories they were converted from (the card's base_model).
HUB_IDS = {
    "smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "qwen2.5-coder-0.5b": "Qwen/Qwen2.5-Coder-0.5B-Instruct",
}
_CARD_COLUMNS = ("workload", "method", "prompts", "tau", "tok/s", "speedup", "lossless")


def add_card_parser(sub: argparse._SubParsersAction) -> None:
    summary = "Render a drafter's model card from its checkpoint and a bench result (or --check cards)."
    parser = add_command(sub, "card", summary, cmd_card, __doc__)
    parser.add_argument("--checkpoint", help="drafter folder (config.json, model.safetensors, dlite_training.json)")
    parser.add_argument("--bench-result", default=None, help="bench result JSON (see above); its path is cited")
    parser.add_argument("--repo-id", default=None, help="Hub repository of the drafter, e.g. ORG/dlite-smollm2-135m")
    parser.add_argument("--base-model", default=None, help="Hub id of the target (default: from the config)")
    parser.add_argument("--title", default=None)
    parser.add_argument("--license", default="apache-2.0")
    parser.add_argument("--methods", default=None, help="comma-separated methods to keep (default: all rows)")
    parser.add_argument("--limit", action="append", default=[], help="an extra line for Limits (repeatable)")
    parser.add_argument("--out", default=None, help="output file (default: CHECKPOINT/README.md; '-' = stdout)")
    parser.add_argument("--check", nargs="+", metavar="CARD", help="only check these cards; exit 1 on a problem")


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
    if problems := check_card(card):
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


def read_bench_result(document: Any, source: str = "the bench result") -> BenchResult:
    """A ``--bench-result`` document (either format above) as a :class:`BenchResult`; ``ValueError`` otherwise."""
    if isinstance(document, dict) and "summary" in document:
        return parse_result(document, source)
    if isinstance(document, list):
        document = {"rows": document}
    if not (isinstance(document, dict) and "rows" in document):
        raise ValueError(
            "The bench result must be the JSON `dlite-hf bench` writes (with a `summary` list), a list of rows, or "
            '{"rows": [...]}; each row needs workload, method, tau (or mean_tau) and speedup.'
        )
    summary = []
    for index, row in enumerate(document["rows"]):
        tau = row.get("tau", row.get("mean_tau")) if isinstance(row, dict) else None
        if tau is None or any(row.get(k) is None for k in ("workload", "method", "speedup")):
            raise ValueError(f"Bench row {index} is {row!r}: expected a dict with workload, method, tau and speedup.")
        fields = {k: v for k, v in row.items() if k != "tau"}
        summary.append(SummaryRow.from_dict({**fields, "mean_tau": tau}, f"bench row {index}"))
    return BenchResult(meta=RunMeta.from_dict(document.get("meta", {}), "meta"), summary=summary)


def bench_rows(result: BenchResult, methods: list[str] | None = None) -> list[dict[str, Any]]:
    """Card rows (display strings) from a bench result's summary rows, of ``methods`` (None: all); at least one."""
    rows = []
    for row in result.summary:
        if methods and row.method not in methods:
            continue
        out = {"workload": str(row.workload), "method": str(row.method)}
        if row.prompts is not None:
            out["prompts"] = str(int(row.prompts))
        out["tau"] = f"{float(row.mean_tau):.2f}"
        if row.tok_s is not None:
            out["tok/s"] = f"{float(row.tok_s):.2f}"
        out["speedup"] = f"{float(row.speedup):.2f}x"
        if row.lossless is not None:
            out["lossless"] = "yes" if row.lossless else "**NO**"
        rows.append(out)
    if not rows:
        raise ValueError("The bench result has no rows" + (f" for methods {methods}." if methods else "."))
    return rows


def _num_parameters(checkpoint: Path) -> int | None:
    """Drafter parameters counted from the safetensors header; integer tensors (the draft vocabulary) are buffers."""
    weights = checkpoint / "model.safetensors"
    if not weights.is_file():
        return None
    from safetensors import safe_open

    with safe_open(str(weights), framework="pt") as handle:
        slices = [handle.get_slice(key) for key in handle.keys()]
        return sum(math.prod(s.get_shape()) for s in slices if s.get_dtype().startswith(("F", "BF")))


def card_from_checkpoint(
    checkpoint: str | Path,
    bench_result: str | Path | None = None,
    *,
    base_model: str | None = None,
    methods: list[str] | None = None,
    **card: Any,
) -> str:
    """The card of the drafter in ``checkpoint``, the rows of ``bench_result`` (of ``methods``) as its results table;
    ``card``: more keywords of :func:`render_model_card` (``repo_id``, ``title``, ``license``, ``extra_limits``)."""
    checkpoint = Path(checkpoint)
    if not (checkpoint / "config.json").is_file():
        raise FileNotFoundError(f"No config.json in {checkpoint}: pass a drafter folder saved by `dlite-hf train`.")
    config = DLiteConfig.from_pretrained(checkpoint)
    target = (config.target_model or {}).get("name_or_path") or ""
    if (checkpoint / "dlite_training.json").is_file():
        card["training"] = json.loads((checkpoint / "dlite_training.json").read_text(encoding="utf-8"))
    if bench_result is not None:
        path = Path(bench_result)
        document = json.loads(path.read_text(encoding="utf-8"))
        result = read_bench_result(document, str(path))
        rows = bench_rows(result, methods)
        card.update(_measured_mode(result, path), results=rows)
        card["results_columns"] = [c for c in _CARD_COLUMNS if any(c in r for r in rows)]
        if isinstance(document, dict) and "summary" in document:  # a row list compares no decodings
            card["fastest"] = fastest_decoding(result)
    base_model = base_model or HUB_IDS.get(target) or target or None
    return render_model_card(config, base_model=base_model, num_parameters=_num_parameters(checkpoint), **card)


def _measured_mode(result: BenchResult, path: Path) -> dict[str, str | None]:
    """How a bench result's numbers were measured (dtype, attention) and where (the source line)."""
    meta = result.meta
    shown = str(path)
    for base in (repo_root(), Path.cwd()):  # the path relative to the checkout (or the working directory)
        if path.resolve().is_relative_to(base):
            shown = str(path.resolve().relative_to(base))
            break
    source = f"`{shown}`" + (f", written by `{meta.command}`" if meta.command else "")
    machine = meta.machine
    if machine is not None and machine.cpu:  # speedups are ratios on one CPU: another CPU gives other ratios
        cores = f", {machine.cpu_count} cores" if machine.cpu_count else ""
        source += f", on {machine.cpu}{cores}, {meta.value_or('threads', '?')} thread(s)"
    attention = "packed_gqa" if meta.attention == PACKED_GQA_SDPA else meta.attention
    return {"dtype": meta.dtype, "attention": attention, "results_source": source}


def fastest_decoding(result: BenchResult) -> str | None:
    """``"hybrid"`` when a bench result's ``all`` row has the hybrid faster than the drafter alone, ``"dlite"``
    when the drafter alone was faster, None when the result does not compare the two."""
    speed = {r.method: r.speedup for r in result.summary if r.workload == "all"}
    if speed.get("hybrid") is None or speed.get("dlite") is None:
        return None
    return "hybrid" if speed["hybrid"] > speed["dlite"] else "dlite"
