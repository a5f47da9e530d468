"""`dlite-hf train`: one stage of the recipe (teacher | warmup | stable) on `DLiteTrainer`; see `--help`."""

from __future__ import annotations

from pathlib import Path

from .common import set_threads


def build_train_parser():
    """The parser of `dlite-hf train`: `ScriptArguments` and `DLiteTrainingArguments`."""
    from transformers import HfArgumentParser

    from ..training.arguments import DLiteTrainingArguments, ScriptArguments

    return HfArgumentParser((ScriptArguments, DLiteTrainingArguments))


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


def _parse_train_args(argv: list[str]):
    """`dlite-hf train`'s arguments, checked before the target loads (flags the run would ignore are refused);
    sets the thread count."""
    # `--teacher DIR` (the spelling) is DLiteTrainingArguments.teacher_path
    argv = ["--teacher_path" if a == "--teacher" else a.replace("--teacher=", "--teacher_path=", 1) for a in argv]
    script, args = build_train_parser().parse_args_into_dataclasses(args=argv)
    set_threads(script.threads)
    if not script.data:
        raise SystemExit("--data is required: the JSONL written by `dlite-hf regenerate`.")
    grow, window = script.grow_layers, script.sliding_window
    if grow < 0:
        raise SystemExit(f"--grow_layers must be >= 0 (layers to add), got {grow}.")
    if grow and (not script.init or args.lora):
        raise SystemExit(
            f"--grow_layers {grow} deepens the drafter passed as --init (without --lora, whose adapter must fit the "
            "released drafter's layers); a new drafter takes --drafter_layers instead."
        )
    if script.refresh_draft_vocab and not script.init and args.stage != "warmup":
        raise SystemExit(
            "--refresh_draft_vocab re-chooses the draft vocabulary of a drafter you start from (--init, or --teacher "
            "for warmup); a new drafter chooses it from --data anyway. Drop the flag or pass --init."
        )
    if script.refresh_draft_vocab and args.lora:
        raise SystemExit(
            "--refresh_draft_vocab cannot be combined with --lora: LoRA keeps the drafter's vocabulary. Drop one flag."
        )
    if window < 0:
        raise SystemExit(f"--sliding_window {window!r}: expected 0 (history-free) or N > 0 positions.")
    if window and (args.stage != "stable" or script.init or args.lora):
        raise SystemExit(
            f"--sliding_window {window} builds a new windowed drafter for stage stable (got stage {args.stage!r}"
            f"{', --init' if script.init else ''}{', --lora' if args.lora else ''}). The teacher stage takes "
            "--history_window instead; drop --init/--lora to train a windowed drafter from scratch."
        )
    if args.lora and not script.init:
        raise SystemExit("--lora adapts a released drafter: pass --init <drafter folder>.")
    if script.init_only and (script.init or args.stage == "warmup"):
        raise SystemExit(
            f"--init_only saves a new drafter (stage teacher or stable, no --init); got stage {args.stage!r}"
            f"{', --init' if script.init else ''}. Drop --init_only to train from that start."
        )
    return script, args


def _starting_drafter(script, args, target_config, target_name: str, teacher):
    """What the stage trains: --init, else the warmup teacher's warm start, else a new drafter (or teacher)."""
    import torch

    from .. import DLiteForSpeculation
    from ..derived_drafters import derive_drafter

    if script.init:
        model = DLiteForSpeculation.from_pretrained(script.init, dtype=torch.float32)  # float32 master weights
        window = model.config.history_window
        if args.stage == "teacher" and window == 0:
            raise SystemExit("--init for stage teacher must be a history-aware checkpoint (history_window != 0).")
        if args.stage != "teacher" and window != 0 and not args.lora:
            raise SystemExit(
                f"--init {script.init} is a history-aware model (history_window={window}); "
                "stages warmup/stable train the history-free drafter. Pass it as --teacher for warmup."
            )
        return model
    if teacher is not None:  # warm start: the teacher's architecture and weights, minus its history projection
        return derive_drafter(teacher, "history_proj", history_window=0)
    window = args.history_window if args.stage == "teacher" else script.sliding_window
    return DLiteForSpeculation(_new_drafter_config(script, target_config, window, target_name))


def _adapted_drafter(script, args, model):
    """The starting drafter with --no_sequential_head, --grow_layers, --refresh_draft_vocab and --lora applied."""
    from ..derived_drafters import derive_drafter, grow_drafter

    if not script.sequential_head and model.head is not None:  # the pure-parallel ablation, same start
        model = derive_drafter(model, "head.", use_sequential_head=False)
    if script.grow_layers:
        model = grow_drafter(model, script.grow_layers)
    if script.refresh_draft_vocab:
        size = min(script.draft_vocab_size, model.config.vocab_size) or None
        model = derive_drafter(model, "draft_vocab_ids", draft_vocab_size=size)
    if args.lora:
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

    rows = [row for path in script.data.split(",") if path for row in read_jsonl(path)]  # files train together
    dataset = RegeneratedDataset(rows, max_length=args.max_length)
    drafter = model.get_base_model() if args.lora else model
    if drafter.draft_vocab_ids is not None and (script.refresh_draft_vocab or (not script.init and teacher is None)):
        set_draft_vocab(drafter, response_token_counts(dataset, drafter.config.vocab_size))
    if script.eval_fraction <= 0:
        return dataset, None
    n_eval = max(1, int(len(dataset) * script.eval_fraction))
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(args.seed)).tolist()
    return torch.utils.data.Subset(dataset, order[n_eval:]), torch.utils.data.Subset(dataset, order[:n_eval])


def run_train(argv: list[str]) -> Path:
    import torch
    from transformers import AutoConfig
    from transformers.trainer_utils import get_last_checkpoint

    from .. import DLiteForSpeculation
    from ..assets import open_target, resolve_model
    from ..training.trainer import DLiteTrainer

    script, args = _parse_train_args(argv)
    if script.init_only:  # the target's config is enough
        target, folder = None, resolve_model(script.target)
        target_config = AutoConfig.from_pretrained(folder)
    else:
        target, _, folder = open_target(
            script.target, script.target_adapter, dtype=script.target_dtype, device_map=script.target_device_map
        )
        target_config = target.config
    target_name = script.target if not Path(script.target).exists() else str(folder)
    teacher = None
    if args.stage == "warmup":
        teacher = DLiteForSpeculation.from_pretrained(args.teacher_path, dtype=torch.float32)
    torch.manual_seed(args.seed)  # a new drafter's random weights follow --seed
    model = _adapted_drafter(script, args, _starting_drafter(script, args, target_config, target_name, teacher))
    dataset, eval_dataset = _training_rows(script, args, model, teacher)
    if script.init_only:
        model.save_pretrained(args.output_dir)
        return Path(args.output_dir)
    card_info = {"base_model": target_name, "training": {"data": script.data, "target": target_name}}
    trainer = DLiteTrainer(
        model=model,
        target=target,
        args=args,
        train_dataset=dataset,
        eval_dataset=eval_dataset,
        teacher=teacher,
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
    import torch.distributed as dist

    run_train(argv)
    # Under torchrun / `accelerate launch` the Trainer leaves the process group open, and destroying it at exit races
    # with the backend's threads and can abort a rank after a successful run: all ranks close it at a barrier. (After
    # a failure the launcher stops the other ranks; a barrier there could only hang.)
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return 0
