"""JSON: the Report's fields as keys, integer ns, full names, schema_version and the
trace-gaps version that wrote it."""

import dataclasses
import json

from trace_gaps.records import OMITTED_WHEN_NONE, Report


def report_to_dict(report: Report) -> dict[str, object]:
    """The Report as plain data, schema_version and tool_version first; fields not asked for
    left out."""
    data = dataclasses.asdict(report, dict_factory=_without_omitted)
    return {
        "schema_version": data.pop("schema_version"),
        "tool_version": data.pop("tool_version"),
        **data,
    }


def render_json(report: Report) -> str:
    """Render the whole Report as indented JSON."""
    return json.dumps(report_to_dict(report), indent=2, ensure_ascii=False) + "\n"


def _without_omitted(pairs: list[tuple[str, object]]) -> dict[str, object]:
    return {k: v for k, v in pairs if v is not None or k not in OMITTED_WHEN_NONE}
