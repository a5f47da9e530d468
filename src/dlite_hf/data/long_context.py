"""The ``long`` workload (out of domain: no training mix reads it): Paul Graham essays (source ``essays``) cut into
windows of about ``n_tokens`` tokens, then a question."""

from __future__ import annotations

import functools
import json
from typing import Any

from . import sources as S
from .common import EVAL_SIZE, SPLITS, Prompt, check_choice, check_limit, hash_key, prompt, user

LONG_DEFAULT_TOKENS = 2048
_CHARS_PER_TOKEN = 4  # rough English average; only used by the long workload when no tokenizer is given
_LONG_WINDOW_CHARS_PER_TOKEN = 6  # window size per requested token: enough text for any BPE tokenizer here

_LONG_QUESTIONS = (
    "Summarize the main argument of the last essay above in three sentences.",
    "What advice does the author give in the text above? List three points.",
    "Which ideas about startups appear in the text above? Answer briefly.",
    "Suggest a short title for each essay that appears in the text above.",
    "Pick one claim from the text above that you disagree with and explain why.",
    "Quote the sentence that best captures the main idea of the text above, then explain it.",
    "Explain the text above to a high-school student in one paragraph.",
    "Which examples does the author use in the text above to support his points?",
)


@functools.lru_cache(maxsize=1)
def _essays() -> str:
    return json.loads(S.read_text("essays"))["text"]


def _long_messages(context: str, question: str) -> list[dict[str, str]]:
    return [user(f"Read the following essays by Paul Graham.\n\n<essays>\n{context}\n</essays>\n\n{question}")]


def _count_tokens(tokenizer: Any, messages: list[dict[str, str]]) -> int:
    """Prompt length in tokens: with the chat template (and generation prompt) when the tokenizer has one."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
        return len(ids["input_ids"])
    return len(tokenizer(messages[0]["content"])["input_ids"])


def _fit_context(window: str, question: str, n_tokens: int, tokenizer: Any) -> str:
    """Cut ``window`` so that the whole templated prompt is about ``n_tokens`` tokens (never more)."""
    if tokenizer is None:
        overhead = len(_long_messages("", question)[0]["content"]) // _CHARS_PER_TOKEN
        return window[: max(0, n_tokens - overhead) * _CHARS_PER_TOKEN]
    ids = tokenizer(window, add_special_tokens=False)["input_ids"]
    keep = max(0, n_tokens - _count_tokens(tokenizer, _long_messages("", question)))
    for _ in range(4):  # decode/re-encode can merge or split a few tokens at the edges; shrink until it fits
        context = tokenizer.decode(ids[:keep])
        excess = _count_tokens(tokenizer, _long_messages(context, question)) - n_tokens
        if excess <= 0:
            return context
        keep = max(0, keep - excess)
    return tokenizer.decode(ids[:keep])


def load_long(
    n_tokens: int = LONG_DEFAULT_TOKENS, tokenizer: Any = None, split: str = "eval", limit: int | None = None
) -> list[Prompt]:
    """Long-context prompts: a window of the essays, then a question, the whole templated prompt cut to at most (and
    within a few of) ``n_tokens`` of ``tokenizer``'s tokens (without one: 4 characters a token, approximately).

    The windows do not overlap (``6 * n_tokens`` characters each); eval takes ``min(EVAL_SIZE, windows // 2)`` of
    them by sha1 of their id, train the rest."""
    check_choice("split", split, SPLITS)
    if n_tokens <= 0:
        raise ValueError(f"n_tokens must be positive, got {n_tokens}.")
    check_limit(limit)
    text = _essays()
    width = n_tokens * _LONG_WINDOW_CHARS_PER_TOKEN
    n_windows = len(text) // width
    if n_windows < 2:
        raise ValueError(
            f"n_tokens={n_tokens} is too large: the essays ({len(text)} characters) give fewer than two windows "
            f"of {width} characters. Use n_tokens <= {len(text) // (2 * _LONG_WINDOW_CHARS_PER_TOKEN)}."
        )
    ids = [f"long/{n_tokens}/{i}" for i in range(n_windows)]
    ranked = sorted(range(n_windows), key=lambda i: (hash_key(ids[i]), i))
    n_eval = min(EVAL_SIZE, n_windows // 2)
    chosen = ranked[:n_eval] if split == "eval" else sorted(ranked[n_eval:])
    source = S.provenance("essays")
    prompts = []
    for i in chosen[:limit]:
        window = text[i * width : (i + 1) * width]
        space = window.find(" ")
        window = window[space + 1 :] if 0 <= space < 200 else window  # start on a word boundary
        question = _LONG_QUESTIONS[int(hash_key(ids[i]), 16) % len(_LONG_QUESTIONS)]
        context = _fit_context(window, question, n_tokens, tokenizer)
        prompts.append(prompt(ids[i], "long", source, _long_messages(context, question)))
    return prompts
