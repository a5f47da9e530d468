"""`dlite-hf interpolate`: WiSE-FT weight averaging of a fine-tuned drafter with the one it started from."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_models import make_drafter, make_tiny_target

from dlite_hf import DLiteForSpeculation
from dlite_hf.cli import main
from dlite_hf.draft_vocab import set_draft_vocab


@pytest.fixture
def pair(tmp_path):
    target = make_tiny_target("llama", seed=0)
    base = make_drafter(target, seed=1, draft_vocab_size=40)
    set_draft_vocab(base, torch.arange(128, dtype=torch.float64))
    tuned = make_drafter(target, seed=2, draft_vocab_size=40)
    set_draft_vocab(tuned, torch.arange(128, 0, -1, dtype=torch.float64))  # another vocabulary
    base.save_pretrained(tmp_path / "base")
    tuned.save_pretrained(tmp_path / "tuned")
    return tmp_path, base, tuned


def _interpolate(folder, alpha: str, out: str, tuned: str = "tuned") -> int:
    args = ["--base", str(folder / "base"), "--tuned", str(folder / tuned), "--alpha", alpha]
    return main(["interpolate", *args, "--out", str(folder / out)])


def test_weights_are_the_convex_mix_and_the_vocabulary_is_the_tuned_one(pair):
    folder, base, tuned = pair
    assert _interpolate(folder, "0.25", "mix") == 0
    mixed = DLiteForSpeculation.from_pretrained(folder / "mix", dtype=torch.float32)
    b, t, m = base.state_dict(), tuned.state_dict(), mixed.state_dict()
    assert torch.equal(m["draft_vocab_ids"], t["draft_vocab_ids"])
    assert not torch.equal(b["draft_vocab_ids"], t["draft_vocab_ids"])
    floats = [k for k, v in t.items() if v.is_floating_point()]
    assert floats
    for key in floats:
        assert torch.allclose(m[key], 0.75 * b[key] + 0.25 * t[key], atol=1e-6), key
    record = json.loads((folder / "mix" / "dlite_training.json").read_text())
    assert record["interpolated"]["alpha"] == 0.25
    # the ends are the inputs themselves
    _interpolate(folder, "1", "one")
    one = DLiteForSpeculation.from_pretrained(folder / "one", dtype=torch.float32).state_dict()
    assert all(torch.equal(one[k], t[k]) for k in floats)


def test_refuses_a_bad_alpha_an_input_as_output_and_another_architecture(pair):
    folder, base, _ = pair
    args = ["interpolate", "--base", str(folder / "base"), "--tuned", str(folder / "tuned")]
    with pytest.raises(SystemExit, match="alpha must be a number in \\[0, 1\\]"):
        main(args + ["--alpha", "1.5", "--out", str(folder / "x")])
    with pytest.raises(SystemExit, match="is one of the drafters averaged"):
        main(args + ["--alpha", "0.5", "--out", str(folder / "tuned")])
    other = make_drafter(make_tiny_target("llama", seed=0), seed=3, draft_vocab_size=40, head_rank=4)
    other.save_pretrained(folder / "other")
    with pytest.raises(SystemExit, match="head_rank differs"):
        _interpolate(folder, "0.5", "y", tuned="other")
