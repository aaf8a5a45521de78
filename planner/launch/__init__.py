"""Read the user's own launch config: ``--from-launch FILE`` on evaluate, search and export.

``read_launch(path, fmt=None, model=None)`` reads

* ``megatron``: a Megatron-LM launch script or argument list (``planner.launch.megatron``),
  planner's own ``megatron_args.sh`` / ``launch_torchrun.sh`` / ``launch.sbatch`` included;
* ``torchtitan``: a TOML job config (0.1 / 0.2 names) or the 0.3 command line
  (``planner.launch.torchtitan``);
* ``deepspeed``: a DeepSpeed config JSON; the model comes from ``--model``
  (``planner.launch.deepspeed``);
* ``nemo`` (also ``megatron-bridge``): a NeMo 2 or Megatron-Bridge recipe's resulting config as YAML, or its override strings
  (``planner.launch.nemo``),

and returns a ``Launch`` (``planner.launch.spec``). This package holds the readers only: the
commands that price a launch file, rank it in a search or export it in another format live in
``planner.cli.from_launch``.
Everything here imports lazily: ``planner --help`` does not load it.
"""

from __future__ import annotations

from pathlib import Path

from planner.launch.spec import FORMATS, READERS, Launch

_SUFFIXES = {".json": "deepspeed", ".toml": "torchtitan", ".yaml": "nemo", ".yml": "nemo"}


def read_text(path) -> str:
    from hardware_catalog.errors import PlannerInputError

    from hardware_catalog.files import read_input_text, show

    p = Path(path)
    if p.is_dir():
        raise PlannerInputError(f"--from-launch {show(path)}: is a folder; give the launch file")
    try:
        return read_input_text(p, f"--from-launch {show(path)}")
    except FileNotFoundError:
        raise PlannerInputError(f"--from-launch {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        reason = getattr(err, "strerror", None) or type(err).__name__
        raise PlannerInputError(f"--from-launch {path}: cannot read ({reason})") from None


def detect_format(path, text: str) -> str:
    """The launch format of a file: by its suffix, else by what its commands run."""
    from hardware_catalog.errors import PlannerInputError

    suffix = Path(path).suffix.lower()
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    if suffix == ".py":
        raise PlannerInputError(f"--from-launch {path}: a Python recipe is code, which planner does not run; give its "
                                "resulting config as YAML (ConfigContainer.to_yaml / the run's run_config.yaml) or "
                                "its override strings")
    from planner.launch.shell import read_script

    words = [w for command in read_script(text, str(path)).commands for w in command]
    if "torchtitan.train" in words or any(w.startswith(("--parallelism.", "--training.", "--job.config_file")) for w in words):
        return "torchtitan"
    if any("=" in w and w.split("=", 1)[0].startswith(("trainer.", "model.", "train.", "data.", "ddp.", "dataset."))
           for w in words) and not any(w.startswith("--num-layers") for w in words):
        return "nemo"
    return "megatron"


def read_launch(path, fmt: str | None = None, model=None) -> Launch:
    """Read ``path`` as a ``fmt`` launch file (None: detected). ``model``: a ModelSpec that
    replaces the file's (``--model``); a DeepSpeed config needs it."""
    from hardware_catalog.errors import PlannerInputError

    if fmt is not None and fmt not in FORMATS:
        raise PlannerInputError(f"--launch-format {fmt}: allowed {', '.join(FORMATS)}")
    text = read_text(path)
    fmt = fmt or detect_format(path, text)
    from importlib import import_module

    return import_module(READERS[fmt]).read(text, str(path), model)


__all__ = ["FORMATS", "READERS", "Launch", "detect_format", "read_launch"]
