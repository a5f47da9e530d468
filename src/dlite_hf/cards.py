"""Model cards for DLite drafters, for `dlite-hf card`, the trainer and `hub_cards/render_paper_cards.py`.

:func:`render_model_card` fills the package's `templates/model_card.md` from a drafter's config and the card's texts;
:func:`card_from_checkpoint` renders a drafter folder's card with a results table read from a bench result (formats:
`dlite-hf card --help`), each number the file's value rounded for display (`card_check.check_card` verifies it).
"""

from __future__ import annotations

import functools
import json
import math
from importlib import resources
from pathlib import Path
from typing import Any

from jinja2 import Environment, StrictUndefined

from .attention import PACKED_GQA_SDPA
from .bench.results import BenchResult, RunMeta, SummaryRow, parse_result
from .defaults import repo_root
from .modeling.configuration_dlite import DLiteConfig

__all__ = [
    "HUB_IDS",
    "PAPER_LABEL",
    "REQUIRED_SECTIONS",
    "bench_rows",
    "card_from_checkpoint",
    "fastest_decoding",
    "read_bench_result",
    "render_model_card",
]

REQUIRED_SECTIONS = ("## Usage", "## Architecture", "## Training", "## Results", "## Limits", "## Citation")
PAPER_LABEL = "reported in the DLite paper"  # the phrase above a table of the paper's figures
# Registry names of dlite-hf's local targets -> the Hub repositories they were converted from (the card's base_model).
HUB_IDS = {
    "smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "qwen2.5-coder-0.5b": "Qwen/Qwen2.5-Coder-0.5B-Instruct",
}
_CARD_COLUMNS = ("workload", "method", "prompts", "tau", "tok/s", "speedup", "lossless")
# config fields the template prints as they are
_CONFIG_FIELDS = (
    "num_target_layers",
    "target_hidden_size",
    "vocab_size",
    "num_hidden_layers",
    "backbone_type",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_rank",
)


@functools.lru_cache(maxsize=1)
def _template() -> str:
    """The card template, read once per process (a long training run keeps rendering the version it started with)."""
    return resources.files("dlite_hf").joinpath("templates/model_card.md").read_text(encoding="utf-8")


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    body = "".join("| " + " | ".join(str(row.get(c, "")) for c in columns) + " |\n" for row in rows)
    return head + body


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
            "one-token step; "
            "pays off on CPUs, where a multi-token forward costs much more than a one-token one: pass "
            "`draft_skip_threshold=0.0` to `from_pretrained` on a GPU)"
        )
        fallback = getattr(config, "lookup_fallback_min_match", 0)
        if fallback:
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
    if attention not in (None, "sdpa", "packed_gqa"):
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


_WINDOWS = {0: "0 (history-free)", -1: "-1 (full history: the history-aware teacher)"}


def _training_table(training: dict[str, Any] | None) -> str:
    if not training:
        return "Not recorded."
    rows = [{"setting": k, "value": _setting(v)} for k, v in training.items() if v is not None]
    return _table(rows, ["setting", "value"])


def _results_text(
    results: list[dict[str, Any]] | None, columns: list[str] | None, source: str | None, are_paper: bool
) -> str:
    if not results:
        return "No measurements recorded yet."
    label = (
        f"Figures {PAPER_LABEL} (not measured by dlite-hf)."
        if are_paper
        else f"Measured by dlite-hf. Source: {source or 'not recorded'}."
    )
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
    from .modeling.decoding_options import DEFAULT_LOOKUP_TOKENS

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
    """Render a card for a drafter with config `config`.

    `fastest` (``"hybrid"``, or ``"dlite"`` the default), `dtype` and `attention` (None: float32, transformers'
    attention): the decoding the results measured fastest and the mode they were measured in, as the usage example
    shows them. `results` rows are printed as a table, whose numbers come from `results_source` (a bench result file
    and the command that wrote it), or from the paper with `results_are_paper=True`.
    """
    target = dict(config.target_model or {})
    base_model = base_model or target.get("name_or_path") or "unknown-target"
    if training_text is None:
        training_text = _training_table(training)
    if fastest not in (None, "dlite", "hybrid"):
        raise ValueError(f"fastest={fastest!r} is invalid: expected None, 'dlite' or 'hybrid'.")
    repo_id = repo_id or f"<your-org>/dlite-{str(base_model).split('/')[-1].lower()}"
    values = {
        "usage_load": _usage_load(str(base_model), repo_id, dtype, attention),
        "usage_generate": _usage_generate(fastest),
        "intro_text": _intro(config, base_model),
        "title": title or f"DLite drafter for {base_model}",
        "base_model": base_model,
        "repo_id": repo_id,
        "license": license,
        **{name: getattr(config, name) for name in _CONFIG_FIELDS},
        "num_tapped": len(config.target_layer_ids),
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
    environment = Environment(undefined=StrictUndefined, keep_trailing_newline=True)
    return environment.from_string(_template()).render(**values)


def read_bench_result(document: Any, source: str = "the bench result") -> BenchResult:
    """A ``--bench-result`` document in either accepted format (:mod:`dlite_hf.commands.card`), typed: the document
    ``dlite-hf bench`` writes (:func:`dlite_hf.bench.results.parse_result`), or a list of rows (or
    ``{"rows": [...]}``) as a result whose summary is those rows. Raises ``ValueError`` for anything else."""
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
    """Card rows (display strings) from a bench result's summary rows, of ``methods`` (None: all); at least one."""
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
    for base in (repo_root(), Path.cwd()):
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
    """The card of the drafter in ``checkpoint`` (its config.json, dlite_training.json, weights header), with the
    rows of ``bench_result`` (of ``methods``) as its results table; ``card``: :func:`render_model_card`'s
    ``repo_id``, ``title``, ``license`` or ``extra_limits``."""
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
    source = f"`{_display_path(path)}`" + (f", written by `{meta.command}`" if meta.command else "")
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
