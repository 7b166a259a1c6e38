"""trace-gaps: where each decode step's wall time goes, from an Nsight Systems SQLite export."""

__version__ = "0.1.0"
