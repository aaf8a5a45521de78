"""Which launch formats can write a priced layout, checked in memory, nothing written.

A search without ``--framework`` ranks every layout the cost model can price, and its best row may
be one that no framework planner exports runs as priced (FSDP1-style flat ZeRO-3 under Megatron,
Ulysses CP beside TP under Megatron-DeepSpeed...). ``planner search`` asks this module about its
rows so that it can say so under the table instead of leaving the user to find out at
``planner export``.
"""

from __future__ import annotations

import re
from typing import Optional

from hardware_catalog.errors import PlannerInputError
from hardware_catalog.schema import ClusterSpec, ModelSpec
from planner.export import EXPORTERS, with_release_options
from planner.export.common import CannotExpress, build_plan

_RULE = re.compile(r"\(rule ([A-Za-z0-9_]+)")


def refusals(result: dict, model: ModelSpec, cluster: ClusterSpec, formats=None,
             until_one_writes: bool = False) -> dict[str, str]:
    """Format -> why it cannot write the layout of ``result`` (a search or evaluate record); the
    formats that can write at least one of their files are absent. Rendered as ``export_layout``
    renders them (the record's ``--framework`` release included), without the shell check or
    any file written. ``formats``: only these (default every registered one), in order;
    ``until_one_writes``: stop at the first that writes (the rest are not asked)."""
    names = list(EXPORTERS) if formats is None else [f for f in formats if f in EXPORTERS]
    try:
        plan = with_release_options(build_plan(result, model, cluster), result)
    except PlannerInputError as err:  # the record itself is refused: every format with it
        return {name: str(err) for name in names}
    out = {}
    for name in names:
        exporter = EXPORTERS[name]
        try:
            texts, _ = exporter.render(plan, "pretrain_gpt.py")
        except CannotExpress as err:
            out[name] = str(err)
            continue
        if not texts:
            out[name] = "writes none of its files"
        elif until_one_writes:
            break
    return out


def rule_names(reason: str) -> str:
    """The rule a refusal names ("rule megatron_fsdp_flat; ..."), or the reason's first words."""
    found = _RULE.findall(reason)
    if found:
        return found[-1]
    return reason.split(":")[0][:60]


def release_refusal_note(record: dict, model, cluster, release) -> str:
    """One line when no format that launches ``release`` writes ``record``'s layout as priced
    (planner evaluate --framework R: the layout is priced as R runs it, but R cannot run it);
    '' when one does or planner has no exporter for R."""
    formats = list(release.formats)
    rules = _rules_refusing_all(record, model, cluster, formats) if formats else None
    if rules is None:
        return ""
    return (f"note: no format that launches {release.name} ({', '.join(formats)}) writes this layout as priced "
            f"(rules {', '.join(rules)}; planner export --framework {release.name} prints each reason)")


def _rules_refusing_all(record: dict, model, cluster, formats: list) -> Optional[list]:
    """The rules by which every one of ``formats`` refuses ``record`` (said once each: torchrun and
    slurm launch Megatron-LM and refuse with its rule), or None when one of them writes it."""
    refused = refusals(record, model, cluster)
    if any(f not in refused for f in formats):
        return None
    return list(dict.fromkeys(rule_names(refused[f]) for f in formats))


def launch_notes(records: list[dict], specs: list, release=None) -> list[str]:
    """Lines for under the search table when its best row exports to no format (with
    ``--framework``, ``release``: to none of the formats that launch that release): which rule each
    exporter names, and the best row that does export (or that none shown does). Empty when the
    best row exports (the common case) or there is no row."""
    if not records:
        return []
    formats = list(EXPORTERS) if release is None else list(release.formats)
    if not formats:
        return [f"launch: planner has no exporter for {release.name}: it writes none of its files"]
    rules = _rules_refusing_all(records[0], specs[0][0], specs[0][1], formats)
    if rules is None:
        return []
    which = ("no format planner exports" if release is None else
             f"no format that launches {release.name} ({', '.join(formats)})")
    lines = [f"launch: {which} runs #1 as priced (rules {', '.join(rules)}; "
             f"planner export --format {'all' if release is None else formats[0]} prints each reason)"]
    for rec, (model, cluster, _) in list(zip(records, specs))[1:]:
        refused = refusals(rec, model, cluster)
        writes = [name for name in formats if name not in refused]
        if writes:
            lines.append(f"  the best row that exports is #{rec.get('rank')} ({', '.join(writes)})")
            break
    else:
        lines.append("  nor does any row shown")
    if release is None:
        lines.append("  --framework RELEASE prices as a release runs and checks its rows against that release's "
                     "launch formats ('planner catalog frameworks' lists them)")
    return lines
