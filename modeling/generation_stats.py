"""The statistics of one `generate()` call with a DLite drafter (tau, rounds, the hybrid's shares, times)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["DLiteGenerationStats"]


@dataclass
class DLiteGenerationStats:
    """Statistics of one `generate()` call with a DLite drafter: `drafter.last_generation_stats` (the call that
    started last on any thread), or `session.last_generation_stats` of the `DraftSession` it ran in. The `lookup_*`
    fields count hybrid drafting's retrieved drafts, which are included in `rounds`, `drafted` and `accepted`.
    """

    new_tokens: int = 0  # tokens committed by the call
    target_forwards: int = 0  # the prefill included (plain decoding would need `new_tokens`)
    rounds: int = 0  # target forwards that verified a non-empty draft
    drafted: int = 0  # draft tokens proposed over all rounds
    accepted: int = 0  # draft tokens accepted by the target
    tokens_per_forward: list[int] = field(default_factory=list)  # tokens each target forward committed, in order
    drafted_per_forward: list[int] = field(default_factory=list)  # drafts each forward verified (0: a plain step)
    drafter_time_s: float = 0.0  # wall time spent drafting (the drafter's own work)
    target_time_s: float = 0.0  # wall time in the target's forwards and acceptance
    skipped: int = 0  # forwards after a drafting attempt that proposed nothing (skip rule, or a stop string)
    lookup_rounds: int = 0  # rounds that drafted a retrieved continuation
    lookup_drafted: int = 0
    lookup_accepted: int = 0
    lookup_time_s: float = 0.0  # wall time spent indexing tokens and querying the suffix index
    lookup_index_reused: int = 0  # prompt tokens already indexed by an earlier call of the `DraftSession`
    lookup_fallback_rounds: int = 0  # lookup rounds that drafted a short match because the drafter proposed nothing

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
        derived = ("tau", "acceptance_rate", "dlite_rounds", "undrafted_forwards", "dlite_drafted", "dlite_accepted")
        return {**asdict(self), **{name: getattr(self, name) for name in derived}}
