"""Which launch formats can write a priced layout, checked in memory, nothing written.

A search without ``--framework`` ranks every layout the cost model can price, and its best row may
be one that no framework planner exports runs as priced (FSDP1-style flat ZeRO-3 under Megatron,
Ulysses CP beside TP under Megatron-DeepSpeed...). ``planner search`` asks this module about its
rows so that it can say so under the table instead of leaving the user to find out at
``planner export``.
"""

from __future__ import annotations

import re

from hardware_catalog.errors import PlannerInputError
from hardware_catalog.schema import ClusterSpec, ModelSpec
from planner.export import EXPORTERS, with_release_options
from planner.export.common import CannotExpress, build_plan

_RULE = re.compile(r"\(rule ([A-Za-z0-9_]+)")


def refusals(result: dict, model: ModelSpec, cluster: ClusterSpec) -> dict[str, str]:
    """Format -> why it cannot write the layout of ``result`` (a search or evaluate record); the
    formats that can write at least one of their files are absent. Rendered as ``export_layout``
    renders them (the record's ``--framework`` release included), without the shell check or
    any file written."""
    try:
        plan = with_release_options(build_plan(result, model, cluster), result)
    except PlannerInputError as err:  # the record itself is refused: every format with it
        return {name: str(err) for name in EXPORTERS}
    out = {}
    for name, exporter in EXPORTERS.items():
        try:
            texts, _ = exporter.render(plan, "pretrain_gpt.py")
        except CannotExpress as err:
            out[name] = str(err)
            continue
        if not texts:
            out[name] = "writes none of its files"
    return out


def rule_names(reason: str) -> str:
    """The rule a refusal names ("rule megatron_fsdp_flat; ..."), or the reason's first words."""
    found = _RULE.findall(reason)
    if found:
        return found[-1]
    return reason.split(":")[0][:60]


def launch_notes(records: list[dict], specs: list, framework_searched: bool) -> list[str]:
    """Lines for under the search table when its best row exports to no format: which rule each
    framework's exporter names, and the best row that does export (or that none shown does).
    Empty when the best row exports (the common case) or there is no row."""
    if not records:
        return []
    best = refusals(records[0], specs[0][0], specs[0][1])
    if len(best) < len(EXPORTERS):
        return []
    # torchrun and slurm launch Megatron-LM: they refuse with Megatron's rule, said once.
    rules = list(dict.fromkeys(rule_names(reason) for reason in best.values()))
    lines = [f"launch: no format planner exports runs #1 as priced (rules {', '.join(rules)}; "
             f"planner export --format all prints each reason)"]
    for rec, (model, cluster, _) in list(zip(records, specs))[1:]:
        refused = refusals(rec, model, cluster)
        writes = [name for name in EXPORTERS if name not in refused]
        if writes:
            lines.append(f"  the best row that exports is #{rec.get('rank')} ({', '.join(writes)})")
            break
    else:
        lines.append("  nor does any row shown")
    if not framework_searched:
        lines.append("  --framework RELEASE ranks only what that release runs ('planner catalog frameworks' lists them)")
    return lines
