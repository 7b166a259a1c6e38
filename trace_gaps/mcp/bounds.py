"""An answer kept small enough to read whole: figures in ms, long names shortened, empty
values left out (compact), lists paged (paged), and the longest lists halved until the answer
fits its bound in bytes (fit)."""

from __future__ import annotations

import json
import re
from typing import Any

OVERVIEW_BYTES = 4_000
ANSWER_BYTES = 16_000
NAME_CHARS = 300  # a C++ kernel name can run to thousands: kept whole only in the JSON report

Json = dict[str, Any]
NS = re.compile(r"(^|_)ns(_|$)")  # a figure in ns, by its key: wall_ns, ns_per_step


def size_of(answer: Json) -> int:
    """The answer's bytes as JSON on the wire (compact, UTF-8)."""
    return len(json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode())


def ms(ns: int | float | None) -> float | None:
    """ns as ms, rounded to the µs: what an agent reads, a fifth of the digits."""
    return None if ns is None else round(ns / 1e6, 3)


def short_name(name: str, limit: int = NAME_CHARS) -> str:
    """A name shortened in the middle past limit characters."""
    if len(name) <= limit:
        return name
    keep = (limit - 1) // 2
    return name[:keep] + "…" + name[-(limit - 1 - keep) :]


def paged(page: list[Any], offset: int, total: int) -> Json:
    """Where a page sits in its list; next_offset None on the last page."""
    after = offset + len(page)
    return {"offset": offset, "total": total, "next_offset": after if after < total else None}


def compact(value: Any) -> Any:
    """ns fields as ms (`x_ns` → `x_ms`), long names shortened, empty values left out."""
    if isinstance(value, dict):
        out: Json = {}
        for key, item in value.items():
            if item in (None, [], {}, ""):
                continue
            if isinstance(item, int | float) and not isinstance(item, bool) and NS.search(key):
                out[NS.sub(r"\1ms\2", key)] = ms(item)
            else:
                out[key] = compact(item)
        return out
    if isinstance(value, list):
        return [compact(item) for item in value]
    if isinstance(value, str):
        return short_name(value)
    return value


def fit(answer: Json, limit: int, *, shrink_first: tuple[str, ...] = ()) -> Json:
    """The answer within limit bytes: its longest lists cut by half until it fits (the lists
    named in shrink_first first), each cut said in `cut` (the path, kept and total)."""
    cuts: list[Json] = []
    while size_of({**answer, "cut": cuts}) > limit:
        found = longest_list(answer, shrink_first) or longest_list(answer, ())
        if found is None:
            break
        path, items = found
        kept = len(items) // 2
        total = len(items)
        del items[kept:]
        cuts.append({"path": path, "kept": kept, "of": total})
    if cuts:
        answer["cut"] = cuts
    return answer


def longest_list(
    value: Any, within: tuple[str, ...], path: str = ""
) -> tuple[str, list[Any]] | None:
    """The list of more than one item with the most bytes in value (under the keys named in
    within, when given)."""
    best: tuple[int, str, list[Any]] | None = None

    def visit(item: Any, where: str, inside: bool) -> None:
        nonlocal best
        if isinstance(item, dict):
            for key, child in item.items():
                visit(child, f"{where}.{key}" if where else key, inside or key in within)
        elif isinstance(item, list):
            if len(item) > 1 and (inside or not within):
                size = size_of({"x": item})
                if best is None or size > best[0]:
                    best = (size, where, item)
            for number, child in enumerate(item):
                visit(child, f"{where}[{number}]", inside)

    visit(value, path, False)
    return None if best is None else (best[1], best[2])
