"""JSON: the Report's fields as keys, integer ns, full names, schema_version and the
trace-gaps version that wrote it.

Written by hand, not by json.dumps(indent=2), whose indented output is made by its
pure-Python encoder a chunk at a time (about 3.3 s after a 15,000-step report was built): the same bytes,
each string escaped by json's own C function, the structure joined once."""

from __future__ import annotations

import dataclasses
import json
import math
from functools import cache
from typing import Any

from trace_gaps.records import OMITTED_WHEN_NONE, Report

_escaped = json.encoder.encode_basestring  # ensure_ascii=False: the C function where built


def report_to_dict(report: Report) -> dict[str, object]:
    """The Report as plain data, schema_version and tool_version first; fields not asked for
    left out (dataclasses.asdict's result, without its copies)."""
    data = _plain(report)
    return {
        "schema_version": data.pop("schema_version"),
        "tool_version": data.pop("tool_version"),
        **data,
    }


# Pieces written are joined into one string this many at a time: millions of small strings
# held until the end cost several times the text they make (0.45 GB for an 82 MB report).
JOINED_EVERY = 65_536


def render_json(report: Report) -> str:
    """Render the whole Report as indented JSON (json.dumps(indent=2, ensure_ascii=False))."""
    return "".join(json_pieces(report))


def json_pieces(report: Report) -> list[str]:
    """render_json's text in pieces, to be written one after the other: the whole text is
    never one string (twice its length in memory while it is joined, and again while it is
    encoded). The Report's dataclasses are written as they are met, with no plain copy of
    the Report (report_to_dict) beside the text."""
    data = {name: getattr(report, name) for name in ("schema_version", "tool_version")}
    for name in _field_names(Report) or ():
        value = getattr(report, name)
        if name not in data and (value is not None or name not in OMITTED_WHEN_NONE):
            data[name] = value
    parts: list[str] = []
    joined: list[str] = []
    _encode(data, "\n", parts, joined)
    parts.append("\n")
    joined.append("".join(parts))
    return joined


_LEAVES = frozenset({str, int, float, bool, type(None)})


@cache
def _field_names(kind: type) -> tuple[str, ...] | None:
    """A dataclass's field names; None for any other type."""
    if not dataclasses.is_dataclass(kind):
        return None
    return tuple(f.name for f in dataclasses.fields(kind))


def _plain(value: Any) -> Any:
    """dataclasses.asdict with the omitted fields left out, sharing the leaves (str, int,
    float, bool, None: nothing to copy)."""
    kind = type(value)
    if kind in _LEAVES:
        return value
    if kind is list or kind is tuple:
        return [_plain(v) for v in value]
    names = _field_names(kind)  # type: ignore[arg-type]
    if names is not None:
        data = {}
        for name in names:
            item = _plain(getattr(value, name))
            if item is not None or name not in OMITTED_WHEN_NONE:
                data[name] = item
        return data
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value


def _encode(value: Any, newline: str, parts: list[str], joined: list[str] | None = None) -> None:
    """Append value as json.dumps(indent=2) writes it at this depth (newline: a line break
    and the depth's indent); a dataclass as _plain's dict of it. Scalars of the exact
    built-in types are written inline by their containers (_SCALARS): a report of 15,000
    steps holds millions of them. joined: where the parts go, joined, every JOINED_EVERY."""
    if isinstance(value, str):
        parts.append(_escaped(value))
    elif value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, int):
        parts.append(int.__repr__(value))
    elif isinstance(value, float):
        parts.append(_float(value))
    elif isinstance(value, list | tuple):
        if not value:
            parts.append("[]")
            return
        inner = newline + "  "
        separator = "[" + inner
        for item in value:
            scalar = _SCALARS.get(type(item))
            if scalar is not None:
                parts.append(separator + scalar(item))
            else:
                parts.append(separator)
                _encode(item, inner, parts, joined)
                if joined is not None and len(parts) > JOINED_EVERY:
                    joined.append("".join(parts))
                    parts.clear()
            separator = "," + inner
        parts.append(newline + "]")
    elif isinstance(value, dict):
        if not value:
            parts.append("{}")
            return
        inner = newline + "  "
        separator = "{" + inner
        for key, item in value.items():
            name = _escaped(key) if type(key) is str else _key(key)
            scalar = _SCALARS.get(type(item))
            if scalar is not None:
                parts.append(f"{separator}{name}: {scalar(item)}")
            else:
                parts.append(f"{separator}{name}: ")
                _encode(item, inner, parts, joined)
            separator = "," + inner
        parts.append(newline + "}")
    elif (names := _field_names(value.__class__)) is not None:
        fields = {}
        for name in names:
            item = getattr(value, name)
            if item is not None or name not in OMITTED_WHEN_NONE:
                fields[name] = item
        _encode(fields, newline, parts, joined)
    else:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _float(value: float) -> str:
    if math.isfinite(value):
        return float.__repr__(value)
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _null(_: None) -> str:
    return "null"


def _key(key: Any) -> str:
    """A dict key as json writes it: a string, or a scalar turned into one."""
    if isinstance(key, str):
        return _escaped(key)
    if key is True:
        return '"true"'
    if key is False:
        return '"false"'
    if key is None:
        return '"null"'
    if isinstance(key, int):
        return _escaped(int.__repr__(key))
    if isinstance(key, float):
        return _escaped(_float(key))
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


# How a container writes a scalar of each exact built-in type (a subclass, such as a StrEnum
# member, goes through _encode's isinstance checks, as json's own encoder does).
_SCALARS: dict[type, Any] = {
    str: _escaped,
    int: int.__repr__,
    float: _float,
    bool: _bool,
    type(None): _null,
}
