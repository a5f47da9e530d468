"""Measuring one generate() call (:class:`_Runner`, the state of one benchmark run): hooks on the target's (and the
assistant's) top-level forward count and time every forward, so every method is measured by the same code; DLite
drafters add their own statistics (`drafter.last_generation_stats`); and peak memory."""

from __future__ import annotations

import contextlib
import gc
import inspect
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch
import transformers
from torch import nn

from .. import __version__
from ..defaults import native_bfloat16
from ..neartie import NearTieChecker
from .methods import BenchMethod


class ForwardTimer:
    """Forward pre/post hooks on one module: the number of input positions and the wall time of every forward."""

    def __init__(self, module: nn.Module):
        self.forwards: list[tuple[int, float]] = []
        self._started: float | None = None
        self._length = 0
        self._handles = [
            module.register_forward_pre_hook(self._pre, with_kwargs=True),
            module.register_forward_hook(self._post, with_kwargs=True),
        ]

    def _pre(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        inputs = kwargs.get("input_ids", args[0] if args else None)
        if inputs is None:
            inputs = kwargs.get("inputs_embeds")
        self._length = int(inputs.shape[1]) if isinstance(inputs, torch.Tensor) and inputs.dim() > 1 else 0
        self._started = time.perf_counter()

    def _post(self, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        if self._started is not None:
            self.forwards.append((self._length, time.perf_counter() - self._started))
            self._started = None

    def reset(self) -> None:
        self.forwards = []
        self._started = None

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


SDPA_GQA_VARIABLE = "TRANSFORMERS_SDPA_FORCE_GQA"  # read by transformers at every attention call


@contextlib.contextmanager
def sdpa_gqa_forced(forced: bool = True):
    """``TRANSFORMERS_SDPA_FORCE_GQA=1`` while the block runs (a benchmark's every method sees the same attention),
    the variable as it was afterwards; nothing changed when not `forced`."""
    before = os.environ.get(SDPA_GQA_VARIABLE)
    if forced:
        os.environ[SDPA_GQA_VARIABLE] = "1"
    try:
        yield
    finally:
        if forced and before is None:
            os.environ.pop(SDPA_GQA_VARIABLE, None)
        elif forced:
            os.environ[SDPA_GQA_VARIABLE] = before


def _proc_field(path: str, key: str, missing: str | None = None) -> str | None:
    """The value of the first line starting with ``key`` in a ``/proc`` file: ``missing`` without such a line, None
    when the file cannot be read."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith(key)), missing)


def _rss_kb(key: str) -> int | None:
    value = _proc_field("/proc/self/status", key + ":")
    return int(value.split()[0]) if value else None


def environment_info() -> dict[str, Any]:
    """Machine, threads and library versions, for the results file."""
    flags = _proc_field("/proc/cpuinfo", "flags", missing="")
    flags = flags.split() if flags is not None else None
    memory = _proc_field("/proc/meminfo", "MemTotal:")
    return {
        "machine": {
            "platform": platform.platform(),
            "cpu": _proc_field("/proc/cpuinfo", "model name") or platform.processor() or "",
            "amx_bf16": None if flags is None else "amx_bf16" in flags,  # bfloat16 matmuls in hardware
            "avx512_bf16": None if flags is None else "avx512_bf16" in flags,
            # what `--dtype fastest` resolves by: without native bfloat16, torch emulates its matrix products
            "bf16_native": native_bfloat16("cpu"),
            "cpu_count": os.cpu_count(),
            "memory_gb": round(int(memory.split()[0]) / 2**20, 1) if memory else None,
            "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        },
        "threads": torch.get_num_threads(),
        "sdpa_force_gqa": os.environ.get(SDPA_GQA_VARIABLE, "0") == "1",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "dlite_hf": __version__,
    }


# the drafter statistics a hybrid method's records report under their own names
HYBRID_STATS = (
    "lookup_rounds lookup_drafted lookup_accepted lookup_index_reused lookup_fallback_rounds "
    "dlite_rounds dlite_accepted"
).split()


def _drafting(
    method: BenchMethod, forwards: list[tuple[int, float]], new_tokens: int, assistant_timer: ForwardTimer | None
) -> dict[str, Any]:
    """What proposing drafts cost in one generate() call, as record fields (``drafter_s`` None: no drafter model):
    a DLite method's from its drafter's statistics; any other method's from the target's forwards (a verification
    forward over n > 1 positions checked n - 1 drafts)."""
    if method.kind != "dlite":
        verify = [n for n, _ in forwards[1:] if n > 1]
        return {
            "rounds": len(verify),
            "draft_calls": len(verify),
            "drafted": sum(verify) - len(verify),
            "accepted": max(0, new_tokens - len(forwards)) if method.kind != "plain" else 0,
            "drafter_s": sum(t for _, t in assistant_timer.forwards) if assistant_timer is not None else None,
        }
    stats = method.model.last_generation_stats
    if stats is None:
        raise RuntimeError(
            f"Method {method.name!r}: the drafter recorded no generation statistics; was it used as the "
            "assistant_model?"
        )
    fields = {
        "rounds": int(stats.rounds),
        "draft_calls": int(stats.rounds + stats.skipped),  # a skipped round ran the drafter too
        "drafted": int(stats.drafted),
        "accepted": int(stats.accepted),
        "drafter_s": stats.drafter_time_s + stats.lookup_time_s,  # all the work of proposing drafts
    }
    if method.lookup_tokens is not None:  # a hybrid method: the suffix index's share
        fields |= {name: getattr(stats, name) for name in HYBRID_STATS}
        fields |= {"lookup_s": stats.lookup_time_s, "dlite_drafter_s": stats.drafter_time_s}
    return fields


class _Runner:
    """State of one benchmark run: models, hooks, greedy settings."""

    def __init__(
        self,
        target: nn.Module,
        tokenizer: Any,
        methods: list[BenchMethod],
        max_new_tokens: int,
        prefix_cache: bool = False,
    ):
        self.target, self.tokenizer, self.methods = target, tokenizer, methods
        self.max_new_tokens, self.prefix_cache = max_new_tokens, prefix_cache
        self.timer = ForwardTimer(target)
        self.assistant_timers = {
            m.name: ForwardTimer(m.model) for m in methods if m.kind == "assisted" and m.model is not None
        }
        pad = target.generation_config.pad_token_id
        if pad is None:
            pad = getattr(tokenizer, "pad_token_id", None)
        if pad is None:
            eos = target.generation_config.eos_token_id
            pad = eos[0] if isinstance(eos, (list, tuple)) else eos
        self.greedy = {"do_sample": False, "num_beams": 1, "max_new_tokens": max_new_tokens}
        if pad is not None:
            self.greedy["pad_token_id"] = pad
        # float32 is the token-exact mode; in reduced precision a divergence from plain must be a near-tie
        self.checker = NearTieChecker(target)
        # generate()'s name for a cache to start from: the forward's (`cache` from transformers 5.24)
        forward = inspect.signature(type(target).forward).parameters
        self.cache_keyword = "cache" if "cache" in forward else "past_key_values"

    def close(self) -> None:
        for timer in (self.timer, *self.assistant_timers.values()):
            timer.remove()

    def generate(
        self,
        method: BenchMethod,
        input_ids: torch.Tensor,
        max_new_tokens: int | None = None,
        session: Any = None,
        cache: Any = None,
    ):
        kwargs = {**self.greedy, **method.generate_kwargs(self.tokenizer)}
        if max_new_tokens is not None:
            kwargs["max_new_tokens"] = max_new_tokens
        inputs = {k: kwargs.pop(k) for k in ("assistant_model", "tokenizer", "assistant_tokenizer") if k in kwargs}
        inputs["attention_mask"] = torch.ones_like(input_ids)
        if cache is not None:  # the previous turn's cache, cropped to the prefix this turn shares with it
            inputs[self.cache_keyword] = cache
        config = method.generation_config(**kwargs)  # everything else: this call's decoding options
        with session if session is not None else contextlib.nullcontext():
            return self.target.generate(input_ids, generation_config=config, **inputs)

    def measure(
        self, method: BenchMethod, input_ids: torch.Tensor, session: Any = None, cache: Any = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Run one greedy generate() (inside `session`, a hybrid method's `DraftSession`; on `cache`, a prefix of
        `input_ids` kept from the session's previous turn) and return (sequences, metrics)."""
        cached = cache.get_seq_length() if cache is not None else 0
        gc.collect()
        try:  # reset the kernel's peak-RSS mark (Linux clear_refs 5)
            Path("/proc/self/clear_refs").write_text("5")
            rss_before = _rss_kb("VmRSS")
        except OSError:
            rss_before = None
        self.timer.reset()
        assistant_timer = self.assistant_timers.get(method.name)
        if assistant_timer is not None:
            assistant_timer.reset()
        if method.kind == "dlite":
            method.model.last_generation_stats = None
        started = time.perf_counter()
        sequences = self.generate(method, input_ids, session=session, cache=cache)
        wall = time.perf_counter() - started
        peak = _rss_kb("VmHWM") if rss_before is not None else None
        forwards, prompt_tokens = self.timer.forwards, input_ids.shape[1]
        new_tokens = int(sequences.shape[1] - prompt_tokens)
        drafting = _drafting(method, forwards, new_tokens, assistant_timer)
        drafter_s, draft_calls = drafting["drafter_s"], drafting["draft_calls"]
        prefill_s = forwards[0][1] if forwards else 0.0
        verify = forwards[1:]
        verify_s = sum(t for _, t in verify)
        decode_s = max(wall - prefill_s, 1e-9)
        return sequences, {  # the record's fields (:class:`~dlite_hf.bench.results.Record`)
            "prompt_tokens": int(prompt_tokens),
            "cached_prompt_tokens": int(cached),
            "new_tokens": new_tokens,
            "target_forwards": len(forwards),
            "tau": new_tokens / len(forwards) if forwards else 0.0,
            "wall_s": wall,
            "prefill_s": prefill_s,
            "decode_s": decode_s,
            "tok_s": new_tokens / wall if wall > 0 else 0.0,
            "decode_tok_s": new_tokens / decode_s,
            "target_s": prefill_s + verify_s,
            "overhead_s": wall - prefill_s - verify_s - (drafter_s or 0.0),
            "target_ms_per_round": 1000 * verify_s / len(verify) if verify else None,
            "drafter_ms_per_round": 1000 * drafter_s / draft_calls if drafter_s is not None and draft_calls else None,
            "drafter_share": drafter_s / (drafter_s + verify_s) if drafter_s is not None and verify_s > 0 else None,
            "peak_rss_delta_mb": (peak - rss_before) / 1024 if peak is not None and rss_before is not None else None,
            **drafting,
        }
