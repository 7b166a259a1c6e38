"""Which capture settings an output may show: a list of what to keep, never of what to drop.

nsys records the capture's settings in META_DATA_CAPTURE, among them the host's name
(DEVICE_DISPLAY_NAME), the working directory, the program's path and arguments (a token or a
private path can be one), the environment and the user's name. A report pasted into a bug
must not carry them: a setting is shown only when its value is a number or a boolean, or
when its name is one of the few whose text values are nsys's own words. The program's name
is kept without its folder. --include-command adds the host name, the working directory, the
full program path and its arguments; the environment and the user's name never appear.
"""

from __future__ import annotations

import re
from pathlib import PurePath

# Settings whose text values are nsys's own words (Cuda, Immediate, LaunchAnother, Node, ...).
_NSYS_WORDS = frozenset(
    {
        "CAPTURE_EVENT_TYPE",
        "CUDA_GRAPH_TRACE_OPTIONS:MODE",
        "CUDA_TRACE_SCOPE",
        "DEVICE_ID",
        "DEVICE_TYPE",
        "HOW_TO_ATTACH",
        "START_TRIGGER",
        "STOP_TRIGGER",
    }
)
# Shown only with --include-command.
_COMMAND_SETTINGS = frozenset({"DEVICE_DISPLAY_NAME", "WORKING_DIR", "COMMAND_LINE"})
_PROGRAM = "COMMAND"
_ARGUMENT = re.compile(r"ARGUMENT_\d+")
_PROCESS_PREFIX = re.compile(r"^PROCESS_\d+:")
_NUMBER_OR_BOOLEAN = re.compile(r"-?\d+(\.\d+)?|true|false", re.IGNORECASE)


def shareable_settings(
    settings: tuple[tuple[str, str], ...], *, include_command: bool = False
) -> list[tuple[str, str]]:
    """The capture settings an output may show, in their order."""
    kept = []
    for key, value in settings:
        name = _PROCESS_PREFIX.sub("", key)
        if name == _PROGRAM:
            kept.append((key, value if include_command else PurePath(value).name))
        elif name in _COMMAND_SETTINGS or _ARGUMENT.fullmatch(name):
            if include_command:
                kept.append((key, value))
        elif name in _NSYS_WORDS or _NUMBER_OR_BOOLEAN.fullmatch(str(value)):
            kept.append((key, value))
    return kept
