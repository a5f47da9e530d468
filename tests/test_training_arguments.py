"""Tests of DLiteTrainingArguments: defaults, validation, CLI parsing."""

from __future__ import annotations

import dataclasses

import pytest
from transformers import HfArgumentParser

from dlite_hf.training.arguments import DLiteTrainingArguments


def test_defaults(tmp_path):
    args = DLiteTrainingArguments(output_dir=str(tmp_path), stage="stable")
    assert args.stage == "stable"
    assert args.num_anchors == 16
    assert args.loss_decay_gamma == 4.0 and args.loss_decay_form == "divide"
    assert args.lambda_ce == 0.1 and args.lambda_tv == 1.0
    assert args.teacher_path is None
    assert args.max_length == 1024
    assert args.history_window == -1
    assert args.feature_cache_dir is None
    assert args.lora is False and args.lora_target_modules is None
    assert args.remove_unused_columns is False
    assert args.report_to == []  # "none", normalised by TrainingArguments
    assert args.learning_rate == 4e-4


def test_warmup_requires_teacher_path(tmp_path):
    with pytest.raises(ValueError, match="teacher_path"):
        DLiteTrainingArguments(output_dir=str(tmp_path), stage="warmup")
    args = DLiteTrainingArguments(output_dir=str(tmp_path), stage="warmup", teacher_path="out/teacher")
    assert args.teacher_path == "out/teacher"


@pytest.mark.parametrize("stage", ["teacher", "stable"])
def test_teacher_path_rejected_outside_warmup(tmp_path, stage):
    with pytest.raises(ValueError, match="teacher_path"):
        DLiteTrainingArguments(output_dir=str(tmp_path), stage=stage, teacher_path="out/teacher")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("stage", "pretrain"),
        ("num_anchors", 0),
        ("loss_decay_gamma", 0.0),
        ("loss_decay_gamma", float("nan")),
        ("loss_decay_form", "exp"),
        ("lambda_ce", -0.1),
        ("lambda_tv", float("inf")),
        ("max_length", 2),
        ("vocab_chunk_size", 0),
        ("anchor_stride", 0),
        ("history_window", -2),
        ("feature_cache_dir", ""),
        ("lora_r", 0),
        ("lora_alpha", 0),
        ("lora_target_modules", []),
    ],
)
def test_bad_values_raise_with_field_name(tmp_path, field, value):
    with pytest.raises(ValueError, match=field) as excinfo:
        DLiteTrainingArguments(output_dir=str(tmp_path), **{field: value})
    assert "expected" in str(excinfo.value)


def test_stable_needs_a_nonzero_loss(tmp_path):
    with pytest.raises(ValueError, match="lambda"):
        DLiteTrainingArguments(output_dir=str(tmp_path), stage="stable", lambda_ce=0.0, lambda_tv=0.0)
    DLiteTrainingArguments(output_dir=str(tmp_path), stage="stable", lambda_ce=0.0, lambda_tv=1.0)


def test_single_lora_target_module_string_becomes_list(tmp_path):
    args = DLiteTrainingArguments(output_dir=str(tmp_path), lora=True, lora_target_modules="all-linear")
    assert args.lora_target_modules == ["all-linear"]


def test_hf_argument_parser_round_trip(tmp_path):
    parser = HfArgumentParser(DLiteTrainingArguments)
    cli = [
        "--output_dir",
        str(tmp_path),
        "--stage",
        "warmup",
        "--teacher_path",
        "out/teacher",
        "--num_anchors",
        "8",
        "--loss_decay_gamma",
        "2.5",
        "--loss_decay_form",
        "multiply",
        "--lambda_ce",
        "0.2",
        "--lambda_tv",
        "0.5",
        "--max_length",
        "256",
        "--vocab_chunk_size",
        "4",
        "--feature_cache_dir",
        str(tmp_path / "cache"),
        "--history_window",
        "128",
        "--lora",
        "--lora_r",
        "8",
        "--lora_alpha",
        "16",
        "--lora_target_modules",
        "q_proj",
        "v_proj",
        "--max_steps",
        "2",
    ]
    (args,) = parser.parse_args_into_dataclasses(cli)
    assert isinstance(args, DLiteTrainingArguments)
    assert args.stage == "warmup" and args.teacher_path == "out/teacher"
    assert args.num_anchors == 8
    assert args.loss_decay_gamma == 2.5 and args.loss_decay_form == "multiply"
    assert args.lambda_ce == 0.2 and args.lambda_tv == 0.5
    assert args.max_length == 256 and args.vocab_chunk_size == 4
    assert args.feature_cache_dir == str(tmp_path / "cache") and args.history_window == 128
    assert args.lora is True and args.lora_r == 8 and args.lora_alpha == 16
    assert args.lora_target_modules == ["q_proj", "v_proj"]
    assert args.max_steps == 2

    # dict round trip (the path YAML / JSON configs take): to_dict() parses back into the same values
    init_fields = {f.name for f in dataclasses.fields(DLiteTrainingArguments) if f.init}
    as_dict = {k: v for k, v in args.to_dict().items() if k in init_fields} | {"report_to": "none"}
    (again,) = parser.parse_dict(as_dict)
    assert again.stage == args.stage and again.lora_target_modules == args.lora_target_modules
    assert again.num_anchors == 8 and again.loss_decay_form == "multiply"


def test_hf_argument_parser_rejects_unknown_stage(tmp_path):
    parser = HfArgumentParser(DLiteTrainingArguments)
    with pytest.raises(SystemExit):
        parser.parse_args_into_dataclasses(["--output_dir", str(tmp_path), "--stage", "pretrain"])


@pytest.mark.parametrize("native", [True, False])
def test_bf16_on_a_cpu_without_native_bfloat16_warns_and_says_how_to_train_in_float32(
    tmp_path, monkeypatch, caplog, native
):
    from dlite_hf.training import arguments

    monkeypatch.setattr(arguments, "native_bfloat16", lambda device="cpu": native)
    with caplog.at_level("WARNING", logger=arguments.__name__):
        args = DLiteTrainingArguments(output_dir=str(tmp_path), stage="stable", bf16=True, use_cpu=True)
        DLiteTrainingArguments(output_dir=str(tmp_path), stage="stable", bf16=False, use_cpu=True)
    assert args.bf16 is True  # what was asked is kept
    warned = [r.getMessage() for r in caplog.records if "without native bfloat16" in r.getMessage()]
    assert len(warned) == (0 if native else 1)
    if warned:
        assert "--bf16 false" in warned[0]
