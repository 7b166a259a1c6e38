"""A stage's busy time recomputed straight from the export with SQL, against the ledger.

busy[stage] over a step is the sum of the intervals its ops own, clipped to the step window
(docs/definitions.md): op i owns [max(start_i, latest end of the ops that started before it),
end_i), and an op's stage is the stage range open on the launching thread when its launching
call started. Even on one stream ops overlap a little on Hopper (a split-K reduce kernel
starts 64 ns before its GEMM ends in spec_eager), so the ownership rule matters.
"""

from __future__ import annotations

import sqlite3

import pytest

from tests.conftest import SAMPLE_TRACES
from tests.test_ledger import analyse
from trace_gaps.analysis.engine.metrics import LEDGER
from trace_gaps.analysis.stages import STAGE

BUSY_BY_SQL = """
WITH names AS (SELECT id, value FROM StringIds),
ranges AS (
    SELECT e.start, e."end", e.globalTid, COALESCE(e.text, n.value) AS name
    FROM NVTX_EVENTS AS e LEFT JOIN names AS n ON n.id = e.textId
    WHERE e.eventType = 59 AND e."end" IS NOT NULL AND COALESCE(e.domainId, 0) = 0
),
steps AS (SELECT start, "end", globalTid FROM ranges WHERE name = 'decode_step'),
stages AS (SELECT start, "end", globalTid FROM ranges WHERE name = ?),
ops AS (
    SELECT start, "end", correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL
    UNION ALL SELECT start, "end", correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMCPY
    UNION ALL SELECT start, "end", correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMSET
),
owned AS (
    SELECT MAX(start, COALESCE(MAX("end") OVER (
               PARTITION BY globalPid ORDER BY start, "end" DESC
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), start)) AS start,
           "end", correlationId, globalPid
    FROM ops
),
launched AS (
    SELECT o.start, o."end", r.globalTid, r.start AS call_start
    FROM owned AS o JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r
      ON r.correlationId = o.correlationId AND (r.globalTid >> 24) = (o.globalPid >> 24)
)
SELECT COALESCE(SUM(MIN(l."end", st."end") - MAX(l.start, st.start)), 0)
FROM launched AS l
JOIN stages AS g ON g.globalTid = l.globalTid AND l.call_start >= g.start AND l.call_start < g."end"
JOIN steps AS st ON st.globalTid = l.globalTid AND l.start < st."end" AND l."end" > st.start
WHERE l.start < l."end"
"""


@pytest.mark.parametrize(
    ("trace", "stage"),
    [
        ("spec_eager", "verify_forward"),
        ("spec_eager", "draft_forward"),
        ("spec_eager", "accept_sample_commit"),
        ("spec_sync", "accept_sample_commit"),  # three streams
        ("spec_graph_node", "verify_forward"),  # node-level graph kernels
    ],
)
def test_stage_busy_time_equals_a_by_hand_sql_sum(trace: str, stage: str) -> None:
    path = SAMPLE_TRACES / f"{trace}.sqlite"
    if not path.exists():
        pytest.skip("sample trace not present")
    connection = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    (expected,) = connection.execute(BUSY_BY_SQL, (stage,)).fetchone()
    connection.close()
    analysis = analyse(path, skip=0)
    code = analysis.stage_map.code(stage)
    ledger = analysis.metrics[LEDGER]
    ours = ledger[(ledger[STAGE] == code) & (ledger["bucket"] == "busy")]["duration_ns"].sum()
    assert expected > 0
    assert int(ours) == int(expected)
