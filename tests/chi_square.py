"""Pearson's chi-square goodness of fit, in torch alone: shared by the sampling tests of both engines
(tests/generate/test_sampling.py, and tests_vllm/, whose environment has no dlite_hf and no scipy)."""

from __future__ import annotations

import torch

__all__ = ["chi2_sf", "chi_square_test"]


def chi2_sf(statistic: float, df: int) -> float:
    """Survival function of the chi-square distribution: Q(df / 2, x / 2), the regularized upper gamma."""
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(statistic / 2.0)))


def chi_square_test(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int, float]:
    """Pearson goodness of fit; cells with expected count < 5 are merged (smallest first). Returns (stat, df, p)."""
    n = float(counts.sum())
    impossible = probs == 0
    assert counts[impossible].sum() == 0, f"tokens of probability 0 were generated: {counts[impossible]}"
    expected = probs * n
    cells, observed_acc, expected_acc = [], 0.0, 0.0
    for index in torch.argsort(expected).tolist():
        if impossible[index]:
            continue
        observed_acc += float(counts[index])
        expected_acc += float(expected[index])
        if expected_acc >= 5.0:
            cells.append((observed_acc, expected_acc))
            observed_acc, expected_acc = 0.0, 0.0
    if expected_acc > 0:  # leftover small mass joins the last (largest) cell
        observed, expected_last = cells.pop()
        cells.append((observed + observed_acc, expected_last + expected_acc))
    assert len(cells) >= 3, cells  # enough degrees of freedom for the test to mean something
    statistic = sum((o - e) ** 2 / e for o, e in cells)
    df = len(cells) - 1
    return statistic, df, chi2_sf(statistic, df)
