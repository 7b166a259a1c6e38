"""The hand-written JSON (render/json.py) is json.dumps(indent=2, ensure_ascii=False), byte
for byte, on any plain data and on real reports; a dataclass becomes asdict's dict."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import sample_trace_paths, shipped_report
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.records.report import OMITTED_WHEN_NONE
from trace_gaps.render import json as writer

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
)
KEYS = st.text() | st.integers() | st.booleans() | st.none() | st.floats(allow_nan=False)
PLAIN = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(KEYS, inner, max_size=4)
    ),
    max_leaves=30,
)


def written(value: object) -> str:
    parts: list[str] = []
    writer._encode(value, "\n", parts)
    return "".join(parts)


@settings(max_examples=300)
@given(PLAIN)
def test_any_plain_data_is_written_as_json_dumps_writes_it(value: object) -> None:
    assert written(value) == json.dumps(value, indent=2, ensure_ascii=False)


def test_a_value_json_cannot_write_is_refused_alike() -> None:
    with pytest.raises(TypeError):
        json.dumps({"a": {1, 2}}, indent=2)
    with pytest.raises(TypeError):
        written({"a": {1, 2}})


@pytest.mark.parametrize(
    "path",
    [p for p in sample_trace_paths() if p.stem in {"spec_two_ranks", "spec_sync"}],
    ids=lambda p: Path(str(p)).stem,
)
def test_real_reports_are_written_as_before(path: Path) -> None:
    report = shipped_report(path, AnalysisOptions(), ())
    data = dataclasses.asdict(
        report,
        dict_factory=lambda pairs: {
            k: v for k, v in pairs if v is not None or k not in OMITTED_WHEN_NONE
        },
    )
    data = {
        "schema_version": data.pop("schema_version"),
        "tool_version": data.pop("tool_version"),
        **data,
    }
    assert writer.render_json(report) == json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def test_a_report_is_written_in_pieces_that_make_the_same_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """analyze -f json writes the report piece by piece (streams.write_output), never as one
    string: the pieces, joined every 50 parts here, are the text, in a file and on stdout."""
    from trace_gaps.streams import write_output

    path = next(p for p in sample_trace_paths() if p.stem == "spec_two_ranks")
    report = shipped_report(path, AnalysisOptions(), ())
    whole = writer.render_json(report)
    monkeypatch.setattr(writer, "JOINED_EVERY", 50)
    pieces = writer.json_pieces(report)
    assert len(pieces) > 10 and "".join(pieces) == whole
    write_output(pieces, tmp_path / "r.json", quiet=True)
    assert (tmp_path / "r.json").read_text(encoding="utf-8") == whole
