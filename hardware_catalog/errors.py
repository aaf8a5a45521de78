"""One error type for everything a user can get wrong about the catalog or their input."""

from __future__ import annotations

import difflib


class PlannerInputError(ValueError):
    """Bad user input. ``str(err)`` is one line naming the bad value and what is allowed."""

    exit_code = 2
    """The command line's exit status for it (``planner.cli.errors``)."""


class DoesNotFit(PlannerInputError):
    """The layout (or every layout) needs more GPU memory than there is: exit status 3."""

    exit_code = 3


def unknown_name_error(kind: str, name: str, known: list[str]) -> PlannerInputError:
    """Error for an unknown catalog name, listing the closest known names."""
    close = difflib.get_close_matches(name.lower(), known, n=4, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return PlannerInputError(
        f"unknown {kind} '{name}'{hint} (known: {', '.join(sorted(known))}; or give a file path)"
    )
