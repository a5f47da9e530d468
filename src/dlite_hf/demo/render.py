"""The columns as the page shows them (HTML of the tokens, markdown of the numbers), the verdict, the context note."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from .models import SAMPLING

if TYPE_CHECKING:
    from .runner import ColumnRun

# Two alternating backgrounds for target forwards that committed several tokens (drafts accepted + the target's own).
ROUND_COLOURS = ("#bfe3ff", "#ffd9a8")
_BOX_STYLE = (
    "white-space:pre-wrap;word-break:break-word;font-family:ui-monospace,SFMono-Regular,Menlo,monospace;"
    "font-size:13px;line-height:1.65;min-height:14em;max-height:34em;overflow-y:auto;padding:10px;"
    "border:1px solid #d0d7de;border-radius:8px;background:#fff;color:#1f2328;"
)


def render_tokens(column: ColumnRun, highlight: bool) -> str:
    """The column's text as HTML; with ``highlight``, each multi-token target forward gets a coloured span."""
    if column.skipped:
        return f'<div style="{_BOX_STYLE}color:#6e7781">{html.escape(column.skipped)}</div>'
    spans, coloured = [], 0
    for index, (text, size) in enumerate(zip(column.texts, column.sizes)):
        if not text:
            continue
        escaped = html.escape(text)
        if highlight and size > 1:
            colour = ROUND_COLOURS[coloured % len(ROUND_COLOURS)]
            coloured += 1
            title = f"target forward {index + 1}: {size} tokens ({size - 1} drafted and accepted + 1 from the target)"
            spans.append(
                f'<span style="background:{colour};color:#1f2328;border-radius:3px" title="{title}">{escaped}</span>'
            )
        else:
            spans.append(escaped)
    if column.running:
        spans.append('<span style="color:#8c959f">&#9612;</span>')
    elif not column.ids and not column.error:
        spans.append('<span style="color:#8c959f">(waiting)</span>')
    if column.error:
        spans.append(f'<div style="color:#cf222e;margin-top:8px">{html.escape(column.error)}</div>')
    return f'<div class="dlite-tokens" style="{_BOX_STYLE}">{"".join(spans)}</div>'


def render_stats(column: ColumnRun, plain: ColumnRun | None = None) -> str:
    """One markdown block of live numbers for a column (tokens, time, tokens/s; tau, rounds, speedup)."""
    if column.skipped:
        return "_not run_"
    if not column.running and not column.done:
        return "_waiting for its turn (the columns run one after the other)_"
    state = "running" if column.running else ("stopped" if column.stopped else "done")
    first = f" · first token after {column.first_token_s:.2f} s" if column.first_token_s is not None else ""
    lines = [
        f"**{len(column.ids)} tokens** in {column.elapsed_s:.1f} s · **{column.tokens_per_s:.1f} tok/s**"
        f"{first} · prompt {column.prompt_tokens} tokens · _{state}_"
    ]
    if column.method != "plain" and column.sizes:
        stats = column.stats
        if stats is not None:
            drafting = stats["drafter_time_s"] + stats.get("lookup_time_s", 0.0)
            total = drafting + stats["target_time_s"]
            share = f"{drafting / total:.0%}" if total > 0 else "-"
            lines.append(
                f"tau **{stats['tau']:.2f}** tokens per target forward ({stats['target_forwards']} forwards, "
                f"{stats['rounds']} draft rounds, {stats['accepted']}/{stats['drafted']} drafted tokens accepted) "
                f"· drafter {share} of the time"
            )
            if stats.get("lookup_rounds"):
                lines.append(
                    f"{stats['lookup_rounds']} rounds drafted from the suffix index ({stats['lookup_accepted']}/"
                    f"{stats['lookup_drafted']} accepted), {stats['dlite_rounds']} by the drafter"
                )
        else:
            lines.append(
                f"tau **{len(column.ids) / len(column.sizes):.2f}** tokens per target forward ({len(column.sizes)} "
                f"forwards, {sum(1 for s in column.sizes if s > 1)} committed more than one token)"
            )
        if plain is not None and plain.done and not plain.error and plain.tokens_per_s > 0 and column.elapsed_s > 0:
            speedup = column.tokens_per_s / plain.tokens_per_s
            lines.append(f"**speedup {speedup:.2f}x** over the target alone (tokens/s ratio)")
    return "  \n".join(lines)


def verdict(columns: list[ColumnRun], decoding: str) -> str:
    """The line that says whether the speculative outputs equal the target's own output."""
    from ..neartie import first_difference

    plain, others = columns[0], [c for c in columns[1:] if not c.skipped]
    if any(c.running or not c.done for c in [plain, *others]):
        return "_Generating… the columns run one after the other; the comparison appears when all are done._"
    if any(c.stopped for c in [plain, *others]):
        return "■ **Stopped.** Outputs were not compared."
    if plain.error or any(c.error for c in others):
        return "⚠ A run failed; see the column."
    if not others:
        return "Only the target ran (no drafter, prompt lookup off): nothing to compare."
    if decoding == SAMPLING:
        return (
            "**Sampling:** the outputs differ by design. Speculative sampling keeps the target's output "
            "*distribution* (each run draws different random numbers), so compare distributions over many runs, "
            "not these texts."
        )
    parts = []
    for column in others:
        diff = first_difference(plain.ids, column.ids)
        report = column.near_tie
        if diff is None:
            parts.append(
                f"✔ **Identical:** {column.title} produced exactly the target's own greedy tokens "
                f"({len(column.ids)} of {len(plain.ids)})."
            )
        elif report is not None and report.ok:
            parts.append(
                f"≈ **Near-tie** ({column.title}): identical to new token {diff}, where the target's two best tokens "
                f"are {report.top2_margin:.3f} logits apart in float32 and reduced-precision rounding picked the "
                f"other one; every token after it is the target's choice within {report.epsilon} logits "
                "(re-scored in float32). Expected in bfloat16; `--dtype float32` is token-exact."
            )
        elif report is not None:
            parts.append(
                f"✘ **Outputs differ** ({column.title}) from new token {diff}, and not at a near-tie: "
                f"{report.reason}. This is a bug; please report it with the prompt."
            )
        else:
            parts.append(
                f"✘ **Outputs differ** ({column.title}) from new token {diff}: greedy speculative decoding must be "
                "lossless, so this is a bug; please report it with the prompt."
            )
    return "  \n".join(parts)


def context_note(context: dict[str, Any] | None) -> str:
    """The line under the prompt box that says which earlier messages are sent before it."""
    if not context or not context.get("messages"):
        if context:
            return f"Example `{context['label']}`: the box is the whole prompt (role `{context['role']}`)."
        return ""
    messages = context["messages"]
    roles = ", ".join(dict.fromkeys(m["role"] for m in messages))
    chars = sum(len(m["content"]) for m in messages)
    return (
        f"Example `{context['label']}`: the box holds its last message (role `{context['role']}`); "
        f"{len(messages)} earlier messages ({roles}; {chars:,} characters) are sent before it. "
        "Press “Clear context” to send the box alone."
    )
