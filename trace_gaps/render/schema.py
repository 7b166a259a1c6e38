"""The JSON Schema of `analyze -f json` and `diff -f json`, generated from their dataclasses."""

from __future__ import annotations

import dataclasses
import functools
import json
import operator
import types
import typing
from enum import StrEnum
from typing import Any

from trace_gaps.diff.build import Diff
from trace_gaps.diff.changes import StageSide
from trace_gaps.figures.speed_of_light import SpeedOfLight
from trace_gaps.figures.stage import StageSummary
from trace_gaps.model import OpKind
from trace_gaps.records.notes import Note, Severity
from trace_gaps.records.report import (
    OMITTED_WHEN_NONE,
    Candidate,
    KernelRow,
    LedgerEntry,
    Report,
    StepLedgerEntry,
)
from trace_gaps.records.whatif import Prediction
from trace_gaps.vocabulary import (
    WAIT_CAUSE,
    Bucket,
    DictKeys,
    ExecutionMode,
    IdleCause,
    VerdictKind,
)

DRAFT = "https://json-schema.org/draft/2020-12/schema"

# String fields whose values are the model's vocabulary (typed `str` in the dataclasses, so
# that asdict gives plain strings): their schema lists the allowed values.
_CAUSES = [*(cause.value for cause in IdleCause), WAIT_CAUSE]
VOCABULARY: dict[tuple[type, str], list[str]] = {
    (LedgerEntry, "bucket"): [bucket.value for bucket in Bucket],
    (LedgerEntry, "cause"): _CAUSES,
    (StepLedgerEntry, "bucket"): [bucket.value for bucket in Bucket],
    (StepLedgerEntry, "cause"): _CAUSES,
    (Candidate, "bucket"): [bucket.value for bucket in Bucket],
    (Candidate, "kind"): [kind.value for kind in VerdictKind],
    (StageSummary, "execution"): [mode.value for mode in ExecutionMode],
    (StageSide, "execution"): [mode.value for mode in ExecutionMode],
    (Note, "severity"): [severity.value for severity in Severity],
    (KernelRow, "kind"): [kind.value for kind in OpKind],
}

# Integer fields with bounds (docs/what-if.md: a prediction is above zero, a saving never
# negative); on a nullable field the bound is the integer's.
BOUNDS: dict[tuple[type, str], dict[str, int]] = {
    (Candidate, "predicted_step_ns"): {"exclusiveMinimum": 0},
    (Candidate, "saving_ns"): {"minimum": 0},
    (Prediction, "predicted_ns"): {"exclusiveMinimum": 0},
    (Prediction, "saving_ns"): {"minimum": 0},
    (SpeedOfLight, "predicted_step_ns"): {"exclusiveMinimum": 0},
}

_SCALARS: dict[Any, dict[str, Any]] = {
    int: {"type": "integer"},
    float: {"type": "number"},
    str: {"type": "string"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}


def json_schema(root: type) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of `dataclasses.asdict(root(...))` as rendered.

    Every dataclass is an object with all its fields required (but for OMITTED_WHEN_NONE,
    present only where given) and no other keys; `X | None` is either; a float field also
    accepts integers (JSON does not tell 1.0 from 1).
    """
    definitions: dict[str, dict[str, Any]] = {}
    _define(root, definitions)
    return {
        "$schema": DRAFT,
        "title": f"trace-gaps {root.__name__}",
        "$ref": f"#/$defs/{root.__name__}",
        "$defs": dict(sorted(definitions.items())),
    }


def render_schema(root: type) -> str:
    """The schema as the indented JSON written to docs/."""
    return json.dumps(json_schema(root), indent=2, ensure_ascii=False) + "\n"


def schema_keys(schema: dict[str, Any]) -> set[str]:
    """Every key name any object of the schema has."""
    return {key for definition in schema["$defs"].values() for key in definition["properties"]}


def schema_values(schema: dict[str, Any]) -> set[str]:
    """Every value a vocabulary field of the schema may take, and every fixed dict key."""
    values: set[str] = set()
    for definition in schema["$defs"].values():
        for prop in definition["properties"].values():
            for allowed in (prop.get("enum", []), prop.get("propertyNames", {}).get("enum", [])):
                values.update(v for v in allowed if isinstance(v, str))
    return values


def _define(cls: type, definitions: dict[str, dict[str, Any]]) -> dict[str, Any]:
    name = cls.__name__
    if name not in definitions:
        definitions[name] = {}  # placeholder: a dataclass may refer to itself
        hints = typing.get_type_hints(cls, include_extras=True)
        properties = {
            f.name: _field_schema(cls, f.name, hints[f.name], definitions)
            for f in dataclasses.fields(cls)
        }
        definitions[name] = {
            "description": (cls.__doc__ or "").strip().splitlines()[0],
            "type": "object",
            "properties": properties,
            "required": [key for key in properties if key not in OMITTED_WHEN_NONE],
            "additionalProperties": False,
        }
    return {"$ref": f"#/$defs/{name}"}


def _given(name: str, hint: Any) -> Any:
    """A field left out where None is, where given, not None."""
    if name not in OMITTED_WHEN_NONE:
        return hint
    return functools.reduce(
        operator.or_, [arg for arg in typing.get_args(hint) if arg is not type(None)]
    )


def _field_schema(
    cls: type, name: str, annotated: Any, definitions: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    hint, keys = _dict_keys(annotated)
    hint = _given(name, hint)
    schema = _type_schema(hint, definitions)
    values = VOCABULARY.get((cls, name))
    if values is not None:
        nullable = _is_optional(hint)
        schema = {"enum": [*values, None] if nullable else list(values)}
    bounds = BOUNDS.get((cls, name))
    if bounds is not None:
        schema = _bounded(schema, bounds)
    if keys is not None:
        schema = {**schema, "propertyNames": {"enum": list(keys)}}
    return schema


def _dict_keys(hint: Any) -> tuple[Any, DictKeys | None]:
    """The type without its annotation, and the keys a dict field is annotated with (None:
    any keys)."""
    if typing.get_origin(hint) is not typing.Annotated:
        return hint, None
    keys = [extra for extra in hint.__metadata__ if isinstance(extra, DictKeys)]
    return hint.__origin__, keys[0] if keys else None


def _bounded(schema: dict[str, Any], bounds: dict[str, int]) -> dict[str, Any]:
    """The integer schema (or the integer branch of a nullable one) with the bounds."""
    if schema.get("type") == "integer":
        return {**schema, **bounds}
    branches = [
        {**branch, **bounds} if branch.get("type") == "integer" else branch
        for branch in schema.get("anyOf", [])
    ]
    return {**schema, "anyOf": branches}


def _is_optional(hint: Any) -> bool:
    return isinstance(hint, types.UnionType) and type(None) in typing.get_args(hint)


def _type_schema(hint: Any, definitions: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if hint is float:
        return {"type": ["number", "integer"]}
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    if isinstance(hint, type) and issubclass(hint, StrEnum):
        return {"enum": [member.value for member in hint]}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _define(hint, definitions)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if isinstance(hint, types.UnionType):
        return {"anyOf": [_type_schema(arg, definitions) for arg in args]}
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0], definitions)}
    if origin is dict and args[0] is str:
        return {"type": "object", "additionalProperties": _type_schema(args[1], definitions)}
    raise TypeError(f"no JSON Schema for {hint!r}: add it to trace_gaps/render/schema.py")


SCHEMAS: dict[str, type] = {"report": Report, "diff": Diff}
