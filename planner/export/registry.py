"""The exporter interface and the registry ``export_layout`` loops over.

A launcher is one ``Exporter``: its format name, the files it writes (with their modes) and a
``render(plan, entrypoint)`` that returns the texts of those files, or raises ``CannotExpress``
naming the rule the target framework would break. Adding a launcher (as ``bridge.py`` added
Megatron-Bridge recipes) is one module that defines its ``EXPORTER`` plus its name in
``planner.export.EXPORTER_MODULES`` (another package may call ``register`` itself);
``planner.export.FORMATS`` and ``FILES``, format parsing, "all", atomic writes, ``bash -n`` and
``--force`` follow from the registry.

``EXPORTERS`` keeps registration order, which is the order "all" writes and reports formats in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from planner.export.common import CannotExpress, NotThisRelease, Plan

EXECUTABLE = 0o755
"""Mode of a script (``.sh``, ``.sbatch``)."""
PLAIN = 0o644
"""Mode of a data file (JSON, TOML)."""

Rendered = tuple[dict[str, str], dict[str, str]]
"""(file name -> text, file name -> why that file cannot express the layout)."""


@dataclass(frozen=True, eq=False)
class Exporter:
    """One launch-file format."""

    name: str
    """Format name, as ``--format`` takes it."""
    files: Mapping[str, int]
    """File name (relative to ``out_dir``) -> mode, for every file the format can write."""
    render: Callable[[Plan, str], Rendered]
    """``render(plan, entrypoint)`` -> (file name -> text, file name -> reason it was left out).
    Raises ``CannotExpress`` when the format can write none of its files. A file left out with
    a reason while others are written is reported as ``"format:file"``."""
    description: str = field(default="")
    """One line: what the files are for."""
    table: object = field(default=None)
    """The framework table (``planner.frameworks.table.Table``) whose every refusal this format
    raises for any plan (its ``check`` runs inside ``render``); None: none declared. The search's
    ``--framework`` domain reads it (``planner.export.domain``)."""


EXPORTERS: dict[str, Exporter] = {}
"""Format name -> exporter, in registration order (the order of ``FORMATS``)."""


def register(exporter: Exporter) -> Exporter:
    """Add ``exporter`` after the registered ones; returns it. Raises ``ValueError`` on a name
    ``--format`` cannot take or that is taken, or a file another format already writes."""
    name = exporter.name
    if not name or name == "all" or "," in name or name != name.strip():
        raise ValueError(f"exporter name {name!r}: give a non-empty word other than 'all', without commas")
    if name in EXPORTERS:
        raise ValueError(f"exporter {name!r} is already registered")
    if not exporter.files:
        raise ValueError(f"exporter {name!r} declares no files")
    for other in EXPORTERS.values():
        shared = sorted(set(exporter.files) & set(other.files))
        if shared:
            raise ValueError(f"exporter {name!r} would write {shared[0]}, which {other.name!r} writes")
    EXPORTERS[name] = exporter
    return exporter


def unregister(name: str) -> Exporter:
    """Remove and return the exporter registered as ``name``."""
    return EXPORTERS.pop(name)


def formats() -> tuple[str, ...]:
    """Registered format names, in order."""
    return tuple(EXPORTERS)


def files() -> dict[str, tuple[str, ...]]:
    """Format -> the file names it writes."""
    return {name: tuple(exporter.files) for name, exporter in EXPORTERS.items()}


def one_file(name: str, render: Callable[[Plan, str], str]) -> Callable[[Plan, str], Rendered]:
    """``Exporter.render`` for a format with one file: the file or ``CannotExpress``."""

    def render_one(plan: Plan, entrypoint: str) -> Rendered:
        return {name: render(plan, entrypoint)}, {}

    return render_one


def each_file(renderers: Mapping[str, Callable[[Plan, str], str]]) -> Callable[[Plan, str], Rendered]:
    """``Exporter.render`` for a format whose files refuse independently: every file that can
    express the layout, and why the others cannot; ``CannotExpress`` when none can (with the
    common rule, or every file's rule and reason)."""

    def render_each(plan: Plan, entrypoint: str) -> Rendered:
        texts: dict[str, str] = {}
        refused: dict[str, CannotExpress] = {}
        for name, render in renderers.items():
            try:
                texts[name] = render(plan, entrypoint)
            except CannotExpress as err:
                refused[name] = err
        if not texts:
            # The files the release reads first: their rule is why the layout cannot run, a file
            # of another release (NotThisRelease) only why that file is not written.
            order = sorted(refused.items(), key=lambda item: isinstance(item[1], NotThisRelease))
            errors = [err for _, err in order]
            if len({e.rule for e in errors}) == 1:
                raise errors[0]
            # Every file's rule: a release refusal of one file (torchtitan 0.2 reads no command line)
            # must not hide the layout rule that refused the other.
            raise CannotExpress(", ".join(dict.fromkeys(e.rule for e in errors)),
                                "; ".join(f"{name}: {err}" for name, err in order))
        return texts, {name: str(err) for name, err in refused.items()}

    return render_each
