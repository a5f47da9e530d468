"""Start-up refusals: each bad drafter fails where vLLM builds its config, before any model loads, with a message
that names what was given and what fits. Plus the signature check of what the plugin wraps."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import DRAFTER, TARGET
from dlite_hf_vllm.compat import DLiteVLLMError, check_signature


def _engine_config(speculative_config: dict, dtype: str = "float32"):
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(model=str(TARGET), dtype=dtype, speculative_config=speculative_config, max_model_len=2048)
    return args.create_engine_config()


def _drafter_like_shipped(tmp_path, **changes):
    folder = tmp_path / "drafter"
    shutil.copytree(DRAFTER, folder, symlinks=False)
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(autouse=True)
def _needs_target():
    if not TARGET.is_dir():
        pytest.fail(f"No target at {TARGET}: run `make assets`.")


def test_a_drafter_folder_becomes_the_dlite_proposer_with_its_k():
    spec = _engine_config({"model": str(DRAFTER)}).speculative_config
    assert spec.method == "custom_class" and spec.model == "dlite_hf_vllm.proposer.DLiteProposer"
    assert spec.num_speculative_tokens == 7 and spec.dlite_drafter_folder == str(DRAFTER.resolve())


def test_other_speculative_methods_are_untouched():
    spec = _engine_config({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}).speculative_config
    assert spec.method == "ngram" and not hasattr(spec, "dlite_drafter_folder")


def _refused(speculative_config, dtype="float32"):
    with pytest.raises(Exception) as caught:
        _engine_config(speculative_config, dtype)
    assert isinstance(caught.value, DLiteVLLMError) or "DLite drafter" in str(caught.value), caught.value
    return str(caught.value)


def test_a_drafter_for_another_target(tmp_path):
    folder = _drafter_like_shipped(
        tmp_path, num_target_layers=24, target_hidden_size=896, target_model={"name_or_path": "qwen2.5-0.5b"}
    )
    message = _refused({"model": str(folder)})
    assert "trained for 'qwen2.5-0.5b'" in message and "30 layers (expected 24)" in message
    assert "hidden size 576 (expected 896)" in message and "dlite-hf train" in message


def test_a_drafter_in_another_reduced_precision_dtype(tmp_path):
    folder = _drafter_like_shipped(tmp_path, dtype="float16")
    message = _refused({"model": str(folder)}, dtype="bfloat16")
    assert "torch.float16" in message and "torch.bfloat16" in message and "float32" in message
    # a float32 checkpoint runs in any engine dtype (it is cast, as generate() casts it)
    assert _engine_config({"model": str(DRAFTER)}, dtype="bfloat16").speculative_config.method == "custom_class"


def test_more_speculative_tokens_than_the_drafter_was_trained_for():
    message = _refused({"model": str(DRAFTER), "num_speculative_tokens": 9})
    assert "num_speculative_tokens=9" in message and "K=7" in message and "Use 1..7" in message
    assert (
        _engine_config({"model": str(DRAFTER), "num_speculative_tokens": 3}).speculative_config.num_speculative_tokens
        == 3
    )


def test_prompt_lookup_max_beside_a_drafter_is_the_hybrid():
    """Hybrid drafting: retrieved drafts up to prompt_lookup_max, so vLLM's K may exceed the drafter's (which still
    drafts at most its own); the lookup settings survive vLLM clearing them for a custom class."""
    spec = _engine_config({"model": str(DRAFTER), "prompt_lookup_max": 16}).speculative_config
    assert spec.method == "custom_class" and spec.num_speculative_tokens == 16 and spec.dlite_lookup == (16, None)
    spec = _engine_config(
        {"model": str(DRAFTER), "num_speculative_tokens": 12, "prompt_lookup_max": 12, "prompt_lookup_min": 3}
    ).speculative_config
    assert spec.num_speculative_tokens == 12 and spec.dlite_lookup == (12, 3)
    assert _engine_config({"model": str(DRAFTER)}).speculative_config.dlite_lookup is None
    message = _refused({"model": str(DRAFTER), "num_speculative_tokens": 7, "prompt_lookup_max": 16})
    assert "prompt_lookup_max=16" in message and "num_speculative_tokens=7" in message and "Raise" in message
    message = _refused({"model": str(DRAFTER), "prompt_lookup_min": 3})
    assert "prompt_lookup_min=3 without prompt_lookup_max" in message


def test_a_target_whose_layers_the_drafter_does_not_tap(tmp_path):
    folder = _drafter_like_shipped(tmp_path, target_layer_ids=[1, 6, 11, 17, 22, 31])
    message = _refused({"model": str(folder)})
    assert "[1, 6, 11, 17, 22, 31]" in message and "layers 0..29" in message


def test_a_moved_vllm_method_names_the_version():
    class Runner:
        def propose_draft_token_ids(self, scheduler_output, sampled): ...

    with pytest.raises(DLiteVLLMError, match=r"vllm(-cpu)?==0\.\d+.*propose_draft_token_ids takes \(self, "):
        check_signature(Runner, "propose_draft_token_ids", ("self", "scheduler_output", "sampled_token_ids"))
    with pytest.raises(DLiteVLLMError, match="does not exist"):
        check_signature(Runner, "_setup_eagle3_aux_hidden_state_outputs", ("self",))


@pytest.mark.parametrize("keep", [0.0, 0.5, 0.9999])
def test_a_truncated_weights_file_is_refused_at_start_up(tmp_path, keep):
    folder = _drafter_like_shipped(tmp_path)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: int(weights.stat().st_size * keep)])
    message = _refused({"model": str(folder)})
    assert str(weights) in message and "truncated or corrupt" in message and "save_pretrained" in message, message


def test_code_files_from_different_releases_are_refused_at_start_up(tmp_path):
    folder = _drafter_like_shipped(tmp_path)
    folder = folder.rename(tmp_path / "drafter_mixed_releases")  # transformers caches remote code by folder name
    older = folder / "candidate_generators.py"
    older.write_text(
        older.read_text().replace("import DECODING_OPTIONS,", "import DECODING_OPTIONS, check_option,", 1)
    )
    message = _refused({"model": str(folder)})
    assert "check_option" in message and "different dlite-hf versions" in message, message
