"""A user's own prompts: a JSONL file in the chat format (``--prompts FILE.jsonl`` of ``dlite-hf bench`` and
``compare``), checked row by row."""

from __future__ import annotations

from pathlib import Path

from ..jsonl import read_jsonl
from .common import Prompt, prompt

USER_PROMPTS_WORKLOAD = "prompts"  # the workload label of a user's prompt file
_ROLES = ("system", "user", "assistant", "tool")


def load_prompt_file(path: str | Path) -> list[Prompt]:
    """A user's prompts: a JSONL file whose rows hold `messages` (`[{"role", "content"}, ...]`, ending with a message
    the target answers) and optionally an `id`; a malformed row is a `ValueError` naming it and what was expected."""
    rows = read_jsonl(path)
    if not rows:
        raise ValueError(f"{path} holds no prompts: expected one JSON object per line with a `messages` list.")
    prompts = []
    for number, row in enumerate(rows, start=1):
        messages = row.get("messages")
        where = f"{path}, prompt {number}"
        if not isinstance(messages, list) or not messages:
            raise ValueError(
                f"{where}: expected a non-empty `messages` list (chat format: "
                f'[{{"role": "user", "content": "..."}}]), got {type(messages).__name__}.'
            )
        for message in messages:
            if (
                not isinstance(message, dict)
                or message.get("role") not in _ROLES
                or not isinstance(message.get("content"), str)
            ):
                raise ValueError(
                    f"{where}: each message needs a `role` in {', '.join(_ROLES)} and a string `content`; got "
                    f"{message!r:.120}."
                )
        if messages[-1]["role"] == "assistant":
            raise ValueError(f"{where}: the last message is the assistant's; end with the message to answer.")
        id_ = str(row.get("id") or f"{Path(path).stem}/{number}")
        prompts.append(prompt(id_, USER_PROMPTS_WORKLOAD, str(path), [dict(m) for m in messages]))
    ids = [p["id"] for p in prompts]
    if len(set(ids)) != len(ids):
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"{path}: prompt ids must be unique; repeated: {repeated}.")
    return prompts
