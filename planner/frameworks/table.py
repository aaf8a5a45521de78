"""One framework's words for planner's options, declared once and read both ways.

A ``Table`` is a list of ``Row``s. A row says: planner option ``option`` at ``value`` is written as
the framework settings ``sets`` (key -> value; the keys are the framework's own names: Megatron-LM
argparse dests, DeepSpeed config paths, torchtitan config fields), plus ``also`` (settings the
framework needs beside them, written but not required when reading), valid for ``releases``, as
declared at ``source``. A row whose ``value`` is ``NUMBER`` carries the option's number in its one
key (a parallel degree, say).

* Export: ``Table.write(option, value)`` -> the settings of the row for that value, or
  ``CannotExpress`` with the table's reason (``Refusal``) when no row can write it: a framework
  never runs a value silently changed.
* Read: ``Table.read(option, settings)`` -> the value of the most specific row whose ``sets`` all
  hold in the file's settings (unstated keys take the row marked ``default``), so a value read back
  is the value written.

Megatron-LM keeps its external names identical to its config fields and lists the renames once
(megatron/training/argument_utils.py); Megatron-Bridge keeps two-way mapping objects in a registry
(src/megatron/bridge/models/conversion/param_mapping.py): a row is both directions of one fact.
Adding an option to a framework is one row here (plus a refusal where it cannot be expressed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

NUMBER = "<number>"
"""``Row.value`` of a row that carries the option's number in its one ``sets`` key."""


class CannotExpress(Exception):
    """The target framework cannot run this layout as planned. ``str()`` is one line."""

    def __init__(self, rule: str, detail: str, source: str = ""):
        self.rule = rule
        self.detail = detail
        self.source = source
        where = f"; {source}" if source else ""
        super().__init__(f"{detail} (rule {rule}{where})")


class NotThisRelease(CannotExpress):
    """One file of a format that the target release does not read (torchtitan 0.2 reads no 0.3
    command line; 0.3 no TOML): not a limit of the layout, so when every file refuses, the rule of
    the file the release reads names why (``planner.export.registry.each_file``)."""


@dataclass(frozen=True)
class Row:
    option: str
    """A ``costmodel.options.Layout`` field."""
    value: Any
    """The option's value this row writes and reads (``NUMBER``: any number, carried through)."""
    sets: tuple = ()
    """(framework key, value) pairs that state ``value``; () states it by leaving the keys out."""
    also: tuple = ()
    """(framework key, value) pairs written beside ``sets`` that reading does not require."""
    source: str = ""
    releases: str = ""
    """The releases that have these keys ("" : every release the table covers)."""
    default: bool = False
    """The framework's own default: read when the file states none of the option's keys."""
    write: bool = True
    """False: a spelling planner reads but does not write (an older flag, another backend)."""
    when: Callable[[Any], bool] | None = None
    """Written only where this holds for the plan (e.g. a flag that needs ZeRO >= 1)."""


@dataclass(frozen=True)
class Above:
    """``Refusal.values`` for a number option: every number above ``bound`` (e.g. any layer count > 0)."""

    bound: float

    def __contains__(self, value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value > self.bound


@dataclass(frozen=True)
class Refusal:
    """A value of an option the framework cannot run: the export names this rule and reason."""

    option: str
    values: tuple
    """The refused values (a tuple, or ``Above(n)`` for every number above n)."""
    rule: str
    reason: str
    source: str
    when: Callable[[Any], bool] | None = None
    """Refused only where this holds for the plan (e.g. an overlap kind, with the overlap on)."""


def _same(stated, wanted) -> bool:
    if isinstance(stated, (list, tuple)) and len(stated) == 1 and not isinstance(wanted, (list, tuple)):
        stated = stated[0]  # a list-valued flag given once (argparse nargs)
    if isinstance(wanted, bool) or isinstance(stated, bool):
        return str(stated).strip().lower() in (("true", "1") if wanted else ("false", "0"))
    return str(stated).strip() == str(wanted)


WORKLOAD = {
    "moe_imbalance": "a property of the router's load on the data (the busiest EP rank over the mean), not a "
                     "framework setting: priced, never written; a reader cannot know it from a launch file, so it "
                     "comes from the command line (--moe-imbalance, default 1.0: forced balance)",
}
"""Options that describe the workload, not the framework: no table writes or reads them."""

CONTAINER = {
    "cudnn": "the cuDNN release the container ships (its fused attention's speed, costmodel.compute."
             "CUDNN_2024_ATTENTION_FRACTION), not a launch setting: priced, never written; a reader cannot know it "
             "from a launch file, so it comes from the command line (--cudnn, default current)",
}
"""Options that describe the software image the job runs in: no table writes or reads them."""


@dataclass(frozen=True)
class Table:
    framework: str
    rows: tuple
    refusals: tuple = ()
    source: str = ""
    releases: str = ""
    """The releases every row holds for unless its own ``releases`` says otherwise."""
    elsewhere: tuple = ()
    """(option, where) pairs: options this framework's files state with code beside the table (the
    pipeline split, the batch, recompute) or not at all (then given on the command line), and why."""

    def rows_for(self, option: str) -> list[Row]:
        return [r for r in self.rows if r.option == option]

    @property
    def options(self) -> tuple:
        return tuple(dict.fromkeys(r.option for r in self.rows))

    def declares(self, option: str) -> bool:
        """The table says how ``option`` is written, refused, stated elsewhere, or that it is a
        workload or container property (``WORKLOAD``, ``CONTAINER``): a new option declared nowhere
        fails the table tests."""
        return (option in self.options or any(f.option == option for f in self.refusals)
                or any(o == option for o, _ in self.elsewhere) or option in WORKLOAD or option in CONTAINER)

    def keys(self) -> frozenset:
        """Every framework key a row reads or writes."""
        return frozenset(k for r in self.rows for k, _ in r.sets + r.also)

    def refusal(self, option: str, value, plan=None) -> Refusal | None:
        return next((f for f in self.refusals if f.option == option and value in f.values
                     and (f.when is None or plan is None or f.when(plan))), None)

    def write(self, option: str, value, plan=None) -> list[tuple[str, Any]]:
        """The settings that state ``option`` = ``value``; ``CannotExpress`` where none can."""
        refused = self.refusal(option, value, plan)
        if refused is not None:
            raise CannotExpress(refused.rule, refused.reason, refused.source)
        if value is None:  # unset (an AUTO option, an absent degree): nothing to write
            return []
        for row in self.rows_for(option):
            if not row.write or (row.when is not None and plan is not None and not row.when(plan)):
                continue
            if row.value == NUMBER and not isinstance(value, bool) and isinstance(value, (int, float)):
                return [(key, value) for key, _ in row.sets] + list(row.also)
            if row.value == value:
                return list(row.sets) + list(row.also)
        raise CannotExpress(f"{self.framework}_{option}", f"{self.framework} has no setting for {option}={value}",
                            self.source)

    def check(self, plan) -> None:
        """``CannotExpress`` for the first option of ``plan`` this framework refuses."""
        for option in self.options:
            self.write(option, getattr(plan.layout, option, None), plan)

    def read(self, option: str, settings: Mapping[str, Any]):
        """(value, the keys that stated it) for ``option`` from a file's ``settings``; (default, ())
        when the file states none of its keys; (None, ()) when no row matches and none is default."""
        best, best_keys = None, ()
        for row in self.rows_for(option):
            keys = tuple(k for k, _ in row.sets)
            if not keys:
                continue
            if row.value == NUMBER:
                if keys[0] in settings and settings[keys[0]] is not None:
                    return settings[keys[0]], keys
                continue
            if all(k in settings and _same(settings[k], v) for k, v in row.sets) and len(keys) > len(best_keys):
                best, best_keys = row, keys
        if best is not None:
            return best.value, best_keys
        default = next((r for r in self.rows_for(option) if r.default), None)
        return (default.value if default else None), ()
