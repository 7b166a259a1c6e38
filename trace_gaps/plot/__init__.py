"""Matplotlib figures from a Report: the step timeline and the per-step ledger bars."""

from trace_gaps.plot.steps import plot_steps
from trace_gaps.plot.timeline import plot_timeline

__all__ = ["plot_steps", "plot_timeline"]
