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
import math
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


# ------------------------------------------------------------------------------ the run model
# Flags of costmodel.goodput (failures, checkpoints, restarts, energy), from RUN_SETTINGS.

_RUN_PANEL = "Run: failures, checkpoints, energy, cost"
_BUDGET_HELP = {
    "train_tokens": "Tokens of the whole run: 15T, 300B, 15e12. Adds the run block: wall-clock days with goodput "
                    "(failures, checkpoints, restarts), GPU-hours, MWh (and $ with --price-per-gpu-hour).",
    "price_per_gpu_hour": "USD per GPU-hour: 2.5 for every GPU, or per GPU type h100=2.5,b200=4 (a bare number "
                          "prices the types not named; every GPU type priced must be one the command runs, and each "
                          "one it runs needs a price). Adds the cost: per step (search, evaluate) or per million "
                          "tokens (sweep), and of the run with --train-tokens.",
}


def _run_parameters(command: str) -> list:
    from costmodel.goodput import RUN_SETTINGS

    params = [inspect.Parameter("train_tokens", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
                                default=typer.Option(None, "--train-tokens", help=_BUDGET_HELP["train_tokens"],
                                                     rich_help_panel=_RUN_PANEL))]
    # One declaration for every command: a price for all GPUs or one per GPU type
    # (costmodel.goodput.parse_prices reads it on each).
    params.append(inspect.Parameter(
        "price_per_gpu_hour", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
        default=typer.Option(None, "--price-per-gpu-hour", help=_BUDGET_HELP["price_per_gpu_hour"],
                             rich_help_panel=_RUN_PANEL)))
    for s in RUN_SETTINGS:
        if s.bound is None:
            decl, ann = f"{s.flag}/--no-{s.flag[2:]}", bool
        else:
            decl, ann = s.flag, Optional[float]
        shown = s.default is not None and s.bound is not None
        help_text = s.help + (f" [default: {s.default:,.4g}]" if shown else "")
        params.append(inspect.Parameter(
            s.name, inspect.Parameter.KEYWORD_ONLY, annotation=ann,
            default=typer.Option(False if s.bound is None else None, decl, help=help_text, show_default=False,
                                 rich_help_panel=_RUN_PANEL)))
    return params


def run_options(command: str):
    """Decorator for a typer command: appends the run model's flags (``costmodel.goodput
    .RUN_SETTINGS``, ``--train-tokens`` and ``--price-per-gpu-hour``) and passes their values to
    the function as ``run=`` (a dict, None where not given)."""

    def decorate(fn):
        signature = inspect.signature(fn, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name != "run"]
        added = _run_parameters(command)
        names = [p.name for p in added]

        @functools.wraps(fn)
        def command_fn(**kwargs):
            run = {name: kwargs.pop(name) for name in names}
            return fn(run=run, **kwargs)

        params = own + added
        command_fn.__signature__ = signature.replace(parameters=params)
        command_fn.__annotations__ = {p.name: p.annotation for p in params}
        return command_fn

    return decorate


def run_inputs(run: dict, typed=None):
    """``costmodel.goodput.RunInputs`` from the flags' values (bad values: one line, exit 2);
    None when neither a token budget, a price nor a run flag was given. The price is not in it:
    it may be per GPU type (``costmodel.goodput.parse_prices``, read again with the GPU types the
    command runs); each command sets the price of the GPU it runs."""
    from costmodel.goodput import RunInputs, parse_prices

    given = {k: v for k, v in (run or {}).items() if v is not None and v is not False}
    if not given:
        return None
    parse_prices(given.pop("price_per_gpu_hour", None))  # its form, before any work
    return RunInputs.from_values(given)


def run_settings_given(run: dict) -> tuple:
    """The run-model flags typed (``costmodel.goodput.RUN_SETTINGS``: --mtbf-gpu-hours, --pue, ...),
    for ``costmodel.goodput.refuse_unused_run_settings``."""
    from costmodel.goodput import RUN_SETTINGS

    return tuple(s.flag for s in RUN_SETTINGS if (run or {}).get(s.name) not in (None, False))


def calibration_flag():
    """``--calibration PROFILE``, declared once for every command that prices (evaluate, export,
    search, sweep, validate)."""
    return typer.Option(
        None, "--calibration",
        help="Calibration profile (TOML from 'planner calibrate'): its fitted constants replace the shipped ones. "
             "With --from (evaluate, export), it replaces the constants the record was priced with (a note says so).")


# ------------------------------------------------------------------------- values typer could not read

_INTEGER_EXAMPLE = "a whole number, e.g. 8"
_NUMBER_EXAMPLE = "a number, e.g. 0.5"


def _declared_bounds(command: str) -> dict:
    """flag -> the ``Bound`` (or the layout ``Option``) a number flag of ``command`` is
    declared with: the layout options, the job's GPUs and batch, --rank, the run model's flags,
    search's and sweep's own. Imported here, on the error path only."""
    from costmodel.goodput import MIN_SCALING_EFFICIENCY, PRICE_PER_GPU_HOUR, RUN_SETTINGS
    from costmodel.options import GPUS, OPTIONS, TOKENS_PER_BATCH
    from planner.records import RANK

    bounds = {o.flag: o for o in OPTIONS if o.kind in (INT, OPTIONAL_INT, FLOAT)}
    bounds.update({b.flag: b for b in (GPUS, TOKENS_PER_BATCH, RANK, MIN_SCALING_EFFICIENCY, PRICE_PER_GPU_HOUR)})
    bounds.update({s.flag: s.bound for s in RUN_SETTINGS if s.bound is not None})
    if command in ("search", "sweep"):  # their own flags (search.api imports the search)
        from planner.sweep import WAIT
        from search.api import MEMORY_HEADROOM, SEED, TOP, TRIALS

        bounds.update({b.flag: b for b in (MEMORY_HEADROOM, SEED, TOP, TRIALS, WAIT)})
    if command == "comm":
        from planner.comm import GROUP_GPUS

        bounds["--gpus"] = GROUP_GPUS
    return bounds


def _allowed(flag: str, integer: bool, command: str) -> str:
    """What ``flag`` takes, in the words of its declared range ("an integer from 1 to 1,048,576")."""
    from costmodel.options import Bound, range_text

    declared = _declared_bounds(command).get(flag)
    if isinstance(declared, Bound):
        return declared.allowed()
    if declared is not None:  # a layout option
        return range_text(declared.kind != FLOAT, declared.minimum, declared.maximum)
    return _INTEGER_EXAMPLE if integer else _NUMBER_EXAMPLE


def unconverted_value(flag: str, typed: str, cause, command: str = "") -> Optional[str]:
    """planner's one line for a value typer could not turn into its flag's type: typer passes
    pydantic's words on ("--tp 'abc': Input should be a valid integer, unable to parse string as
    an integer"); this says "--tp 'abc': not a whole number (allowed: an integer from 1 to
    1,048,576)", the range the flag is declared with. ``cause``: the pydantic ValidationError
    typer raised its BadParameter from. None where it is not a failed number (the caller keeps
    typer's message)."""
    try:
        kinds = {str(e.get("type", "")) for e in cause.errors()}
    except Exception:  # noqa: BLE001 - not a pydantic error: not ours to word
        return None
    if any(k.startswith("int_") for k in kinds):
        allowed = _allowed(flag, True, command)
        try:
            number = float(typed)
        except ValueError:
            number = math.nan
        if math.isfinite(number) and number == int(number):  # 1e3, 8.0: whole, written otherwise
            return f"{flag} {typed!r}: give a whole number in digits, e.g. {int(number)} (allowed: {allowed})"
        return f"{flag} {typed!r}: not a whole number (allowed: {allowed})"
    if any(k.startswith("float_") or k == "finite_number" for k in kinds):
        return f"{flag} {typed!r}: not a number (allowed: {_allowed(flag, False, command)})"
    return None


# ------------------------------------------------------------------------------- --tokens-per-batch


def _token_count_callback(value: Optional[str]) -> Optional[int]:
    from costmodel.goodput import parse_token_count

    return parse_token_count(value)


def tokens_per_batch_flag():
    """``--tokens-per-batch``: typed as text (16M, 4194304), handed to the command as a whole
    number of tokens (``parse_token_count``, so the flags seen as typed hold the number too)."""
    return typer.Option(None, "--tokens-per-batch", callback=_token_count_callback, metavar="TOKENS",
                        help="Global batch in tokens (instead of --gbs): 4194304, 4M, 16M (K, M, B, T = 10^3 ... "
                             "10^12, as --train-tokens).")
