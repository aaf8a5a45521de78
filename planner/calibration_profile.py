"""Calibration profiles: the global constants ``planner calibrate`` fitted to a cluster's runs.

A profile is TOML. ``[constants.NAME]`` tables hold the constants that moved (``value``, with
the ``shipped`` one, the ``interval`` and ``why``); ``[profile]`` and ``[fit]`` record the runs it
came from, the date and the errors before and after. ``load_profile`` reads the values over
``costmodel.calibration.DEFAULT`` (the constants a profile leaves out keep their shipped
values), so predictions with a profile differ from the defaults only through its constants.
Only the fitted constants (``costmodel.calibration.FIT_RANGES``) may appear, each within its
plausible range. ``write_profile`` writes atomically: a file is whole or absent.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

from hardware_catalog.errors import PlannerInputError
from hardware_catalog.files import read_input_text, show


def _ranges() -> dict:
    from costmodel.calibration import FIT_RANGES

    return FIT_RANGES


def profile_constants(path: Path | str) -> dict[str, float]:
    """The constant -> value a profile sets, checked; one-line errors naming the file."""
    where = f"--calibration {show(path)}"
    try:
        data = tomllib.loads(read_input_text(path, where).removeprefix("\ufeff"))  # a BOM from an editor is no error
    except FileNotFoundError:
        raise PlannerInputError(f"{where}: no such file (write one with planner calibrate --runs FILE --out {path})") from None
    except (OSError, UnicodeDecodeError) as err:
        raise PlannerInputError(f"{where}: cannot read ({getattr(err, 'strerror', None) or type(err).__name__})") from None
    except tomllib.TOMLDecodeError as err:
        raise PlannerInputError(f"{where}: not a TOML profile ({' '.join(str(err).split())})") from None
    constants = data.get("constants")
    if not isinstance(constants, dict):
        raise PlannerInputError(f"{where}: no [constants] table (a profile written by planner calibrate has one)")
    values = {}
    for name, entry in constants.items():
        check_constant_name(name, f"{where}: constants.{name}")
        value = entry.get("value") if isinstance(entry, dict) else None
        values[name] = checked_constant(name, value, f"{where}: constants.{name}.value")
    _warn_stale(path, stale_constants(constants, where))
    return values


def check_constant_name(name: str, label: str) -> None:
    """A fitted constant's name (``costmodel.calibration.FIT_RANGES``), or one line at ``label``."""
    ranges = _ranges()
    if name not in ranges:
        raise PlannerInputError(f"{label}: not a fitted constant (allowed: {', '.join(ranges)})")


def checked_constant(name: str, value: Any, label: str) -> float:
    """``value`` of the fitted constant ``name``: a finite number inside the plausible range the
    fit searches (``FIT_RANGES``); otherwise one line at ``label`` (a profile's or a record's key)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PlannerInputError(f"{label}: expected a number, got {value!r}")
    lo, hi = float(_ranges()[name].min()), float(_ranges()[name].max())
    if not lo <= value <= hi:
        raise PlannerInputError(f"{label}={value:g}: outside its plausible range [{lo:g}, {hi:g}]")
    return float(value)


def stale_constants(constants: dict, where: str) -> list[str]:
    """One line per constant whose recorded ``shipped`` value (the one ``planner calibrate``
    fitted against: the prior's centre) is not today's shipped value: the fit's prior, and
    so its value, came from constants since changed (a newer planner, or a hand edit). A
    profile without ``shipped`` (hand-written) is not checked."""
    from costmodel.calibration import DEFAULT

    out = []
    for name, entry in constants.items():
        shipped = entry.get("shipped") if isinstance(entry, dict) else None
        if shipped is None:
            continue
        if isinstance(shipped, bool) or not isinstance(shipped, (int, float)) or not math.isfinite(shipped):
            raise PlannerInputError(f"{where}: constants.{name}.shipped: expected a number, got {shipped!r}")
        now = float(getattr(DEFAULT, name))
        if not math.isclose(float(shipped), now, rel_tol=1e-6, abs_tol=1e-9):
            out.append(f"{where}: constants.{name} was fitted against shipped {float(shipped):g}, but the shipped "
                       f"value is now {now:g}; its value {constants[name]['value']:g} is used as written: re-run "
                       "planner calibrate on the same runs for a profile fitted against today's constants")
    return out


_WARNED: set = set()
"""Lines already said in this process (a search or sweep reads one profile many times)."""


def _warn_stale(path, lines: list[str]) -> None:
    """Each line once per process, on stderr as 'warning: ...'. A warning, not a refusal: the
    value is still within its plausible range and was the user's choice, as a record whose
    profile is gone is priced on with a note (planner/cli/main.py ``_record_calibration``)."""
    import sys

    for line in lines:
        if line in _WARNED:
            continue
        _WARNED.add(line)
        try:
            print(f"warning: {line}", file=sys.stderr)
        except (OSError, ValueError):  # a closed stderr: the pricing goes on
            pass


def load_profile(path: Path | str):
    """The ``Calibration`` a profile gives: ``DEFAULT`` with the profile's constants."""
    from costmodel.calibration import DEFAULT

    return DEFAULT.with_(**profile_constants(path))


def calibration_option(path) -> Any:
    """``--calibration PROFILE`` as given on the command line -> a ``Calibration`` (None: the defaults)."""
    if path is None:
        return None
    return load_profile(path)


# ------------------------------------------------------------------------------------ writing


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(round(float(value), 6)) if isinstance(value, float) else str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
    return f'"{text}"'


def render_profile(tables: dict[str, dict], header: str) -> str:
    """TOML text: ``header`` as comments, then one table per entry (dotted names allowed)."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    for name, fields in tables.items():
        lines += ["", f"[{name}]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in fields.items() if v is not None]
    return "\n".join(lines) + "\n"


def check_profile_path(path, force: bool = False) -> Path:
    """``--out PROFILE``, checked before any work: a *.toml path that may be written now
    (``planner.outputs.check_output_file``: not a directory or special file, its folder there,
    an existing file only with ``force``)."""
    from planner.outputs import check_output_file

    path = Path(path)
    if path.suffix.lower() != ".toml":
        raise PlannerInputError(f"--out {show(path)}: a profile is TOML; name it *.toml")
    return check_output_file(path, "--out", force)


def write_profile(path: Path, text: str, force: bool = False) -> Path:
    """Write ``text`` to ``path`` atomically (``planner.outputs``, the one writer)."""
    from planner.outputs import write_text_atomically

    path = check_profile_path(path, force)
    tomllib.loads(text)  # what we write must read back
    return write_text_atomically(path, text, "--out")
