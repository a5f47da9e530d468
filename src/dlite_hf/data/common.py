"""The prompt dict every data module builds, the split constants, and the small helpers they share.

A prompt is ``{"id", "workload", "source", "messages"}``; a text item is a prompt whose messages end with the
reference reply. Tool calls are written ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable
from typing import Any

Prompt = dict[str, Any]
Group = tuple[str, list[Prompt]]  # a domain's items of one group: (group_id, [prompt, ...])
Groups = list[Group]
SPLITS: tuple[str, ...] = ("eval", "train")
EVAL_SIZE = 16
MAX_PROMPT_CHARS = 3600  # about 900 tokens: regenerate skips prompts over 1,024 tokens anyway
TEXT_CHUNK_CHARS = 2400
PYTHON_VERSION = ".".join(map(str, sys.version_info[:3]))  # the running interpreter's, as the stdlib sources name it

TOOL_CALL_HELP = (
    "To call a function, reply with one <tool_call></tool_call> block per call, each holding a JSON object "
    '{"name": <function name>, "arguments": <arguments object>}. If no call is needed, answer directly.'
)


def hash_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def prompt(id_: str, workload: str, source: str, messages: list[dict[str, str]]) -> Prompt:
    return {"id": id_, "workload": workload, "source": source, "messages": messages}


def user(content: str) -> dict[str, str]:
    return {"role": "user", "content": content}


def text_item(id_: str, domain: str, source: str, request: str, reply: str) -> Prompt:
    return prompt(id_, domain, source, [user(request), {"role": "assistant", "content": reply}])


def tools_block(functions: Iterable[dict]) -> str:
    return "<tools>\n" + "\n".join(json.dumps(fn, ensure_ascii=False) for fn in functions) + "\n</tools>"


def tool_system_prompt(functions: Iterable[dict], preamble: Iterable[str] = ()) -> str:
    """The system message of a function-calling prompt: ``preamble`` paragraphs, the schemas, the call format."""
    parts = [*preamble, "You are a function-calling assistant with access to these functions:"]
    return "\n\n".join([*parts, tools_block(functions), TOOL_CALL_HELP])


def tool_call(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>"


def dedupe(prompts: Iterable[Prompt], seen: set[str]) -> list[Prompt]:
    """Drop prompts whose non-system messages repeat ones already seen (so no question lands in both splits)."""
    kept = []
    for item in prompts:
        key = json.dumps([m for m in item["messages"] if m["role"] != "system"], sort_keys=True, ensure_ascii=False)
        if key not in seen:
            seen.add(key)
            kept.append(item)
    return kept


def cut(text: str, limit: int) -> str:
    """``text`` cut at the last sentence or line end before ``limit`` characters (if past half of it)."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    end = max(head.rfind(". "), head.rfind("\n"))
    return head[: end + 1] if end > limit // 2 else head


def check_choice(kind: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"Unknown {kind} {value!r}; allowed: {', '.join(allowed)}.")


def check_limit(limit: int | None) -> None:
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be None or >= 0, got {limit}.")
