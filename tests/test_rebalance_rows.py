"""`dlite-hf mix rebalance` (dlite_hf.data.mix): domain shares follow tokens ** power, and no row is dropped."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from dlite_hf.cli import main
from dlite_hf.data import mix as rebalance_rows


def _rows(counts: dict[str, int], tokens_per_row: int = 10) -> list[dict]:
    return [
        {"id": f"{w}/{i}", "workload": w, "input_ids": [1] * 14, "loss_mask": [0] * 4 + [1] * tokens_per_row}
        for w, n in counts.items()
        for i in range(n)
    ]


def test_multipliers_give_shares_proportional_to_tokens_to_the_power():
    tokens = {"big": 900, "mid": 100, "small": 25}
    factor = rebalance_rows.multipliers(tokens, 0.5)
    assert min(factor.values()) == pytest.approx(1.0)
    after = {w: t * factor[w] for w, t in tokens.items()}
    total = sum(after.values())
    # shares 30 : 10 : 5 (the square roots)
    assert [after[w] / total for w in tokens] == pytest.approx([30 / 45, 10 / 45, 5 / 45])
    assert rebalance_rows.multipliers(tokens, 1.0) == pytest.approx(dict.fromkeys(tokens, 1.0))


def test_rebalance_keeps_every_row_and_repeats_small_domains():
    rows = _rows({"big": 400, "small": 25})
    out = rebalance_rows.rebalance(rows, 0.5, seed=1)
    ids = Counter(row["id"] for row in out)
    assert set(ids) == {row["id"] for row in rows}  # none dropped
    assert all(ids[f"big/{i}"] == 1 for i in range(400))  # the largest domain: once
    assert all(ids[f"small/{i}"] == 4 for i in range(25))  # sqrt shares 20 : 5 -> 4 repeats exactly
    assert out == rebalance_rows.rebalance(rows, 0.5, seed=1)  # seeded


@pytest.mark.parametrize("power", [-0.1, 1.5])
def test_power_outside_zero_one_is_refused(power):
    with pytest.raises(ValueError, match="power must be in"):
        rebalance_rows.multipliers({"a": 1}, power)


def test_cli_writes_the_rows_and_refuses_rows_without_a_workload(tmp_path):
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows({"a": 9, "b": 1})))
    assert main(["mix", "rebalance", str(tmp_path / "rows.jsonl"), "--out", str(tmp_path / "out.jsonl")]) == 0
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert Counter(r["workload"] for r in out) == {"a": 9, "b": 3}
    (tmp_path / "bad.jsonl").write_text(json.dumps({"id": "x", "input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}) + "\n")
    with pytest.raises(SystemExit, match="no workload/loss_mask"):
        main(["mix", "rebalance", str(tmp_path / "bad.jsonl"), "--out", str(tmp_path / "o.jsonl")])


def test_balanced_order_keeps_every_row_once_and_balances_every_prefix():
    rows = _rows({"big": 400, "mid": 100, "small": 25})  # 10 response tokens a row
    done = [{**row, "id": f"done/{row['id']}"} for row in _rows({"mid": 50})]
    out = rebalance_rows.balanced_order(rows, 0.5, done)
    assert sorted(row["id"] for row in out) == sorted(row["id"] for row in rows)
    assert [r["id"] for r in out if r["workload"] == "big"] == [f"big/{i}" for i in range(400)]  # order kept
    # whole: big 4,000 tokens, mid 1,500 (500 done), small 250; shares sqrt: 63.2, 38.7, 15.8. mid's done tokens put
    # it at 500 / 38.7 = 12.9 shares, so the rows before its first are big's 0..81 (10 i / 63.2 < 12.9) and
    # small's 0..20 (10 i / 15.8 < 12.9): 82 + 21
    assert next(i for i, r in enumerate(out) if r["workload"] == "mid") == 103
    share = {"big": 4000**0.5, "mid": 1500**0.5, "small": 250**0.5}
    used, whole = {"big": 0, "mid": 500, "small": 0}, {"big": 4000, "mid": 1500, "small": 250}
    for index, row in enumerate(out):  # from there on no domain with rows left runs ahead by more than a row
        used[row["workload"]] += 10
        level = [used[w] / share[w] for w in share if used[w] < whole[w]]
        assert index < 103 or not level or max(level) - min(level) <= 10 / share["small"] + 1e-9, index
