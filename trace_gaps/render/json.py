"""JSON: the Report's fields as keys, integer ns, full names, schema_version and the
trace-gaps version that wrote it.

Written by hand, not by json.dumps(indent=2), whose indented output is made by its
pure-Python encoder a chunk at a time (about 3.3 s after a 15,000-step report was built): the
same bytes, each string escaped by json's own C function, the structure joined in pieces."""

from __future__ import annotations

import dataclasses
import json
import math
from functools import cache
from typing import Any

from trace_gaps.records.report import OMITTED_WHEN_NONE, Report

_escaped = json.encoder.encode_basestring  # ensure_ascii=False: the C function where built


# Pieces written are joined into one string this many at a time. Millions of small strings
# held to the end, with a plain copy of the Report, took a process from 0.73 to 1.22 GB
# while it wrote an 82 MB report (the 1M capture x10, two cores; 0.78 GB at its peak now).
JOINED_EVERY = 65_536


def render_json(report: Report) -> str:
    """Render the whole Report as indented JSON (json.dumps(indent=2, ensure_ascii=False))."""
    return "".join(json_pieces(report))


def json_pieces(report: Report) -> list[str]:
    """render_json's text in pieces, to be written one after the other: the whole text is
    never one string (twice its length in memory while it is joined, and again while it is
    encoded). The Report's dataclasses are written as they are met, with no plain copy of
    the Report beside the text."""
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


def render_json_value(value: Any) -> str:
    """Any value (dicts, lists, dataclasses) as render_json writes a Report: indented as
    json.dumps(indent=2, ensure_ascii=False), OMITTED_WHEN_NONE fields left out when None."""
    parts: list[str] = []
    _encode(value, "\n", parts)
    return "".join(parts) + "\n"


@cache
def _field_names(kind: type) -> tuple[str, ...] | None:
    """A dataclass's field names; None for any other type."""
    if not dataclasses.is_dataclass(kind):
        return None
    return tuple(f.name for f in dataclasses.fields(kind))


def _encode(value: Any, newline: str, parts: list[str], joined: list[str] | None = None) -> None:
    """Append value as json.dumps(indent=2) writes it at this depth (newline: a line break
    and the depth's indent); a dataclass as dataclasses.asdict's dict of it, the fields of
    OMITTED_WHEN_NONE left out when None. Scalars of the exact built-in types are written
    inline by their containers (_SCALARS): a report of 15,000 steps holds millions of them.
    joined: where the parts go, joined, every JOINED_EVERY."""
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
