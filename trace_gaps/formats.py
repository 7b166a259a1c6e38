"""Output formats, in a module of their own: the command line names them before it loads
pandas, so `--help` and a wrong option answer at once."""

from enum import StrEnum


class Format(StrEnum):
    """Output formats of `trace-gaps analyze` (and `info`, `diff`)."""

    TEXT = "text"
    MD = "md"
    JSON = "json"
    CSV = "csv"


class DiffFormat(StrEnum):
    """Output formats of `trace-gaps diff`: a diff has no CSV form, so none is offered."""

    TEXT = "text"
    MD = "md"
    JSON = "json"


class InfoFormat(StrEnum):
    """Output formats of `trace-gaps info`."""

    TEXT = "text"
    JSON = "json"
