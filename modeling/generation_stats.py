"""The statistics of one `generate()` call with a DLite drafter (tau, rounds, the hybrid's shares, times)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["DLiteGenerationStats"]


@dataclass
class DLiteGenerationStats:
    """Statistics of one `generate()` call with a DLite drafter, read from `drafter.last_generation_stats`.

    `drafter.last_generation_stats` is the call that started last on any thread (the usual streamer pattern runs
    `generate()` on a worker thread and reads it on the main one). Concurrent calls sharing a drafter each get
    their own through a `DraftSession` per call (`session.last_generation_stats`, set by every call made inside
    that session, hybrid or DLite alone).

    Attributes:
        new_tokens: tokens committed by the call.
        target_forwards: target forwards, the prefill included (so plain decoding would need `new_tokens`).
        rounds: draft-and-verify rounds (target forwards that verified a non-empty draft).
        drafted / accepted: draft tokens proposed / accepted by the target over all rounds.
        tokens_per_forward: tokens committed by each target forward, in order (the demo highlights these).
        drafted_per_forward: draft tokens each target forward verified, in order (0: a plain step).
        drafter_time_s / target_time_s: wall time spent drafting / in the target's forwards and acceptance.
        skipped: forwards after a drafting attempt that proposed nothing (`draft_skip_threshold`, or a stop string
            completed by the first draft): plain one-token steps.
        lookup_rounds / lookup_drafted / lookup_accepted: hybrid drafting: the rounds that drafted the retrieved
            continuation, its tokens and the accepted ones (included in `rounds`, `drafted`, `accepted`); the
            drafter's share is the difference (`dlite_rounds`, ...).
        lookup_time_s: hybrid drafting: wall time spent indexing tokens and querying the suffix index (not in
            `drafter_time_s`, which counts the drafter's own work).
        lookup_index_reused: hybrid drafting with a `DraftSession`: prompt tokens already indexed by an earlier
            call of the session (not indexed again).
        lookup_fallback_rounds: hybrid drafting with `lookup_fallback_min_match`: the lookup rounds (counted in
            `lookup_rounds`) that drafted a short match because the drafter proposed nothing.
    """

    new_tokens: int = 0
    target_forwards: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    tokens_per_forward: list[int] = field(default_factory=list)
    drafted_per_forward: list[int] = field(default_factory=list)
    drafter_time_s: float = 0.0
    target_time_s: float = 0.0
    skipped: int = 0
    lookup_rounds: int = 0
    lookup_drafted: int = 0
    lookup_accepted: int = 0
    lookup_time_s: float = 0.0
    lookup_index_reused: int = 0
    lookup_fallback_rounds: int = 0

    @property
    def dlite_rounds(self) -> int:
        return self.rounds - self.lookup_rounds

    @property
    def undrafted_forwards(self) -> int:
        """Forwards after the prefill that verified no draft (plain one-token steps: skipped, or no budget)."""
        return max(0, self.target_forwards - 1 - self.rounds)

    @property
    def dlite_drafted(self) -> int:
        return self.drafted - self.lookup_drafted

    @property
    def dlite_accepted(self) -> int:
        return self.accepted - self.lookup_accepted

    @property
    def tau(self) -> float:
        """Acceptance length: tokens committed per target forward (1.0 for plain decoding)."""
        return self.new_tokens / self.target_forwards if self.target_forwards else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "tau": self.tau,
            "acceptance_rate": self.acceptance_rate,
            "dlite_rounds": self.dlite_rounds,
            "undrafted_forwards": self.undrafted_forwards,
            "dlite_drafted": self.dlite_drafted,
            "dlite_accepted": self.dlite_accepted,
        }
