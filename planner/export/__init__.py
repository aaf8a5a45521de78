"""Write launch configs for an evaluated layout: torchrun, Megatron-LM, DeepSpeed, torchtitan, SLURM,
Megatron-Bridge.

``export_layout(result, model, cluster, formats, out_dir)`` takes the dict of ``planner evaluate
--json``. Every file is rendered and checked in memory first; then all of them are written to
temporary files and renamed into place, so a failure leaves no half-written output. Existing
files are kept unless ``force``.

``formats="all"`` writes every format that can express the layout and reports the others in
``ExportReport.skipped`` with the reason; naming a format that cannot express the layout raises
``PlannerInputError`` naming the rule (and the framework source that enforces it). A record
whose layout breaks a rule of ``search.rules`` (the one rule set evaluate and search use) is
refused for every format (``build_plan``).

Each format is an ``Exporter`` in the registry (``planner.export.registry``): ``FORMATS`` and
``FILES`` list what is registered, and a new launcher is one module defining ``EXPORTER``, named
in ``EXPORTER_MODULES``. Exporters write framework words through the tables of
``planner.frameworks`` (the ones the ``--from-launch`` readers read with). Formats and files:

==========  =============================  ==================================================
torchrun    launch_torchrun.sh             run on every node; torchrun c10d + Megatron args
megatron    megatron_args.sh               MEGATRON_ARGS bash array for pretrain_gpt.py
deepspeed   deepspeed_config.json          Megatron-DeepSpeed config (batch, ZeRO, pipeline)
torchtitan  torchtitan_overrides.sh,       torchtitan 0.3.0 command line (run it to launch), and
            torchtitan.toml                the TOML job config of torchtitan 0.2.2 (0.1/0.2/0.3
                                           with options={"torchtitan_version": ...})
slurm       launch.sbatch                  sbatch script: srun one torchrun per node
megatron-   megatron_bridge_overrides.yaml Megatron-Bridge ConfigContainer overrides (YAML) to
bridge                                     merge over a recipe (names: planner.frameworks.bridge)
==========  =============================  ==================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from hardware_catalog.errors import PlannerInputError
from hardware_catalog.schema import ClusterSpec, ModelSpec
from importlib import import_module
from planner.export.common import CannotExpress, build_plan, check_entrypoint, write_atomically
from planner.export.registry import EXPORTERS, Exporter, files, formats, register, unregister

EXPORTER_MODULES = ("torchrun", "megatron", "deepspeed", "torchtitan", "slurm", "bridge")
"""The modules of this package that define an ``EXPORTER``, registered in this order (the order of
``FORMATS`` and of "all"). A new launcher is one module here plus its name in this tuple."""

for _module in EXPORTER_MODULES:
    _exporter = import_module(f"planner.export.{_module}").EXPORTER
    if _exporter.name not in EXPORTERS:  # a reload of this package keeps the registry
        register(_exporter)


def __getattr__(name: str):
    # FORMATS and FILES follow the registry (an exporter registered later is listed too).
    if name == "FORMATS":
        return formats()
    if name == "FILES":
        return files()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# FORMATS: format names in order (torchrun, megatron, deepspeed, torchtitan, slurm, then any
# registered later). FILES: format -> the file names it writes, relative to ``out_dir``.


@dataclass
class ExportReport:
    written: list[Path] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    """Format -> why it cannot express the layout (only with ``formats="all"``). A format with
    several files that wrote only some reports each other one as ``"format:file"`` (torchtitan:
    the 0.3 overrides and the job-config TOML can each refuse on their own)."""


def _parse_formats(formats) -> tuple[list[str], bool]:
    """(format names, all?)."""
    known = tuple(EXPORTERS)
    if isinstance(formats, str):
        names = [f.strip() for f in formats.split(",") if f.strip()]
    else:
        names = [str(f).strip() for f in formats]
    if not names:
        raise PlannerInputError(f"formats={formats!r}: name at least one of {', '.join(known)} or 'all'")
    if names == ["all"]:
        return list(known), True
    bad = [n for n in names if n not in EXPORTERS]
    if bad:
        raise PlannerInputError(f"unknown export format {bad[0]!r} (known: {', '.join(known)}, or all)")
    return list(dict.fromkeys(names)), False


def _render(exporter: Exporter, plan, entrypoint: str) -> tuple[dict[str, tuple[str, int]], dict[str, str]]:
    """(file name -> (text, mode), "format:file" -> why that file was left out)."""
    texts, refused = exporter.render(plan, entrypoint)
    undeclared = sorted(set(texts) - set(exporter.files))
    if undeclared:  # a programming error in the exporter
        raise RuntimeError(f"exporter {exporter.name} rendered {undeclared[0]}, which it does not declare")
    return ({name: (text, exporter.files[name]) for name, text in texts.items()},
            {f"{exporter.name}:{name}": reason for name, reason in refused.items()})


def _framework_release(result: dict):
    """The ``--framework`` release the record was priced with (None: none)."""
    name = (result.get("framework") or {}).get("name") if isinstance(result.get("framework"), dict) else None
    if not name:
        return None
    from planner.frameworks.releases import RELEASES_BY_NAME

    return RELEASES_BY_NAME.get(name)


def with_release_options(plan, result: dict, options: Mapping[str, object] | None = None):
    """``plan`` with its per-format ``options``, the record's ``--framework`` release among them
    (--framework torchtitan-0.2: its files target torchtitan 0.2; megatron-core-0.13: the Megatron-LM
    files, Megatron-LM core_v0.13.0's arguments; megatron-bridge-25.09: the Bridge file's header names
    what that container reads otherwise)."""
    options = dict(options or {})
    release = _framework_release(result)
    if release is not None and release.bridge_release and "bridge_release" not in options:
        options["bridge_release"] = release.bridge_release
    if release is not None and release.export_release and "torchtitan_version" not in options:
        options["torchtitan_version"] = release.export_release
    if release is not None and release.megatron_release and "megatron_release" not in options:
        options["megatron_release"] = release.megatron_release
    return replace(plan, options=options)


def _shell_syntax_ok(name: str, text: str) -> None:
    """``bash -n`` on a rendered script where bash exists (a programming-error guard)."""
    import shutil
    import subprocess

    bash = shutil.which("bash")
    if bash is None or not (name.endswith(".sh") or name.endswith(".sbatch")):
        return
    proc = subprocess.run([bash, "-n"], input=text, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"generated {name} is not valid bash: {proc.stderr.strip()}")


def export_layout(
    result: dict,
    model: ModelSpec,
    cluster: ClusterSpec,
    formats: list[str] | str,
    out_dir: Path,
    *,
    force: bool = False,
    entrypoint: str = "pretrain_gpt.py",
    command: str = "",
    allow_unfit: bool = False,
    allow_cross_node_tp: bool = True,
    options: Mapping[str, object] | None = None,
) -> ExportReport:
    """Render, check and write launch files for one evaluated layout, with every registered
    exporter named in ``formats`` (``"all"``: all of them, in registration order).

    ``allow_unfit`` writes files for a layout predicted not to fit in memory (refused otherwise);
    ``allow_cross_node_tp``: see ``build_plan``. ``options``: per-format settings the exporters read
    from ``Plan.options`` (``torchtitan_version``: the torchtitan release, e.g. "0.2" or "0.3.0").
    """
    names, all_formats = _parse_formats(formats)
    entrypoint = check_entrypoint(entrypoint)
    plan = with_release_options(build_plan(result, model, cluster, command=command, allow_unfit=allow_unfit,
                                           allow_cross_node_tp=allow_cross_node_tp), result, options)
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise PlannerInputError(f"out_dir={str(out_dir)!r} exists and is not a directory")

    report = ExportReport()
    rendered: dict[Path, tuple[str, int]] = {}
    for fmt in names:
        try:
            texts, partial = _render(EXPORTERS[fmt], plan, entrypoint)
        except CannotExpress as err:
            if all_formats:
                report.skipped[fmt] = str(err)
                continue
            raise PlannerInputError(f"format {fmt} cannot express this layout: {err}") from None
        report.skipped.update(partial)
        for name, (text, mode) in texts.items():
            _shell_syntax_ok(name, text)
            rendered[out_dir / name] = (text, mode)

    if not force:
        for path in rendered:
            if path.exists():
                raise PlannerInputError(f"{path} already exists: pass --force (export_layout(force=True) from Python) to overwrite")
    try:
        report.written = write_atomically(rendered)
    except OSError as err:  # a read-only or immutable directory, /proc, a full disk: nothing was written
        where = err.filename or out_dir
        raise PlannerInputError(f"cannot write the launch files to {out_dir}: {where}: {err.strerror or err}") from None
    return report


__all__ = ["FORMATS", "FILES", "ExportReport", "export_layout", "Exporter", "EXPORTERS", "register", "unregister"]
