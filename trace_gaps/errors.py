"""Problems the user can fix: each message names the file, what is wrong and what to do."""


class TraceGapsError(Exception):
    """A problem with the user's input or options; the CLI prints it as one line."""


class NotAnExportError(TraceGapsError):
    """The file is not a readable Nsight Systems SQLite export."""


class MissingTableError(TraceGapsError):
    """The export lacks a table the analysis cannot do without."""


class NoKernelsError(TraceGapsError):
    """The export holds no GPU work to analyse."""


class StepNotFoundError(TraceGapsError):
    """The requested step range does not exist in the export."""
