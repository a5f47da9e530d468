"""The one file that touches private transformers APIs: routing `generate(assistant_model=<DLite drafter>)`.

Narrow wrappers, installed on first use of a drafter (never on `import dlite_hf`), with a DLite assistant only:
`_get_candidate_generator` asks it for its generator; `_assisted_decoding` removes the call's hooks when it ends and
serves a pre-filled cache (`_prefilled_call`); `GenerationConfig.get_generation_mode` refuses a mode that would ignore
it. If a wrapped signature changed, nothing is installed and a warning says what. Idempotent, also across the
package's and a trust_remote_code copy. `docs/upstream-protocol.md`'s patch deletes this module.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import transformers
from transformers import GenerationConfig
from transformers.generation.configuration_utils import GenerationMode
from transformers.generation.utils import GenerationMixin

from .tapping import remove_thread_recorders

_HOOKED_METHOD = "_get_candidate_generator"
_DECODING_METHOD = "_assisted_decoding"
_PREFILLED = "_dlite_prefilled_calls"  # target attribute: {thread id: cached tokens} of live DLite calls
_LOCK = threading.Lock()  # guards installing and removing the instance shadow across threads

# Each wrapped method and the parameters the wrapper reads (by name; others may come and go, in any order).
_REQUIRED_PARAMETERS = {
    _HOOKED_METHOD: (
        "generation_config",
        "input_ids",
        "logits_processor",
        "model_kwargs",
        "assistant_model",
        "target_tokenizer",
        "assistant_tokenizer",
    ),
    _DECODING_METHOD: ("assistant_model", "**"),
    "prepare_inputs_for_generation": ("input_ids", "next_sequence_length", "is_first_iteration"),
    "get_generation_mode": ("assistant_model",),
}


def _signature_problem(method: Any, required: tuple[str, ...]) -> str | None:
    """Why `method` cannot be wrapped (a parameter the wrapper reads is gone), or None if it can."""
    if method is None:
        return "it does not exist"
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError) as error:
        return f"its signature cannot be read ({error})"
    names = set(parameters)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        names.add("**")
    missing = [name for name in required if name not in names]
    if missing:
        shown = ", ".join("**kwargs" if name == "**" else name for name in missing)
        return f"it has no parameter {shown} (it has {', '.join(parameters)})"
    return None


def _originals() -> dict[str, Any]:
    """Each method of `_REQUIRED_PARAMETERS` as transformers defines it (unwrapped where dlite-hf wrapped it)."""
    methods = {name: getattr(GenerationMixin, name, None) for name in _REQUIRED_PARAMETERS}
    methods["get_generation_mode"] = getattr(GenerationConfig, "get_generation_mode", None)
    return {name: getattr(method, "_dlite_original", method) for name, method in methods.items()}


def wrapped_method_problems() -> dict[str, str]:
    """`{method: why it cannot be wrapped}` for this transformers release; empty when every wrapper fits."""
    problems = {name: _signature_problem(method, _REQUIRED_PARAMETERS[name]) for name, method in _originals().items()}
    return {name: why for name, why in problems.items() if why is not None}


def _is_dlite(assistant: Any) -> bool:
    return assistant is not None and callable(getattr(assistant, "get_candidate_generator", None))


def install_generate_hook() -> bool:
    """Install the wrappers (see the module docstring); returns whether they are installed (if not, a warning says
    why and `generate(assistant_model=<DLite drafter>)` raises transformers' own error)."""
    with _LOCK:
        if getattr(getattr(GenerationMixin, _HOOKED_METHOD, None), "_dlite_hook", False):
            return True
        problems = wrapped_method_problems()
        if problems:
            changed = "; ".join(f"{name}: {why}" for name, why in problems.items())
            warnings.warn(
                f"dlite-hf cannot route generate(assistant_model=<DLite drafter>) on transformers "
                f"{transformers.__version__}: private generation methods changed ({changed}). Nothing was patched. "
                "Every other generation mode works unchanged; for DLite drafting install a tested transformers "
                "(constraints.txt) or a newer dlite-hf.",
                RuntimeWarning,
                stacklevel=2,
            )
            return False
        originals = _originals()
        _install_wrapper(GenerationMixin, _DECODING_METHOD, _assisted_decoding_wrapper(originals[_DECODING_METHOD]))
        _install_wrapper(
            GenerationConfig, "get_generation_mode", _mode_check_wrapper(originals["get_generation_mode"])
        )
        # last: the mark that says every wrapper is in place
        _install_wrapper(GenerationMixin, _HOOKED_METHOD, _candidate_generator_wrapper(originals[_HOOKED_METHOD]))
    return True


def _install_wrapper(owner: type, name: str, wrapper: Any) -> None:
    """Set `wrapper` as `owner.name`, marked as dlite-hf's and pointing to the method it wraps."""
    wrapper._dlite_hook = True
    wrapper._dlite_original = wrapper.__wrapped__  # the unwrapped method, also when another copy wrapped it before
    setattr(owner, name, wrapper)


def _candidate_generator_wrapper(original: Any) -> Any:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def _get_candidate_generator(self, *args, **kwargs):
        try:
            arguments = signature.bind(self, *args, **kwargs).arguments
        except TypeError:  # not a call this wrapper understands: transformers decides
            return original(self, *args, **kwargs)
        assistant = arguments.get("assistant_model")
        if not _is_dlite(assistant):
            return original(self, *args, **kwargs)
        names = [name for name in _REQUIRED_PARAMETERS[_HOOKED_METHOD] if name != "assistant_model"]
        return assistant.get_candidate_generator(target=self, **{name: arguments.get(name) for name in names})

    return _get_candidate_generator


def _assisted_decoding_wrapper(original: Any) -> Any:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def _assisted_decoding(self, *args, **kwargs):
        try:
            assistant = signature.bind(self, *args, **kwargs).arguments.get("assistant_model")
        except TypeError:
            assistant = None
        if not _is_dlite(assistant):  # prompt lookup, another assistant model: upstream, untouched
            return original(self, *args, **kwargs)
        with _prefilled_call(self, kwargs):
            try:
                return original(self, *args, **kwargs)
            finally:  # the hooks leave with the call, also when it raises
                remove_thread_recorders(self)

    return _assisted_decoding


@contextlib.contextmanager
def _prefilled_call(model: Any, model_kwargs: dict[str, Any]) -> Iterator[None]:
    """A DLite call on a cache that already holds `past` tokens (`generate(full_ids, cache=cache)`): transformers'
    assisted loop would run its first forward over all of `full_ids` on top of the cache (the prefix twice). While
    such calls run, the target's `prepare_inputs_for_generation` is shadowed on the instance (installed by the first,
    removed by the last) so that each call's first iteration runs only its thread's uncached tokens."""
    cache = model_kwargs.get("cache", model_kwargs.get("past_key_values"))
    get_length = getattr(cache, "get_seq_length", None)
    past = get_length() if callable(get_length) else 0
    if past:
        with _LOCK:
            calls = model.__dict__.get(_PREFILLED)
            if calls is None and "prepare_inputs_for_generation" in model.__dict__:  # someone else's shadow
                past = 0
            elif calls is None:
                calls = model.__dict__[_PREFILLED] = {}
                model.prepare_inputs_for_generation = _uncached_prefill(model.prepare_inputs_for_generation, calls)
            if past:
                calls[threading.get_ident()] = past
    try:
        yield
    finally:
        if past:
            with _LOCK:
                calls = model.__dict__.get(_PREFILLED, {})
                calls.pop(threading.get_ident(), None)
                if not calls:
                    model.__dict__.pop(_PREFILLED, None)
                    model.__dict__.pop("prepare_inputs_for_generation", None)


def _uncached_prefill(prepare: Any, calls: dict[int, int]) -> Any:
    """`prepare` (the target's `prepare_inputs_for_generation`) whose first iteration, in a thread with a live
    pre-filled DLite call (`calls`: thread id -> cached tokens), runs only the tokens the cache lacks."""

    def prepare_inputs_for_generation(input_ids, *args, **kwargs):
        past = calls.get(threading.get_ident())
        first = past and kwargs.get("is_first_iteration") and kwargs.get("next_sequence_length") is None and not args
        if first:  # the full ids (the candidate generators need them) on the cache
            if input_ids.shape[1] <= past:
                raise ValueError(
                    f"generate() got input_ids of {input_ids.shape[1]} tokens and a cache that already holds {past}: "
                    "assisted decoding needs the whole sequence as input_ids (the cached prefix, then at least one "
                    "new token). Pass the full ids, or crop the cache to a prefix of them (cache.crop(-n))."
                )
            kwargs["next_sequence_length"] = input_ids.shape[1] - past
        return prepare(input_ids, *args, **kwargs)

    return prepare_inputs_for_generation


def _mode_check_wrapper(original: Any) -> Any:
    """Refuse a DLite assistant in a generation mode that would ignore it (transformers only warns), and beside
    classifier-free guidance, whose extra target forward breaks assisted decoding's bookkeeping."""

    @functools.wraps(original)
    def get_generation_mode(self, assistant_model=None, *args, **kwargs):
        mode = original(self, assistant_model, *args, **kwargs)
        if _is_dlite(assistant_model) and mode != GenerationMode.ASSISTED_GENERATION:
            raise ValueError(
                f"A DLite drafter drafts for greedy search and sampling only, but this call's settings select "
                f"{getattr(mode, 'value', mode)} (num_beams={self.num_beams}, penalty_alpha={self.penalty_alpha}, "
                f"constraints={'set' if self.constraints is not None else None}); transformers would run it "
                "without the drafter. Use num_beams=1 (greedy or do_sample=True), or leave out assistant_model."
            )
        guidance = getattr(self, "guidance_scale", None)
        if _is_dlite(assistant_model) and guidance is not None and guidance != 1:
            raise ValueError(
                f"guidance_scale={guidance!r} (classifier-free guidance) runs an extra, unconditional forward of the "
                "target at every step, outside what assisted decoding verifies; a DLite drafter cannot draft for it. "
                "Leave guidance_scale unset (or 1.0), or leave out assistant_model."
            )
        return mode

    return get_generation_mode
