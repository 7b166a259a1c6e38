"""Remove the capture machine's environment variables from exports before they are committed.

nsys records the profiled process's whole environment (META_DATA_CAPTURE
PROCESS_n:ENVIRONMENT_VARIABLE rows, TARGET_INFO_SYSTEM_ENV DeviceEnvironment, and
NUL-separated environment blocks in StringIds). Nothing the
analysis reads is touched; the file is vacuumed so the deleted text is gone from its pages.

    python3 sample_traces/generate/scrub.py sample_traces/*.sqlite trace_gaps/data/demo.sqlite
"""

import sqlite3
import sys


def scrub(path: str) -> int:
    connection = sqlite3.connect(path)
    tables = {
        row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    removed = 0
    if "META_DATA_CAPTURE" in tables:
        removed += connection.execute(
            "DELETE FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT%' OR name LIKE '%WORKING_DIR%'"
        ).rowcount
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        removed += connection.execute(
            "DELETE FROM TARGET_INFO_SYSTEM_ENV WHERE name IN ('DeviceEnvironment', 'Hostname')"
        ).rowcount
    if "StringIds" in tables:
        # Environment blocks (NUL-separated NAME=value lists) interned for process records.
        removed += connection.execute(
            "UPDATE StringIds SET value = '(environment removed)' "
            "WHERE instr(value, char(0)) > 0 AND value LIKE '%=%'"
        ).rowcount
    connection.commit()
    connection.execute("VACUUM")
    connection.close()
    return removed


if __name__ == "__main__":
    for argument in sys.argv[1:]:
        print(f"{argument}: removed {scrub(argument)} rows")
