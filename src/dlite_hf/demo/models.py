"""The demo's flags and models: its command line (defaults from the DLITE_* and GRADIO_* environment variables, read
by app.py with :func:`parse_app_args`; a bad value there stops the start with a message), and loading the target, the
drafter and the example prompts, with messages a person can act on, and the page's line about what was loaded.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..commands.common import ATTENTION_HELP, DTYPE_HELP
from ..defaults import (
    ATTENTION_CHOICES,
    DEFAULT_ATTENTION,
    DEFAULT_DRAFTER,
    DEFAULT_DTYPE,
    DEFAULT_TARGET,
    DTYPE_CHOICES,
    check_attention,
    check_dtype,
    default_drafter_dir,
)

GREEDY, SAMPLING = "greedy", "sampling"  # the page's decoding choices
TARGET_ENV = "DLITE_TARGET"
DRAFTER_ENV = "DLITE_DRAFTER"


def env_default(name: str, fallback: str | None) -> str | None:
    """``$name`` if set and non-empty, else ``fallback``."""
    return os.environ.get(name, "").strip() or fallback


def parse_app_args(description: str | None = None, argv: list[str] | None = None) -> argparse.Namespace:
    """The demo's flags; unknown arguments are ignored (so `gradio app.py` and hosted runners can import it)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add(
        "--target",
        default=env_default(TARGET_ENV, DEFAULT_TARGET),
        help=f"target model: a registry name or a local folder (env {TARGET_ENV}; default {DEFAULT_TARGET})",
    )
    add(
        "--drafter",
        default=env_default(DRAFTER_ENV, None),
        help=f"DLite drafter folder (env {DRAFTER_ENV}; default: the shipped drafters/dlite-smollm2-135m)",
    )
    # argparse checks `choices` only on the command line: a bad environment value is refused here
    for flag, env, default, choices, text in (
        ("--dtype", "DLITE_DTYPE", DEFAULT_DTYPE, DTYPE_CHOICES, DTYPE_HELP),
        ("--attention", "DLITE_ATTENTION", DEFAULT_ATTENTION, ATTENTION_CHOICES, ATTENTION_HELP),
    ):
        value = env_default(env, default)
        if value not in choices:
            raise SystemExit(f"{env}={value!r} is invalid: expected one of {', '.join(choices)} (or leave it unset).")
        add(flag, default=value, choices=choices, help=f"{text}; env {env}, default {default}")
    port = env_default("GRADIO_SERVER_PORT", "7860")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise SystemExit(f"GRADIO_SERVER_PORT={port!r} is invalid: expected a port number (1-65535), e.g. 7861.")
    add(
        "--host",
        default=env_default("GRADIO_SERVER_NAME", "127.0.0.1"),
        help="address to listen on (0.0.0.0 for every interface; env GRADIO_SERVER_NAME, gradio's convention)",
    )
    add("--port", type=int, default=int(port), help="port (env GRADIO_SERVER_PORT, gradio's convention; default 7860)")
    add("--threads", type=int, help="torch.set_num_threads (default: torch's choice; 1 = stable timings)")
    add("--no-warm-up", action="store_true", help="skip the short warm-up generation at start")
    return parser.parse_known_args(argv)[0]


LONG_EXAMPLE_TOKENS = 1024  # long enough for prompt reuse to matter, short enough to prefill in seconds on a CPU
EXAMPLE_WORKLOADS = (
    ("chat", "chat"),
    ("code", "code"),
    ("math", "math"),
    ("tool", "tool call"),
    ("agentic", "agentic, multi-turn tool use"),
    ("long", "long context"),
)


@dataclass
class DemoModels:
    """What the page runs on: the target and its tokenizer, the drafter (checked against the target), what was
    asked for, the dtype and attention. A missing piece is ``None``, its ``*_error`` the message the page shows."""

    target: Any = None
    tokenizer: Any = None
    drafter: Any = None
    target_name: str = DEFAULT_TARGET
    drafter_path: str | None = None
    dtype: str = DEFAULT_DTYPE
    attention: str = DEFAULT_ATTENTION
    target_error: str | None = None
    drafter_error: str | None = None


def missing_drafter_message(path: Path, default: bool) -> str:
    where = "the shipped drafter's place" if default else "the folder given"
    return (
        f"No DLite drafter at `{path}` ({where}). The trained SmolLM2-135M drafter ships in the repository as "
        "`drafters/dlite-smollm2-135m` (pull the latest checkout), or train one with `scripts/train_smollm2.sh` "
        "(`dlite-hf train`, see the README). Point the demo at any drafter folder saved by `dlite-hf train` or "
        f"`save_pretrained`: `python app.py --drafter PATH` or `{DRAFTER_ENV}=PATH python app.py`. The target-alone "
        "and prompt-lookup columns work without a drafter."
    )


def load_models(
    target: str = DEFAULT_TARGET,
    drafter: str | Path | None = None,
    *,
    dtype: str = DEFAULT_DTYPE,
    attention: str = DEFAULT_ATTENTION,
) -> DemoModels:
    """Load the target (registry name, Hub id or folder) and the drafter (default: the shipped one). A missing or
    mismatched asset does not raise: its message is in the result. A registry target is never downloaded here (the
    page must not stall for minutes; ``make assets`` does it)."""
    from .. import assets

    models = DemoModels(target_name=str(target), dtype=check_dtype(dtype), attention=check_attention(attention))
    folder = None
    try:  # a folder, a Hub id or a registry name (only one already fetched)
        folder = assets.resolve_model(str(target), fetch=False)
        models.target, models.tokenizer = assets.load_target(folder, dtype=dtype, attention=attention)
    except assets.AssetError as error:
        models.target_error = (
            f"{error} Pass `--target DIR` (or `{TARGET_ENV}`) with a transformers model folder, a Hub id or a known "
            f"name; fetch the default with `make assets` or `dlite-hf assets fetch {DEFAULT_TARGET}` and restart "
            "the demo."
        )
    except (OSError, ValueError) as error:
        models.target_error = f"Could not load the target from `{folder}`: {error}"

    default = drafter is None or str(drafter) == ""
    try:  # a folder, a Hub id or a drafter name (the default: the shipped one, found by name)
        path = assets.resolve_drafter(DEFAULT_DRAFTER if default else drafter)
    except assets.AssetError:
        path = default_drafter_dir() if default else Path(drafter).expanduser()
    models.drafter_path = str(path)
    if not path.is_dir():
        models.drafter_error = missing_drafter_message(path, default)
    elif models.target is not None:
        try:
            models.drafter = assets.load_drafter(path, models.target)
        except (OSError, ValueError) as error:
            models.drafter_error = f"Could not use the drafter at `{path}`: {error}"
    return models


def load_examples(tokenizer: Any = None) -> tuple[dict[str, list[dict[str, str]]], str | None]:
    """Example conversations of the evaluation split (two per workload, one long one) by dropdown label, and a note
    saying which workloads could not be loaded (or ``None``)."""
    from ..assets import AssetError
    from ..data.prompts import load_long, load_prompts

    if tokenizer is None:
        return {}, "Example prompts appear once the target model is available."
    examples: dict[str, list[dict[str, str]]] = {}
    problems = []
    for workload, label in EXAMPLE_WORKLOADS:
        try:
            if workload == "long":
                prompts = load_long(LONG_EXAMPLE_TOKENS, tokenizer, "eval", limit=1)
            else:
                prompts = load_prompts(workload, "eval", limit=2)
        except (AssetError, OSError, ValueError) as error:
            problems.append(f"{label}: {error}")
            continue
        examples.update({f"{label} · {prompt['id']}": prompt["messages"] for prompt in prompts})
    return examples, ("Some example prompts could not be loaded (" + "; ".join(problems) + ")." if problems else None)


def describe_models(models: DemoModels) -> str:
    """The page's line about the models: target, drafter (and its training record), dtype mode, attention, CPU."""
    lines = []
    if models.target is not None:
        config = models.target.config
        lines.append(
            f"**Target** `{models.target_name}` ({(config.architectures or [type(models.target).__name__])[0]}, "
            f"{config.num_hidden_layers} layers, {models.target.num_parameters() / 1e6:.0f}M parameters)"
        )
    if models.drafter is not None:
        config = models.drafter.config
        lines.append(
            f"**Drafter** `{models.drafter_path}` (DLite, K = {config.num_draft_tokens}, "
            f"{len(config.target_layer_ids)} tapped layers, {config.num_hidden_layers}-layer backbone, "
            f"R = {config.head_rank}, {models.drafter.num_parameters() / 1e6:.1f}M parameters; "
            f"{_training_record(models.drafter_path)})"
        )
    chosen = ""
    if models.dtype == "fastest":
        from ..defaults import native_bfloat16

        reason = "computes bfloat16 natively (AVX512-BF16 or AMX)"
        if not native_bfloat16("cpu"):
            reason = "has no native bfloat16 (no AVX512-BF16 or AMX), where float32 is the faster mode"
        chosen = f" (`--dtype fastest`: this CPU {reason})"
    lines.append(f"**Mode** {dtype_mode(models)}{chosen}; attention `{models.attention}`")
    lines.append(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {os.cpu_count()} CPU cores")
    return " · ".join(lines)


def dtype_mode(models: DemoModels) -> str:
    """What the page says about the dtype: which losslessness guarantee greedy decoding has in it."""
    dtype = str(models.target.dtype).removeprefix("torch.") if models.target is not None else models.dtype
    if dtype == "float32":
        return "float32: greedy output token-identical to the target alone"
    return (
        f"{dtype}: greedy output matches the target alone except at near-ties (two top tokens within rounding "
        "of each other, where the verification forward's kernels round differently; see the README, Results); "
        "`--dtype float32` is the token-exact mode"
    )


def _training_record(drafter_path: str | None) -> str:
    """What `dlite_training.json` (written by `dlite-hf train`) says about the drafter's training."""
    record = Path(drafter_path or "") / "dlite_training.json"
    if not record.is_file():
        return "no training record (dlite_training.json): if it is untrained, expect tau near 1 and a slowdown"
    try:
        info = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "unreadable training record"
    return f"trained: stage {info.get('stage', '?')}, {info.get('global_step', '?')} steps"
