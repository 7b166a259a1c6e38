"""The commands, one module each: parse, call the pipeline, write the output (cli.py assembles
them and maps their errors to exit codes)."""
