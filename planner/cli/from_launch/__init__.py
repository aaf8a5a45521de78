"""``--from-launch FILE`` on evaluate, export and search: the command flows over the readers of
``planner.launch``.

* ``options``: the typer options (``--from-launch``, ``--launch-format``, ``--keep``);
* ``resolve``: a read ``Launch`` -> a job (``planner.job``) with the command line's overrides,
  priced by ``planner.job.price``, and the text that says what was read and assumed;
* ``commands``: evaluate and export from a launch file (``LaunchRequest``);
* ``reference``: search the file's problem and rank the file's own layout among the results.
"""
