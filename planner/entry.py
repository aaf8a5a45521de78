"""The ``planner`` command's entry point (``python -m planner`` too).

It only installs planner's SIGINT handler before anything heavy is imported, so Ctrl-C while
typer, numpy or the cost model load ends like Ctrl-C anywhere else: one line, exit 130 (a
KeyboardInterrupt inside an extension's import can surface as another exception; the handler's
record tells them apart). The command itself runs in ``planner.cli.errors.PlannerGroup``.
"""

from __future__ import annotations

import signal
import sys

EXIT_INTERRUPTED = 130
INTERRUPTED_LINE = "interrupted (Ctrl-C)"


def _on_sigint(signum, frame):
    from hardware_catalog.errors import mark_interrupted

    mark_interrupted()
    raise KeyboardInterrupt


def _interrupted_exit() -> None:
    try:
        sys.stderr.write(INTERRUPTED_LINE + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass
    raise SystemExit(EXIT_INTERRUPTED)


def main() -> None:
    try:
        signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:  # not the main thread: leave SIGINT alone
        pass
    try:
        from planner.cli.main import main as run
    except KeyboardInterrupt:
        _interrupted_exit()
    except ModuleNotFoundError as err:  # run outside the environment the README sets up
        if _seen():
            _interrupted_exit()
        sys.stderr.write(
            f"error: planner needs the Python package '{err.name}', which is not installed here; "
            "set up as the README says (python3 -m venv .venv && source .venv/bin/activate && pip install -e '.[test]')\n"
        )
        raise SystemExit(1)
    except Exception:
        if _seen():
            _interrupted_exit()
        raise
    try:
        run()
    except KeyboardInterrupt:  # between the command's own handling and here
        _interrupted_exit()
    finally:
        # The answer is out and the exit code decided: a Ctrl-C while Python shuts down must not
        # turn it into a traceback (only the program does this, never an in-process caller).
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        except ValueError:
            pass


def _seen() -> bool:
    try:
        from hardware_catalog.errors import was_interrupted
    except BaseException:  # noqa: BLE001 - the package itself failed to import
        return False
    return was_interrupted()
