"""The engine: the analyses run over windows of steps, their metrics merged.

pipeline.py   options → steps → windows → one Analysis (the entry: analyse_trace, analyse_rows)
structure.py  the range tree and the steps cut from it; memory.py: a Trace as row sources
windows.py    plan the windows, read and drop the rows, check them; spans.py: spans on workers
streams.py    the rows of each table held while a window may need them
frames.py     a window's shared frames, computed once for every metric
metric.py     what a metric is (declare) and how parts merge; metrics.py: the declared ones
details.py    the steps a picture draws; picks.py: which steps those are
"""
