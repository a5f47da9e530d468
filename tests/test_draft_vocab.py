"""Changing a trained drafter's draft vocabulary: `set_draft_vocab(..., size=)` and `dlite-hf draft-vocab`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny_models import make_drafter, make_tiny_target

from dlite_hf import DLiteForSpeculation
from dlite_hf.cli import main
from dlite_hf.draft_vocab import coverage, set_draft_vocab
from dlite_hf.jsonl import write_jsonl


def _counts(seed: int = 0) -> torch.Tensor:
    """Distinct, decreasing-with-id-shuffled counts over the tiny vocabulary (no ties)."""
    return torch.randperm(128, generator=torch.Generator().manual_seed(seed)).double() + 1.0


def test_narrowing_keeps_the_most_frequent_tokens_and_their_logits(fitted_pair):
    target, fitted, prompts, _, _ = fitted_pair
    drafter = make_drafter(target, seed=3, draft_vocab_size=40)
    drafter.load_state_dict({k: v for k, v in fitted.state_dict().items() if k != "draft_vocab_ids"}, strict=False)
    counts = _counts()
    wide = set_draft_vocab(drafter, counts).clone()
    drafter.bind_target(target)
    context, anchors = torch.randn(2, drafter.config.num_tapped_layers, 64), torch.tensor([3, 4])
    _, wide_logits = drafter.draft(context, anchors)

    narrow = set_draft_vocab(drafter, counts, size=12)
    assert drafter.config.draft_vocab_size == 12 and narrow.shape == (12,)
    assert narrow.tolist() == sorted(torch.topk(counts, 12).indices.tolist())
    assert set(narrow.tolist()) <= set(wide.tolist())
    tokens, logits = drafter.draft(context, anchors)
    assert set(tokens.flatten().tolist()) <= set(narrow.tolist())
    # the first position's logits are the same numbers on the kept tokens, -inf on every other one
    assert torch.allclose(logits[:, 0, narrow], wide_logits[:, 0, narrow])
    dropped = torch.ones(128, dtype=torch.bool)
    dropped[narrow] = False
    assert torch.isinf(logits[..., dropped]).all()
    for row in range(2):
        ids = prompts[row : row + 1]
        plain = target.generate(ids, max_new_tokens=20, do_sample=False)
        assert torch.equal(plain, target.generate(ids, max_new_tokens=20, do_sample=False, assistant_model=drafter))


def test_size_is_validated_and_a_full_vocabulary_drafter_can_get_one(tmp_path: Path):
    target = make_tiny_target("llama", seed=1)
    drafter = make_drafter(target, seed=2, draft_vocab_size=40)
    for bad in (0, 129, True, 3.0):
        with pytest.raises(ValueError, match=rf"size={bad!r}: expected an integer in \[1, 128\]"):
            set_draft_vocab(drafter, _counts(), size=bad)
    assert drafter.config.draft_vocab_size == 40

    full = make_drafter(target, seed=2)
    with pytest.raises(ValueError, match="full vocabulary .* pass `size`"):
        set_draft_vocab(full, _counts())
    set_draft_vocab(full, _counts(), size=16)
    full.save_pretrained(tmp_path / "d")
    loaded = DLiteForSpeculation.from_pretrained(tmp_path / "d")
    assert loaded.config.draft_vocab_size == 16 and torch.equal(loaded.draft_vocab_ids, full.draft_vocab_ids)


def test_the_hub_setter_refuses_what_cannot_be_draft_columns():
    """`use_draft_vocab` (the Hub code's half of `set_draft_vocab`) takes only sorted, distinct, in-range token ids:
    a round's argmax ties and `searchsorted` read the columns as sorted ids."""
    drafter = make_drafter(make_tiny_target("llama", seed=1), seed=2, draft_vocab_size=40)
    before = drafter.draft_vocab_ids.clone()
    for bad in (torch.tensor([3, 1, 5]), torch.tensor([1, 1, 5]), torch.tensor([1, 128]), torch.tensor([-1, 2])):
        with pytest.raises(ValueError, match=r"sorted, distinct token ids in \[0, 128\)"):
            drafter.use_draft_vocab(bad)
    assert torch.equal(drafter.draft_vocab_ids, before) and drafter.config.draft_vocab_size == 40
    assert drafter.use_draft_vocab(torch.tensor([2, 7, 9])).tolist() == [2, 7, 9]
    assert drafter.config.draft_vocab_size == 3


def _rows(path: Path, sequences: list[list[int]], prompt_len: int) -> Path:
    masks = [[0] * prompt_len + [1] * (len(seq) - prompt_len) for seq in sequences]
    rows = [
        {"id": f"r{i}", "input_ids": seq, "loss_mask": mask} for i, (seq, mask) in enumerate(zip(sequences, masks))
    ]
    return write_jsonl(rows, path)


def test_draft_vocab_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    target = make_tiny_target("llama", seed=4)
    drafter = make_drafter(target, seed=5, draft_vocab_size=40)
    gen = torch.Generator().manual_seed(6)
    sequences = [torch.randint(0, 30, (24,), generator=gen).tolist() for _ in range(6)]  # responses use ids < 30
    data = _rows(tmp_path / "rows.jsonl", sequences, prompt_len=4)
    counts = torch.zeros(128)
    for seq in sequences:
        counts += torch.bincount(torch.tensor(seq[4:]), minlength=128)
    set_draft_vocab(drafter, counts)
    (tmp_path / "src").mkdir()
    drafter.save_pretrained(tmp_path / "src")
    (tmp_path / "src" / "dlite_training.json").write_text(json.dumps({"stage": "stable"}))

    out = tmp_path / "narrow"
    command = ["draft-vocab", "--drafter", str(tmp_path / "src"), "--data", str(data), "--size", "8", "--out"]
    assert main([*command, str(out)]) == 0
    narrowed = DLiteForSpeculation.from_pretrained(out)
    assert narrowed.config.draft_vocab_size == 8
    ranked = counts + 0.5 * (1 - torch.arange(128) / 128)  # ties go to lower ids (response_token_counts)
    assert narrowed.draft_vocab_ids.tolist() == sorted(torch.topk(ranked, 8).indices.tolist())
    expected = coverage(counts, narrowed.draft_vocab_ids)
    assert 0 < expected < 1
    record = json.loads((out / "dlite_training.json").read_text())
    assert record["stage"] == "stable"
    resized = record["draft_vocab_resized"]
    assert resized["from"] == 40 and resized["to"] == 8 and resized["coverage_before"] == 1.0
    assert resized["coverage_after"] == round(expected, 4) and resized["response_tokens"] == 6 * 20
    assert f"40 -> 8 tokens; coverage of the 120 response tokens of {data}: 100.00% -> {expected:.2%}" in (
        capsys.readouterr().out
    )

    with pytest.raises(SystemExit, match="is the drafter's own folder"):
        main(["draft-vocab", "--drafter", str(out), "--data", str(data), "--size", "4", "--out", str(out)])
    foreign = _rows(tmp_path / "foreign.jsonl", [[1, 2, 3, 500, 7]], prompt_len=2)
    with pytest.raises(SystemExit, match=r"outside the drafter's vocabulary \[0, 128\).*another tokenizer"):
        main(
            ["draft-vocab", "--drafter", str(out), "--data", str(foreign), "--size", "4", "--out", str(tmp_path / "x")]
        )
