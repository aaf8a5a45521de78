"""``planner calibrate``: fit the global constants to your cluster's measured runs.

Registered on the main app by ``planner.cli.main``; the fit loads only when the command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    """Add the ``calibrate`` command to ``app``."""

    @app.command("calibrate")
    def calibrate_cmd(
        runs: Path = typer.Option(..., "--runs", help="Your runs file (the runs format: planner validate --schema)."),
        out: Optional[Path] = typer.Option(None, "--out", help="Write the fitted constants to this calibration profile (.toml), for --calibration."),
        confidence: str = typer.Option("high", help="Rows fitted: high | medium | all (rows without 'confidence' are high)."),
        as_json: bool = typer.Option(False, "--json", help="Print the fit as JSON."),
        force: bool = typer.Option(False, "--force", help="Overwrite --out."),
        skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Leave out the rows the runs format refuses (listed on stderr) and fit the rest."),
    ):
        """Fit the global constants to your cluster's runs (the shipped values as a prior) and write a profile for --calibration."""
        from planner.common import planner_version
        from planner.validate.calibrate_report import run_calibrate

        run_calibrate(runs, out, confidence=confidence, as_json=as_json, force=force, version=planner_version(),
                      skip_invalid=skip_invalid)
