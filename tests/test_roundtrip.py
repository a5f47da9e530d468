"""save_pretrained / from_pretrained: the same drafter comes back, through our classes, AutoModel, and the
trust_remote_code route in a process where dlite_hf cannot be imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from tiny_models import HUB_CODE_FILES, make_drafter
from transformers import AutoConfig, AutoModel

import dlite_hf
from dlite_hf import DLiteConfig, DLiteForSpeculation

MODELING_DIR = Path(dlite_hf.modeling.__file__).parent


@pytest.fixture(scope="module", params=[0, 3], ids=["history_free", "window3"])
def saved(request, target, tmp_path_factory):
    drafter = make_drafter(target, seed=22, history_window=request.param, mask_token_id=7 if request.param else None)
    folder = tmp_path_factory.mktemp("drafter")
    drafter.save_pretrained(folder)
    return drafter, folder


def _draft_inputs(drafter):
    gen = torch.Generator().manual_seed(0)
    context = torch.randn(4, drafter.config.num_tapped_layers, 64, generator=gen)
    anchors = torch.randint(0, 128, (4,), generator=gen)
    history = {}
    if drafter.config.history_window:
        history = {
            "history_states": torch.randn(4, 3, drafter.config.num_tapped_layers, 64, generator=gen),
            "history_valid": torch.tensor([[True] * 3, [False, True, True], [False] * 3, [True] * 3]),
            "history_positions": torch.tensor([[-3, -2, -1]] * 4),
        }
    return context, anchors, history


def test_saved_folder_layout(saved):
    drafter, folder = saved
    names = sorted(os.listdir(folder))
    assert names == sorted(["config.json", "model.safetensors", *HUB_CODE_FILES]), names
    assert not [n for n in names if n.endswith(".bin")]
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"] == {
        "AutoConfig": "configuration_dlite.DLiteConfig",
        "AutoModel": "modeling_dlite.DLiteForSpeculation",
    }
    assert config["model_type"] == "dlite"
    assert config["target_layer_ids"] == drafter.config.target_layer_ids
    assert config["target_model"]["name_or_path"] == "tiny"
    for name in HUB_CODE_FILES:  # the code beside the checkpoint is exactly the package's model code
        assert (folder / name).read_text() == (MODELING_DIR / name).read_text(), name


def test_from_pretrained_gives_identical_weights_and_drafts(saved, target):
    drafter, folder = saved
    for loaded in (DLiteForSpeculation.from_pretrained(folder), AutoModel.from_pretrained(folder)):
        assert type(loaded) is DLiteForSpeculation  # the registered route, not a remote-code copy
        skip = {"_name_or_path", "transformers_version", "architectures", "auto_map", "dtype"}
        original_config = {k: v for k, v in drafter.config.to_dict().items() if k not in skip}
        assert {k: v for k, v in loaded.config.to_dict().items() if k not in skip} == original_config
        original_state, loaded_state = drafter.state_dict(), loaded.state_dict()
        assert original_state.keys() == loaded_state.keys()
        for key, value in original_state.items():
            assert torch.equal(value, loaded_state[key]), key
        loaded.eval().bind_target(target)
        drafter.bind_target(target)
        context, anchors, history = _draft_inputs(drafter)
        expected_tokens, expected_logits = drafter.draft(context, anchors, **history)
        tokens, logits = loaded.draft(context, anchors, **history)
        assert torch.equal(tokens, expected_tokens)
        assert torch.equal(logits, expected_logits)
    config = AutoConfig.from_pretrained(folder)
    assert isinstance(config, DLiteConfig) and config.history_window == drafter.config.history_window


def test_assisted_generate_after_reload_is_lossless(saved, target):
    drafter, folder = saved
    loaded = AutoModel.from_pretrained(folder).eval()
    ids = torch.randint(1, 128, (1, 7), generator=torch.Generator().manual_seed(5))
    plain = target.generate(ids, max_new_tokens=15, do_sample=False)
    assisted = target.generate(ids, max_new_tokens=15, do_sample=False, assistant_model=loaded)
    assert torch.equal(plain, assisted)
    assert loaded.last_generation_stats.drafted > 0


_REMOTE_SCRIPT = textwrap.dedent(
    """
    import importlib.abc
    import json
    import sys


    class BlockDliteHf(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "dlite_hf" or name.startswith("dlite_hf."):
                raise ImportError(f"{name} is blocked in this process")
            return None


    sys.meta_path.insert(0, BlockDliteHf())
    try:
        import dlite_hf  # noqa: F401
    except ImportError:
        blocked = True
    else:
        blocked = False

    import torch
    from transformers import AutoModel, AutoModelForCausalLM
    from transformers.generation.utils import GenerationMixin

    torch.set_num_threads(1)
    drafter_dir, target_dir, prompt = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    target = AutoModelForCausalLM.from_pretrained(target_dir).eval()
    drafter = AutoModel.from_pretrained(drafter_dir, trust_remote_code=True).eval()
    ids = torch.tensor([prompt])
    plain = target.generate(ids, max_new_tokens=20, do_sample=False)
    assisted = target.generate(ids, max_new_tokens=20, do_sample=False, assistant_model=drafter)
    hook = GenerationMixin._get_candidate_generator
    stats = drafter.last_generation_stats
    session = drafter.draft_session(min_match=2)  # hybrid drafting, with no dlite_hf in the process
    with session:
        hybrid = [target.generate(ids, max_new_tokens=20, do_sample=False, assistant_model=drafter,
                                  prompt_lookup_num_tokens=8) for _ in range(2)]
    hybrid_stats = session.last_generation_stats
    print("RESULT " + json.dumps({
        "blocked": blocked,
        "dlite_hf_modules": sorted(m for m in sys.modules if m == "dlite_hf" or m.startswith("dlite_hf.")),
        "drafter_class": type(drafter).__name__,
        "drafter_module": type(drafter).__module__,
        "plain": plain[0].tolist(),
        "assisted": assisted[0].tolist(),
        "drafted": stats.drafted,
        "target_forwards": stats.target_forwards,
        "hybrid": [h[0].tolist() for h in hybrid],
        "hybrid_reused": hybrid_stats.lookup_index_reused,
        "hybrid_lookup_rounds": hybrid_stats.lookup_rounds,
        "hook": bool(getattr(hook, "_dlite_hook", False)),
        "single_wrapper": not getattr(hook._dlite_original, "_dlite_hook", False),
        "checksums": {k: float(v.double().sum()) for k, v in drafter.state_dict().items()},
    }))
    """
)


@pytest.mark.heavy  # a fresh interpreter: in `make test` and CI, not test-fast
def test_trust_remote_code_without_dlite_hf(saved, target, tmp_path):
    drafter, folder = saved
    target_dir = tmp_path / "target"
    target.save_pretrained(target_dir)
    prompt = torch.randint(1, 128, (9,), generator=torch.Generator().manual_seed(9)).tolist()
    expected = target.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False)[0].tolist()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "HF_", "TRANSFORMERS_"))}
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HOME=str(tmp_path / "hf_home"),
        HF_MODULES_CACHE=str(tmp_path / "modules"),
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
    )
    work = tmp_path / "cwd"
    work.mkdir()
    result = subprocess.run(
        [sys.executable, "-I", "-c", _REMOTE_SCRIPT, str(folder), str(target_dir), json.dumps(prompt)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stdout[-2000:] + result.stderr[-2000:]
    out = json.loads(lines[-1][len("RESULT ") :])

    assert out["blocked"] is True  # dlite_hf could not be imported in that process ...
    assert out["dlite_hf_modules"] == []  # ... and nothing of it was loaded
    assert out["drafter_class"] == "DLiteForSpeculation"
    assert out["drafter_module"].startswith("transformers_modules."), out["drafter_module"]
    assert (tmp_path / "modules").is_dir()  # the code came from the saved files, through HF_MODULES_CACHE
    assert out["hook"] and out["single_wrapper"]
    assert out["plain"] == expected
    assert out["assisted"] == expected
    assert out["drafted"] > 0 and out["target_forwards"] >= 1  # the DLite candidate generator really ran
    assert out["hybrid"] == [expected, expected]  # the hybrid through the remote code, twice in one session ...
    assert out["hybrid_reused"] == len(prompt) and out["hybrid_lookup_rounds"] > 0  # ... the second call reused it
    checksums = {k: float(v.double().sum()) for k, v in drafter.state_dict().items()}
    assert out["checksums"].keys() == checksums.keys()
    for key, value in checksums.items():
        assert out["checksums"][key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
