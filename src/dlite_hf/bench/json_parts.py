"""Dataclasses read from and written to JSON objects, for the results document (:mod:`.results`): every value
checked against its field's type (numbers kept as they are, so a document read and written back is the same bytes),
unknown keys kept, and the keys written back in the order they were read.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
from dataclasses import dataclass, field
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

_WRITTEN_WHEN_SET = "written_when_set"  # field metadata: the key is written only when the value is not None


class ResultsError(ValueError):
    """A document that is not a `dlite-hf bench` results document, or has a value of the wrong type."""


class Invalid(Exception):
    """A value of the wrong type at ``where`` (a path such as ``records[3].tau``)."""

    def __init__(self, where: str, value: Any, expected: str):
        super().__init__(where)
        self.where, self.value, self.expected = where, value, expected


def when_set() -> Any:
    """A field (default None) whose key is written only when it has a value."""
    return field(default=None, metadata={_WRITTEN_WHEN_SET: True})


P = TypeVar("P", bound="Part")


@dataclass(kw_only=True)
class Part:
    """A JSON object of the document: declared fields, ``extra`` (keys this version does not define) and the keys
    it was read with (``_keys``, None when built in code)."""

    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    _keys: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_dict(cls: type[P], data: Any, where: str = "") -> P:
        """Read one JSON object (``where``: its place in the document); :class:`ResultsError` when invalid."""
        try:
            return cls._read(data, where)
        except Invalid as error:
            raise ResultsError(f"{error.where} is {shown(error.value)}: expected {error.expected}.") from None

    @classmethod
    def _read(cls: type[P], data: Any, where: str) -> P:
        if not isinstance(data, dict):
            raise Invalid(where or cls.__name__, data, "a JSON object")
        hints, values = _hints(cls), {}
        for spec in _fields(cls):
            here = f"{where}.{spec.name}" if where else spec.name
            if spec.name in data:
                values[spec.name] = _convert(data[spec.name], hints[spec.name], here)
            elif spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
                raise Invalid(here, ABSENT, _describe(hints[spec.name]))
        names = {spec.name for spec in _fields(cls)}
        extra = {key: value for key, value in data.items() if key not in names}
        return cls(**values, extra=extra, _keys=tuple(data))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: the keys it was read with, in their order, then the :func:`when_set` fields set
        since (a part built in code: its fields in order)."""
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
        if self._keys is not None and name not in self._keys:
            return default
        return getattr(self, name)


@functools.cache
def _fields(cls: type) -> tuple[dataclasses.Field, ...]:
    return tuple(spec for spec in dataclasses.fields(cls) if spec.name not in ("extra", "_keys"))


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


ABSENT = object()  # a required key the object lacks


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
        if value is None:
            _fail(where, value, hint)
        try:
            return _convert(value, inner, where)
        except Invalid as error:
            if error.where != where:  # a key inside the value: that key's own message
                raise
            raise Invalid(where, value, _describe(hint)) from None
    if isinstance(hint, type) and issubclass(hint, Part):
        return hint._read(value, where)
    if origin is list:
        if not isinstance(value, list):
            _fail(where, value, hint)
        (item,) = get_args(hint)
        return [_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            _fail(where, value, hint)
        item = get_args(hint)[1]
        return {k: _convert(v, item, f"{where}.{k}") for k, v in value.items()}
    accepted = {float: (int, float), int: (int,), bool: (bool,), str: (str,)}[hint]
    if (isinstance(value, bool) and hint is not bool) or not isinstance(value, accepted):  # JSON true is no number
        _fail(where, value, hint)
    return value


def _fail(where: str, value: Any, hint: Any) -> Any:
    raise Invalid(where, value, _describe(hint))


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
