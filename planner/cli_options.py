"""Typer options derived from the layout option declarations (``costmodel.options``).

``@layout_options(command)`` adds one typer option per layout option that ``command`` takes
(``Option.commands``) to a command function's signature, and hands the values to the function
as one ``layout`` dict (option name -> value as typed, None where not given). A new option
declared in ``Layout`` appears on every command it names, with its help text, and nothing here
changes.
"""

from __future__ import annotations

import functools
import inspect
from typing import Optional

import typer

from costmodel.options import (
    AUTO_FLAG,
    BATCH,
    CHOICE,
    FLAG,
    FLOAT,
    INT,
    MODULES,
    OPTIONAL_INT,
    SEARCH,
    SEARCHED,
    SETTING,
    Option,
    options_for,
)

_TYPES = {INT: int, OPTIONAL_INT: int, CHOICE: str, FLAG: bool, AUTO_FLAG: bool, MODULES: str, FLOAT: float}


def cli_default(opt: Option, command: str):
    """What the command passes when the user gives nothing: None where planner decides later
    (the batch from the model preset, a searched knob), else the option's default."""
    if command == SEARCH:
        if opt.search == SEARCHED:
            return opt.search_default
        if opt.search == SETTING:
            return opt.default
        return None
    if opt.group == BATCH and opt.name != "mbs":
        return None
    return opt.default


def cli_help(opt: Option, command: str) -> str:
    text = opt.help
    if command == SEARCH and opt.search == SEARCHED:
        text += " Searched unless given." if opt.search_default is None else f" Default: {opt.search_default}."
    elif command == SEARCH and opt.search == SETTING:
        text += " Applied to every candidate where it applies."
    return text


def _parameter(opt: Option, command: str) -> inspect.Parameter:
    default = cli_default(opt, command)
    kind = _TYPES[opt.kind]
    annotation = kind if default is not None else Optional[kind]
    decls = [f"{opt.flag}/--no-{opt.flag[2:]}"] if opt.kind in (FLAG, AUTO_FLAG) else [opt.flag]
    if opt.kind == CHOICE:
        metavar = "|".join(opt.choices)
    elif opt.kind in (INT, OPTIONAL_INT):
        metavar = "INTEGER"
    elif opt.kind == FLOAT:
        metavar = "NUMBER"
    else:
        metavar = None
    option = typer.Option(default, *decls, help=cli_help(opt, command), metavar=metavar,
                          show_default=default is not None and opt.kind not in (FLAG, AUTO_FLAG),
                          rich_help_panel=f"Layout: {opt.group}")
    return inspect.Parameter(opt.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)


def layout_options(command: str):
    """Decorator for a typer command: appends the layout options of ``command`` and passes them
    to the function as ``layout=`` (a dict)."""
    declared = options_for(command)

    def decorate(fn):
        signature = inspect.signature(fn, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name != "layout"]
        params = own + [_parameter(opt, command) for opt in declared]

        @functools.wraps(fn)
        def command_fn(**kwargs):
            layout = {opt.name: kwargs.pop(opt.name) for opt in declared}
            return fn(layout=layout, **kwargs)

        command_fn.__signature__ = signature.replace(parameters=params)
        command_fn.__annotations__ = {p.name: p.annotation for p in params}
        return command_fn

    return decorate
