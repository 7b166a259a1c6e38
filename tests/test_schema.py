"""The JSON Schema generated from the Report and Diff dataclasses, and the docs that show it.

docs/report.schema.json and docs/diff.schema.json are the generated schemas (rewrite them
with `pytest tests/test_schema.py --update-golden`); every sample's and peer trace's JSON is
validated against them in test_samples.py and test_scale.py, the diff's in test_diff.py.
docs/json.md and docs/diff.md name every key of the schema and no key it lacks.
"""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from tests.conftest import ROOT, SAMPLE_TRACES
from tests.test_samples import sample_report
from trace_gaps import __version__
from trace_gaps.records.report import Report
from trace_gaps.render.csv import render_csv
from trace_gaps.render.json import render_json
from trace_gaps.render.schema import SCHEMAS, json_schema, render_schema, schema_keys, schema_values

DOCS = ROOT / "docs"
# Example values in the docs' sketches: stage, step, process and OS call names, a diff bucket.
EXAMPLE_VALUES = {
    "decode_step",
    "python3",
    "verify_forward",
    "target_verify",
    "fopen",
    "fread",
    "busy",
}


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_the_schema_in_docs_is_the_generated_one(kind: str, update_golden: bool) -> None:
    path = DOCS / f"{kind}.schema.json"
    text = render_schema(SCHEMAS[kind])
    if update_golden:
        path.write_text(text, encoding="utf-8")
    assert path.read_text(encoding="utf-8") == text, f"run pytest {__file__} --update-golden"


def quoted_words(markdown: str) -> set[str]:
    """The "double-quoted" identifiers in the Markdown's code blocks."""
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", markdown, re.S | re.M)
    return {
        word
        for language, block in blocks
        if not language
        for word in re.findall(r'"([a-z][a-z0-9_]*)"', block)
    }


@pytest.mark.parametrize(("kind", "page"), [("report", "json.md"), ("diff", "diff.md")])
def test_the_docs_sketch_names_every_key_and_no_other(kind: str, page: str) -> None:
    schema = json_schema(SCHEMAS[kind])
    words = quoted_words((DOCS / page).read_text(encoding="utf-8"))
    keys = schema_keys(schema)
    assert not keys - words, f"keys missing from docs/{page}: {sorted(keys - words)}"
    unknown = words - keys - schema_values(schema) - EXAMPLE_VALUES
    assert not unknown, f"docs/{page} names what the {kind} JSON lacks: {sorted(unknown)}"


def test_no_key_of_the_report_or_the_diff_breaks_the_naming_rule() -> None:
    # The rule (docs/json.md, "Naming"): a non-integer number is a rate (`_per_step`,
    # `_per_replay`), a percentage (`_pct`) or a fraction (`_fraction`); no bare "share",
    # "index", "total", "mean" or "p50"; "analysed", not "analyzed".
    for kind, root in SCHEMAS.items():
        for definition in json_schema(root)["$defs"].values():
            for key, prop in definition["properties"].items():
                assert key not in {"share", "index", "total", "mean", "p50"}, (kind, key)
                assert "analyzed" not in key and not key.endswith("_share"), (kind, key)
                types = [prop.get("type"), *(p.get("type") for p in prop.get("anyOf", []))]
                if any(t == ["number", "integer"] for t in types):
                    assert key.endswith(("_per_step", "_per_replay", "_pct", "_fraction")), key


def test_the_csv_header_uses_the_json_key_names() -> None:
    # A CSV column is named as the JSON key it copies (steps_analysed, not steps_analyzed).
    report = sample_report(SAMPLE_TRACES / "spec_sync.sqlite")
    header = next(csv.reader(io.StringIO(render_csv(report))))
    assert set(header) <= schema_keys(json_schema(Report)), header


def test_the_json_names_the_trace_gaps_that_wrote_it() -> None:
    data = json.loads(render_json(sample_report(SAMPLE_TRACES / "spec_sync.sqlite")))
    assert list(data)[:2] == ["schema_version", "tool_version"]
    assert data["tool_version"] == __version__
