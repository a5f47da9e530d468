"""The plugin's only contact with vLLM internals (docs/vllm.md, "The choice"): three methods, each checked by
signature first (`compat.py`), wrapped to pass anything that is not a DLite drafter straight to vLLM's own method:

1. `SpeculativeConfig.__post_init__`: a DLite drafter folder (or Hub repo) as `model`, once `startup_checks.py`
   passes it, becomes vLLM's custom-class method with `DLiteProposer`, the folder kept on the config.
2. `GPUModelRunner._setup_eagle3_aux_hidden_state_outputs`: the target returns the tapped layers' residual streams.
3. `GPUModelRunner.propose_draft_token_ids`: the proposer is staged those states and the batch's layout before
   vLLM's own custom-class call; its q then goes to the rejection sampler as the draft probabilities.
"""

from __future__ import annotations

import functools
from typing import Any

from . import cpu_fixes
from .compat import DLiteVLLMError, check_signature, vllm_moved
from .proposer import DRAFTER_FOLDER, LOOKUP, DLiteProposer, StepInputs
from .startup_checks import check_drafter_files, resolve_drafter_folder, validate_drafter

PROPOSER = f"{DLiteProposer.__module__}.{DLiteProposer.__qualname__}"
# the parameters of propose_draft_token_ids, in the order vLLM passes them (positionally)
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


def _wrap_post_init(original: Any) -> Any:
    @functools.wraps(original)
    def __post_init__(self: Any) -> None:
        found = resolve_drafter_folder(self.model) if self.method in (None, "draft_model") else None
        if found is not None:
            folder, config = found
            self.num_speculative_tokens, lookup = validate_drafter(config, self)
            check_drafter_files(folder, f"The DLite drafter {str(self.model)!r}")
            self.method, self.model = "custom_class", PROPOSER
            setattr(self, DRAFTER_FOLDER, str(folder))
            setattr(self, LOOKUP, lookup)
        return original(self)

    return __post_init__


def _wrap_setup(original: Any) -> Any:
    @functools.wraps(original)
    def _setup_eagle3_aux_hidden_state_outputs(self: Any) -> None:
        if not isinstance(drafter := getattr(self, "drafter", None), DLiteProposer):
            return original(self)
        self.use_aux_hidden_state_outputs = True  # startup_checks.py made sure the target's class supports them
        self.get_model().set_aux_hidden_state_layers(drafter.aux_layers)

    return _setup_eagle3_aux_hidden_state_outputs


def _remaining(state: Any) -> int | None:
    """How many more tokens a request may generate (its max_tokens less its output so far); None if unbounded."""
    params = getattr(state, "sampling_params", None)
    if params is None or params.max_tokens is None:
        return None
    return params.max_tokens - len(state.output_token_ids)


def _wrap_propose(original: Any) -> Any:
    @functools.wraps(original)
    def propose_draft_token_ids(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(drafter := getattr(self, "drafter", None), DLiteProposer):
            return original(self, *args, **kwargs)
        call = dict(zip(_PROPOSE_PARAMETERS[1:], args), **kwargs)
        if call["aux_hidden_states"] is None:
            raise DLiteVLLMError("Internal error: the target returned no auxiliary hidden states for DLite.")
        req_ids = list(self.input_batch.req_ids)
        scheduler_output, attention = call["scheduler_output"], call["common_attn_metadata"]
        sampling, spec_decode = call["sampling_metadata"], call["spec_decode_metadata"]
        tap = drafter.tap is not None
        drafter.stage(
            StepInputs(
                aux_hidden_states=call["aux_hidden_states"],
                query_start_loc=attention.query_start_loc_cpu[: len(req_ids) + 1].tolist(),
                num_draft_tokens=None if spec_decode is None else list(spec_decode.num_draft_tokens),
                temperatures=None if sampling.all_greedy else sampling.temperature.cpu(),
                req_ids=req_ids,
                remaining=[_remaining(self.requests.get(rid)) for rid in req_ids],
                scheduled_tokens=scheduler_output.num_spec_tokens_to_schedule,
                new_req_ids=frozenset(r.req_id for r in scheduler_output.scheduled_new_reqs),
                hidden_states=call["hidden_states"] if tap else None,
                seq_lens=attention.seq_lens[: len(req_ids)].tolist() if tap else None,
            )
        )
        result = original(self, *args, **kwargs)
        if (probs := drafter.take_probs()) is not None:
            self._draft_probs, self._draft_prob_req_ids = probs, req_ids
        return result

    return propose_draft_token_ids


def install() -> None:
    """Wrap the three methods (once per process). Raises `DLiteVLLMError` naming the vLLM version if one moved."""
    global _installed
    if _installed:
        return
    from vllm.config.speculative import SpeculativeConfig
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    patches = [
        (SpeculativeConfig, "__post_init__", ("self",), _wrap_post_init),
        (GPUModelRunner, "_setup_eagle3_aux_hidden_state_outputs", ("self",), _wrap_setup),
        (GPUModelRunner, "propose_draft_token_ids", _PROPOSE_PARAMETERS, _wrap_propose),
    ]
    originals = [check_signature(owner, name, parameters) for owner, name, parameters, _ in patches]
    for name in ("_draft_probs", "_draft_prob_req_ids"):
        if name not in GPUModelRunner.propose_draft_token_ids.__code__.co_names:
            raise vllm_moved(
                f"GPUModelRunner.propose_draft_token_ids no longer uses {name}, through which the plugin hands its q "
                "to the rejection sampler"
            )
    if "num_spec_tokens_to_schedule" not in getattr(SchedulerOutput, "__dataclass_fields__", {}):
        raise vllm_moved(
            "SchedulerOutput has no num_spec_tokens_to_schedule, the step's draft length the plugin reads"
        )
    cpu_fixes.install()
    cpu_fixes.install_top_k_fix()
    for (owner, name, _, wrap), original in zip(patches, originals):
        setattr(owner, name, wrap(original))
    _installed = True
