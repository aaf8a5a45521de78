"""The pipeline schedule of one layout as a list of timed blocks, for ``planner evaluate --plot``.

Two parts, both plain Python (no matplotlib here):

* ``stage_pass_times``: the forward and backward seconds of one micro-batch on each pipeline
  stage, from the cost model's own per-layer costs (``costmodel.schedule.stage_time`` on the
  ``costmodel.context.chunk_context`` of this one layout). Forward is the layers' forward
  compute (+ the LM head's on the last stage) and one pass's share of the exposed TP / CP / EP
  communication; backward is everything else: backward compute, recompute (it runs just before
  the backward) and the other passes' communication.
* ``simulate``: the 1F1B schedule (PipeDream-flush; Narayanan et al. 2021, Sec. 2.2.1) or the
  interleaved one (Sec. 2.2.2) in Megatron-Core's order (schedules.py: warm-up
  ``2(p - s - 1) + (v - 1) p`` chunk forwards on stage s, then one forward / one backward, then
  the flush), each block started as soon as its stage is free and its input has arrived. P2P
  sends take no time here (the cost model prices them as a separate term).
"""

from __future__ import annotations

from dataclasses import dataclass

FORWARD, BACKWARD = "F", "B"


@dataclass(frozen=True)
class Block:
    """One forward or backward of one micro-batch through one model chunk on one stage."""

    stage: int
    kind: str
    """``FORWARD`` or ``BACKWARD``."""
    micro_batch: int
    """0-based."""
    chunk: int
    """Model chunk (virtual stage) on this stage, 0-based; always 0 without interleaving."""
    start: float
    end: float


@dataclass(frozen=True)
class Timeline:
    """A simulated pipeline step: its blocks and the shape that produced them."""

    blocks: list
    pp: int
    vpp: int
    micro_batches: int
    forward_s: tuple
    """One micro-batch's forward on each stage (all its chunks), seconds."""
    backward_s: tuple
    """The same for the backward."""

    @property
    def end(self) -> float:
        return max(b.end for b in self.blocks)


def stage_kind(stage: int, pp: int) -> int:
    """0 first, 1 middle, 2 last (the cost model's three stage kinds; pp = 1: first)."""
    return 0 if stage == 0 else (2 if stage == pp - 1 else 1)


def stage_pass_times(model, cluster, gpu, layout) -> tuple[tuple, tuple]:
    """(forward, backward) seconds of one micro-batch on each of the layout's ``pp`` stages."""
    from hardware_catalog import get_interconnect

    from costmodel import collectives
    from costmodel.calibration import DEFAULT
    from costmodel.context import chunk_context
    from costmodel.layout import LayoutBatch
    from costmodel.params import count_params
    from costmodel.pipeline import StageSplit, stage_layer_mix
    from costmodel.schedule import stage_time
    from costmodel.step import layer_costs

    batch = LayoutBatch.from_layouts([layout])
    fabric = collectives.fabric_from_cluster(cluster, gpu, get_interconnect(cluster.nic))
    ctx = chunk_context(model, cluster, batch, gpu, DEFAULT, fabric, count_params(model))
    split = StageSplit(model, batch, ctx.pp)
    costs, _ = layer_costs(ctx, split)
    kinds = ((split.first, True, split.single), (split.middle, False, False), (split.last, False, True))
    per_kind = []
    for n_layers, first, last in kinds:
        st = stage_time(ctx, costs, n_layers, first, last)
        nd, nm = stage_layer_mix(model, ctx.counts, n_layers, first)
        fwd = nd * costs.dense.forward + nm * costs.moe.forward
        if last is True or (last is not False and bool(last[0])):
            fwd = fwd + costs.head_forward
        passes = 2.0 + costs.full.share(n_layers)
        fwd = fwd + (st.tp + st.cp + st.ep) / passes
        per_kind.append((float(fwd[0]), float(st.total()[0] - fwd[0])))
    kinds_of = [stage_kind(s, layout.pp) for s in range(layout.pp)]
    return tuple(per_kind[k][0] for k in kinds_of), tuple(per_kind[k][1] for k in kinds_of)


def schedule_table(m: int, v: int, group: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) of each virtual micro-batch in forward order: groups of ``group``
    micro-batches go through chunk 0, then chunk 1, ... (Megatron-Core get_schedule_table)."""
    table = []
    for lo in range(0, m, group):
        hi = m if lo + group >= m else lo + group
        table += [(mb, c) for c in range(v) for mb in range(lo, hi)]
    return table


def stage_order(stage: int, pp: int, vpp: int, m: int) -> list[tuple[str, int, int]]:
    """(kind, micro-batch, chunk) in the order stage ``stage`` runs them: warm-up forwards, one
    forward / one backward, then the flush (backward chunks run in reverse order)."""
    table = schedule_table(m, vpp, pp)
    total = m * vpp
    warmup = (pp - stage - 1) if vpp == 1 else 2 * (pp - stage - 1) + (vpp - 1) * pp
    warmup = min(warmup, total)
    fwd = [(FORWARD, mb, c) for mb, c in table]
    bwd = [(BACKWARD, mb, vpp - 1 - c) for mb, c in table]
    order = fwd[:warmup]
    for k in range(total - warmup):
        order += [fwd[warmup + k], bwd[k]]
    return order + bwd[total - warmup:]


def dependency(kind: str, stage: int, mb: int, chunk: int, pp: int, vpp: int):
    """The block whose output this one needs, as (kind, stage, micro-batch, chunk), or None."""
    if kind == FORWARD:
        if stage > 0:
            return (FORWARD, stage - 1, mb, chunk)
        return (FORWARD, pp - 1, mb, chunk - 1) if chunk > 0 else None
    if stage < pp - 1:
        return (BACKWARD, stage + 1, mb, chunk)
    if chunk < vpp - 1:
        return (BACKWARD, 0, mb, chunk + 1)
    return (FORWARD, stage, mb, chunk)


def simulate(pp: int, vpp: int, m: int, forward_s, backward_s) -> Timeline:
    """Run the schedule: each block starts when its stage is free and its input is ready; a
    chunk takes 1/vpp of its stage's micro-batch time."""
    orders = [stage_order(s, pp, vpp, m) for s in range(pp)]
    pos, free, done, blocks = [0] * pp, [0.0] * pp, {}, []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(pp):
            while pos[s] < len(orders[s]):
                kind, mb, c = orders[s][pos[s]]
                dep = dependency(kind, s, mb, c, pp, vpp)
                if dep is not None and dep not in done:
                    break
                start = max(free[s], done[dep] if dep is not None else 0.0)
                end = start + (forward_s[s] if kind == FORWARD else backward_s[s]) / vpp
                done[(kind, s, mb, c)] = free[s] = end
                blocks.append(Block(s, kind, mb, c, start, end))
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - the orders above never deadlock
            raise RuntimeError(f"pipeline schedule deadlocked (pp={pp}, vpp={vpp}, m={m})")
    return Timeline(blocks, pp, vpp, m, tuple(forward_s), tuple(backward_s))


def layout_timeline(model, cluster, gpu, layout) -> Timeline:
    """The simulated schedule of one step of ``layout`` with the cost model's stage times."""
    fwd, bwd = stage_pass_times(model, cluster, gpu, layout)
    return simulate(layout.pp, layout.vpp, layout.grad_accum, fwd, bwd)
