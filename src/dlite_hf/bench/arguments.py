"""The flags of `dlite-hf bench`, in the order `--help` lists them: the models, the drafting settings, what is
measured, the sessions, the runtime and the outputs (the command itself: :mod:`dlite_hf.bench.command`)."""

from __future__ import annotations

import argparse

from ..commands.common import ATTENTION_HELP, DTYPE_HELP, positive_int
from ..data.bfcl import BFCL_CATEGORIES
from ..data.workloads import LONG_MAX_TOKENS, WORKLOAD_CHOICES
from ..defaults import ATTENTION_CHOICES, DTYPE_CHOICES
from .methods import METHOD_CHOICES

DEFAULT_WORKLOADS = "chat,code,math,tool,agentic,long,legal,clinical"  # the last three: out of domain
DEFAULT_METHODS = "plain,prompt_lookup,dlite"


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """Every flag of `dlite-hf bench`, in `--help` order."""
    _add_model_arguments(parser)
    _add_run_arguments(parser)
    _add_runtime_arguments(parser)


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The target, the checkpoints the methods need, and the DLite / hybrid per-call settings."""
    parser.add_argument("--target", default="smollm2-135m", help="target: a local folder, Hub id or registry name")
    parser.add_argument(
        "--drafter",
        help="methods dlite, dlite_fixed, hybrid: a drafter folder, Hub id or name (default dlite-smollm2-135m)",
    )
    parser.add_argument("--drafter-nohead", help="method dlite_nohead: a no-sequential-head drafter")
    parser.add_argument("--drafter-history", help="method history: a history-aware checkpoint")
    parser.add_argument("--assistant", help="method assisted: a small assistant LM (registry name or folder)")
    for flag in ("confidence", "skip"):  # dlite_fixed always uses 0: K drafts every round
        parser.add_argument(
            f"--{flag}-threshold",
            type=float,
            help=f"draft_{flag}_threshold of methods dlite, dlite_nohead and history (default: each checkpoint's "
            "config; dlite_fixed: 0)",
        )
    parser.add_argument("--lookup-tokens", type=int, help="method hybrid: the cap on a retrieved draft (default 16)")
    parser.add_argument(
        "--lookup-min-match",
        type=int,
        help="method hybrid: draft the retrieved continuation of a matched suffix this long (default: the drafter's)",
    )
    parser.add_argument(
        "--lookup-fallback-min-match",
        type=int,
        help="method hybrid: when the drafter proposes nothing, draft the retrieved continuation of a match this "
        "long (0: off; default: the drafter's)",
    )


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """What is measured: the workloads (or your prompts), the methods, how much, how often; the sessions."""
    parser.add_argument(
        "--workloads",
        help=f"comma-separated, from: {', '.join(WORKLOAD_CHOICES)} (default {DEFAULT_WORKLOADS}; with --prompts: "
        "none unless given)",
    )
    parser.add_argument(
        "--prompts",
        help="your own prompts as one more workload, 'prompts': a JSONL file, one row per prompt with `messages` "
        "(the chat format) and optionally `id`; every row is measured",
    )
    parser.add_argument(
        "--methods", default=DEFAULT_METHODS, help=f"comma-separated, from: {', '.join(METHOD_CHOICES)}"
    )
    parser.add_argument(
        "--num-prompts",
        type=positive_int("--num-prompts"),
        default=4,
        help="prompts per workload (per long length; ToolTalk sessions)",
    )
    parser.add_argument("--max-new-tokens", type=positive_int("--max-new-tokens"), default=128)
    parser.add_argument(
        "--repeats",
        type=positive_int("--repeats", ">= 1 (1 measures every turn once)"),
        default=1,
        help="measure every turn this many times with every method (interleaved, from the same state), keep the "
        "fastest: timing noise only adds time",
    )
    parser.add_argument(
        "--long-lengths", default="1024,4096", help=f"prompt lengths of the long workload (<= {LONG_MAX_TOKENS})"
    )
    parser.add_argument(
        "--agentic-max-tokens", type=int, default=8192, help="agentic sessions stop when the context passes this"
    )
    parser.add_argument(
        "--agentic-max-turns", type=positive_int("--agentic-max-turns"), default=8, help="turns per session"
    )
    parser.add_argument("--coding-sessions", type=int, default=1, help="coding sessions (stdlib files) in agentic")
    parser.add_argument(
        "--coding-files",
        type=positive_int("--coding-files"),
        default=3,
        help="files a coding session reads (up to 8: with 8 files of 2048 tokens, contexts pass 16k)",
    )
    parser.add_argument(
        "--coding-file-tokens",
        type=positive_int("--coding-file-tokens"),
        default=None,
        help="tokens of each file a coding session reads (default: --agentic-max-tokens / 4)",
    )
    parser.add_argument(
        "--prefix-cache",
        action="store_true",
        help="multi-turn sessions: every method keeps its KV cache across turns (cropped to the shared prefix), so a "
        "turn prefills only its new tokens, as serving with prefix caching does",
    )
    parser.add_argument(
        "--bfcl-sessions", type=int, default=1, help="BFCL multi-turn sessions (executable tool backends) in agentic"
    )
    parser.add_argument(
        "--bfcl-category",
        default="multi_turn_base",
        choices=BFCL_CATEGORIES,
        help="BFCL multi-turn category (long_context: large scenarios, long tool results)",
    )


def _add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """Threads, dtype and attention (the same for every method of the run); the outputs."""
    parser.add_argument("--threads", type=positive_int("--threads"), default=1, help="torch.set_num_threads")
    parser.add_argument(
        "--dtype", default="float32", choices=DTYPE_CHOICES, help=f"{DTYPE_HELP}; the drafters follow the target"
    )
    parser.add_argument(
        "--attention", default="sdpa", choices=ATTENTION_CHOICES, help=f"{ATTENTION_HELP}, the assistant's too"
    )
    parser.add_argument(
        "--pack-weights",
        action="store_true",
        help="the target's (and assistant's) linear layers on weights packed once (bfloat16 on a CPU: "
        "dlite_hf.pack_linears; the drafter's always are)",
    )
    parser.add_argument(
        "--sdpa-gqa",
        action="store_true",
        help="set TRANSFORMERS_SDPA_FORCE_GQA=1: on CPU, transformers otherwise copies the KV cache to repeat "
        "grouped-query heads in every verification forward, a cost that grows with context",
    )
    parser.add_argument("--out", default="benchmarks/results/", help="output folder")
    parser.add_argument("--name", help="file-name stem (default: <target>-<UTC time>)")
    parser.add_argument(
        "--allow-mismatch", action="store_true", help="exit 0 even if a greedy output differs from plain"
    )
    parser.add_argument("--plot", action="store_true", help="also draw the PNG plots (<name>_<plot>.png)")
    parser.add_argument("--no-plots", action="store_true", help=argparse.SUPPRESS)  # the default; old commands
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up generation per method")
