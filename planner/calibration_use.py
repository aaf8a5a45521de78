"""A calibration profile as a priced result carries it: its name, the constants it set, and the GPU
types and models its runs used.

A record priced with ``--calibration`` (``evaluate --json``, each ``search --json`` result, each
``search --csv`` row, each ``sweep`` scenario) states ``calibration`` (the profile's path as given)
and ``calibration_constants`` (constant -> value, every constant the profile sets), so the record
says which numbers priced it even after the file moved or changed: ``--from`` reprices with the
record's constants, not with whatever the file holds now. Reading and checking the profile file is
``planner.calibration_profile``'s; this module only carries what it read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from hardware_catalog.errors import PlannerInputError

CONSTANTS_KEY = "calibration_constants"
"""The record key (and CSV column) holding the constants a record was priced with."""


@dataclass(frozen=True)
class AppliedCalibration:
    """The constants a profile sets (over ``costmodel.calibration.DEFAULT``), and where they came from."""

    profile: str
    """The profile's path as the user gave it (or as a record names it)."""
    constants: tuple
    """(name, value) pairs: every constant the profile sets, sorted by name."""
    fitted_gpus: tuple = ()
    """GPU types of the runs the profile was fitted on (``[profile] gpus``, written by ``planner
    calibrate``); empty: the profile does not say (a hand-written or older one)."""

    @classmethod
    def from_path(cls, path) -> "AppliedCalibration":
        """The profile file ``path``, checked by ``planner.calibration_profile`` (one-line errors)."""
        from planner.calibration_profile import profile_constants

        values = profile_constants(path)
        return cls(str(path), tuple(sorted(values.items())), _fitted_gpus(path))

    @classmethod
    def from_record(cls, rec: dict, where: str) -> Optional["AppliedCalibration"]:
        """What a record states it was priced with; None when it names no profile or (an older
        record) names one without its constants. Checked as a profile's constants are."""
        named, values = rec.get("calibration"), rec.get(CONSTANTS_KEY)
        if not named or values is None:
            return None
        if not isinstance(values, dict):
            raise PlannerInputError(f"{where}: {CONSTANTS_KEY}: expected constant -> value, got {values!r}")
        gpus = rec.get("calibration_fitted_gpus") or []
        if not isinstance(gpus, list) or not all(isinstance(g, str) for g in gpus):
            # a string would be read one character per GPU type ("h, 1, 0, 0")
            raise PlannerInputError(f"{where}: calibration_fitted_gpus: expected a list of GPU type names, "
                                    f"got {gpus!r}")
        return cls(str(named), tuple(sorted(_checked(values, where).items())), tuple(gpus))

    def calib(self):
        """The ``Calibration`` to price with: the shipped constants with the profile's."""
        from costmodel.calibration import DEFAULT

        return DEFAULT.with_(**dict(self.constants))

    def moved(self) -> dict:
        """name -> (value, shipped) for the constants that differ from the shipped ones."""
        from costmodel.calibration import DEFAULT

        return {k: (v, getattr(DEFAULT, k)) for k, v in self.constants if v != getattr(DEFAULT, k)}

    def stamp(self, record: dict) -> dict:
        record["calibration"] = self.profile
        record[CONSTANTS_KEY] = dict(self.constants)
        if self.fitted_gpus:
            record["calibration_fitted_gpus"] = list(self.fitted_gpus)
        return record

    def gpu_warning(self, gpu: str) -> Optional[str]:
        """A line when the profile's runs used other GPU types than ``gpu`` (its constants were fitted
        to those GPUs' kernels); None when they include it or the profile does not say."""
        if not self.fitted_gpus or str(gpu).lower() in {g.lower() for g in self.fitted_gpus}:
            return None
        return (f"warning: calibration profile {self.profile} was fitted on runs on {', '.join(self.fitted_gpus)} "
                f"only, not on {gpu}")


def describe_constants(moved: dict) -> str:
    """``attention_efficiency 0.325 (shipped 0.3)``, or that none differs."""
    if not moved:
        return "every constant as shipped"
    return ", ".join(f"{k} {v:g} (shipped {s:g})" for k, (v, s) in moved.items())


def record_calibration(rec: dict) -> Optional[AppliedCalibration]:
    """What a record planner wrote says it was priced with (None: the shipped constants or, for an older
    record, a profile named without its constants)."""
    try:
        return AppliedCalibration.from_record(rec, "record")
    except PlannerInputError:
        return None


def calibration_line(rec: dict, gpu: Optional[str] = None) -> Optional[str]:
    """The report's line: the profile and the constants it changed (and a warning when its runs used
    other GPU types than ``gpu``); None without a profile."""
    named = rec.get("calibration")
    if not named:
        return None
    applied = record_calibration(rec)
    if applied is None:  # an older record: the file's name only
        return f"constants from calibration profile {named}"
    line = f"constants from calibration profile {named}: {describe_constants(applied.moved())}"
    warning = applied.gpu_warning(gpu) if gpu else rec.get("calibration_warning")
    return line + (f"\n{warning}" if warning else "")


def header_words(rec: dict) -> Optional[str]:
    """``calibrated: prof.toml (attention_efficiency 0.325)`` for a launch file's header; None
    without a profile."""
    named = rec.get("calibration")
    if not named:
        return None
    applied = record_calibration(rec)
    if applied is None:
        return f"calibrated: {named}"
    moved = applied.moved()
    inside = ", ".join(f"{k} {v:g}" for k, (v, _) in moved.items()) or "every constant as shipped"
    return f"calibrated: {named} ({inside})"


def as_applied(calibration) -> Optional[AppliedCalibration]:
    """``Pricing.calibration`` (a profile path, an ``AppliedCalibration`` or None) as applied."""
    if calibration is None or isinstance(calibration, AppliedCalibration):
        return calibration
    return AppliedCalibration.from_path(calibration)


# ------------------------------------------------------------------------------------ checks


def _checked(values: dict, where: str) -> dict:
    """Constants a record states: fitted constants only, each a number within its plausible range (the
    checks ``planner.calibration_profile`` applies to a profile file)."""
    from planner.calibration_profile import check_constant_name, checked_constant

    out = {}
    for name, value in values.items():
        check_constant_name(name, f"{where}: {CONSTANTS_KEY}.{name}")
        out[name] = checked_constant(name, value, f"{where}: {CONSTANTS_KEY}.{name}")
    return out


def parse_csv_constants(text: str, where: str) -> Optional[dict]:
    """A ``search --csv`` cell ``name=value;name=value`` -> constant -> value (None: empty)."""
    if not text:
        return None
    out = {}
    for part in text.split(";"):
        name, sep, value = part.partition("=")
        try:
            if not sep:
                raise ValueError
            out[name.strip()] = float(value)
        except ValueError:
            raise PlannerInputError(f"{where}: {CONSTANTS_KEY}={text!r}: expected name=value;name=value") from None
    return out


def csv_constants(values: Optional[dict]) -> Optional[str]:
    """constant -> value as one CSV cell (``parse_csv_constants`` reads it back)."""
    if values is None:
        return None
    return ";".join(f"{k}={v!r}" for k, v in sorted(values.items()))


def _fitted_gpus(path) -> tuple:
    """``[profile] gpus`` of a profile file already read and checked (empty when absent)."""
    import tomllib

    from hardware_catalog.files import read_input_text

    try:
        data = tomllib.loads(read_input_text(Path(path), f"--calibration {path}").removeprefix("\ufeff"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return ()
    gpus = (data.get("profile") or {}).get("gpus")
    return tuple(str(g) for g in gpus) if isinstance(gpus, list) else ()
