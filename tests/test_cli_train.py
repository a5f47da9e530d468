"""`dlite-hf train` in process: the no-head ablation starts from the same weights as the drafter it ablates."""

from __future__ import annotations

import pytest
import torch
from tiny_models import write_tiny_training_run

from dlite_hf import DLiteForSpeculation
from dlite_hf.cli import run_train


def test_no_sequential_head_from_an_init_keeps_every_other_weight(tmp_path, smollm2_dir):
    base = write_tiny_training_run(tmp_path, smollm2_dir)[1:]  # run_train takes the arguments after "train"
    run_train(base + ["--output_dir", str(tmp_path / "with_head"), "--max_steps", "1"])
    with_head = DLiteForSpeculation.from_pretrained(tmp_path / "with_head")
    assert with_head.head is not None
    # zero steps: the ablation is the init minus its head, bit for bit
    run_train(
        base
        + ["--output_dir", str(tmp_path / "nohead"), "--max_steps", "0", "--init", str(tmp_path / "with_head")]
        + ["--no_sequential_head", "--learning_rate", "0"]
    )
    ablated = DLiteForSpeculation.from_pretrained(tmp_path / "nohead")
    assert ablated.head is None and ablated.config.use_sequential_head is False
    reference = {k: v for k, v in with_head.state_dict().items() if not k.startswith("head.")}
    assert reference.keys() == ablated.state_dict().keys()
    assert all(torch.equal(reference[k], v) for k, v in ablated.state_dict().items())


def test_refresh_draft_vocab_rechooses_it_from_the_data_and_keeps_every_weight(tmp_path, smollm2_dir):
    from dlite_hf.training.data import RegeneratedDataset, response_token_counts

    base = write_tiny_training_run(tmp_path, smollm2_dir)[1:]
    run_train(base + ["--output_dir", str(tmp_path / "first"), "--max_steps", "1", "--draft_vocab_size", "16"])
    first = DLiteForSpeculation.from_pretrained(tmp_path / "first")
    assert first.draft_vocab_ids.numel() == 16
    run_train(
        base
        + ["--output_dir", str(tmp_path / "refreshed"), "--max_steps", "0", "--learning_rate", "0"]
        + ["--init", str(tmp_path / "first"), "--refresh_draft_vocab", "--draft_vocab_size", "40"]
    )
    refreshed = DLiteForSpeculation.from_pretrained(tmp_path / "refreshed")
    counts = response_token_counts(RegeneratedDataset(str(tmp_path / "data.jsonl"), max_length=64), 128)
    assert refreshed.config.draft_vocab_size == 40
    assert torch.equal(refreshed.draft_vocab_ids, torch.topk(counts, 40).indices.sort().values)
    weights = {k: v for k, v in first.state_dict().items() if k != "draft_vocab_ids"}
    assert all(torch.equal(weights[k], refreshed.state_dict()[k]) for k in weights)
    # without --refresh_draft_vocab an --init keeps its vocabulary, whatever --draft_vocab_size says
    run_train(
        base
        + ["--output_dir", str(tmp_path / "kept"), "--max_steps", "0", "--learning_rate", "0"]
        + ["--init", str(tmp_path / "first"), "--draft_vocab_size", "40"]
    )
    assert torch.equal(DLiteForSpeculation.from_pretrained(tmp_path / "kept").draft_vocab_ids, first.draft_vocab_ids)


def test_grow_layers_starts_from_the_init_function_and_trains_the_new_layers(tmp_path, smollm2_dir):
    base = write_tiny_training_run(tmp_path, smollm2_dir)[1:]
    run_train(base + ["--output_dir", str(tmp_path / "first"), "--max_steps", "1"])
    first = DLiteForSpeculation.from_pretrained(tmp_path / "first").eval()
    grow = ["--init", str(tmp_path / "first"), "--grow_layers", "2"]
    run_train(base + ["--output_dir", str(tmp_path / "grown"), "--max_steps", "0", "--learning_rate", "0"] + grow)
    grown = DLiteForSpeculation.from_pretrained(tmp_path / "grown").eval()
    assert grown.config.num_hidden_layers == first.config.num_hidden_layers + 2 == len(grown.layers)
    old = first.state_dict()
    assert all(torch.equal(v, grown.state_dict()[k]) for k, v in old.items())
    # the same drafts: the new layers are the identity until trained
    generator = torch.Generator().manual_seed(0)
    config = first.config
    states = torch.randn(3, config.num_tapped_layers, config.target_hidden_size, generator=generator)
    anchors = torch.randint(0, config.vocab_size, (3,), generator=generator)
    drafts = torch.randint(0, config.vocab_size, (3, config.num_draft_tokens), generator=generator)
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(tmp_path / "target")
    with torch.no_grad():
        expected = first.bind_target(target)(states, anchors, drafts).logits
        assert torch.allclose(grown.bind_target(target)(states, anchors, drafts).logits, expected, atol=1e-6)
    # two steps move every weight of the new layers (the first step moves their output projections only)
    run_train(base + ["--output_dir", str(tmp_path / "trained"), "--max_steps", "2"] + grow)
    trained = DLiteForSpeculation.from_pretrained(tmp_path / "trained").state_dict()
    new = {k: v for k, v in grown.state_dict().items() if k not in old and "layernorm" not in k and "_norm" not in k}
    assert new and all(not torch.equal(v, trained[k]) for k, v in new.items()), [
        k for k, v in new.items() if torch.equal(v, trained[k])
    ]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--grow_layers", "2"], "--grow_layers 2 deepens the drafter passed as --init"),
        (["--grow_layers", "-1"], "--grow_layers must be >= 0"),
        (["--init", "DIR", "--lora", "--grow_layers", "1"], "--grow_layers 1 deepens the drafter passed as --init"),
        (["--refresh_draft_vocab"], "--refresh_draft_vocab re-chooses"),
        (["--init", "DIR", "--lora", "--refresh_draft_vocab"], "cannot be combined with --lora"),
    ],
)
def test_continuation_flags_need_a_drafter_to_start_from(tmp_path, smollm2_dir, flags, message):
    base = write_tiny_training_run(tmp_path, smollm2_dir)[1:]
    flags = [str(tmp_path / "missing") if f == "DIR" else f for f in flags]  # refused before anything loads
    with pytest.raises(SystemExit, match=message):
        run_train(base + ["--output_dir", str(tmp_path / "new"), "--max_steps", "0", *flags])


def test_init_only_saves_the_drafter_a_run_starts_from(tmp_path, smollm2_dir):
    base = write_tiny_training_run(tmp_path, smollm2_dir)[1:] + ["--seed", "3", "--draft_vocab_size", "16"]
    run_train(base + ["--output_dir", str(tmp_path / "init"), "--init_only"])
    run_train(base + ["--output_dir", str(tmp_path / "run"), "--max_steps", "0", "--learning_rate", "0"])
    saved, started = (DLiteForSpeculation.from_pretrained(tmp_path / name) for name in ("init", "run"))
    assert saved.draft_vocab_ids.numel() == 16  # chosen from --data, as the run chose it
    init, run = saved.config.to_dict(), started.config.to_dict()
    differ = {k for k in init.keys() | run.keys() if init.get(k) != run.get(k)}
    assert differ == {"_name_or_path"}  # the folder each was loaded from
    assert all(torch.equal(v, started.state_dict()[k]) for k, v in saved.state_dict().items())
    with pytest.raises(SystemExit, match="--init_only saves a new drafter .*got stage 'stable', --init"):
        run_train(base + ["--output_dir", str(tmp_path / "no"), "--init_only", "--init", str(tmp_path / "init")])


def test_sliding_window_trains_a_windowed_drafter_in_the_stable_stage(tmp_path, smollm2_dir):
    base = write_tiny_training_run(tmp_path, smollm2_dir)[1:]
    run_train(base + ["--output_dir", str(tmp_path / "free"), "--max_steps", "0", "--learning_rate", "0"])
    run_train(
        base
        + ["--output_dir", str(tmp_path / "w0"), "--max_steps", "0", "--learning_rate", "0", "--sliding_window", "4"]
    )
    start = DLiteForSpeculation.from_pretrained(tmp_path / "w0")
    assert start.config.history_window == 4
    assert DLiteForSpeculation.from_pretrained(tmp_path / "free").config.history_window == 0
    run_train(base + ["--output_dir", str(tmp_path / "w2"), "--max_steps", "2", "--sliding_window", "4"])
    trained = DLiteForSpeculation.from_pretrained(tmp_path / "w2")
    assert trained.config.history_window == 4
    # the history projection is read by the windowed forward, so the stable stage's gradient reaches it
    moved = [
        k for k, v in start.state_dict().items() if "history" in k and not torch.equal(v, trained.state_dict()[k])
    ]
    assert moved, [k for k in start.state_dict() if "history" in k]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--sliding_window", "-2"], "expected 0 \\(history-free\\) or N > 0"),
        (["--sliding_window", "8", "--stage", "teacher"], "builds a new windowed drafter for stage stable"),
        (["--sliding_window", "8", "--init", "DIR"], "drop --init/--lora"),
    ],
)
def test_sliding_window_is_refused_where_it_would_be_ignored(tmp_path, smollm2_dir, flags, message):
    base = write_tiny_training_run(tmp_path, smollm2_dir)[1:]
    flags = [str(tmp_path / "missing") if f == "DIR" else f for f in flags]
    with pytest.raises(SystemExit, match=message):
        run_train(base + ["--output_dir", str(tmp_path / "new"), "--max_steps", "0", *flags])


def test_an_init_saved_in_bfloat16_trains_float32_master_weights(tmp_path, smollm2_dir):
    base = write_tiny_training_run(tmp_path, smollm2_dir)[1:]
    run_train(base + ["--output_dir", str(tmp_path / "first"), "--max_steps", "1"])
    first = DLiteForSpeculation.from_pretrained(tmp_path / "first")
    first.to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    assert next(DLiteForSpeculation.from_pretrained(tmp_path / "bf16").parameters()).dtype == torch.bfloat16
    run_train(base + ["--output_dir", str(tmp_path / "next"), "--max_steps", "1", "--init", str(tmp_path / "bf16")])
    trained = DLiteForSpeculation.from_pretrained(tmp_path / "next", dtype=None)
    assert {v.dtype for v in trained.state_dict().values() if v.is_floating_point()} == {torch.float32}


def test_a_truncated_init_is_an_error_naming_the_file_and_the_fix(tmp_path, smollm2_dir):
    base = write_tiny_training_run(tmp_path, smollm2_dir)[1:]
    run_train(base + ["--output_dir", str(tmp_path / "first"), "--max_steps", "1"])
    weights = tmp_path / "first" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ValueError) as raised:
        run_train(base + ["--output_dir", str(tmp_path / "second"), "--max_steps", "1", "--init", str(weights.parent)])
    message = str(raised.value)
    assert "truncated or corrupt" in message and str(weights.parent) in message and "save the drafter again" in message
    assert not (tmp_path / "second" / "model.safetensors").exists()
