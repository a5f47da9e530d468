"""`vllm serve` with the drafter under load and faults (a short run of `server_faults.py`): the server never dies,
malformed requests get a 4xx, dropped streams are tolerated, and greedy answers afterwards equal a plain server's."""

from __future__ import annotations

import pytest
from server_faults import PASSING, run

pytestmark = pytest.mark.engine


def test_a_short_faults_run_leaves_the_server_answering_as_plain(real_prompts, tmp_path):
    conversations = [row["messages"] for row in real_prompts["prompts"]]
    summary = run(48, seed=3, conversations=conversations, log_dir=tmp_path)
    assert summary["failures"] == {}, summary
    assert summary["healthy_after"] and summary["greedy_after_equal_plain"], summary
    assert set(summary["outcomes"]) <= set(PASSING)
    assert summary["outcomes"].get("malformed answered 4xx", 0) > 0 and sum(summary["outcomes"].values()) == 48
