"""The one error path of the ``planner`` command line: exit codes, one-line errors, stdout.

Every command runs inside ``PlannerGroup`` (the typer group of ``planner.cli.main.app``), so a
failure anywhere ends the same way, whether planner runs as ``planner`` or in-process under
typer's ``CliRunner``:

====  =====================================================================================
code  meaning
====  =====================================================================================
0     done (also when the reader of a pipe stops early: ``planner search | head -1``)
1     internal error: a bug in planner; one line says where the traceback was saved
2     bad input: a value, a file, an output that cannot be written, a closed or full stdout
3     nothing fits: search found no layout that fits (or, with --framework, none the release
      launches: "nothing to launch"), evaluate's layout does not fit, export refuses a layout
      predicted not to fit
130   interrupted (Ctrl-C)
====  =====================================================================================

A broken pipe exits 0 quietly: the reader took what it wanted (``head`` closes its end once it
has its lines), every file planner writes is written before it prints, and a status of 0 keeps
``set -o pipefail`` scripts that cut planner's output short working. ``--debug`` anywhere on the
command line (or ``PLANNER_DEBUG=1``) prints an internal error's traceback as well.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
import traceback

import typer
from typer.core import TyperGroup

from hardware_catalog.errors import PlannerInputError, clear_interrupted, interrupt, was_interrupted

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_NOTHING_FITS = 3
EXIT_INTERRUPTED = 130

# typer >= 0.20 vendors click; older releases use click itself. Find its classes either way.
_CLICK_EXCEPTION = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
_USAGE_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
_EXIT_TYPES = (typer.Exit, typer.Abort, _CLICK_EXCEPTION)
_DEBUG = {"on": False}
_ARGS: list[str] = []
"""The arguments of the command running now (for ``command_line``)."""


def command_line() -> str:
    """The command as typed, shell-quoted (``planner.export.common.shell_join``): pasted into a
    shell it runs the same command, and nothing in it executes."""
    from planner.export.common import shell_join

    return shell_join(["planner", *_ARGS])


def say(message: str) -> None:
    """One line on stderr; a closed or broken stderr is ignored (the exit code still tells)."""
    try:
        typer.echo(message, err=True)
    except (OSError, ValueError):
        pass


def _one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line, each overlong word (a 100,000-character name or path) cut short
    (``hardware_catalog.files.show``), the whole at most ``limit`` characters."""
    from hardware_catalog.files import show

    text = " ".join(show(word) for word in str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def silence_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered for a closed pipe or a full disk is
    dropped, and Python's flush at exit cannot fail again (it would print and exit 120)."""
    try:
        fd = sys.stdout.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (OSError, ValueError, AttributeError):  # not a real file (CliRunner), or already closed
        pass


def _save_traceback(err: BaseException) -> str:
    """The traceback written to a private temporary file; its path, or why it could not be saved."""
    try:
        fd, path = tempfile.mkstemp(prefix="planner-traceback-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("planner " + " ".join(sys.argv[1:]) + "\n\n")
            fh.write("".join(traceback.format_exception(type(err), err, err.__traceback__)))
        return f"the traceback is in {path}"
    except OSError as save_err:
        return f"the traceback could not be saved ({save_err.strerror or save_err})"


INTERRUPTED_LINE = "interrupted (Ctrl-C)"


def report_interrupt() -> int:
    """Ctrl-C: one line, exit 130. Every file planner writes is renamed into place whole, and a
    sweep's interrupted trial is failed (never stored as done), so nothing partial remains."""
    say(INTERRUPTED_LINE)
    silence_stdout()
    return EXIT_INTERRUPTED


def _on_sigint(signum, frame):
    """planner's SIGINT handler: record it (an interrupt turned into another exception by an
    extension still reads as one), then raise KeyboardInterrupt as Python's default does, or when
    the block that holds interrupts off ends (``hardware_catalog.errors.interrupt``)."""
    interrupt()


def _own_sigint():
    """Install ``_on_sigint``; the handler it replaced (None off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        return signal.signal(signal.SIGINT, _on_sigint)
    except (ValueError, OSError):
        return None


def report_failure(err: BaseException) -> int:
    """Say what went wrong in one line; the exit code."""
    if isinstance(err, KeyboardInterrupt) or was_interrupted():
        return report_interrupt()
    if isinstance(err, PlannerInputError):
        say(f"error: {_one_line(err, 2000)}")
        return getattr(err, "exit_code", EXIT_BAD_INPUT)
    if isinstance(err, BrokenPipeError):
        silence_stdout()
        return EXIT_OK
    if isinstance(err, OSError):
        where = f"{_one_line(err.filename)}: " if err.filename else ""
        say(f"error: {where}{err.strerror or _one_line(err)}" if where else
            f"error: cannot write to standard output ({err.strerror or _one_line(err)})")
        if not where:
            silence_stdout()
        return EXIT_BAD_INPUT
    if _DEBUG["on"] or os.environ.get("PLANNER_DEBUG"):
        say("".join(traceback.format_exception(type(err), err, err.__traceback__)).rstrip())
    say(f"error: internal error, a bug in planner ({type(err).__name__}: {_one_line(err, 200)}); "
        f"{_save_traceback(err)}; run again with --debug to print it")
    return EXIT_INTERNAL


def _usage_error(err) -> int:
    """typer's parse errors as one line (the help of a bare ``planner`` as it is)."""
    if type(err).__name__ == "NoArgsIsHelpError":
        err.show()
        return EXIT_BAD_INPUT
    own = _own_words(err)
    if own:  # it says what the flag takes: no hint
        say(f"error: {_one_line(own)}")
        return EXIT_BAD_INPUT
    ctx = getattr(err, "ctx", None)
    hint = f" ({ctx.command_path} --help lists the options)" if ctx is not None and isinstance(err, _USAGE_ERROR) else ""
    say(f"error: {_one_line(_with_value(err))}{hint}")
    return EXIT_BAD_INPUT


def _own_words(err) -> str | None:
    """planner's line for a number typer could not read ("--tp 'abc': not a whole number
    (allowed: an integer from 1 to 1,048,576)", ``planner.cli.options.unconverted_value``) in
    place of pydantic's words that typer passes on; None for any other error."""
    param = getattr(err, "param", None)
    opts = list(getattr(param, "opts", None) or [])
    if type(err).__name__ != "BadParameter" or not opts:
        return None
    value = _typed_value(opts)
    if value is None:
        return None
    from planner.cli.options import unconverted_value

    command = getattr(getattr(getattr(err, "ctx", None), "command", None), "name", None) or ""
    return unconverted_value(opts[0], value, err.__cause__, command)


def _typed_value(opts) -> str | None:
    """The value last typed for an option named ``opts`` (``--tp 4.5`` or ``--tp=4.5``), or None."""
    end = _ARGS.index("--") if "--" in _ARGS else len(_ARGS)
    value = None
    for i, arg in enumerate(_ARGS[:end]):
        for opt in opts:
            if arg == opt and i + 1 < end:
                value = _ARGS[i + 1]
            elif arg.startswith(opt + "="):
                value = arg[len(opt) + 1:]
    return value


def _with_value(err) -> str:
    """typer's message for a value it could not convert, naming the value typed: its own
    ("Invalid value for '--tp': Input should be a valid integer") leaves it out."""
    param = getattr(err, "param", None)
    opts = list(getattr(param, "opts", None) or []) + list(getattr(param, "secondary_opts", None) or [])
    message = getattr(err, "message", None)
    if type(err).__name__ != "BadParameter" or not opts or not isinstance(message, str):
        return err.format_message()
    value = _typed_value(opts)
    if value is None or repr(value) in message:
        return err.format_message()
    return f"{opts[0]} {value!r}: {message}"


def _flush_stdout(code: int) -> int:
    """Flush stdout inside the error path: a full disk is an error, a closed pipe is not."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
    except OSError as err:
        silence_stdout()
        say(f"error: cannot write to standard output ({err.strerror or err})")
        return code or EXIT_BAD_INPUT
    return code


def _take_debug(args: list[str]) -> list[str]:
    """``args`` without ``--debug`` (before a ``--``); sets the debug switch when present."""
    end = args.index("--") if "--" in args else len(args)
    if "--debug" in args[:end]:
        _DEBUG["on"] = True
        return [a for a in args[:end] if a != "--debug"] + args[end:]
    return args


class PlannerGroup(TyperGroup):
    """planner's typer group: every command's failure goes through ``report_failure``."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except _EXIT_TYPES:
            raise
        except KeyboardInterrupt:
            raise typer.Exit(report_interrupt()) from None
        except Exception as err:  # noqa: BLE001 - the one place every failure is answered
            raise typer.Exit(report_failure(err)) from None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        _DEBUG["on"] = False
        clear_interrupted()
        previous = _own_sigint()
        try:
            args = _take_debug(list(sys.argv[1:] if args is None else args))
            _ARGS[:] = args
            if sys.stdout is None:  # started with stdout closed (`planner ... >&-`)
                say("error: standard output is closed; planner prints its results there (redirect it to a file or /dev/null)")
                code = EXIT_BAD_INPUT
            else:
                code = self._run(args, prog_name, complete_var, **extra)
        except KeyboardInterrupt:
            code = report_interrupt()
        finally:
            if previous is not None:  # give the handler back (in-process callers: CliRunner, tests)
                signal.signal(signal.SIGINT, previous)
        if standalone_mode:
            sys.exit(code)
        return code

    def _run(self, args, prog_name, complete_var, **extra) -> int:
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) and not isinstance(rv, bool) else EXIT_OK
        except _CLICK_EXCEPTION as err:
            code = _usage_error(err)
        except typer.Abort:  # click's form of a KeyboardInterrupt outside a command
            code = report_interrupt()
        except KeyboardInterrupt:
            code = report_interrupt()
        except Exception as err:  # noqa: BLE001 - raised outside a command (help, completion)
            code = report_failure(err)
        return _flush_stdout(code)
