"""The benchmark results document (``NAME.json`` of `dlite-hf bench`), typed: one definition for every reader.

Each JSON object is a :class:`Part`, a dataclass whose fields are its keys (``benchmarks/README.md`` lists them),
values type-checked, unknown keys kept, keys written back in the order read (byte for byte), a missing key read as
its field's default (None: not recorded). :func:`parse_result` migrates older versions. No torch: cards read it too.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

SCHEMA_VERSION = 3  # 2: records gained draft_calls; 3: reduced precision (meta dtype, records near_tie, divergences)
SUPPORTED_VERSIONS = (1, 2, 3)
_NOT_A_DOCUMENT = "is not a `dlite-hf bench` results document"
_HOW_TO_FIX = (
    "The file is not as `dlite-hf bench` writes it (edited by hand, or cut short?): restore it (git checkout) or "
    "re-run the benchmark."
)
_PASS_ONE = "Pass the NAME.json `dlite-hf bench --out DIR` writes, e.g. benchmarks/results/smollm2-135m-main.json."
_WRITTEN_WHEN_SET = "written_when_set"  # field metadata: the key is written only when the value is not None
ABSENT = object()  # a required key the object lacks
P = TypeVar("P", bound="Part")


class ResultsError(ValueError):
    """A document that is not a `dlite-hf bench` results document, or has a value of the wrong type."""


class Invalid(ResultsError):
    """A value of the wrong type at ``where`` (a path such as ``records[3].tau``)."""

    def __init__(self, where: str, value: Any, expected: str):
        super().__init__(where)
        self.where, self.value, self.expected = where, value, expected

    def __str__(self) -> str:
        return f"{self.where} is {shown(self.value)}: expected {self.expected}."


def when_set() -> Any:
    """A field (default None) whose key is written only when it has a value."""
    return field(default=None, metadata={_WRITTEN_WHEN_SET: True})


@dataclass(kw_only=True)
class Part:
    """A JSON object: its fields, ``extra`` (keys this version does not define), ``_keys`` (None: built in code)."""

    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    _keys: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_dict(cls: type[P], data: Any, where: str = "") -> P:
        """Read one JSON object (``where``: its place in the document); :class:`Invalid` when invalid."""
        if not isinstance(data, dict):
            raise Invalid(where or cls.__name__, data, "a JSON object")
        hints, values = _hints(cls), {}
        for spec in _fields(cls):
            here = f"{where}.{spec.name}" if where else spec.name
            if spec.name in data:
                values[spec.name] = _convert(data[spec.name], hints[spec.name], here)
            elif spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
                raise Invalid(here, ABSENT, _describe(hints[spec.name]))
        extra = {key: value for key, value in data.items() if key not in values}  # no field's keys
        return cls(**values, extra=extra, _keys=tuple(data))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: the keys as read (built in code: the fields), then :func:`when_set` fields set since."""
        specs = {spec.name: spec for spec in _fields(type(self))}
        keys = list(self._keys) if self._keys is not None else list(specs)
        keys += [name for name, spec in specs.items() if name not in keys and spec.metadata.get(_WRITTEN_WHEN_SET)]
        keys += [key for key in self.extra if key not in keys]
        out = {}
        for key in keys:
            spec = specs.get(key)
            if spec is None:
                if key in self.extra:
                    out[key] = self.extra[key]
            elif getattr(self, key) is not None or not spec.metadata.get(_WRITTEN_WHEN_SET):
                out[key] = _dump(getattr(self, key))
        return out

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The keys this part defines, in the order a part built in code writes them."""
        return tuple(spec.name for spec in _fields(cls))

    def value_or(self, name: str, default: Any) -> Any:
        """The field's value, or ``default`` when the document has no such key (a null one stays None)."""
        return default if self._keys is not None and name not in self._keys else getattr(self, name)


@functools.cache
def _fields(cls: type) -> tuple[dataclasses.Field, ...]:
    return tuple(spec for spec in dataclasses.fields(cls) if spec.name not in ("extra", "_keys"))


_hints = functools.cache(get_type_hints)


def _describe(hint: Any) -> str:
    """What a value of type ``hint`` looks like in JSON, in words."""
    if get_origin(hint) in (Union, types.UnionType):
        return " or ".join("null" if arg is type(None) else _describe(arg) for arg in get_args(hint))
    if isinstance(hint, type) and issubclass(hint, Part):
        return f"a JSON object ({hint.__name__})"
    names = {float: "a number", int: "an integer", bool: "true or false", str: "a string", list: "a list"}
    return names.get(get_origin(hint) or hint, "a JSON object" if get_origin(hint) is dict else str(hint))


def _convert(value: Any, hint: Any, where: str) -> Any:
    """``value`` checked against ``hint``; JSON objects of a :class:`Part` type become that part."""
    origin = get_origin(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in get_args(hint):
            return None
        (inner,) = [arg for arg in get_args(hint) if arg is not type(None)]
        try:
            return _convert(value, inner, where)
        except Invalid as error:
            if error.where != where:  # a key inside the value: that key's own message
                raise
            raise Invalid(where, value, _describe(hint)) from None
    if isinstance(hint, type) and issubclass(hint, Part):
        return hint.from_dict(value, where)
    if origin in (list, dict) and not isinstance(value, origin):
        raise Invalid(where, value, _describe(hint))
    if origin is list:
        return [_convert(v, get_args(hint)[0], f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        return {k: _convert(v, get_args(hint)[1], f"{where}.{k}") for k, v in value.items()}
    accepted = {float: (int, float), int: (int,), bool: (bool,), str: (str,)}[hint]
    if (isinstance(value, bool) and hint is not bool) or not isinstance(value, accepted):  # JSON true is no number
        raise Invalid(where, value, _describe(hint))
    return value


def _dump(value: Any) -> Any:
    if isinstance(value, Part):
        return value.to_dict()
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


def shown(value: Any) -> str:
    """``value`` as JSON, cut to 80 characters, for an error message."""
    if value is ABSENT:
        return "absent"
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


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
    pack_weights: bool = False  # the target's linear layers on packed weights (runs before the key existed: no)
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
    """One workload x method of the run (workload ``all``: over every workload; :func:`~.summary.summarize`)."""

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
    """A :class:`Divergence`'s first keys: where it happened (a dataclass lists its last base's fields first)."""

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
    """A performance goal checked on the run's summary rows (``dlite-hf bench goals``); ``met`` None: not measured."""

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


def parse_result(data: Any, source: str = "the results document") -> BenchResult:
    """A results document (parsed JSON) as a :class:`BenchResult`, checked and migrated to the current version
    (without ``schema_version``: the current one); :class:`ResultsError` says what is wrong."""
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a {type(data).__name__}"
        raise ResultsError(
            f"{source} {_NOT_A_DOCUMENT}: it holds {kind} ({shown(data)}), expected a JSON object with "
            f"schema_version, meta, records and summary. {_PASS_ONE}"
        )
    if "summary" not in data:
        keys = ", ".join(map(str, data)) or "none"
        raise ResultsError(f"{source} {_NOT_A_DOCUMENT} (it has no 'summary'; its keys: {keys}). {_PASS_ONE}")
    version = data.get("schema_version", SCHEMA_VERSION)
    if type(version) is not int or version not in SUPPORTED_VERSIONS:  # JSON true is no version
        newer = type(version) is int and version > SCHEMA_VERSION
        fix = "upgrade dlite-hf to read it" if newer else "it is no version `dlite-hf bench` ever wrote"
        raise ResultsError(
            f"{source}: schema_version is {shown(version)}: expected one of "
            f"{', '.join(map(str, SUPPORTED_VERSIONS))} (this dlite-hf reads versions 1 to {SCHEMA_VERSION}); {fix}."
        )
    try:
        result = BenchResult.from_dict(data)
    except Invalid as error:
        raise ResultsError(f"{source}: {error} {_HOW_TO_FIX}") from None
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


def as_result(document: BenchResult | Mapping[str, Any]) -> BenchResult:
    """``document`` itself when it is a :class:`BenchResult`, else its JSON form read with :func:`parse_result`."""
    return document if isinstance(document, BenchResult) else parse_result(document)


def as_parts(items: Sequence[P | Mapping[str, Any]], cls: type[P], name: str) -> list[P]:
    """``items`` typed: parts kept, JSON objects checked as the document's list ``name`` (``summary``, ...)."""
    return [item if isinstance(item, cls) else cls.from_dict(item, f"{name}[{i}]") for i, item in enumerate(items)]
