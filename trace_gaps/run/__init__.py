"""Running analyses: one export, several exports of one run, and the Dask cluster they use."""
