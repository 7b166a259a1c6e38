"""How a figure is declared: `figure(...)` on a dataclass field, with its unit, computation,
reduction, doc, table columns, CSV flag and how the diff compares it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from trace_gaps.figures.inputs import StageInputs

LEFT, RIGHT = "left", "right"


@dataclass(frozen=True, slots=True)
class Column:
    """One column of the per-stage table: header, cell text from the figure's value, and
    alignment (its place: report/tables.py STAGE_TABLE)."""

    header: str
    cell: Callable[[Any], str]
    align: str = RIGHT


@dataclass(frozen=True, slots=True)
class Figure:
    """One per-stage figure: its JSON key (the field's name) and everything said about it."""

    name: str
    unit: str
    doc: str
    compute: Callable[[StageInputs], Any]
    reduced: str  # how the steps' values become one
    columns: tuple[Column, ...] = ()
    in_csv: bool = False  # a column of the CSV (render/csv.py), named by the JSON key
    compared: Compared = False  # on the diff's stage sides (compared_figures)


# How the diff compares a figure on its stage sides (diff/changes.py StageSide): True under its
# own name, as it is; for a dict figure, sums of its keys (two decimals), each under its own name.
Compared: TypeAlias = bool | Mapping[str, tuple[str, ...]]


_FIGURE = "figure"


MEAN = "mean per analysed step"


OVER_STEPS = "over all analysed steps"


NONE = "-"


def figure(
    unit: str,
    doc: str,
    compute: Callable[[StageInputs], Any],
    *,
    reduced: str = MEAN,
    columns: tuple[Column, ...] = (),
    in_csv: bool = False,
    compared: Compared = False,
) -> Any:
    """Declare a StageSummary field as a figure (its name is the field's).

    `columns`: its columns in the per-stage table; `in_csv`: a column of the CSV too, beside
    each ledger row of the stage (a scalar figure only: int, float or str, or None);
    `compared`: on the diff's stage sides, and how (Compared).
    """
    declared = Figure("", unit, doc, compute, reduced, columns, in_csv, compared)
    return field(metadata={_FIGURE: declared})


def declared_figures(cls: type) -> dict[str, Figure]:
    """The figures declared on the fields of a dataclass, by name, each with its name."""
    return {
        f.name: dataclasses.replace(f.metadata[_FIGURE], name=f.name)
        for f in dataclasses.fields(cls)
    }
