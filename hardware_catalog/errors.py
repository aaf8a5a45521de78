"""One error type for everything a user can get wrong about the catalog or their input."""

from __future__ import annotations

import contextlib
import difflib


class PlannerInputError(ValueError):
    """Bad user input. ``str(err)`` is one line naming the bad value and what is allowed."""

    exit_code = 2
    """The command line's exit status for it (``planner.cli.errors``)."""


class DoesNotFit(PlannerInputError):
    """The layout (or every layout) needs more GPU memory than there is: exit status 3."""

    exit_code = 3


FILE_KINDS = {"model", "cluster"}
"""Catalog kinds a file may describe instead (--model and --cluster take one; a GPU or NIC is
only ever a catalog name, also inside a cluster file)."""


def unknown_name_error(kind: str, name: str, known: list[str]) -> PlannerInputError:
    """Error for an unknown catalog name, listing the closest known names."""
    close = difflib.get_close_matches(name.lower(), known, n=4, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    or_file = "; or give a file path" if kind in FILE_KINDS else ""
    return PlannerInputError(f"unknown {kind} '{name}'{hint} (known: {', '.join(sorted(known))}{or_file})")


# Interruption (Ctrl-C). planner owns SIGINT: the command line's handler records it here before
# raising KeyboardInterrupt, so code that sees the interrupt turned into another exception (a C
# extension's import, a solver's callback) still ends as "interrupted" (exit 130), never as a
# result or an internal error. Inside ``interrupts_held`` the handler only records it, and the
# KeyboardInterrupt comes when the block ends (a sweep stores a trial whole or not at all).
_INTERRUPT = {"seen": False, "held": 0, "pending": False}


def mark_interrupted() -> None:
    """Record that SIGINT arrived (the command line's handler, a solver's own)."""
    _INTERRUPT["seen"] = True


def interrupt() -> None:
    """What planner's SIGINT handlers do: record the interrupt and raise KeyboardInterrupt, or,
    inside ``interrupts_held``, leave it pending until the block ends. A second Ctrl-C while one
    is pending is raised at once: a held block stuck on a storage that does not answer must not
    leave the user without a way out."""
    mark_interrupted()
    if _INTERRUPT["held"] and not _INTERRUPT["pending"]:
        _INTERRUPT["pending"] = True
        return
    _INTERRUPT["pending"] = False
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_held():
    """Hold Ctrl-C off this block: an interrupt that arrives in it (through ``interrupt``) is
    raised when it ends, unless the block already ends in an exception (that one goes on; the
    interrupt is recorded either way, ``was_interrupted``); a second one is raised at once.
    Blocks nest. Off the main thread, where no signal handler runs, a no-op (a worker thread must
    not hold off the main thread's Ctrl-C)."""
    if not _on_main_thread():
        yield
        return
    _INTERRUPT["held"] += 1
    try:
        yield
    finally:
        _INTERRUPT["held"] -= 1
        pending = _INTERRUPT["pending"] and not _INTERRUPT["held"]
        if pending:
            _INTERRUPT["pending"] = False
    if pending:
        raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_allowed():
    """Inside ``interrupts_held``, let Ctrl-C through again for this block (one held meanwhile
    is raised on entry). Off the main thread a no-op."""
    if not _on_main_thread():
        yield
        return
    held, _INTERRUPT["held"] = _INTERRUPT["held"], 0
    try:
        if _INTERRUPT["pending"]:
            _INTERRUPT["pending"] = False
            raise KeyboardInterrupt
        yield
    finally:
        _INTERRUPT["held"] = held


def _on_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def was_interrupted() -> bool:
    """True once SIGINT arrived in this process (since ``clear_interrupted``)."""
    return _INTERRUPT["seen"]


def clear_interrupted() -> None:
    _INTERRUPT["seen"] = _INTERRUPT["pending"] = False


def raise_if_interrupted() -> None:
    """KeyboardInterrupt when SIGINT arrived: call it where an exception is caught and stored."""
    if _INTERRUPT["seen"]:
        raise KeyboardInterrupt
