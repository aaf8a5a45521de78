"""``python -m planner``: the same entry point as the ``planner`` command."""

import sys

try:
    from planner.cli.main import main
except ModuleNotFoundError as err:  # run outside the environment the README sets up
    sys.stderr.write(
        f"error: planner needs the Python package '{err.name}', which is not installed here; "
        "set up as the README says (python3 -m venv .venv && source .venv/bin/activate && pip install -e '.[test]')\n"
    )
    sys.exit(1)

main()
