"""JSON: the Report's fields as keys, integer ns, full names, schema_version and the
trace-gaps version that wrote it."""

import dataclasses
import json

from trace_gaps.records import Report


def report_to_dict(report: Report) -> dict[str, object]:
    """The Report as plain data, schema_version and tool_version first."""
    data = dataclasses.asdict(report)
    return {
        "schema_version": data.pop("schema_version"),
        "tool_version": data.pop("tool_version"),
        **data,
    }


def render_json(report: Report) -> str:
    """Render the whole Report as indented JSON."""
    return json.dumps(report_to_dict(report), indent=2, ensure_ascii=False) + "\n"
