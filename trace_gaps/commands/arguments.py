"""The arguments every command takes alike: the exports, and -h as --help."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}

ExportArg = Annotated[
    Path | None,
    typer.Argument(help="File from `nsys export --type sqlite`.", show_default=False),
]
ExportsArg = Annotated[
    list[Path] | None,
    typer.Argument(
        help="File(s) from `nsys export --type sqlite`. Several (or a quoted glob): the "
        "exports of one run, one per rank or node, analysed as one.",
        show_default=False,
    ),
]
