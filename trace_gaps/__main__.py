"""`python -m trace_gaps`."""

from trace_gaps.cli import app

app()
