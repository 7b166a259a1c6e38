"""The tools' parameters: the command line's options, from the commands' own declarations
(ANALYZE_OPTIONS, DIFF_OPTIONS in commands/), and the tools' own (exports, section, paging)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, get_args

if TYPE_CHECKING:
    from trace_gaps.commands.analysis_options import CommandOption


@dataclass(frozen=True, slots=True)
class CliParameter:
    """An option of a command, as a tool parameter: its name, the flag it becomes, and the
    typed parameter (help as description, min and max as bounds)."""

    name: str
    flag: str
    parameter: inspect.Parameter

    def argv(self, value: Any) -> list[str]:
        """The option on a command line (as --flag=value, so a value that starts with a dash
        stays a value); nothing for None or False."""
        if value is None or value is False:
            return []
        if value is True:
            return [self.flag]
        if isinstance(value, list):
            return [f"{self.flag}={item}" for item in value]
        return [f"{self.flag}={value}"]


def cli_parameters(declared: Sequence[CommandOption]) -> list[CliParameter]:
    """The declared options of a CLI command (what typer reads too: commands/ declares each
    once), as tool parameters."""
    import typer.models
    from pydantic import Field

    found = []
    for option in declared:
        base, *metadata = get_args(option.annotation)
        info = next(m for m in metadata if isinstance(m, typer.models.OptionInfo))
        named = [d for d in info.param_decls or () if d.startswith("--")]
        flag = named[0] if named else "--" + option.name.replace("_", "-")
        help_text = (info.help or "").replace("\\[", "[")
        field = Field(description=help_text or None, ge=info.min, le=info.max)
        typed = inspect.Parameter(
            option.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=option.default,
            annotation=Annotated[base, field],
        )
        found.append(CliParameter(option.name, flag, typed))
    return found


def tool_parameter(name: str, annotation: Any, default: Any, description: str) -> inspect.Parameter:
    from pydantic import Field

    return inspect.Parameter(
        name,
        inspect.Parameter.KEYWORD_ONLY,
        default=default,
        annotation=Annotated[annotation, Field(description=description)],
    )


def argument_error(tool: str, error: Any) -> str:
    """A pydantic ValidationError as one line: the first problem, with how many more."""
    problems = error.errors()
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or "arguments"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    got = first.get("input")
    shown = "" if isinstance(got, dict) else f", got {json.dumps(got, default=str)[:80]}"
    return f"{tool}: {where}: {first['msg']}{shown}{more}"


def exports_parameter() -> inspect.Parameter:
    """The exports a tool reads: one run's, at least one."""
    from pydantic import Field

    return inspect.Parameter(
        "exports",
        inspect.Parameter.KEYWORD_ONLY,
        annotation=Annotated[list[str], Field(min_length=1, description=EXPORTS)],
    )


def section_parameter() -> inspect.Parameter:
    from pydantic import Field

    return tool_parameter("section", Annotated[int, Field(ge=0)], 0, SECTION)


def offset_parameter() -> inspect.Parameter:
    from pydantic import Field

    return tool_parameter("offset", Annotated[int, Field(ge=0)], 0, OFFSET)


def limit_parameter(default: int) -> inspect.Parameter:
    from pydantic import Field

    return tool_parameter("limit", Annotated[int, Field(ge=1, le=100)], default, LIMIT)


EXPORTS = (
    "Absolute paths of files from `nsys export --type sqlite` (a quoted glob too); several: "
    "the exports of one run, one per rank, analysed as one."
)
SECTION = "Which section of the overview (0: the first; a process, or one kind of its steps)."
OFFSET = "The first item of the page (next_offset of the page before)."
LIMIT = "Items on the page."
