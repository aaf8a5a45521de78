"""What a framework release can launch, as a search's domain (``planner search --framework R``).

A layout is in release R's domain unless every format that launches R (``Release.formats``)
refuses it. Nothing here restates what a release can do: it reads the two declarations the
exporters already raise from.

1. **Columns** (every candidate, vectorized): each format's framework table (``Exporter.table``,
   whose ``Table.check`` the format runs on every plan). A table's answer for one option is a
   function of a few layout options (the option itself and what its rows' and refusals' ``when``
   read), so it is asked once per distinct combination of those options in a batch, not once per
   layout: the options it reads are found by asking it through ``_Reader``, which records every
   attribute asked, and widened until the groups no longer split (a group's layouts agree on
   everything the answer read, so they get the same answer). A layout every format's table
   refuses is out of the domain. Sound: each such refusal is one the format raises.
2. **The rows shown** (``refused``): the checks the exporters make in code beside their tables
   (heads divisible by TP, Megatron-FSDP without a pipeline, the interleaved schedule's
   micro-batches, ...) read the pipeline split and the batch, so they run on the few rows a
   search shows, through the exporters themselves (``expressible.refusals``), and the search
   drops a refused row for the next (``search.api``).

Releases without formats (llm-foundry: planner writes none of its files) have no domain to derive:
``launch_domain`` returns None and the search ranks what it ranked before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from costmodel.options import OPTIONS_BY_NAME, Layout
from planner.export import EXPORTERS
from planner.export.common import Plan
from planner.frameworks.table import CannotExpress

_EXPORT_TARGET_RULE = "megatron_release_"
"""Refusals of the Megatron exporter's one target commit (``planner.export.megatron.validate_flags``):
a flag of another release, which the release the user named may have. Not a limit of that release,
so not of its domain."""

_VIA_RECOMPUTE = ("recompute_layers", "recompute_share", "recompute_modules")
"""Options ``LayoutBatch.layout`` leaves at None unless the recompute mode uses them."""


class _NotColumns(Exception):
    """A table asked for something the layout's columns do not hold (left to the rows shown)."""


class _Reader:
    """A plan as a table sees it (``plan.tp``, ``plan.layout.fsdp``, ``plan.sp``, ``plan.model``),
    from one layout of a batch, recording which layout options were read."""

    __slots__ = ("_layout", "_model", "_cluster", "_read")

    def __init__(self, layout: Layout, model, cluster, read: set):
        object.__setattr__(self, "_layout", layout)
        object.__setattr__(self, "_model", model)
        object.__setattr__(self, "_cluster", cluster)
        object.__setattr__(self, "_read", read)

    def __getattr__(self, name: str):
        if name == "model":
            return self._model
        if name == "cluster":
            return self._cluster
        if name == "layout":
            return self
        if name in OPTIONS_BY_NAME:
            self._read.add(name)
            if name in _VIA_RECOMPUTE:
                self._read.add("recompute")
            return getattr(self._layout, name)
        for owner in (Layout, Plan):  # derived: sp, gpus, grad_accum, is_moe, shard_replicas
            prop = owner.__dict__.get(name)
            if isinstance(prop, property):
                return prop.fget(self)
        raise _NotColumns(name)


def _codes(column: np.ndarray) -> tuple[np.ndarray | None, int]:
    """(dense code of each row, number of codes) for one column of small integer codes or of
    floats (grouped by exact value); (None, 1) for a column that holds one value (most
    implementation settings: no work per row)."""
    col = np.asarray(column)
    if col.dtype == bool:
        return (None, 1) if col.all() or not col.any() else (col, 2)
    if col.dtype.kind == "f":  # a float column (a ratio, a fraction): group by value, never truncate
        uniq, inv = np.unique(col, return_inverse=True)
        return (None, 1) if len(uniq) == 1 else (inv.reshape(-1), len(uniq))
    lo, hi = int(col.min()), int(col.max())
    if lo == hi:
        return None, 1
    if lo >= 0 and hi < 1 << 20:
        present = np.bincount(col, minlength=hi + 1) > 0
        if present.all():
            return col, hi + 1
        return (np.cumsum(present) - 1)[col], int(present.sum())
    uniq, inv = np.unique(col, return_inverse=True)
    return inv.reshape(-1), len(uniq)


def _groups(columns: dict, names: list, n: int, cache: dict) -> tuple[np.ndarray, np.ndarray]:
    """(group of each row, one row of each group) by the values of ``names``."""
    varying = []
    size = 1
    for name in sorted(names):
        if name not in cache:
            cache[name] = _codes(columns[name])
        codes, count = cache[name]
        if count > 1:
            varying.append((codes, count))
            size *= count
    if size == 1:
        return np.zeros(n, dtype=np.int64), np.zeros(1, dtype=np.int64)
    if size >= 1 << 62:
        _, inv = np.unique(np.stack([c for c, _ in varying], axis=1), axis=0, return_inverse=True)
        return _any_member(inv.reshape(-1))
    key = varying[0][0].astype(np.int64)
    for codes, count in varying[1:]:  # one integer per combination: mixed radix over the dense codes
        key = key * count + codes
    if size <= 1 << 22:  # dense: no sort
        present = np.bincount(key, minlength=size) > 0
        return _any_member((np.cumsum(present) - 1)[key])
    _, inv = np.unique(key, return_inverse=True)
    return _any_member(inv.reshape(-1))


def _any_member(group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(``group``, one row of each group): every row of a group answers alike, so any one will do."""
    rep = np.empty(int(group.max()) + 1, dtype=np.int64)
    rep[group] = np.arange(len(group))
    return group, rep


def _refused_by(table, option: str, batch, model, cluster, cache: dict) -> tuple[np.ndarray, np.ndarray, list, set]:
    """(rows whose ``option`` ``table`` refuses, each row's group, each group's CannotExpress or
    None, the options read); a group where the table asks for more than the columns hold counts
    as not refused."""
    columns, n = batch.columns(), len(batch)
    read: set = set()
    while True:
        group, reps = _groups(columns, list(read), n, cache)
        errors, seen = [None] * len(reps), set()
        for g, i in enumerate(reps):
            reader = _Reader(batch.layout(int(i)), model, cluster, seen)
            try:
                table.write(option, getattr(reader, option), reader)
            except CannotExpress as err:
                errors[g] = err
            except (_NotColumns, AttributeError, TypeError):  # asks for more than a layout's columns
                pass
        if seen <= read:
            refused = np.array([e is not None for e in errors])
            return refused[group], group, errors, read
        read |= seen


@dataclass
class Refused:
    """Rows of one batch out of the domain, and why (the first refusing table option's rule)."""

    mask: np.ndarray
    """True: every format of the release refuses the layout."""
    rules: dict = field(default_factory=dict)
    """Rule -> layouts it removed (the first refusal of the first format, per layout)."""
    reads: dict = field(default_factory=dict)
    """Rule -> the layout options its answer read (for naming a pinned value)."""
    reasons: dict = field(default_factory=dict)
    """Rule -> the refusal's one line."""


@dataclass(frozen=True)
class LaunchDomain:
    """The layouts a release's launch formats can write (``search.space.Problem.domain``)."""

    release: str
    formats: tuple
    typed: tuple = ()
    """The layout options the user typed (``search.api`` names one as bad input when the rule that
    leaves out every layout reads it)."""

    @property
    def tables(self) -> list:
        """The distinct tables of the release's formats; [] when one format declares none (then no
        column is refused by all of them)."""
        tables = [EXPORTERS[f].table for f in self.formats if f in EXPORTERS]
        if len(tables) < len(self.formats) or any(t is None for t in tables):
            return []
        return list({id(t): t for t in tables}.values())

    def outside(self, batch, model, cluster) -> Refused:
        """The layouts of ``batch`` every format's table refuses (vectorized: see the module doc)."""
        n = len(batch)
        tables = self.tables
        out = Refused(np.zeros(n, bool))
        if not tables or n == 0:
            return out
        cache: dict = {}
        every = np.ones(n, bool)
        first_rule = np.full(n, -1, dtype=np.int64)
        found: dict = {}  # rule -> (index, reason, options read)
        for t, table in enumerate(tables):
            by_table = np.zeros(n, bool)
            # Options with a Refusal first, as the exporters ask them (the ZeRO-3 flavour's reason
            # before the zero rows' generic "no setting"), so the rule named is the one export names.
            refused_options = {f.option for f in table.refusals}
            for option in sorted(table.options, key=lambda o: o not in refused_options):
                mask, group, errors, read = _refused_by(table, option, batch, model, cluster, cache)
                new = mask & ~by_table
                if t == 0 and new.any():
                    for g in np.unique(group[new]):
                        err = errors[g]
                        k = found.setdefault(err.rule, (len(found), str(err), read | {option}))[0]
                        first_rule[new & (group == g)] = k
                by_table |= mask
            every &= by_table
            if not every.any():
                break
        out.mask = every
        if every.any():
            counts = np.bincount(first_rule[every], minlength=len(found))
            for rule, (k, reason, read) in found.items():
                if counts[k]:
                    out.rules[rule] = int(counts[k])
                    out.reads[rule] = sorted(read)
                    out.reasons[rule] = reason
        return out

    def refused(self, record: dict, model, cluster):
        """(rule, reason) when no format of the release writes the layout of ``record`` (a search
        record); None when one does. Asks the exporters themselves (``expressible.refusals``), so
        the checks they make beside their tables count too."""
        from planner.export.expressible import refusals, rule_names

        if not record.get("framework"):  # the export release it targets (torchtitan's files)
            record = {**record, "framework": {"name": self.release}}
        why = refusals(record, model, cluster, self.formats, until_one_writes=True)
        if any(f not in why for f in self.formats):
            return None
        rules = [rule_names(why[f]) for f in self.formats]
        if all(r.startswith(_EXPORT_TARGET_RULE) for r in rules):
            # The release runs it; only the one Megatron-LM commit the files target lacks the flag
            # (e.g. r0.8's GroupedMLP, which `--moe-grouped-gemm` picked before r0.9 and which
            # Megatron-LM 2caa681a1d removed). It stays ranked and the launch note says why no file
            # is written.
            return None
        return rules[0], why[self.formats[0]]


def launch_domain(release, typed=()) -> LaunchDomain | None:
    """The domain of a ``planner.frameworks.releases.Release`` for the search (``typed``: the layout
    options the user typed); None for a release planner writes no files for (llm-foundry):
    nothing to derive a domain from, so its search ranks every layout as before."""
    if release is None or not release.formats:
        return None
    return LaunchDomain(release.name, tuple(release.formats), tuple(typed))
