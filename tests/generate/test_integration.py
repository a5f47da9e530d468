"""modeling/integration.py: installed on first use of a drafter, scoped to DLite calls, thread-safe, signature-checked.

The upstream behaviour these tests compare against is transformers' own unwrapped `_assisted_decoding`
(`._dlite_original`), run on the same inputs."""

from __future__ import annotations

import inspect
import subprocess
import sys
import threading

import pytest
import torch
from transformers import DynamicCache
from transformers.generation.utils import GenerationMixin

from dlite_hf.modeling import integration


def _cache_key(target) -> str:
    # generate()'s spelling: `cache` from transformers 5.24 (the forward's name), `past_key_values` before
    return "cache" if "cache" in inspect.signature(type(target).forward).parameters else "past_key_values"


def test_importing_the_package_patches_nothing_until_a_drafter_is_created():
    code = (
        "import dlite_hf\n"
        "from transformers import GenerationConfig\n"
        "from transformers.generation.utils import GenerationMixin as M\n"
        "marked = lambda: [getattr(f, '_dlite_hook', False) for f in (M._get_candidate_generator, "
        "M._assisted_decoding, GenerationConfig.get_generation_mode)]\n"
        "print(marked())\n"
        "import sys; sys.path.insert(0, 'tests')\n"
        "from tiny_models import make_drafter, make_tiny_target\n"
        "target = make_tiny_target('qwen3', seed=0)\n"
        "print(marked())\n"
        "make_drafter(target, seed=0)\n"
        "print(marked())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:3] == ["[False, False, False]", "[False, False, False]", "[True, True, True]"], out


def _two_turns(target, prompts, kwargs, assisted_decoding=None, monkeypatch=None):
    """Turn 1 fills a cache; turn 2 (turn 1, a repeat and new tokens) runs on it. Returns turn 2's output."""
    if assisted_decoding is not None:
        monkeypatch.setattr(GenerationMixin, "_assisted_decoding", assisted_decoding)
    key = _cache_key(target)
    greedy = {"do_sample": False, "max_new_tokens": 16}
    cache = DynamicCache(config=target.config)
    first = prompts[:1]
    turn1 = target.generate(first, attention_mask=torch.ones_like(first), **{key: cache}, **greedy, **kwargs)
    turn2 = torch.cat([turn1, turn1[:, -12:], prompts[1:2, :6]], dim=1)
    try:
        return target.generate(turn2, attention_mask=torch.ones_like(turn2), **{key: cache}, **greedy, **kwargs)
    except Exception as error:  # upstream's behaviour may be an error: compare it as such
        return f"{type(error).__name__}: {error}"


def test_prompt_lookup_on_a_prefilled_cache_runs_exactly_as_upstream(fitted_pair, monkeypatch):
    """Plain prompt lookup (no DLite assistant) on a pre-filled cache, with the package imported and the integration
    installed: the same result as transformers' own unwrapped method gives, whatever that is."""
    target, drafter, prompts, _, _ = fitted_pair
    assert getattr(GenerationMixin._assisted_decoding, "_dlite_hook", False)  # installed (a drafter exists)
    lookup = {"prompt_lookup_num_tokens": 7}
    ours = _two_turns(target, prompts, lookup)
    upstream_method = GenerationMixin._assisted_decoding._dlite_original
    upstream = _two_turns(target, prompts, lookup, upstream_method, monkeypatch)
    if isinstance(ours, str) or isinstance(upstream, str):
        assert ours == upstream
    else:
        assert torch.equal(ours, upstream)
    assert "prepare_inputs_for_generation" not in target.__dict__


def test_two_threads_on_one_target_each_with_a_prefilled_cache(fitted_pair):
    """Concurrent DLite calls on one target, each with its own pre-filled cache: the instance shadow is shared,
    so neither call may remove it while the other still runs, and each reads its own cached length."""
    target, drafter, prompts, _, _ = fitted_pair
    key = _cache_key(target)
    greedy = {"do_sample": False, "max_new_tokens": 24, "assistant_model": drafter}
    inputs = []
    for row in (0, 2):  # two conversations of different lengths: different cached prefixes
        first = prompts[row : row + 1]
        cache = DynamicCache(config=target.config)
        turn1 = target.generate(first, **{key: cache}, do_sample=False, max_new_tokens=8 + 4 * row)
        inputs.append((torch.cat([turn1, prompts[row + 1 : row + 2, :5]], dim=1), cache))
    expected = [target.generate(ids, **greedy) for ids, _ in inputs]
    results: dict[int, torch.Tensor] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def run(i: int) -> None:
        ids, cache = inputs[i]
        try:
            start.wait()
            for _ in range(3):  # several calls each, so the calls overlap in every order
                trial = DynamicCache(config=target.config)
                for layer in range(len(cache.layers)):
                    trial.update(cache.layers[layer].keys.clone(), cache.layers[layer].values.clone(), layer)
                results[i] = target.generate(ids, **{key: trial}, **greedy)
                assert torch.equal(results[i], expected[i])
        except BaseException as error:  # reported below, on the main thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert "prepare_inputs_for_generation" not in target.__dict__  # the last call out removed the shadow
    assert integration._PREFILLED not in target.__dict__


@pytest.mark.parametrize("method", sorted(integration._REQUIRED_PARAMETERS))
def test_every_wrapped_method_is_checked_and_a_change_installs_nothing(monkeypatch, method):
    from transformers import GenerationConfig

    owner = GenerationConfig if method == "get_generation_mode" else GenerationMixin

    def moved(self):  # a release that dropped every parameter the wrapper reads
        return None

    originals = {
        name: getattr(getattr(GenerationMixin, name), "_dlite_original", getattr(GenerationMixin, name))
        for name in ("_get_candidate_generator", "_assisted_decoding")
    }
    monkeypatch.setattr(GenerationMixin, "_get_candidate_generator", originals["_get_candidate_generator"])
    monkeypatch.setattr(GenerationMixin, "_assisted_decoding", originals["_assisted_decoding"])
    mode = GenerationConfig.get_generation_mode
    monkeypatch.setattr(GenerationConfig, "get_generation_mode", getattr(mode, "_dlite_original", mode))
    monkeypatch.setattr(owner, method, moved)
    assert method in integration.wrapped_method_problems()
    with pytest.warns(RuntimeWarning, match=rf"cannot route generate.*{method}: it has no parameter"):
        assert integration.install_generate_hook() is False
    for name in ("_get_candidate_generator", "_assisted_decoding", "prepare_inputs_for_generation"):
        assert not getattr(getattr(GenerationMixin, name), "_dlite_hook", False), name
    assert not getattr(GenerationConfig.get_generation_mode, "_dlite_hook", False)


def test_the_installed_release_fits_every_wrapper():
    assert integration.wrapped_method_problems() == {}
