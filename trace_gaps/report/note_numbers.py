"""A note's numbers read back by type: a wrong type is our bug, and says which key."""

from __future__ import annotations

from trace_gaps.records.notes import NoteNumber

Numbers = dict[str, NoteNumber]


def int_of(numbers: Numbers, key: str) -> int:
    """The number under key, which must be an int."""
    value = numbers[key]
    if not isinstance(value, int):
        raise TypeError(f"note number {key!r} is {value!r}, not an int")
    return value


def float_of(numbers: Numbers, key: str) -> float:
    """The number under key, an int or a float."""
    value = numbers[key]
    if not isinstance(value, int | float):
        raise TypeError(f"note number {key!r} is {value!r}, not a number")
    return value


def items_of(numbers: Numbers, key: str) -> tuple[int | str, ...]:
    """The tuple of numbers or names under key."""
    value = numbers[key]
    if not isinstance(value, tuple):
        raise TypeError(f"note number {key!r} is {value!r}, not a tuple")
    return value
