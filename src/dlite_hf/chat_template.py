"""Token ids of a chat prompt with the target's chat template, the same for regeneration, benchmarks and demo."""

from __future__ import annotations

from typing import Any


def token_ids(encoded: Any) -> list[int]:
    """The flat ids ``apply_chat_template(..., tokenize=True)`` returned (a list, a batch of one, or a dict)."""
    if hasattr(encoded, "keys"):
        encoded = encoded["input_ids"]
    if encoded and isinstance(encoded[0], list):
        encoded = encoded[0]
    return [int(t) for t in encoded]


def chat_prompt_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of `messages` with the generation prompt; Qwen3-style thinking is switched off."""
    return token_ids(
        tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, enable_thinking=False, return_dict=False
        )
    )
