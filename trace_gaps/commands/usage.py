"""How the command line presents itself, for every command at once: help with plain value
names (INTEGER, PATH, [text|md|json|csv]) instead of typer's type placeholders (`<bool>`,
`<list[Path]>`, `{before}`), and a wrong choice answered in one line."""

from __future__ import annotations

import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

import typer
from typer.core import TyperArgument, TyperOption

from trace_gaps.streams import stdout_outside_commands

Command = Any  # typer's own (vendored) click Command or Group

# typer's label of a value type (its help placeholder without the <>) → the name shown.
VALUE_NAMES = {
    "int": "INTEGER",
    "int range": "INTEGER",
    "float": "FLOAT",
    "float range": "FLOAT",
    "str": "TEXT",
    "path": "PATH",
}


class PlainArgument(TyperArgument):
    """An argument named in capitals in the usage line (`BEFORE AFTER`, `[EXPORTS]...`),
    with no type placeholder beside it in the help."""

    def _usage_display_name(self) -> str:
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name + ("..." if self.nargs != 1 else "")

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


def plain_help(command: Command, help_names: list[str]) -> None:
    """Plain value names (name_values) for the command and every command under it.
    help_names: the help option's names (its option is made here, once).

    This reads typer's internals (0.29's vendored click); under a typer without them the
    help is typer's own, and the command runs: help text is never worth a crash."""
    try:
        help_option = command.get_help_option(SimpleNamespace(help_option_names=help_names))
    except (AttributeError, TypeError):
        help_option = None
    if help_option is not None and callable(getattr(help_option, "callback", None)):
        help_option.callback = _help_to_any_stdout(help_option.callback)
    name_values([*command.params, *([help_option] if help_option else [])])
    for sub in getattr(command, "commands", {}).values():
        plain_help(sub, help_names)


def _help_to_any_stdout(show_help: Callable[..., Any]) -> Callable[..., Any]:
    """The help option's callback, with a full or failing stdout as one line (help does no
    other input or output)."""
    if getattr(show_help, "is_guarded", False):
        return show_help

    def guarded(*args: Any, **kwargs: Any) -> Any:
        with stdout_outside_commands():
            return show_help(*args, **kwargs)

    guarded.is_guarded = True  # type: ignore[attr-defined]
    return guarded


def name_values(params: list[Any]) -> None:
    """Give each parameter a plain name for its value: none for a flag, the choices for a
    choice, else the value's kind; an argument its own name in capitals."""
    for param in params:
        try:
            if isinstance(param, TyperArgument) and param.metavar is None:
                param.metavar = (param.name or "").upper()
                param.__class__ = PlainArgument
            elif isinstance(param, TyperOption) and param.metavar is None:
                param.metavar = "" if param.is_flag else _value_name(param)
        except (AttributeError, TypeError):  # another typer: its own help for this one
            continue


def _value_name(option: TyperOption) -> str:
    choices = _choices(option)
    if choices:
        return "[" + "|".join(choices) + "]"
    # typer reads the context only to normalise a choice, answered above.
    label = option.display_type(cast(Any, None)).strip("<>")
    return VALUE_NAMES.get(label, label.upper())


def _choices(param: Any) -> list[str]:
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None or not descriptor.is_choice:
        return []
    return [str(getattr(choice, "value", choice)) for choice in descriptor.choices or ()]


def choice_error(error: typer.BadParameter) -> str | None:
    """A wrong value for a choice in one line, `--format 'html': choose one of: text, md,
    json, csv.`; None for any other error."""
    choices = _choices(error.param)
    if not choices or error.param is None:
        return None
    given = re.search(r"('.*?') is not one of", error.message)
    name = "/".join(error.param.opts)
    return f"{name}{' ' + given.group(1) if given else ''}: choose one of: {', '.join(choices)}."
