"""regenerate resumes without duplicates; the card renders offline; push_to_hub uploads drafter, code and card."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny_models import HUB_CODE_FILES, make_drafter, make_tiny_target
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from dlite_hf.cards import REQUIRED_SECTIONS, render_model_card
from dlite_hf.data.regenerate import OutputBusyError, exclusive_writer, regenerate
from dlite_hf.jsonl import completed_ids, read_jsonl
from dlite_hf.training.arguments import DLiteTrainingArguments
from dlite_hf.training.data import RegeneratedDataset
from dlite_hf.training.trainer import DLiteTrainer


@pytest.fixture(scope="module")
def tiny_chat_target(smollm2_dir):
    """A tiny random Llama with SmolLM2's real tokenizer and chat template (vocab 49152)."""
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval(), tokenizer


def _prompts(n):
    return [
        {"id": f"p{i}", "messages": [{"role": "user", "content": f"Question number {i}: what is {i} + {i}?"}]}
        for i in range(n)
    ]


def test_regenerate_resumes_after_a_crash_without_duplicates(tiny_chat_target, tmp_path, monkeypatch):
    model, tokenizer = tiny_chat_target
    out = tmp_path / "regen.jsonl"
    prompts = _prompts(10)
    original = model.generate
    calls = {"n": 0}

    def crashing_generate(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("killed")
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "generate", crashing_generate)
    with pytest.raises(KeyboardInterrupt):
        regenerate(model, tokenizer, prompts, out, max_new_tokens=6, batch_size=3, progress=False)
    assert len(read_jsonl(out)) == 6
    with open(out, "a") as handle:  # a write torn by the kill
        handle.write('{"id": "p9", "input_ids": [1, 2')
    monkeypatch.setattr(model, "generate", original)
    result = regenerate(model, tokenizer, prompts, out, max_new_tokens=6, batch_size=3, progress=False)
    rows = read_jsonl(out)
    ids = [row["id"] for row in rows]
    assert sorted(ids) == sorted(p["id"] for p in prompts) and len(ids) == len(set(ids))
    assert result == {"written": 4, "already_done": 6, "skipped_too_long": 0}
    for row in rows:
        assert len(row["input_ids"]) == len(row["loss_mask"]) == row["prompt_tokens"] + sum(row["loss_mask"])
        assert row["loss_mask"][: row["prompt_tokens"]] == [0] * row["prompt_tokens"]
        assert sum(row["loss_mask"]) >= 1
    assert completed_ids(out) == set(ids)
    RegeneratedDataset(out)  # the trainer reads it


def test_regenerate_leaves_out_rows_already_shipped(tiny_chat_target, tmp_path):
    model, tokenizer = tiny_chat_target
    out = tmp_path / "regen.jsonl"
    regenerate(model, tokenizer, _prompts(3), out, max_new_tokens=4, batch_size=2, progress=False, skip_ids={"p1"})
    assert sorted(row["id"] for row in read_jsonl(out)) == ["p0", "p2"]


def test_regenerate_locks_its_output(tiny_chat_target, tmp_path):
    """Two jobs appending to one file would tear each other's lines: while one holds the rows, the library function
    refuses (not only the CLI) and leaves the rows alone; once it is released, the job runs."""
    model, tokenizer = tiny_chat_target
    out = tmp_path / "regen.jsonl"
    with exclusive_writer(out), pytest.raises(OutputBusyError, match=r"Another process is writing .*regen.jsonl"):
        regenerate(model, tokenizer, _prompts(2), out, max_new_tokens=4, progress=False)
    assert not out.exists()
    regenerate(model, tokenizer, _prompts(2), out, max_new_tokens=4, progress=False)
    assert len(read_jsonl(out)) == 2


def test_regenerated_response_equals_the_targets_greedy_output(tiny_chat_target, tmp_path):
    model, tokenizer = tiny_chat_target
    out = tmp_path / "regen.jsonl"
    regenerate(model, tokenizer, _prompts(1), out, max_new_tokens=8, batch_size=1, progress=False)
    row = read_jsonl(out)[0]
    prompt = torch.tensor([row["input_ids"][: row["prompt_tokens"]]])
    expected = model.generate(prompt, max_new_tokens=8, do_sample=False)[0, prompt.shape[1] :].tolist()
    assert row["input_ids"][row["prompt_tokens"] :] == expected[: len(row["input_ids"]) - row["prompt_tokens"]]


def test_card_renders_offline_with_measured_numbers():
    target = make_tiny_target("qwen3")
    drafter = make_drafter(target)
    card = render_model_card(
        drafter.config,
        base_model="org/tiny",
        repo_id="org/dlite-tiny",
        training={"stage": "stable", "epochs": 3},
        results=[{"workload": "chat", "tau": 2.345}],
        results_source="benchmarks/results/x.json",
    )
    for section in REQUIRED_SECTIONS:
        assert section in card
    assert "2.345" in card and "benchmarks/results/x.json" in card and "base_model: org/tiny" in card
    from huggingface_hub import ModelCard

    parsed = ModelCard(card)
    assert parsed.data.library_name == "transformers" and parsed.data.base_model == "org/tiny"


class _FakeApi:
    def __init__(self):
        self.uploads = []

    def create_repo(self, repo_id, **kwargs):
        return type("RepoUrl", (), {"repo_id": repo_id})()

    def upload_folder(self, repo_id, folder_path, **kwargs):
        files = sorted(p.name for p in Path(folder_path).iterdir() if not p.name.startswith("checkpoint-"))
        self.uploads.append(
            {"repo_id": repo_id, "files": files, "card": (Path(folder_path) / "README.md").read_text()}
        )


def test_push_to_hub_uploads_drafter_code_and_card(tmp_path, monkeypatch):
    import transformers.trainer as trainer_module

    api = _FakeApi()
    monkeypatch.setattr(trainer_module, "hf_api", lambda: api)
    target = make_tiny_target("qwen3")
    prompts = torch.randint(1, 128, (8, 6), generator=torch.Generator().manual_seed(0))
    sequences = target.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=16, do_sample=False)
    dataset = RegeneratedDataset([{"input_ids": s.tolist(), "loss_mask": [0] * 6 + [1] * 16} for s in sequences])
    args = DLiteTrainingArguments(
        output_dir=str(tmp_path / "run"),
        stage="stable",
        max_steps=2,
        per_device_train_batch_size=4,
        num_anchors=2,
        push_to_hub=True,
        hub_model_id="org/dlite-tiny",
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    trainer = DLiteTrainer(model=make_drafter(target), target=target, args=args, train_dataset=dataset)
    trainer.train()
    trainer.push_to_hub()
    upload = api.uploads[-1]
    assert upload["repo_id"] == "org/dlite-tiny"
    for name in (
        *HUB_CODE_FILES,
        "model.safetensors",
        "config.json",
        "README.md",
    ):
        assert name in upload["files"], upload["files"]
    assert "library_name: transformers" in upload["card"] and "DLite" in upload["card"]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["model_type"] == "dlite" and "auto_map" in config


def test_regenerate_command_writes_the_libraries_rows_and_checks_its_device(tiny_chat_target, tmp_path, capsys):
    """`dlite-hf regenerate` end to end on a local target folder: `--device cpu --dtype float32` writes exactly the
    rows of the library call; bfloat16 runs; a device this machine lacks or a malformed one is refused up front."""
    from dlite_hf.cli import main

    model, tokenizer = tiny_chat_target
    model.save_pretrained(tmp_path / "target")
    tokenizer.save_pretrained(tmp_path / "target")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in _prompts(3)))
    common = ["regenerate", "--target", str(tmp_path / "target"), "--prompts", str(prompts), "--max-new-tokens", "5"]
    common += ["--batch-size", "2", "--engine", "transformers"]
    assert main([*common, "--out", str(tmp_path / "cli.jsonl"), "--device", "cpu", "--dtype", "float32"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["written"] == 3
    regenerate(model, tokenizer, _prompts(3), tmp_path / "lib.jsonl", max_new_tokens=5, batch_size=2, progress=False)
    assert read_jsonl(tmp_path / "cli.jsonl") == read_jsonl(tmp_path / "lib.jsonl")

    assert main([*common, "--out", str(tmp_path / "bf16.jsonl"), "--device", "auto", "--dtype", "bfloat16"]) == 0
    assert len(read_jsonl(tmp_path / "bf16.jsonl")) == 3

    with pytest.raises(SystemExit, match="not a torch device"):
        main([*common, "--out", str(tmp_path / "x.jsonl"), "--device", "gpu0"])
    with exclusive_writer(tmp_path / "cli.jsonl"), pytest.raises(SystemExit, match="regenerate: Another process"):
        main([*common, "--out", str(tmp_path / "cli.jsonl"), "--device", "cpu"])  # another job holds its rows
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="no CUDA GPU"):
            main([*common, "--out", str(tmp_path / "x.jsonl"), "--device", "cuda"])
    assert not (tmp_path / "x.jsonl").exists()
