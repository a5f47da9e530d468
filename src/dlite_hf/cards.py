"""Model cards for DLite drafters, rendered from the template shipped in the package."""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

from jinja2 import Environment, StrictUndefined

REQUIRED_SECTIONS = ("## Usage", "## Architecture", "## Training", "## Results", "## Limits", "## Citation")


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

    `fastest`: the decoding the usage example shows, ``"hybrid"`` (DLite plus a suffix index of the context,
    `prompt_lookup_num_tokens`) or ``"dlite"`` (the default): the one the results measured fastest. `dtype` and
    `attention`: the mode the results were measured in (the usage example loads the models so), or None (float32,
    transformers' attention).

    `results` rows are printed as a table; `results_source` says where every number comes from (a bench result
    file, with the command that produced it), or set `results_are_paper=True` for figures quoted from the paper.
    """
    target = dict(config.target_model or {})
    base_model = base_model or target.get("name_or_path") or "unknown-target"
    if training_text is None:
        if training:
            training_text = "| setting | value |\n|---|---|\n" + "".join(
                f"| {k} | {_setting(v)} |\n" for k, v in training.items() if v is not None
            )
        else:
            training_text = "Not recorded."
    if results:
        columns = results_columns or list(results[0].keys())
        label = (
            "Figures reported in the DLite paper (not measured by dlite-hf)."
            if results_are_paper
            else f"Measured by dlite-hf. Source: {results_source or 'not recorded'}."
        )
        results_text = label + "\n\n" + _table(results, columns)
    else:
        results_text = "No measurements recorded yet."
    window = config.history_window
    window_text = {0: "0 (history-free)", -1: "-1 (full history: the history-aware teacher)"}.get(
        window, f"{window} past positions (sliding-window ablation)"
    )
    link = f"[`{base_model}`](https://huggingface.co/{base_model})"
    if window == 0:
        intro_text = (
            f"A **DLite** drafter for {link}: history-free speculative decoding. Every round it reads the target's "
            f"latest hidden states from {len(config.target_layer_ids)} layers, keeps no KV cache and no history, and "
            f"drafts {config.num_draft_tokens} tokens that the target verifies in one forward."
        )
    else:
        past = "every past position" if window == -1 else f"the last {window} positions"
        intro_text = (
            f"A **history-aware** DLite drafter for {link} (`history_window={window}`): the teacher of the DLite "
            f"recipe, which the history-free drafter is distilled from, and usable itself as a history-based "
            f"(EAGLE-style) drafter. Every round it reads the target's hidden states from "
            f"{len(config.target_layer_ids)} layers at {past} and drafts {config.num_draft_tokens} tokens that the "
            "target verifies in one forward, so its drafting cost grows with the context."
        )
    if fastest not in (None, "dlite", "hybrid"):
        raise ValueError(f"fastest={fastest!r} is invalid: expected None, 'dlite' or 'hybrid'.")
    usage_generate = "out = target.generate(**inputs, assistant_model=drafter, max_new_tokens=256)"
    if fastest == "hybrid":
        from .modeling.options import DEFAULT_LOOKUP_TOKENS

        usage_generate = (
            "# hybrid drafting (DLite plus a suffix index of the context), the decoding measured fastest (Results)\n"
            "out = target.generate(\n    **inputs, assistant_model=drafter, "
            f"prompt_lookup_num_tokens={DEFAULT_LOOKUP_TOKENS}, max_new_tokens=256\n)"
        )
    repo_id = repo_id or f"<your-org>/dlite-{str(base_model).split('/')[-1].lower()}"
    values = {
        "usage_load": _usage_load(str(base_model), repo_id, dtype, attention),
        "usage_generate": usage_generate,
        "intro_text": intro_text,
        "title": title or f"DLite drafter for {base_model}",
        "base_model": base_model,
        "repo_id": repo_id,
        "license": license,
        "num_tapped": len(config.target_layer_ids),
        "k": config.num_draft_tokens,
        "target_architecture": target.get("architecture", "?"),
        "num_target_layers": config.num_target_layers,
        "target_hidden_size": config.target_hidden_size,
        "vocab_size": config.vocab_size,
        "target_layer_ids": ", ".join(str(i) for i in config.target_layer_ids),
        "num_hidden_layers": config.num_hidden_layers,
        "backbone_type": config.backbone_type,
        "hidden_size": config.hidden_size,
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_key_value_heads,
        "head_rank": config.head_rank,
        "history_window_text": window_text,
        "draft_vocab_text": (
            "full vocabulary"
            if getattr(config, "draft_vocab_size", None) is None
            else f"the {config.draft_vocab_size:,} most frequent response tokens of the training data (lossless)"
        ),
        "adaptive_text": _adaptive_text(config),
        "num_parameters": f"{num_parameters:,}" if num_parameters else "see model.safetensors",
        "training_text": training_text,
        "results_text": results_text,
        "extra_limits": list(extra_limits or []),
    }
    environment = Environment(undefined=StrictUndefined, keep_trailing_newline=True)
    return environment.from_string(_template()).render(**values)
