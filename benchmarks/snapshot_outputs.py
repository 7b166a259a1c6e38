"""Fingerprint every output of trace-gaps on a set of exports, for a refactor's byte-identity check.

    python benchmarks/snapshot_outputs.py OUT.tsv EXPORT [EXPORT ...]

For each export it runs `analyze` in every format (text, md, csv, json), `plot timeline` and
`plot steps`, all with no other flags, and writes one line per output: export, output,
exit code, SHA-256 and size. Run it before and after a change and `diff` the two files. Outputs
are produced in-process (one interpreter, typer's runner), so a sitting of ~30 exports takes
minutes, not the start-up of 180 processes. TG_SNAPSHOT_JOBS=N adds `--jobs N` to every
command (on a machine of two cores, N > 2 still starts N window workers: the spans).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

from typer.testing import CliRunner

from trace_gaps.cli import app

COMMANDS: dict[str, list[str]] = {
    "text": ["analyze", "-q", "-f", "text"],
    "md": ["analyze", "-q", "-f", "md"],
    "csv": ["analyze", "-q", "-f", "csv"],
    "json": ["analyze", "-q", "-f", "json"],
    "timeline.png": ["plot", "timeline", "-q"],
    "steps.png": ["plot", "steps", "-q"],
}


def main(out: Path, exports: list[Path]) -> None:
    runner = CliRunner()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for export in exports:
            for name, args in COMMANDS.items():
                target = Path(tmp) / f"{export.stem}.{name}"
                jobs = os.environ.get("TG_SNAPSHOT_JOBS")
                extra = ["--jobs", jobs] if jobs else []
                result = runner.invoke(app, [*args, *extra, str(export), "-o", str(target)])
                data = target.read_bytes() if target.exists() else result.output.encode()
                digest = hashlib.sha256(data).hexdigest()[:16]
                lines.append(f"{export.name}\t{name}\t{result.exit_code}\t{digest}\t{len(data)}")
                print(lines[-1], flush=True)
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1].startswith("-"):
        sys.exit("usage: python benchmarks/snapshot_outputs.py OUT.tsv EXPORT [EXPORT ...]")
    main(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
