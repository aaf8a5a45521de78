"""`planner validate`: predictions against real published training runs.

Each row of a runs file (format of ``planner/data/published_runs.json``) becomes a model, a
cluster and a set of candidate layouts: the knobs the source published are pinned, the ones it
left unstated (micro-batch, recompute with Megatron-Core's recompute-module sets, ZeRO /
distributed optimizer, virtual stages, sometimes the whole layout) are searched as a user would,
and the fastest layout that fits in memory is the prediction. How the row's framework runs a
layout (kernels, loss, overlaps, dispatcher) comes from its profile, with the source. Rows that
cannot be mapped are listed with the reason.

* ``runs``: load a runs file; row -> model, cluster, pins, searched grids (``map_run``).
* ``profiles``: the framework profiles, as data.
* ``predict``: candidates (``search.grid``), ``predict_run``, ``validate_rows``.
* ``report``: summaries, the text table, the Llama 3 405B production check, ``run_validate``.
"""

from planner.validate.predict import RowResult, candidate_choices, candidates, layout_label, predict_run, validate_rows
from planner.frameworks.profiles import GENERIC, PROFILES, Entry, Profile, RowFacts, When, apply_profiles, profiles_for
from planner.validate.report import (
    format_production_check, format_table, llama3_405b_production_check, run_validate, summarize,
)
from planner.validate.runs import MappedRun, load_runs, map_model, map_run

__all__ = [
    "GENERIC", "PROFILES", "Entry", "MappedRun", "Profile", "RowFacts", "RowResult", "When", "apply_profiles",
    "candidate_choices", "candidates", "format_production_check", "format_table", "layout_label",
    "llama3_405b_production_check", "load_runs", "map_model", "map_run", "predict_run", "profiles_for",
    "run_validate", "summarize", "validate_rows",
]
