"""Tests of anchor sampling, block labels and the history attention mask."""

from __future__ import annotations

import pytest
import torch

from dlite_hf.training.data import IGNORE_INDEX, block_labels, sample_anchors


def _candidates(loss_mask: torch.Tensor) -> list[set[int]]:
    """Reference candidate sets: a >= 1, a + 1 < T, loss_mask[a + 1]."""
    mask = loss_mask if loss_mask.dim() == 2 else loss_mask.unsqueeze(0)
    seq_len = mask.shape[1]
    return [{a for a in range(1, seq_len - 1) if bool(row[a + 1])} for row in mask]


# ---------------------------------------------------------------------------------------------------------------------
# sample_anchors
# ---------------------------------------------------------------------------------------------------------------------


def test_sample_anchors_draws_only_candidates_without_duplicates_sorted():
    gen = torch.Generator().manual_seed(0)
    loss_mask = torch.rand(4, 40, generator=gen) > 0.4
    loss_mask[:, 0] = True  # position 0 can never be a label of an anchor (a >= 1 means labels start at 2)
    loss_mask[:, 1] = True  # label x_1 would need anchor 0: excluded
    candidates = _candidates(loss_mask)
    for seed in range(20):
        anchors, anchor_valid = sample_anchors(loss_mask, 8, generator=torch.Generator().manual_seed(seed))
        assert anchors.shape == (4, 8) and anchors.dtype == torch.long
        assert anchor_valid.shape == (4, 8) and anchor_valid.dtype == torch.bool
        for b in range(4):
            row = anchors[b][anchor_valid[b]].tolist()
            assert len(row) == min(8, len(candidates[b]))
            assert set(row) <= candidates[b]
            assert 0 not in row
            assert len(set(row)) == len(row)
            assert row == sorted(row)


def test_sample_anchors_covers_all_candidates_uniformly():
    loss_mask = torch.zeros(12, dtype=torch.bool)
    loss_mask[4:] = True  # candidates 3..10 (8 of them)
    counts = torch.zeros(12)
    gen = torch.Generator().manual_seed(1)
    trials = 2000
    for _ in range(trials):
        anchors, valid = sample_anchors(loss_mask, 2, generator=gen)
        counts.index_add_(0, anchors[valid], torch.ones(int(valid.sum())))
    assert counts[:3].sum() == 0 and counts[11] == 0
    expected = trials * 2 / 8
    assert ((counts[3:11] - expected).abs() < 0.15 * expected).all()


def test_sample_anchors_is_deterministic_with_a_generator():
    loss_mask = torch.ones(3, 64, dtype=torch.bool)
    a1, v1 = sample_anchors(loss_mask, 10, generator=torch.Generator().manual_seed(123))
    a2, v2 = sample_anchors(loss_mask, 10, generator=torch.Generator().manual_seed(123))
    a3, _ = sample_anchors(loss_mask, 10, generator=torch.Generator().manual_seed(124))
    assert torch.equal(a1, a2) and torch.equal(v1, v2)
    assert not torch.equal(a1, a3)


def test_sample_anchors_pads_when_fewer_candidates():
    # T = 8; loss mask on positions 5, 6 -> candidates a = 4, 5. Row 2 has no candidate at all.
    loss_mask = torch.zeros(2, 8, dtype=torch.bool)
    loss_mask[0, 5:7] = True
    loss_mask[1, 0:2] = True  # labels x_0, x_1 need anchors -1, 0: none valid
    anchors, anchor_valid = sample_anchors(loss_mask, 4, generator=torch.Generator().manual_seed(0))
    assert anchors.shape == (2, 4)
    assert anchors[0, :2].tolist() == [4, 5]
    assert anchor_valid.tolist() == [[True, True, False, False], [False, False, False, False]]
    assert (anchors[~anchor_valid] == 1).all()  # padding is a safe index (a - 1 >= 0)


def test_sample_anchors_excludes_last_position_and_accepts_1d_mask():
    loss_mask = torch.ones(5, dtype=torch.bool)  # candidates 1, 2, 3 (a = 4 has no label x_5)
    anchors, anchor_valid = sample_anchors(loss_mask, 10)
    assert anchors.shape == (1, 10)
    assert anchors[0][anchor_valid[0]].tolist() == [1, 2, 3]
    assert int(anchor_valid.sum()) == 3


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_anchors": 0}, "num_anchors"),
        ({"loss_mask": torch.ones(2, 3, 4, dtype=torch.bool)}, "loss_mask"),
        ({"loss_mask": torch.ones(5)}, "loss_mask"),
    ],
)
def test_sample_anchors_rejects_bad_args(kwargs, field):
    args = {"loss_mask": torch.ones(8, dtype=torch.bool), "num_anchors": 2} | kwargs
    with pytest.raises(ValueError, match=field):
        sample_anchors(**args)


# ---------------------------------------------------------------------------------------------------------------------
# block_labels
# ---------------------------------------------------------------------------------------------------------------------


def test_block_labels_hand_example():
    input_ids = torch.tensor([[10, 11, 12, 13, 14, 15, 16, 17]])
    loss_mask = torch.tensor([[False, False, False, True, True, False, True, True]])
    anchors = torch.tensor([[2, 5, 6, 1]])
    anchor_valid = torch.tensor([[True, True, True, False]])
    labels, valid = block_labels(input_ids, anchors, 3, loss_mask, anchor_valid=anchor_valid)
    assert labels.shape == (1, 4, 3) and valid.shape == (1, 4, 3)
    x = IGNORE_INDEX
    assert valid[0].tolist() == [
        [True, True, False],  # labels at 3, 4, 5; position 5 outside the loss mask
        [True, True, False],  # 6, 7, 8 (8 >= T)
        [True, False, False],  # 7, 8, 9
        [False, False, False],  # padding anchor
    ]
    assert labels[0].tolist() == [[13, 14, x], [16, 17, x], [17, x, x], [x, x, x]]
    assert torch.equal(labels.ne(IGNORE_INDEX), valid)


def test_block_labels_without_anchor_valid_and_batched():
    input_ids = torch.arange(20).view(2, 10)
    loss_mask = torch.ones(2, 10, dtype=torch.bool)
    anchors = torch.tensor([[1, 8], [3, 4]])
    labels, valid = block_labels(input_ids, anchors, 2, loss_mask)
    assert labels.tolist() == [[[2, 3], [9, IGNORE_INDEX]], [[14, 15], [15, 16]]]
    assert valid.tolist() == [[[True, True], [True, False]], [[True, True], [True, True]]]


def test_block_labels_rejects_mismatched_shapes():
    input_ids = torch.zeros(2, 5, dtype=torch.long)
    anchors = torch.ones(2, 1, dtype=torch.long)
    with pytest.raises(ValueError, match="loss_mask shape"):
        block_labels(input_ids, anchors, 3, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="num_draft_tokens"):
        block_labels(input_ids, anchors, 0, torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="anchors"):
        block_labels(input_ids, torch.ones(3, 1, dtype=torch.long), 3, torch.ones(2, 5, dtype=torch.bool))
