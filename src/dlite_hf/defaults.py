"""The defaults the command line, the benchmark and the demo share: the target, its shipped drafter, the dtype. A leaf
module (it imports nothing from the package), so every front end can read it without import cycles."""

from __future__ import annotations

from pathlib import Path

DEFAULT_TARGET = "smollm2-135m"  # a registry name (`dlite_hf.assets.MODELS`)
DEFAULT_DRAFTER = "dlite-smollm2-135m"  # a name of `dlite_hf.assets.registry.DRAFTERS`, used when none is given
# what `--dtype` accepts everywhere: `fastest` (`resolve_dtype`), a torch floating dtype, or `auto` (the checkpoint's)
DTYPE_CHOICES = ("fastest", "float32", "bfloat16", "float16", "auto")
# What `compare`, `make run` and the demo serve in: bfloat16 where this machine computes it natively (emulated, it is
# far slower than float32: `tests/test_dtypes.py`), else float32. bfloat16 greedy is near-tie-exact (`neartie.py`).
DEFAULT_DTYPE = "fastest"
# torch's private CPU checks `native_bfloat16` asks (`tests/test_dtypes.py` fails on a torch without them)
BF16_PROBES = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
ATTENTION_CHOICES = ("sdpa", "packed_gqa")  # transformers' `sdpa`, or `packed_gqa` (`dlite_hf.attention`)
DEFAULT_ATTENTION = "packed_gqa"  # what `compare`, `make run` and the demo load the target with (fastest: README)
SHIPPED_DRAFTER_NOTE = (
    "the trained SmolLM2-135M drafter ships in the dlite-hf repository as drafters/dlite-smollm2-135m (a checkout "
    "finds it; an installed wheel does not include it): pass --drafter PATH to that folder or to any drafter saved "
    "by `dlite-hf train`"
)


def native_bfloat16(device: str = "cpu") -> bool:
    """Whether `device` computes bfloat16 matrix products natively: a CUDA device that supports bfloat16, or a CPU
    with AVX512-BF16 or AMX (what torch's CPU kernels use for bfloat16; without them they emulate it)."""
    import torch

    if str(device).startswith("cuda"):
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    return any(bool(getattr(torch.cpu, probe, lambda: False)()) for probe in BF16_PROBES)


def resolve_dtype(name: str, device: str = "cpu") -> str:
    """`name` itself, except `fastest`: `bfloat16` where `device` computes it natively, else `float32`."""
    if check_dtype(name) != "fastest":
        return name
    return "bfloat16" if native_bfloat16(device) else "float32"


def _check_choice(kind: str, name: str, choices: tuple[str, ...], hint: str, shown: str) -> str:
    if name not in choices:
        raise ValueError(f"{shown}={name!r} is not a supported {kind}: expected one of {', '.join(choices)} ({hint}).")
    return name


def check_dtype(name: str, shown: str = "dtype") -> str:
    return _check_choice(
        "dtype", name, DTYPE_CHOICES, "fastest: bfloat16 where the machine computes it natively, else float32", shown
    )


def check_attention(name: str, shown: str = "attention") -> str:
    return _check_choice("attention", name, ATTENTION_CHOICES, "packed_gqa: dlite_hf.attention, opt-in", shown)


def repo_root() -> Path:
    """The dlite-hf checkout this package runs from (an installed wheel's site-packages parent otherwise)."""
    return Path(__file__).resolve().parents[2]


def default_drafter_dir() -> Path:
    """The checkout's copy of `DEFAULT_DRAFTER` (commands find it by name: `dlite_hf.assets.resolve_drafter`)."""
    return repo_root() / "drafters" / DEFAULT_DRAFTER
