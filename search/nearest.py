"""The nearest jobs that have valid layouts, for a search whose rules leave none.

When no layout obeys the rules (``tp * cp * pp * dp`` cannot equal the GPU count with a data-
parallel degree that divides the batch, say 1,536 sequences on 1,000 GPUs), the answer a user can
act on is how far the job is from one that has layouts: the nearest global batch sizes at the same
GPU count, and the nearest GPU counts (whole nodes) at the same batch. Candidates come from the
degrees themselves (a batch is a multiple of some data-parallel degree; a GPU count a product of
degrees with a data-parallel degree dividing the batch); each is confirmed by enumerating its
layouts under every rule, as the search does.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Optional

from hardware_catalog.hardware import is_whole_nodes, nearest_multiples
from search.space import Problem, divisors, enumerate_skeleton, powers_of_two

MAX_CHECKS = 16
"""Candidate jobs enumerated at most, per direction of each kind (batch, GPU count)."""
BUDGET_SECONDS = 3.0
"""Wall time the whole look-around may take; it stops at the first check past it."""
GPU_RANGE = 4
"""GPU counts considered lie within a factor of this of the asked count."""


def has_layouts(problem: Problem) -> bool:
    """Whether any layout of ``problem`` obeys every rule (the skeleton enumeration of the search;
    the broadcast knobs' rules do not read the GPU count or the batch)."""
    skeleton, _, _ = enumerate_skeleton(problem, "numpy")
    return len(skeleton["tp"]) > 0


def _degree_values(problem: Problem) -> dict[str, list[int]]:
    """tp, cp and pp values a job of this model on this cluster could take at some GPU count (the
    pins kept): tp up to the scale-up domain, cp dividing the sequence in 2c chunks, pp dividing
    the layers (any count with ``stage_splits``)."""
    ctx, pins, layers = problem.ctx, problem.pins, problem.model.num_layers
    tp_cap = ctx.heads if problem.allow_cross_node_tp else ctx.scaleup_domain
    values = {"tp": powers_of_two(tp_cap),
              "cp": [c for c in powers_of_two(problem.seq_len) if c == 1 or problem.seq_len % (2 * c) == 0],
              "pp": list(range(1, layers + 1)) if problem.stage_splits else divisors(layers)}
    return {k: [pins[k]] if k in pins else v for k, v in values.items()}


def _model_degrees(problem: Problem) -> set[int]:
    """Every tp * cp * pp product (``_degree_values``)."""
    v = _degree_values(problem)
    return {t * c * p for t in v["tp"] for c in v["cp"] for p in v["pp"]}


def batch_candidates(problem: Problem) -> list[int]:
    """Global batch sizes next to ``problem.gbs`` that some data-parallel degree divides, nearest first."""
    out = set()
    for mp in _model_degrees(problem):
        if problem.gpus % mp:
            continue
        dp = problem.gpus // mp
        if "dp" in problem.pins and dp != problem.pins["dp"]:
            continue
        below = (problem.gbs // dp) * dp
        out |= {g for g in (below, below + dp) if g > 0 and g != problem.gbs}
    return sorted(out, key=lambda g: (abs(g - problem.gbs), g))


def gpu_candidates(problem: Problem) -> list[int]:
    """GPU counts next to ``problem.gpus`` (whole nodes, within ``GPU_RANGE``) that are a model-
    parallel degree times a data-parallel degree dividing the batch, nearest first."""
    node = problem.cluster.gpus_per_node
    lo, hi = max(1, problem.gpus // GPU_RANGE), problem.gpus * GPU_RANGE
    dps = [problem.pins["dp"]] if "dp" in problem.pins else divisors(problem.gbs)
    out = set()
    for mp in _model_degrees(problem):
        for dp in dps:
            n = mp * dp
            if lo <= n <= hi and n != problem.gpus and is_whole_nodes(n, node):
                out.add(n)
    return sorted(out, key=lambda n: (abs(n - problem.gpus), n))


def _nearest(problem: Problem, field: str, candidates: list[int], deadline: float) -> tuple[Optional[int], Optional[int]]:
    """(nearest value below, nearest above) of ``field`` among ``candidates`` (nearest first) whose
    jobs have layouts; at most ``MAX_CHECKS`` enumerations a side, none after ``deadline``."""
    base = getattr(problem, field)
    found: dict[str, int] = {}
    checks = {"below": 0, "above": 0}
    for value in candidates:
        side = "below" if value < base else "above"
        if side in found or checks[side] >= MAX_CHECKS:
            continue
        if time.perf_counter() > deadline:
            break
        checks[side] += 1
        if has_layouts(dataclasses.replace(problem, **{field: value})):
            found[side] = value
            if len(found) == 2:
                break
    return found.get("below"), found.get("above")


def nearest_jobs(problem: Problem, budget_s: float = BUDGET_SECONDS) -> dict:
    """{"gbs": (below, above), "gpus": (below, above)}: the nearest batch sizes at the same GPU
    count and the nearest GPU counts at the same batch whose jobs have valid layouts (None where
    none was found within the checks and ``budget_s``)."""
    deadline = time.perf_counter() + budget_s
    return {"gbs": _nearest(problem, "gbs", batch_candidates(problem), deadline),
            "gpus": _nearest(problem, "gpus", gpu_candidates(problem), deadline)}


def format_nearest(found: dict, gpus: int, gbs: int) -> str:
    """'nearest jobs with valid layouts: --gbs 1500 or 1625 at 1,000 GPUs; --gpus 768 or 1024 at
    gbs 1,536', or '' when none was found."""
    parts = []
    for key, at in (("gbs", f"at {gpus:,} GPUs"), ("gpus", f"at gbs {gbs:,}")):
        values = [v for v in found.get(key, ()) if v is not None]
        if values:
            parts.append(f"--{key} " + " or ".join(str(v) for v in values) + f" {at}")
    return ("nearest jobs with valid layouts: " + "; ".join(parts)) if parts else ""


MAX_GROWTH = 64
"""How far past the asked GPU count the memory look-around goes (a factor)."""


def _whole_nodes_above(gpus: int, node: int) -> int:
    """The smallest whole-node GPU count at or above ``gpus``."""
    return gpus if is_whole_nodes(gpus, node) else nearest_multiples(gpus, node)[1]


def fewest_fitting_gpus(problem: Problem, memory_headroom: float, calib=None,
                        budget_s: float = BUDGET_SECONDS) -> tuple[Optional[int], bool]:
    """(GPU count, whether it is the fewest): for a job where no layout fits in memory, the fewest
    GPUs (whole nodes, up to ``MAX_GROWTH`` x the asked count) at which one does, found by
    doubling to a count that fits and then trying every whole-node count below it in turn, each
    with the search's own enumeration and memory model. (None, False) when none fits in range;
    (count, False) when the time ran out before the counts below it were all tried."""
    from search.exhaustive import run_exhaustive

    deadline = time.perf_counter() + budget_s
    node = problem.cluster.gpus_per_node

    def fits(n: int) -> bool:
        job = dataclasses.replace(problem, gpus=n)
        if not has_layouts(job):
            return False
        _, stats = run_exhaustive([job], top=1, memory_headroom=memory_headroom, calib=calib)
        return stats["fits"] > 0

    low, high = problem.gpus, None
    n = problem.gpus
    while n < problem.gpus * MAX_GROWTH and time.perf_counter() < deadline:
        n = _whole_nodes_above(2 * n, node)
        if fits(n):
            high = n
            break
        low = n
    if high is None:
        return None, False
    step = node if low >= node else 1
    for m in range(_whole_nodes_above(low + 1, node), high, step):
        if time.perf_counter() > deadline:
            return high, False
        if fits(m):
            return m, True
    return high, True


def format_fewest(gpus: Optional[int], fewest: bool, gpus_per_node: int = 1) -> str:
    """'a layout fits from --gpus 112 (the fewest whole nodes that fit)', or ''. Below one node
    the count tried is any GPU count of that node, not whole nodes."""
    if gpus is None:
        return ""
    unit = "GPUs" if gpus < gpus_per_node else "whole nodes"
    return (f"a layout fits from --gpus {gpus} (the fewest {unit} that fit)" if fewest
            else f"a layout fits at --gpus {gpus} (fewer GPUs not all tried)")
