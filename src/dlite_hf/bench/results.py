"""The benchmark results document (``NAME.json`` of `dlite-hf bench`), typed: one definition for every reader.

:class:`BenchResult` and its parts are dataclasses whose fields are the document's keys (``benchmarks/README.md``
lists them). :func:`parse_result` checks every value's type and migrates an older schema version's values to the
current meaning (1 had no ``draft_calls``: drafter time was divided by verified rounds; 2 was float32-only, where
lossless meant identical to plain). A key a document lacks reads as its field's default (None: not recorded), and
``to_dict()`` writes the keys back in the order they were read. No torch here: cards and tables read results too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .json_parts import Invalid, Part, ResultsError, shown, when_set

SCHEMA_VERSION = 3  # 2: records gained draft_calls; 3: reduced precision (meta dtype, records near_tie, divergences)
SUPPORTED_VERSIONS = (1, 2, 3)
_NOT_A_DOCUMENT = "is not a `dlite-hf bench` results document"
_HOW_TO_FIX = (
    "The file is not as `dlite-hf bench` writes it (edited by hand, or cut short?): restore it (git checkout) or "
    "re-run the benchmark."
)
P = TypeVar("P", bound=Part)


@dataclass(kw_only=True)
class Machine(Part):
    """Where the run ran (``meta.machine``)."""

    platform: str | None = None
    cpu: str | None = None
    amx_bf16: bool | None = None
    avx512_bf16: bool | None = None
    bf16_native: bool | None = None  # what `--dtype fastest` resolves by (runs before 2026-12-05 lack it)
    cpu_count: int | None = None
    memory_gb: float | None = None
    load_average_at_start: list[float] | None = None


@dataclass(kw_only=True)
class RunMeta(Part):
    """The run's setup (``meta``): machine, versions, the command and its settings (other keys: ``extra``)."""

    machine: Machine | None = None
    threads: int | None = None
    sdpa_force_gqa: bool | None = None
    python: str | None = None
    torch: str | None = None
    transformers: str | None = None
    dlite_hf: str | None = None
    command: str | None = None
    argv: list[str] | None = None
    target: str | None = None
    target_folder: str | None = None
    started_utc: str | None = None
    max_new_tokens: int | None = None
    dtype: str = "float32"  # runs before schema 3 were float32
    near_tie_epsilon: float | None = None  # None in float32 (token-exact)
    attention: str | None = "sdpa"  # runs before the key existed used sdpa
    prefix_cache: bool = False
    repeats: int = 1
    method_order: str | None = None
    finished_utc: str | None = None
    duration_s: float | None = None
    load_average_at_end: list[float] | None = None


@dataclass(kw_only=True)
class SessionLog(Part):
    """One session of a workload: how many of its turns were measured and why it stopped."""

    workload: str
    id: str
    turns_available: int | None = None
    turns_measured: int | None = None
    stop_reason: str | None = None  # end | max_turns | max_tokens
    last_context_tokens: int | None = None


@dataclass(kw_only=True)
class NearTie(Part):
    """The float32 re-scoring verdict on a divergent output (:class:`dlite_hf.neartie.NearTieReport` as JSON)."""

    identical: bool
    first_divergence: int | None
    plain_token: int | None
    speculative_token: int | None
    divergence_margin: float | None
    top2_margin: float | None
    max_gap: float
    worst_position: int | None
    epsilon: float
    ok: bool
    reason: str


@dataclass(kw_only=True)
class Record(Part):
    """One generate() call: one prompt (or agentic turn) with one method. Times in seconds unless named ms."""

    workload: str
    session_id: str | None = None
    turn: int | None = None
    prompt_id: str
    source: str | None = None
    method: str
    prompt_tokens: int | None = None
    cached_prompt_tokens: int | None = None
    new_tokens: int | None = None
    target_forwards: int | None = None
    rounds: int | None = None
    draft_calls: int | None = None
    drafted: int | None = None
    accepted: int | None = None
    tau: float | None = None
    wall_s: float | None = None
    prefill_s: float | None = None
    decode_s: float | None = None
    tok_s: float | None = None
    decode_tok_s: float | None = None
    target_s: float | None = None
    drafter_s: float | None = None
    overhead_s: float | None = None
    target_ms_per_round: float | None = None
    drafter_ms_per_round: float | None = None
    drafter_share: float | None = None
    peak_rss_delta_mb: float | None = None
    # hybrid methods only
    lookup_rounds: int | None = when_set()
    lookup_drafted: int | None = when_set()
    lookup_accepted: int | None = when_set()
    lookup_s: float | None = when_set()
    lookup_index_reused: int | None = when_set()
    lookup_fallback_rounds: int | None = when_set()
    dlite_rounds: int | None = when_set()
    dlite_accepted: int | None = when_set()
    dlite_drafter_s: float | None = when_set()
    identical_to_plain: bool | None = None
    first_mismatch: int | None = None
    near_tie: NearTie | None = None
    lossless_ok: bool | None = None
    wall_s_repeats: list[float] | None = when_set()  # --repeats N > 1 only


@dataclass(kw_only=True)
class SummaryRow(Part):
    """One workload x method of the run (workload ``all``: over every workload; :func:`~.report.summarize`)."""

    workload: str
    method: str
    prompts: int | None = None
    mean_prompt_tokens: float | None = None
    new_tokens: int | None = None
    target_forwards: int | None = None
    wall_s: float | None = None
    prefill_s: float | None = None
    tok_s: float | None = None
    mean_tau: float
    tau_pooled: float | None = None
    speedup: float
    decode_speedup: float | None = None
    wall_ratio: float | None = None
    acceptance_rate: float | None = None
    drafter_ms_per_round: float | None = None
    target_ms_per_round: float | None = None
    drafter_share: float | None = None
    rounds: int | None = None
    peak_rss_delta_mb_max: float | None = None
    mismatches: int | None = None
    exact_match_rate: float | None = None
    near_ties: int | None = None
    lossless_failures: int | None = None
    lossless: bool | None = None


@dataclass(kw_only=True)
class Mismatch(Part):
    """A lossless failure: an output other than plain's (in reduced precision: other than at a near-tie)."""

    workload: str
    prompt_id: str
    turn: int | None = None
    method: str
    first_mismatch: int | None = None
    new_tokens: int | None = None
    plain_new_tokens: int | None = None
    reason: str | None = when_set()


@dataclass(kw_only=True)
class _DivergenceWhere(Part):
    """Where a divergence happened: a :class:`Divergence`'s first keys (a dataclass lists its last base's fields
    first)."""

    workload: str
    prompt_id: str
    method: str
    first_mismatch: int | None = None
    new_tokens: int | None = None


@dataclass(kw_only=True)
class Divergence(NearTie, _DivergenceWhere):
    """A divergent output of a reduced-precision run, near-tie or not: where, then the verdict's fields."""

    @classmethod
    def of(cls, record: Record) -> Divergence:
        """The divergence entry of a record with a near-tie verdict."""
        verdict = {name: getattr(record.near_tie, name) for name in NearTie.field_names()}
        where = {name: getattr(record, name) for name in ("workload", "prompt_id", "method", "first_mismatch")}
        return cls(**where, new_tokens=record.new_tokens, **verdict)


@dataclass(kw_only=True)
class Goal(Part):
    """A performance goal checked on the run's summary rows (``dlite-hf bench goals``); ``met`` None: not
    measured."""

    goal: str
    met: bool | None
    measured: str


@dataclass(kw_only=True)
class BenchResult(Part):
    """The whole document: ``schema_version`` is the version it was written in, the values the current one's."""

    schema_version: int = SCHEMA_VERSION
    meta: RunMeta = field(default_factory=lambda: RunMeta(_keys=()))  # none: every key absent
    methods: dict[str, dict[str, Any]] = field(default_factory=dict)
    workloads: list[str] = field(default_factory=list)
    sessions: list[SessionLog] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    summary: list[SummaryRow]
    mismatches: list[Mismatch] = field(default_factory=list)
    divergences: list[Divergence] = field(default_factory=list)
    ok: bool | None = None  # read as "no mismatches" when the document lacks it
    files: dict[str, str] | None = when_set()
    goals: list[Goal] | None = when_set()

    def rows_by_key(self) -> dict[tuple[str, str], SummaryRow]:
        """``{(workload, method): summary row}``."""
        return {(row.workload, row.method): row for row in self.summary}


def _check_document(data: Any, source: str) -> None:
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a {type(data).__name__}"
        raise ResultsError(
            f"{source} {_NOT_A_DOCUMENT}: it holds {kind} ({shown(data)}), expected a JSON object with "
            "schema_version, meta, records and summary. Pass the NAME.json `dlite-hf bench --out DIR` writes, e.g. "
            "benchmarks/results/smollm2-135m-main.json."
        )
    if "summary" not in data:
        raise ResultsError(
            f"{source} {_NOT_A_DOCUMENT} (it has no 'summary'; its keys: {', '.join(map(str, data)) or 'none'}). "
            "Pass the NAME.json `dlite-hf bench --out DIR` writes, e.g. benchmarks/results/smollm2-135m-main.json."
        )
    version = data.get("schema_version", SCHEMA_VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or version not in SUPPORTED_VERSIONS:
        newer = isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION
        fix = "upgrade dlite-hf to read it" if newer else "it is no version `dlite-hf bench` ever wrote"
        raise ResultsError(
            f"{source}: schema_version is {shown(version)}: expected one of "
            f"{', '.join(map(str, SUPPORTED_VERSIONS))} (this dlite-hf reads versions 1 to {SCHEMA_VERSION}); {fix}."
        )


def parse_result(data: Any, source: str = "the results document") -> BenchResult:
    """A results document (parsed JSON) as a :class:`BenchResult`, checked and migrated to the current version
    (without ``schema_version``: the current one); :class:`ResultsError` says what is wrong."""
    _check_document(data, source)
    try:
        result = BenchResult._read(data, "")
    except Invalid as error:
        raise ResultsError(
            f"{source}: {error.where} is {shown(error.value)}: expected {error.expected}. {_HOW_TO_FIX}"
        ) from None
    for record in result.records:
        if result.schema_version < 2 and record.draft_calls is None:  # 1 divided drafter time by verified rounds
            record.draft_calls = record.rounds
        if result.schema_version < 3 and record.lossless_ok is None:  # 2: float32 only, lossless meant identical
            record.lossless_ok = record.identical_to_plain
    if result.ok is None:
        result.ok = not result.mismatches
    return result


def load_result(path: str | Path) -> BenchResult:
    """Read ``path`` (a ``NAME.json`` of `dlite-hf bench`) with :func:`parse_result` (OSError: unreadable)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise ResultsError(f"{path} {_NOT_A_DOCUMENT}: it is not JSON ({error}).") from None
    return parse_result(data, str(path))


def as_result(document: BenchResult | Mapping[str, Any], source: str = "the results document") -> BenchResult:
    """``document`` itself when it is a :class:`BenchResult`, else its JSON form read with :func:`parse_result`."""
    return document if isinstance(document, BenchResult) else parse_result(document, source)


def _as_parts(items: Sequence[Any], cls: type[P], name: str) -> list[P]:
    return [item if isinstance(item, cls) else cls.from_dict(item, f"{name}[{i}]") for i, item in enumerate(items)]


def as_summary_rows(rows: Sequence[SummaryRow | Mapping[str, Any]]) -> list[SummaryRow]:
    """Summary rows, typed (JSON rows are checked as a document's)."""
    return _as_parts(rows, SummaryRow, "summary")


def as_records(records: Sequence[Record | Mapping[str, Any]]) -> list[Record]:
    """Records, typed (JSON records are checked as a document's)."""
    return _as_parts(records, Record, "records")


def as_goals(goals: Sequence[Goal | Mapping[str, Any]]) -> list[Goal]:
    """Goals, typed (JSON goals are checked as a document's)."""
    return _as_parts(goals, Goal, "goals")
