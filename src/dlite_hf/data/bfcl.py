"""BFCL v4 multi-turn sessions for the ``agentic`` workload (evaluation only), tool results from BFCL's own backends.

An entry is user turns over a stateful environment (a file system, a trading bot, ...) loaded from its
``initial_config``; a session is the system prompt (the classes' schemas), then per turn the user message(s) and,
after the target's reply, the results of the turn's ground-truth calls as ``tool`` messages. The backends are the
pinned wheel's files executed as standalone modules (``bfcl_eval`` is never imported), calls parsed with :mod:`ast`
and run with literal arguments only.
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import json
import random
import re
import sys
import types
from typing import Any

from . import sources as S
from .common import check_choice, hash_key, tool_system_prompt

BFCL_CATEGORIES: tuple[str, ...] = ("multi_turn_base", "multi_turn_long_context")

_UPSTREAM_MODULE_PREFIX = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code."
_LOCAL_MODULE_PREFIX = "_dlite_hf_bfcl_backend_"
# class name -> file stem of its backend (func_source_code/<stem>.py) and of its schemas (multi_turn_func_doc/)
_BACKENDS: dict[str, str] = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "posting_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
_AGENT_PREAMBLE = (
    "You are an agent that completes the user's requests by calling functions. The environment runs each call and "
    "returns its result in a tool message."
)

Session = dict[str, Any]


@functools.cache
def _backend_module(stem: str) -> types.ModuleType:
    """Execute one backend file as a standalone module, its imports of sibling backends redirected."""
    path = S.fetch("bfcl_backends", f"{stem}.py")
    source = path.read_text(encoding="utf-8")
    for dependency in sorted(set(re.findall(rf"{re.escape(_UPSTREAM_MODULE_PREFIX)}(\w+)", source))):
        _backend_module(dependency)
    source = source.replace(_UPSTREAM_MODULE_PREFIX, _LOCAL_MODULE_PREFIX)
    name = _LOCAL_MODULE_PREFIX + stem
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 - pinned, sha256-checked backend code
    return module


def _literal(node: ast.expr, call: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError as error:
        raise ValueError(f"BFCL call {call!r} has a non-literal argument ({ast.unparse(node)}).") from error


def _parse_call(call: str) -> tuple[str, list[Any], dict[str, Any]]:
    """``"mv(source='a', destination='b')"`` -> ``("mv", [], {"source": "a", "destination": "b"})``."""
    try:
        node = ast.parse(call.strip(), mode="eval").body
    except SyntaxError as error:
        raise ValueError(f"BFCL call {call!r} is not a Python call expression.") from error
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"BFCL call {call!r} must be `function(args)` with a plain function name.")
    if any(k.arg is None for k in node.keywords):
        raise ValueError(f"BFCL call {call!r} uses **kwargs; only literal positional and keyword arguments work.")
    args = [_literal(a, call) for a in node.args]
    kwargs = {k.arg: _literal(k.value, call) for k in node.keywords}
    return node.func.id, args, kwargs


class BFCLEnvironment:
    """The instances of one BFCL entry's involved classes, loaded with its ``initial_config``."""

    def __init__(self, entry: dict[str, Any], long_context: bool = False) -> None:
        if unknown := [c for c in entry["involved_classes"] if c not in _BACKENDS]:
            raise ValueError(f"BFCL entry {entry.get('id')!r}: unknown classes {unknown}; known: {sorted(_BACKENDS)}.")
        self.methods: dict[str, Any] = {}
        for class_name in entry["involved_classes"]:
            instance = getattr(_backend_module(_BACKENDS[class_name]), class_name)()
            if hasattr(instance, "_load_scenario"):
                config = copy.deepcopy(entry["initial_config"].get(class_name, {}))
                instance._load_scenario(config, long_context=long_context)
            members = inspect.getmembers(instance, predicate=inspect.ismethod)
            self.methods.update((name, method) for name, method in members if not name.startswith("_"))

    def execute(self, call: str) -> Any:
        """Run one call string and return the backend's result (an error comes back as text, as in BFCL)."""
        name, args, kwargs = _parse_call(call)
        if name not in self.methods:
            return f"Error during execution: no function named {name!r} in this environment."
        try:
            return self.methods[name](*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - the backend's own failure is the tool result, as in BFCL
            return f"Error during execution: {error}"


@functools.cache
def _schemas(class_name: str) -> tuple[dict[str, Any], ...]:
    return tuple(S.read_jsonl("bfcl_multi_turn_functions", f"{_BACKENDS[class_name]}.json"))


def _system_prompt(entry: dict[str, Any]) -> str:
    excluded = set(entry.get("excluded_function") or ())
    functions = [
        {k: v for k, v in schema.items() if k != "response"}
        for class_name in entry["involved_classes"]
        for schema in _schemas(class_name)
        if schema["name"] not in excluded
    ]
    return tool_system_prompt(functions, preamble=[_AGENT_PREAMBLE])


def _session(entry: dict[str, Any], calls: list[list[str]], category: str, max_tokens: int | None):
    if len(calls) != len(entry["question"]):
        raise ValueError(
            f"BFCL entry {entry['id']!r}: {len(entry['question'])} user turns but {len(calls)} ground-truth turns."
        )
    turns: list[list[dict[str, str]]] = []
    state = random.getstate()  # some backends draw random values (a temperature, an id): seed them per entry
    random.seed(int(hash_key(entry["id"])[:16], 16))
    try:
        environment = BFCLEnvironment(entry, long_context=category.endswith("long_context"))
        for index, (messages, turn_calls) in enumerate(zip(entry["question"], calls, strict=True)):
            users = [{"role": "system", "content": _system_prompt(entry)}] if index == 0 else []
            users += [{"role": m["role"], "content": m["content"]} for m in messages]
            results = [
                json.dumps({"call": call, "result": environment.execute(call)}, ensure_ascii=False, default=str)
                for call in turn_calls
            ]
            turns += [turn for turn in (users, [{"role": "tool", "content": r} for r in results]) if turn]
    finally:
        random.setstate(state)
    return {
        "id": f"bfcl/{entry['id']}",
        "workload": "agentic",
        "source": S.provenance(f"bfcl_{category}"),
        "turns": turns,
        "max_tokens": max_tokens,
        "max_turns": None,
    }


def bfcl_sessions(limit: int, max_tokens: int | None = None, category: str = "multi_turn_base") -> list[Session]:
    """The first ``limit`` entries of a category (by sha1 of their id) as sessions, stopped past ``max_tokens``."""
    check_choice("BFCL category", category, BFCL_CATEGORIES)
    entries = S.read_jsonl(f"bfcl_{category}")
    if not 0 <= limit <= len(entries):
        raise ValueError(f"limit must be in 0..{len(entries)} for {category}, got {limit}.")
    answers = {
        row["id"]: row["ground_truth"] for row in S.read_jsonl("bfcl_multi_turn_answers", f"BFCL_v4_{category}.json")
    }
    ranked = sorted(entries, key=lambda e: (hash_key(e["id"]), e["id"]))
    return [_session(e, answers[e["id"]], category, max_tokens) for e in ranked[:limit]]
