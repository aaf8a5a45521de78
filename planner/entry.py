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
    from hardware_catalog.errors import interrupt

    interrupt()


def _interrupted_exit() -> None:
    try:
        sys.stderr.write(INTERRUPTED_LINE + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass
    raise SystemExit(EXIT_INTERRUPTED)


def _redeliver_lost_interrupt(hook_args) -> None:
    """``sys.unraisablehook``: a Ctrl-C that lands in a finalizer or a garbage-collection callback
    (SQLAlchemy's weakref callbacks under Optuna, say) is printed as "Exception ignored" and lost,
    so the command ran on. Deliver it again to the main thread, where it ends the command."""
    if isinstance(hook_args.exc_value, KeyboardInterrupt):
        import _thread
        import threading

        # From another thread, once this hook has returned: raised here, it would be lost again.
        again = threading.Timer(0.01, _thread.interrupt_main)
        again.daemon = True
        again.start()
        return
    sys.__unraisablehook__(hook_args)


def _quiet_once_interrupted(hook_args) -> None:
    """``threading.excepthook``: after Ctrl-C, a library thread that fails because of it (Optuna's
    heartbeat thread finding the SQLite file locked by the interrupted transaction) must not add a
    traceback to the one line; before it, a thread's exception is printed as Python prints it."""
    if _seen():
        return
    import threading

    threading.__excepthook__(hook_args)


def _exit_interrupted_now() -> None:
    """Leave at once with exit 130 once the interrupt is answered: files are renamed into place
    whole and a sweep's trial failed before this point, and a library thread the interrupt caught
    mid-stop (Optuna's heartbeat thread is not a daemon) must not keep the process alive."""
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(EXIT_INTERRUPTED)


def main() -> None:
    try:
        signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:  # not the main thread: leave SIGINT alone
        pass
    sys.unraisablehook = _redeliver_lost_interrupt
    import threading

    threading.excepthook = _quiet_once_interrupted
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
        try:
            run()
        except KeyboardInterrupt:  # between the command's own handling and here
            _interrupted_exit()
    except SystemExit as done:
        if done.code == EXIT_INTERRUPTED:
            _exit_interrupted_now()
        raise
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
