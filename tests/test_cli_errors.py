"""Command-line values and files are refused before any model loads, naming the file, the line or the option."""

from __future__ import annotations

import pytest

# ---------------------------------------------------------------------------------------------------------------------
# command-line values refused before any model loads
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["compare", "--num-prompts", "0"], "--num-prompts 0 is invalid"),
        (["compare", "--threads", "0"], "--threads 0 is invalid"),
        (["compare", "--max-new-tokens", "-5"], "--max-new-tokens -5 is invalid"),
        (["compare", "--lookup-tokens", "300"], "--lookup-tokens 300 is invalid"),
        (["compare", "--workloads", "chat,poetry"], "Unknown workload 'poetry'; allowed: chat, code"),
        (["compare", "--workloads", "text_news"], "Unknown workload 'text_news'"),
        (["mix", "build"], "mix build needs --out DIR"),
        (["mix", "build", "--out", "m", "--domains", "news,poetry"], "Unknown domain 'poetry'"),
        (["mix", "build", "--out", "m", "--prompts-per-domain", "-1"], "prompts_per_domain=-1"),
        (["mix", "build", "--out", "m", "--extend", "nowhere"], "--extend nowhere: no mix.json there"),
        (["mix", "table"], "mix table needs one or more row files"),
        (["label-text", "--texts", "missing.jsonl", "--out", "rows.jsonl"], "No JSONL file at missing.jsonl"),
        (["regenerate", "--out", "unused.jsonl", "--limit", "0"], "--limit 0 is invalid"),
        (["regenerate", "--out", "unused.jsonl", "--limit", "-1"], "--limit -1 is invalid"),
        (["regenerate", "--out", "unused.jsonl", "--threads", "0"], "--threads 0 is invalid"),
        (["bench", "--methods", ""], "No method given"),
        (["bench", "--methods", "hybrid", "--lookup-tokens", "0"], "--lookup-tokens 0 is invalid"),
        (["bench", "--methods", "hybrid", "--lookup-min-match", "0"], "--lookup-min-match 0 is invalid"),
    ],
)
def test_cli_refuses_bad_counts_before_loading_anything(argv, expected, monkeypatch, tmp_path):
    from dlite_hf import assets
    from dlite_hf.cli import main

    monkeypatch.chdir(tmp_path)

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(assets, "open_target", no_loading)
    with pytest.raises(SystemExit) as raised:
        main(argv)
    assert expected in str(raised.value), raised.value
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"id": "a", "messages": []}\n{"id": "b", \n', r"line 2: not valid JSON"),
        ('{"id": "a"}\n\n[1, 2]\n', r"line 3: got a JSON list, expected an object"),
    ],
)
def test_malformed_jsonl_names_the_file_and_line(tmp_path, text, message):
    from dlite_hf.jsonl import read_jsonl

    path = tmp_path / "rows.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as raised:
        read_jsonl(path)
    assert str(path) in str(raised.value)
    with pytest.raises(FileNotFoundError, match="No JSONL file at"):
        read_jsonl(tmp_path / "missing.jsonl")


def test_compare_checks_a_prompt_file_before_loading_a_model(tmp_path, monkeypatch):
    from dlite_hf import assets
    from dlite_hf.cli import main

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded before --prompts was checked")

    monkeypatch.setattr(assets, "open_target", no_loading)
    path = tmp_path / "mine.jsonl"
    path.write_text('{"id": "a", "messages": [{"role": "user", "content": 3}]}\n')
    with pytest.raises(SystemExit, match=r"--prompts .*mine.jsonl, prompt 1: each message needs a `role`"):
        main(["compare", "--prompts", str(path)])


def test_compare_says_where_the_shipped_drafter_lives_when_it_is_missing(tmp_path, monkeypatch):
    """From an installed wheel the repository's drafters/ folder is absent: the error says where it looked, where
    the drafter ships and what to pass, before any model loads."""
    from dlite_hf import assets
    from dlite_hf.assets import loading
    from dlite_hf.cli import main

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded before the drafter was found")

    monkeypatch.setattr(assets, "open_target", no_loading)
    monkeypatch.setattr(loading, "drafter_search_path", lambda: [tmp_path / "drafters"])
    with pytest.raises(
        SystemExit,
        match=r"No drafter named 'dlite-smollm2-135m' in .*drafters; the trained "
        r"SmolLM2-135M drafter ships in the dlite-hf repository .*pass --drafter "
        r"PATH.*DLITE_HF_DRAFTERS",
    ):
        main(["compare", "--workloads", "chat", "--num-prompts", "1"])
    with pytest.raises(SystemExit, match=r"elsewhere' is neither an existing folder, a Hub id \(org/name\) nor a "):
        main(["compare", "--workloads", "chat", "--num-prompts", "1", "--drafter", str(tmp_path / "elsewhere")])


def test_a_drafter_is_found_by_name_in_the_search_path(tmp_path, monkeypatch):
    """`--drafter NAME` (and the default) finds the shipped drafter in $DLITE_HF_DRAFTERS, ./drafters or the
    checkout, in that order; a folder and a Hub id work as given."""
    from dlite_hf.assets import AssetError, drafter_search_path, resolve_drafter
    from dlite_hf.defaults import DEFAULT_DRAFTER, default_drafter_dir

    mine = tmp_path / "mine"
    (mine / DEFAULT_DRAFTER).mkdir(parents=True)
    monkeypatch.setenv("DLITE_HF_DRAFTERS", str(mine))
    assert drafter_search_path()[0] == mine.resolve()
    assert resolve_drafter(DEFAULT_DRAFTER) == mine.resolve() / DEFAULT_DRAFTER
    monkeypatch.delenv("DLITE_HF_DRAFTERS")
    monkeypatch.chdir(tmp_path)  # no ./drafters here: the checkout's copy
    assert resolve_drafter(DEFAULT_DRAFTER) == default_drafter_dir().resolve()
    assert resolve_drafter(str(mine)) == mine
    with pytest.raises(AssetError, match="neither an existing folder"):
        resolve_drafter("not-a-drafter")
