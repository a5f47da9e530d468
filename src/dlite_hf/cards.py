"""Model cards of DLite drafters: :func:`render_model_card` fills the package's `templates/model_card.md` (for the
trainer, `dlite-hf card` and `hub_cards/render_paper_cards.py`); :func:`check_card` checks a card's front matter, its
sections, and that every number of its results tables is the paper's (labelled so) or in the file it names as source.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard
from jinja2 import Environment, StrictUndefined

from .defaults import ATTENTION_CHOICES, repo_root
from .modeling.decoding_options import DEFAULT_LOOKUP_TOKENS

REQUIRED_SECTIONS = ("## Usage", "## Architecture", "## Training", "## Results", "## Limits", "## Citation")
PAPER_LABEL = "reported in the DLite paper"  # the phrase above a table of the paper's figures
_WINDOWS = {0: "0 (history-free)", -1: "-1 (full history: the history-aware teacher)"}
_SOURCE = re.compile(r"Source:\s*`([^`]+)`")
# A number as printed in a table cell: digits not glued to a word (so "Qwen3" and "K7" are not numbers), optional
# thousands separators, optional decimals.
_CELL_NUMBER = re.compile(r"(?<![\w.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_FILE_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


@functools.lru_cache(maxsize=1)
def _template() -> str:
    """The card template, read once per process (a long training run keeps rendering the version it started with)."""
    return resources.files("dlite_hf").joinpath("templates/model_card.md").read_text(encoding="utf-8")


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    return head + "".join("| " + " | ".join(str(row.get(c, "")) for c in columns) + " |\n" for row in rows)


def _adaptive_text(config: Any) -> str:
    confidence = getattr(config, "draft_confidence_threshold", 0.0)
    skip = getattr(config, "draft_skip_threshold", 0.0)
    if not confidence and not skip:
        return "off: K drafts every round (as in the paper)"
    parts = []
    if confidence:
        parts.append(f"a round stops drafting where the drafts' joint probability falls below {confidence:g}")
    if skip:
        parts.append(
            f"a round whose most likely first draft has probability below {skip:g} proposes nothing (a plain "
            "one-token step; pays off on CPUs, where a multi-token forward costs much more than a one-token one: pass "
            "`draft_skip_threshold=0.0` to `from_pretrained` on a GPU)"
        )
        if fallback := getattr(config, "lookup_fallback_min_match", 0):
            parts.append(f"with hybrid drafting such a round drafts a retrieved match of {fallback}+ tokens instead")
    lengths = getattr(config, "draft_lengths", None)
    if lengths and confidence:
        parts.append(
            f"an early stop ends at {', '.join(str(n) for n in lengths)} drafts (or K), the verification sizes "
            "the hardware it was tuned on is fast at"
        )
    return "; ".join(parts) + " (lossless either way)"


def _setting(value: Any) -> str:
    """A training-record value as one table cell: a nested record reads `key: value, key: value`."""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_setting(v)}" for k, v in value.items() if v is not None)
    return str(value)


def _usage_load(base_model: str, repo_id: str, dtype: str | None, attention: str | None) -> str:
    """The usage example's loading lines, in the mode the card's results were measured in."""
    if dtype not in (None, "float32", "bfloat16", "float16"):
        raise ValueError(f"dtype={dtype!r} is invalid: expected None, 'float32', 'bfloat16' or 'float16'.")
    if attention not in (None, *ATTENTION_CHOICES):
        raise ValueError(f"attention={attention!r} is invalid: expected None, 'sdpa' or 'packed_gqa'.")
    reduced = dtype not in (None, "float32")
    extra = f", dtype=torch.{dtype}" if reduced else ""
    lines = ["import torch"] if reduced else []
    if attention == "packed_gqa":
        lines.append("import dlite_hf  # without it: drop attn_implementation and pass trust_remote_code=True below")
    else:
        lines.append("import dlite_hf  # or pass trust_remote_code=True below, without installing dlite-hf")
    lines += ["from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer", ""]
    if dtype == "bfloat16":  # the Results' mode; on a CPU that emulates bfloat16 it is the slow one
        lines.append("# bfloat16 on a GPU or a CPU with AVX512-BF16 or AMX; elsewhere torch.float32 is faster")
    if attention == "packed_gqa":
        lines += [
            "# dlite_hf.attention: SDPA with grouped-query heads packed into rows, the attention of the Results",
            f'target = AutoModelForCausalLM.from_pretrained(\n    "{base_model}"{extra}, '
            "attn_implementation=dlite_hf.attention.register()\n)",
        ]
    else:
        lines.append(f'target = AutoModelForCausalLM.from_pretrained("{base_model}"{extra})')
    lines.append(f'tokenizer = AutoTokenizer.from_pretrained("{base_model}")')
    comment = "DLiteForSpeculation, in the target's dtype" if reduced else "DLiteForSpeculation"
    lines.append(f'drafter = AutoModel.from_pretrained("{repo_id}"{extra})  # {comment}')
    return "\n".join(lines) + "\n"


def _results_text(results: list[dict[str, Any]] | None, columns: list[str] | None, source: str | None, paper: bool):
    if not results:
        return "No measurements recorded yet."
    if paper:
        label = f"Figures {PAPER_LABEL} (not measured by dlite-hf)."
    else:
        label = f"Measured by dlite-hf. Source: {source or 'not recorded'}."
    return label + "\n\n" + _table(results, columns or list(results[0].keys()))


def _intro(config: Any, base_model: str) -> str:
    """The card's first paragraph: what the drafter reads and drafts, history-free or history-aware."""
    window = config.history_window
    link = f"[`{base_model}`](https://huggingface.co/{base_model})"
    if window == 0:
        return (
            f"A **DLite** drafter for {link}: history-free speculative decoding. Every round it reads the target's "
            f"latest hidden states from {len(config.target_layer_ids)} layers, keeps no KV cache and no history, and "
            f"drafts {config.num_draft_tokens} tokens that the target verifies in one forward."
        )
    past = "every past position" if window == -1 else f"the last {window} positions"
    return (
        f"A **history-aware** DLite drafter for {link} (`history_window={window}`): the teacher of the DLite "
        f"recipe, which the history-free drafter is distilled from, and usable itself as a history-based "
        f"(EAGLE-style) drafter. Every round it reads the target's hidden states from "
        f"{len(config.target_layer_ids)} layers at {past} and drafts {config.num_draft_tokens} tokens that the "
        "target verifies in one forward, so its drafting cost grows with the context."
    )


def _usage_generate(fastest: str | None) -> str:
    """The usage example's generate() call: with the suffix index when hybrid drafting measured fastest."""
    if fastest != "hybrid":
        return "out = target.generate(**inputs, assistant_model=drafter, max_new_tokens=256)"
    return (
        "# hybrid drafting (DLite plus a suffix index of the context), the decoding measured fastest (Results)\n"
        "out = target.generate(\n    **inputs, assistant_model=drafter, "
        f"prompt_lookup_num_tokens={DEFAULT_LOOKUP_TOKENS}, max_new_tokens=256\n)"
    )


def render_model_card(
    config: Any,
    *,
    base_model: str | None = None,
    repo_id: str | None = None,
    title: str | None = None,
    license: str = "apache-2.0",
    training: dict[str, Any] | None = None,
    training_text: str | None = None,
    results: list[dict[str, Any]] | None = None,
    results_columns: list[str] | None = None,
    results_source: str | None = None,
    results_are_paper: bool = False,
    num_parameters: int | None = None,
    extra_limits: list[str] | None = None,
    fastest: str | None = None,
    dtype: str | None = None,
    attention: str | None = None,
) -> str:
    """The card of a drafter with config `config`. The usage example shows the decoding measured fastest (`fastest`:
    "hybrid" or "dlite") in the mode measured (`dtype`, `attention`; None: float32, transformers' attention). The
    `results` table's numbers come from `results_source` (a bench result file and its command) or, with
    `results_are_paper=True`, the paper; `training_text` replaces the table of the `training` record."""
    if fastest not in (None, "dlite", "hybrid"):
        raise ValueError(f"fastest={fastest!r} is invalid: expected None, 'dlite' or 'hybrid'.")
    target = dict(config.target_model or {})
    base_model = base_model or target.get("name_or_path") or "unknown-target"
    if training_text is None:
        rows = [{"setting": k, "value": _setting(v)} for k, v in (training or {}).items() if v is not None]
        training_text = _table(rows, ["setting", "value"]) if training else "Not recorded."
    repo_id = repo_id or f"<your-org>/dlite-{str(base_model).split('/')[-1].lower()}"
    values = {
        **config.to_dict(),  # the fields the template prints as they are
        "usage_load": _usage_load(str(base_model), repo_id, dtype, attention),
        "usage_generate": _usage_generate(fastest),
        "intro_text": _intro(config, base_model),
        "title": title or f"DLite drafter for {base_model}",
        "base_model": base_model,
        "repo_id": repo_id,
        "license": license,
        "k": config.num_draft_tokens,
        "target_architecture": target.get("architecture", "?"),
        "target_layer_ids": ", ".join(str(i) for i in config.target_layer_ids),
        "history_window_text": _WINDOWS.get(
            config.history_window, f"{config.history_window} past positions (sliding-window ablation)"
        ),
        "draft_vocab_text": (
            "full vocabulary"
            if getattr(config, "draft_vocab_size", None) is None
            else f"the {config.draft_vocab_size:,} most frequent response tokens of the training data (lossless)"
        ),
        "adaptive_text": _adaptive_text(config),
        "num_parameters": f"{num_parameters:,}" if num_parameters else "see model.safetensors",
        "training_text": training_text,
        "results_text": _results_text(results, results_columns, results_source, results_are_paper),
        "extra_limits": list(extra_limits or []),
    }
    return Environment(undefined=StrictUndefined, keep_trailing_newline=True).from_string(_template()).render(**values)


def numbers_in(text: str) -> list[str]:
    """The numbers of a markdown table cell, as printed (thousands separators removed)."""
    return [match.replace(",", "") for match in _CELL_NUMBER.findall(text)]


def _traceable(number: str, file_numbers: list[float]) -> bool:
    """True if some number of the source file, rounded to ``number``'s decimals, equals it."""
    decimals = len(number.split(".")[1]) if "." in number else 0
    value = float(number)
    return any(abs(round(x, decimals) - value) < 10 ** (-decimals) / 2 for x in file_numbers)


def results_tables(text: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """``(text before the table, header cells, body rows as cells)`` for every table of the card's Results."""
    start = text.find("## Results\n")
    end = text.find("\n## ", start + len("## Results"))
    section = text[start : end if end >= 0 else len(text)] if start >= 0 else ""
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


def _keyed_rows(item: Any) -> list[dict[str, Any]]:
    """Every JSON object in ``item`` that has a workload and a method (bench summary rows, records, rows)."""
    if isinstance(item, list):
        return [row for value in item for row in _keyed_rows(value)]
    if not isinstance(item, dict):
        return []
    own = [item] if "workload" in item and "method" in item else []
    return own + _keyed_rows(list(item.values()))


def _check_table(index: int, header: list[str], rows: list[list[str]], source: Path) -> list[str]:
    """Every number of the table must come from ``source``: from the objects of the same workload and method when
    the table has those columns and the source is JSON, else from anywhere in the file."""
    text = source.read_text(encoding="utf-8")
    everything = [float(x) for x in _FILE_NUMBER.findall(text)]
    keyed = None
    if "workload" in header and "method" in header:
        with contextlib.suppress(ValueError):  # not JSON: the numbers of the whole file
            keyed = _keyed_rows(json.loads(text))
    problems = []
    for row in rows:
        cells = dict(zip(header, row))
        pool = everything
        if keyed is not None:
            same = [r for r in keyed if (str(r["workload"]), str(r["method"])) == (cells["workload"], cells["method"])]
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
    """Problems of a card (empty list: valid): its front matter, the ``REQUIRED_SECTIONS``, and every results table
    labelled as the paper's or naming a source file (``Source: `PATH` ``, relative to ``base_dir``, by default the
    repository root then the working directory) that holds each of its numbers (:func:`_check_table`)."""
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
    problems += [f"missing section {heading!r}" for heading in REQUIRED_SECTIONS if heading + "\n" not in text]
    bases = [Path(base_dir)] if base_dir is not None else [repo_root(), Path.cwd()]
    for index, (before, header, rows) in enumerate(results_tables(text), 1):
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
