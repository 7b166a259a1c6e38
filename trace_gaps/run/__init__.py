"""Running analyses: one export, several exports of one run (their clocks aligned, their
reports merged), the exports a drawing needs, and the Dask cluster they use."""
