"""ToolTalk conversations as agentic prompts (sources ``tooltalk``, ``tooltalk_easy`` and ``tooltalk_apis``): a system
message (time, place, login, the API suites' schemas), then the user turns, tool calls, results and replies; a
conversation's prompts are its prefixes that end at a user or tool message."""

from __future__ import annotations

import ast
import functools
import json
from typing import Any

from . import sources as S
from .common import TOOL_CALL_HELP, Prompt, prompt, tool_call, tools_block, user


@functools.cache
def _tooltalk_apis() -> tuple[dict[str, dict], dict[str, list[str]]]:
    """ToolTalk's API classes parsed from source, never imported: (function doc per API, API names per suite)."""
    apis: dict[str, dict] = {}
    suites: dict[str, list[str]] = {}
    for file in S.list_files("tooltalk_apis", ".py"):
        tree = ast.parse(S.fetch("tooltalk_apis", file).read_text(encoding="utf-8"))
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            attrs: dict[str, Any] = {}
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                    name = stmt.targets[0].id
                    if name == "apis" and isinstance(stmt.value, ast.List):
                        attrs[name] = [e.id for e in stmt.value.elts if isinstance(e, ast.Name)]
                    elif name in ("name", "description", "parameters"):
                        attrs[name] = ast.literal_eval(stmt.value)
            if "apis" in attrs and "name" in attrs:
                suites[attrs["name"]] = attrs["apis"]
            elif "description" in attrs and "parameters" in attrs:
                params = attrs["parameters"]
                properties = {k: {a: v for a, v in spec.items() if a != "required"} for k, spec in params.items()}
                required = [k for k, spec in params.items() if spec.get("required")]
                apis[node.name] = {
                    "name": node.name,
                    "description": attrs["description"],
                    "parameters": {"type": "object", "properties": properties, "required": required},
                }
    return apis, suites


def _tooltalk_messages(conv: dict) -> list[dict[str, str]]:
    """Render a ToolTalk conversation: system (time, place, login, API docs), then user / call / result turns."""
    apis, suites = _tooltalk_apis()
    names = [n for suite in conv["suites_used"] for n in suites[suite]]
    meta, account = conv.get("metadata", {}), conv.get("user", {})
    lines = [
        "You are a helpful assistant that acts on the user's behalf through the APIs below.",
        f"Current time: {meta.get('timestamp', 'unknown')}. User location: {meta.get('location', 'unknown')}.",
    ]
    if account.get("session_token"):
        lines.append(f"The user {account['username']} is logged in (session_token: {account['session_token']}).")
    lines += ["", tools_block(apis[n] for n in names), "", TOOL_CALL_HELP]
    messages = [{"role": "system", "content": "\n".join(lines)}]
    for turn in conv["conversation"]:
        if turn["role"] == "user":
            messages.append(user(turn["text"]))
            continue
        for call in turn.get("apis") or []:
            request = call["request"]
            messages.append({"role": "assistant", "content": tool_call(request["api_name"], request["parameters"])})
            result = {"response": call["response"], "exception": call["exception"]}
            messages.append({"role": "tool", "content": json.dumps(result, ensure_ascii=False)})
        messages.append({"role": "assistant", "content": turn["text"]})
    return messages


def conversation_prefixes(name: str, prefix_id: str) -> list[tuple[str, list[Prompt]]]:
    """Per conversation of the folder source ``name``: every prefix that ends at a user or tool message."""
    out = []
    for file in S.list_files(name, ".json"):
        conv = json.loads(S.fetch(name, file).read_text(encoding="utf-8"))
        messages = _tooltalk_messages(conv)
        source = S.provenance(name, file)
        group = f"{prefix_id}/{conv['name']}"
        cuts = [i for i in range(2, len(messages) + 1) if messages[i - 1]["role"] in ("user", "tool")]
        prompts = [prompt(f"{group}/{i - 1}", "agentic", source, messages[:i]) for i in cuts]
        if prompts:
            out.append((group, prompts))
    return out
