"""`dlite-hf train`: one stage of the recipe (teacher | warmup | stable) on `DLiteTrainer`; see `--help`."""

from __future__ import annotations

from pathlib import Path

from ..defaults import DEFAULT_TARGET, DTYPE_CHOICES
from .common import set_threads


def build_train_parser():
    from dataclasses import dataclass, field

    from transformers import HfArgumentParser

    from ..training.arguments import DLiteTrainingArguments

    @dataclass
    class ScriptArguments:
        target: str = field(
            default=DEFAULT_TARGET, metadata={"help": "Target: a local folder, a Hub id or a registry name."}
        )
        data: str = field(
            default="",
            metadata={"help": "JSONL written by `dlite-hf regenerate` or `label-text`; several: comma-separated."},
        )
        init: str | None = field(default=None, metadata={"help": "Start from this drafter checkpoint folder."})
        target_adapter: str | None = field(default=None, metadata={"help": "PEFT adapter to apply to the target."})
        target_dtype: str = field(
            default="float32",
            metadata={
                "help": "The target's dtype while training: its hidden states (the drafter's features) and p^T are "
                "computed in it (bfloat16: features as a bfloat16 target serves them; the drafter's own weights stay "
                "float32, see --bf16 for autocast).",
                "choices": list(DTYPE_CHOICES),
            },
        )
        target_device_map: str | None = field(
            default=None,
            metadata={
                "help": "Place the frozen target with accelerate's big-model dispatch (e.g. auto: a target that does "
                "not fit one device is spread over the GPUs and the CPU); the trainer then leaves it where it is. "
                "Default: the whole target on the training device."
            },
        )
        num_tapped_layers: int = field(default=6, metadata={"help": "New drafters: target layers to tap (L)."})
        num_draft_tokens: int = field(default=7, metadata={"help": "New drafters: K."})
        drafter_hidden_size: int | None = field(default=None, metadata={"help": "New drafters: backbone width."})
        drafter_layers: int = field(default=5, metadata={"help": "New drafters: backbone layers."})
        drafter_heads: int = field(default=8, metadata={"help": "New drafters: attention heads."})
        drafter_kv_heads: int = field(default=4, metadata={"help": "New drafters: key/value heads."})
        drafter_intermediate_size: int | None = field(default=None, metadata={"help": "New drafters: MLP width."})
        head_rank: int = field(default=64, metadata={"help": "New drafters: rank R of the sequential head."})
        draft_vocab_size: int = field(
            default=8192,
            metadata={
                "help": "New drafters (and --refresh_draft_vocab): draft among the N most frequent response tokens "
                "(0: full vocabulary)."
            },
        )
        refresh_draft_vocab: bool = field(
            default=False,
            metadata={
                "help": "With --init or --teacher: choose the draft vocabulary again from --data (size "
                "--draft_vocab_size, 0: full vocabulary) instead of keeping the one chosen when the drafter was "
                "created. Use it when the data grew since then: a stale vocabulary cannot draft the new tokens."
            },
        )
        grow_layers: int = field(
            default=0,
            metadata={
                "help": "With --init: add this many backbone layers on top, their output projections (attention "
                "o_proj, MLP down_proj) at zero, so training starts from exactly the init's drafts with more depth."
            },
        )
        sequential_head: bool = field(
            default=True, metadata={"help": "New drafters: keep the recurrent head (--no_sequential_head: ablation)."}
        )
        sliding_window: int = field(
            default=0,
            metadata={
                "help": "Stage stable, new drafters: attend to the target's last N positions before each "
                "block's context (the paper's sliding-window ablation; 0: history-free, the shipped design)."
            },
        )
        threads: int | None = field(default=None, metadata={"help": "torch.set_num_threads for this run."})
        eval_fraction: float = field(default=0.0, metadata={"help": "Fraction of rows held out for eval logs."})

    return HfArgumentParser((ScriptArguments, DLiteTrainingArguments)), ScriptArguments


def _new_drafter_config(script, target_config, history_window: int, name: str):
    from .. import DLiteConfig

    return DLiteConfig.for_target(
        target_config,
        num_target_layers_tapped=script.num_tapped_layers,
        target_name_or_path=name,
        num_draft_tokens=script.num_draft_tokens,
        hidden_size=script.drafter_hidden_size,
        num_hidden_layers=script.drafter_layers,
        num_attention_heads=script.drafter_heads,
        num_key_value_heads=script.drafter_kv_heads,
        intermediate_size=script.drafter_intermediate_size,
        head_rank=script.head_rank,
        use_sequential_head=script.sequential_head,
        draft_vocab_size=min(script.draft_vocab_size, target_config.vocab_size) or None,
        history_window=history_window,
    )


def _check_sliding_window(script, args) -> None:
    """--sliding_window builds a new windowed drafter for the stable stage: refuse it where it would be ignored."""
    window = script.sliding_window
    if not isinstance(window, int) or window < 0:
        raise SystemExit(f"--sliding_window {window!r}: expected 0 (history-free) or N > 0 positions.")
    if window and (args.stage != "stable" or script.init or args.lora):
        raise SystemExit(
            f"--sliding_window {window} builds a new windowed drafter for stage stable (got stage {args.stage!r}"
            f"{', --init' if script.init else ''}{', --lora' if args.lora else ''}). The teacher stage takes "
            "--history_window instead; drop --init/--lora to train a windowed drafter from scratch."
        )


def _check_continuation_flags(script, args) -> None:
    """--grow_layers and --refresh_draft_vocab change a drafter the run starts from: check they have one."""
    if script.grow_layers < 0:
        raise SystemExit(f"--grow_layers must be >= 0 (layers to add), got {script.grow_layers}.")
    if script.grow_layers and (not script.init or args.lora):
        raise SystemExit(
            f"--grow_layers {script.grow_layers} deepens the drafter passed as --init (without --lora, whose "
            "adapter must fit the released drafter's layers); a new drafter takes --drafter_layers instead."
        )
    if script.refresh_draft_vocab and not script.init and args.stage != "warmup":
        raise SystemExit(
            "--refresh_draft_vocab re-chooses the draft vocabulary of a drafter you start from (--init, or "
            "--teacher for warmup); a new drafter chooses it from --data anyway. Drop the flag or pass --init."
        )
    if script.refresh_draft_vocab and args.lora:
        raise SystemExit(
            "--refresh_draft_vocab cannot be combined with --lora: a LoRA adapter is loaded onto the released "
            "drafter, so it must keep that drafter's draft vocabulary. Drop one of the two flags."
        )


def _parse_train_args(argv: list[str]):
    """`dlite-hf train`'s arguments, checked before the target loads; sets the thread count."""
    parser, _ = build_train_parser()
    # `--teacher DIR` (the spelling) is DLiteTrainingArguments.teacher_path
    argv = ["--teacher_path" if a == "--teacher" else a.replace("--teacher=", "--teacher_path=", 1) for a in argv]
    script, args = parser.parse_args_into_dataclasses(args=argv)
    set_threads(script.threads)
    if not script.data:
        raise SystemExit("--data is required: the JSONL written by `dlite-hf regenerate`.")
    _check_continuation_flags(script, args)  # before the target loads
    _check_sliding_window(script, args)
    return script, args


def _drafter_from_init(script, args):
    """The drafter of --init (float32 master weights), as the stage may train it."""
    import torch

    from .. import DLiteForSpeculation
    from ..derived_drafters import derive_drafter

    model = DLiteForSpeculation.from_pretrained(script.init, dtype=torch.float32)
    if not script.sequential_head and model.head is not None:  # the pure-parallel ablation, same start
        model = derive_drafter(model, "head.", use_sequential_head=False)
    if args.stage == "teacher" and model.config.history_window == 0:
        raise SystemExit("--init for stage teacher must be a history-aware checkpoint (history_window != 0).")
    if args.stage != "teacher" and model.config.history_window != 0 and not args.lora:
        raise SystemExit(
            f"--init {script.init} is a history-aware model (history_window={model.config.history_window}); "
            "stages warmup/stable train the history-free drafter. Pass it as --teacher for warmup."
        )
    return model


def _starting_drafter(script, args, target_config, target_name: str, teacher):
    """What the stage trains: --init, else a new teacher, else the warmup teacher's warm start, else a new drafter."""
    from .. import DLiteForSpeculation
    from ..derived_drafters import derive_drafter

    if script.init:
        return _drafter_from_init(script, args)
    if args.stage == "teacher":
        return DLiteForSpeculation(_new_drafter_config(script, target_config, args.history_window, target_name))
    if teacher is not None:
        # warm start: the teacher's architecture and weights, minus its history projection
        model = derive_drafter(teacher, "history_proj", history_window=0)
        if not script.sequential_head and model.head is not None:
            model = derive_drafter(model, "head.", use_sequential_head=False)
        return model
    return DLiteForSpeculation(_new_drafter_config(script, target_config, script.sliding_window, target_name))


def _adapted_drafter(script, args, model):
    """The starting drafter with --grow_layers, --refresh_draft_vocab and --lora applied, in that order."""
    from ..derived_drafters import derive_drafter, grow_drafter

    if script.grow_layers:
        model = grow_drafter(model, script.grow_layers)
    if script.refresh_draft_vocab:
        size = min(script.draft_vocab_size, model.config.vocab_size) or None
        model = derive_drafter(model, "draft_vocab_ids", draft_vocab_size=size)
    if args.lora:
        if not script.init:
            raise SystemExit("--lora adapts a released drafter: pass --init <drafter folder>.")
        from peft import LoraConfig, get_peft_model

        from ..training.arguments import LORA_DEFAULT_TARGETS

        targets = args.lora_target_modules or list(LORA_DEFAULT_TARGETS)
        model = get_peft_model(model, LoraConfig(r=args.lora_r, lora_alpha=args.lora_alpha, target_modules=targets))
    return model


def _training_rows(script, args, model, teacher):
    """The rows of --data (several files train together), after choosing the draft vocabulary of a new or
    refreshed drafter from them; split into (train, eval) by --eval_fraction (eval None without one)."""
    import torch

    from ..draft_vocab import set_draft_vocab
    from ..jsonl import read_jsonl
    from ..training.data import RegeneratedDataset, response_token_counts

    paths = [p for p in script.data.split(",") if p]  # several row files (regenerate, label-text) train together
    dataset = RegeneratedDataset(
        paths[0] if len(paths) == 1 else [row for path in paths for row in read_jsonl(path)],
        max_length=args.max_length,
    )
    drafter = model.get_base_model() if args.lora else model
    if drafter.draft_vocab_ids is not None and (script.refresh_draft_vocab or (not script.init and teacher is None)):
        set_draft_vocab(drafter, response_token_counts(dataset, drafter.config.vocab_size))
    if script.eval_fraction <= 0:
        return dataset, None
    n_eval = max(1, int(len(dataset) * script.eval_fraction))
    generator = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(len(dataset), generator=generator).tolist()
    return torch.utils.data.Subset(dataset, order[n_eval:]), torch.utils.data.Subset(dataset, order[:n_eval])


def run_train(argv: list[str]) -> Path:
    import torch
    from transformers.trainer_utils import get_last_checkpoint

    from .. import DLiteForSpeculation
    from ..assets import open_target
    from ..training.trainer import DLiteTrainer

    script, args = _parse_train_args(argv)
    target, _, folder = open_target(
        script.target, script.target_adapter, dtype=script.target_dtype, device_map=script.target_device_map
    )
    target_name = script.target if not Path(script.target).exists() else str(folder)
    teacher = None
    if args.stage == "warmup":
        teacher = DLiteForSpeculation.from_pretrained(args.teacher_path, dtype=torch.float32)
    model = _starting_drafter(script, args, target.config, target_name, teacher)
    model = _adapted_drafter(script, args, model)
    dataset, eval_dataset = _training_rows(script, args, model, teacher)
    card_info = {
        "base_model": target_name,
        "training": {"data": script.data, "target": target_name},
    }
    trainer = DLiteTrainer(
        model=model,
        target=target,
        args=args,
        train_dataset=dataset,
        eval_dataset=eval_dataset,
        teacher=teacher,
        processing_class=None,
        card_info=card_info,
    )
    resume = args.resume_from_checkpoint
    if resume is None and Path(args.output_dir).is_dir():
        resume = get_last_checkpoint(args.output_dir)
    trainer.train(resume_from_checkpoint=resume)
    trainer.save_model(args.output_dir)
    if args.push_to_hub:
        trainer.push_to_hub(commit_message=f"DLite drafter, stage {args.stage}")
    return Path(args.output_dir)


def cmd_train(argv: list[str]) -> int:
    run_train(argv)
    _close_process_group()
    return 0


def _close_process_group() -> None:
    """Tear the distributed process group down before the interpreter exits.

    Under torchrun / `accelerate launch` the Trainer leaves a gloo (or NCCL) group open; destroying it at
    interpreter exit races with the backend's worker threads and can abort a rank ("terminate called
    without an active exception") after a successful run. All ranks wait at a barrier, then close it. (After
    a failure the launcher stops the other ranks; a barrier there could only hang.)
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
