"""BFCL v4 multi-turn sessions: real entries, tool results from BFCL's executable backends, no training overlap."""

from __future__ import annotations

import json

import pytest

import dlite_hf.data.prompts as P
from dlite_hf.data.bfcl import BFCL_CATEGORIES, BFCLEnvironment, bfcl_sessions

FILE_SYSTEM_ENTRY = {
    "id": "handmade_0",
    "involved_classes": ["GorillaFileSystem", "MathAPI"],
    "initial_config": {
        "GorillaFileSystem": {
            "root": {
                "home": {
                    "type": "directory",
                    "contents": {
                        "notes.txt": {"type": "file", "content": "alpha beta\ngamma"},
                        "src": {"type": "directory", "contents": {}},
                    },
                }
            }
        }
    },
}


def _tool_results(session: dict) -> list[dict]:
    return [json.loads(m["content"]) for turn in session["turns"] for m in turn if m["role"] == "tool"]


def test_environment_runs_calls_on_the_real_backends():
    env = BFCLEnvironment(FILE_SYSTEM_ENTRY)
    assert env.execute("ls()") == {"current_directory_content": ["notes.txt", "src"]}
    assert env.execute("cd(folder='src')") == {"current_working_directory": "src"}
    assert env.execute("touch(file_name='a.py')") is None
    assert env.execute("ls()") == {"current_directory_content": ["a.py"]}
    env.execute("cd(folder='..')")
    assert "gamma" in env.execute("cat(file_name='notes.txt')")["file_content"]
    assert env.execute("add(a=2, b=3)") == {"result": 5}  # MathAPI: stateless, no scenario
    # a call the backend rejects comes back as an error text, as BFCL returns it to the model
    assert env.execute("cd(folder='nowhere')").get("error")
    assert (
        env.execute("rm_everything()")
        == "Error during execution: no function named 'rm_everything' in this environment."
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("ls(", "is not a Python call expression"),
        ("os.system('x')", "plain function name"),
        ("cat(file_name=open('x'))", "non-literal argument"),
        ("cat(**{'file_name': 'x'})", "uses \\*\\*kwargs"),
    ],
)
def test_calls_are_parsed_never_evaluated(call, message):
    with pytest.raises(ValueError, match=message):
        BFCLEnvironment(FILE_SYSTEM_ENTRY).execute(call)


def test_unknown_class_and_category_are_refused():
    with pytest.raises(ValueError, match="unknown classes \\['Teleporter'\\]"):
        BFCLEnvironment({"id": "x", "involved_classes": ["Teleporter"], "initial_config": {}})
    with pytest.raises(ValueError, match="Unknown BFCL category 'multi_turn_composite'; allowed: multi_turn_base"):
        bfcl_sessions(1, category="multi_turn_composite")
    with pytest.raises(ValueError, match="limit must be in 0..200"):
        bfcl_sessions(201)


@pytest.mark.parametrize("category", BFCL_CATEGORIES)
def test_sessions_from_the_real_files(category):
    sessions = bfcl_sessions(4, max_tokens=9000, category=category)
    assert len({s["id"] for s in sessions}) == 4 and bfcl_sessions(4, max_tokens=9000, category=category) == sessions
    for session in sessions:
        assert session["workload"] == "agentic" and session["max_tokens"] == 9000
        assert session["source"] == f"bfcl-eval==2026.3.23:bfcl_eval/data/BFCL_v4_{category}.json"
        first, *rest = session["turns"]
        assert [m["role"] for m in first] == ["system", "user"]
        assert "<tools>" in first[0]["content"] and "<tool_call>" in first[0]["content"]
        roles = [{m["role"] for m in turn} for turn in rest]
        assert all(r in ({"user"}, {"tool"}) for r in roles) and {"tool"} in roles
        results = _tool_results(session)
        assert results and all(set(r) == {"call", "result"} for r in results)
        # the ground truth runs cleanly on the backends: no unknown function, no parse failure
        assert not [r for r in results if "no function named" in str(r["result"])]


def test_system_prompt_lists_the_involved_classes_minus_excluded_functions():
    session = bfcl_sessions(1)[0]
    system = session["turns"][0][0]["content"]
    names = {json.loads(line)["name"] for line in system.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()}
    calls = {r["call"].split("(")[0] for r in _tool_results(session)}
    assert calls <= names  # every ground-truth call is offered
    assert all("response" not in line for line in system.splitlines() if line.startswith("{"))


def test_long_context_results_are_longer():
    def tool_chars(category: str) -> int:
        return sum(
            len(m["content"])
            for s in bfcl_sessions(8, category=category)
            for t in s["turns"]
            for m in t
            if m["role"] == "tool"
        )

    assert tool_chars("multi_turn_long_context") > 2 * tool_chars("multi_turn_base")


def test_no_bfcl_multi_turn_text_in_the_training_prompts():
    user_texts = {
        m["content"]
        for category in BFCL_CATEGORIES
        for s in bfcl_sessions(200, category=category)
        for turn in s["turns"]
        for m in turn
        if m["role"] == "user"
    }
    train_texts = {
        m["content"] for w in P.TRAINING_WORKLOADS for p in P.load_prompts(w, "train") for m in p["messages"]
    }
    assert len(user_texts) > 500 and not user_texts & train_texts
