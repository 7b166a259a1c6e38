"""The records the Report is made of: the report, its processes and candidates (report),
its integrity notes (notes), the what-if (whatif), the ranks (ranks), the timelines (timeline)."""
