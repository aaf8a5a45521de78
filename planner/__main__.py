"""``python -m planner``: the same entry point as the ``planner`` command."""

from planner.entry import main

main()
