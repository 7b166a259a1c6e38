"""The commands, one module each: parse, call the pipeline, write the output (cli.py assembles
them and maps their errors to exit codes); the options they share declared once, by concern
(analysis_options, output_options, worker_options, arguments)."""
