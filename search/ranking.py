"""The top rows of a search: intervals, a pessimistic re-rank, folded equivalents, ties, flags.

What happens to the few hundred best layouts the pools kept (``search.exhaustive.Pools``, ranked
by the point prediction of ``Objectives.rank``), and only to them:

1. **Intervals** (``search.uncertainty``): each priced under every cross-validation fold's
   constants, combined with the held-out errors: p10 / p50 / p90 of tokens/s/GPU.
2. **Rank by** ``median`` (the point prediction, the default) or ``p10``: the ranked quantity
   at the pessimistic end of the interval (tokens/s/GPU at its p10), for a safe pick. The
   re-rank covers the ``RERANK_POOL`` best by the point prediction.
3. **Fold** layouts the model cannot tell apart into one row: equal ranked quantity and equal
   memory (e.g. DP64 mbs1 and DP32 CP2 mbs2, priced the same), or equal ranked quantity with
   only interchangeable settings differing (ZeRO 1 vs 2 where the DP traffic hides either way,
   sequence parallelism, recompute modules). The row shows the simplest; the others are its
   ``alternatives``.
4. **Ties**: a row whose interval overlaps #1's is marked ``ties_best`` (``≈`` in the table):
   the model cannot say which of the two is faster.
5. **Envelope** (``search.envelope``): every mechanism outside what the reference runs cover.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

RANK_BY = ("median", "p10")
RERANK_POOL = 256
"""``--rank-by p10`` re-ranks this many layouts, the best by the point prediction."""
FOLD_SLACK = 4
"""The pools keep ``FOLD_SLACK`` x top layouts (at least ``FOLD_MIN``) so that folding leaves
``top`` rows."""
FOLD_MIN = 40
INTERCHANGEABLE = ("zero", "sequence_parallel", "recompute_layers", "recompute_share", "recompute_modules", "etp")
"""Knobs that may differ between folded layouts of unequal memory (equal time)."""
_SIMPLEST = ("cp", "ep", "tp", "pp", "vpp", "mbs")
"""Among layouts priced the same, the row shows the one with the fewest of these."""
_SAME = 1e-9
"""Relative difference below which two prices are the same."""


def pool_size(top: int, rank_by: str) -> int:
    """How many layouts the pools keep for ``top`` rows."""
    size = max(top * FOLD_SLACK, FOLD_MIN)
    return max(size, RERANK_POOL) if rank_by == "p10" else size


@dataclass
class Ranked:
    """One row of the ranking."""

    cand: object
    """``search.exhaustive.Candidate``."""
    interval: np.ndarray
    """p10, p50, p90 of tokens/s/GPU."""
    key: float
    """What the row was ranked by: the point prediction, or its pessimistic end (p10)."""
    alternatives: list = field(default_factory=list)
    """Candidates folded into this row."""

    @property
    def tps(self) -> float:
        return float(self.cand.result.tokens_per_s_per_gpu[0])

    def key_range(self) -> tuple[float, float]:
        """The ranked quantity (lower is better) at the interval's good and bad ends."""
        return key_span(self.cand.key, self.tps, self.interval[0], self.interval[2])


def key_span(key, tokens_per_s_per_gpu, p10, p90) -> tuple[float, float]:
    """A ranked quantity (``key``, lower is better, inversely proportional to tokens/s/GPU at a
    fixed job) at the good and bad ends of the tokens/s/GPU interval (p90, p10)."""
    return key * tokens_per_s_per_gpu / p90, key * tokens_per_s_per_gpu / p10


def intervals(cands: list) -> np.ndarray:
    """(3, n): p10, p50, p90 tokens/s/GPU of each candidate, priced per problem in one batch."""
    from costmodel.layout import LayoutBatch
    from search.uncertainty import tokens_interval

    out = np.zeros((3, len(cands)))
    groups: dict[int, list[int]] = {}
    for i, c in enumerate(cands):
        groups.setdefault(id(c.problem), []).append(i)
    for members in groups.values():
        p = cands[members[0]].problem
        batch = LayoutBatch.concat([cands[i].result.batch for i in members])
        own = np.array([float(np.asarray(cands[i].result.tokens_per_s_per_gpu)[0]) for i in members])
        out[:, members] = tokens_interval(p.model, p.cluster, p.gpu, batch, predicted=own)
    return out


def _values(c) -> dict:
    return {k: np.asarray(v)[0].item() for k, v in c.result.batch.columns().items()}


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= _SAME * max(abs(a), abs(b))


def _folds_into(head: Ranked, r: Ranked) -> bool:
    a, b = head.cand, r.cand
    if a.problem is not b.problem or not _same(head.key, r.key) or not _same(a.key, b.key):
        return False
    if _same(a.peak, b.peak):
        return True
    va, vb = _values(a), _values(b)
    return all(va[k] == vb[k] for k in va if k not in INTERCHANGEABLE)


def fold(rows: list[Ranked]) -> list[Ranked]:
    """Rows priced the same merged into the first (``_folds_into``), order kept."""
    out: list[Ranked] = []
    for r in rows:
        head = next((h for h in out if _folds_into(h, r)), None)
        if head is None:
            out.append(r)
        else:
            head.alternatives.append(r.cand)
    return out


def rank(cands: list, top: int, rank_by: str = "median") -> list[Ranked]:
    """The ``top`` rows from the pools' candidates (best first by point prediction)."""
    if not cands:
        return []
    # The median ranking needs no interval to order: price only the rows kept.
    q = intervals(cands) if rank_by == "p10" else np.full((3, len(cands)), np.nan)
    rows = []
    for i, c in enumerate(cands):
        tps = float(c.result.tokens_per_s_per_gpu[0])
        key = c.key if rank_by == "median" else c.key * tps / q[0, i]
        rows.append(Ranked(c, q[:, i], key))

    def order(r: Ranked):
        v = _values(r.cand)
        return (r.key, v["zero"], r.cand.peak, *(v[k] for k in _SIMPLEST))

    kept = fold(sorted(rows, key=order))[:top]
    if rank_by == "median":
        q = intervals([r.cand for r in kept])
        for i, r in enumerate(kept):
            r.interval = q[:, i]
    return kept


def alternative_fields(head: Ranked) -> list[dict]:
    """Each folded layout as the knobs where it differs from the row shown, and its memory."""
    from costmodel.record import recorded_layout

    model = head.cand.problem.model
    shown = recorded_layout(model, head.cand.result.batch.layout(0))
    out = []
    for c in head.alternatives:
        lay = recorded_layout(model, c.result.batch.layout(0))
        out.append({"layout": {k: v for k, v in lay.items() if shown.get(k) != v}, "peak_gib": c.peak})
    return out


def annotate(record: dict, row: Ranked, best: Ranked) -> None:
    """Add the interval, ties, alternatives and envelope flags of ``row`` to its record."""
    from search.uncertainty import interval_fields

    record.update(interval_fields(record, row.interval))
    lo, _ = row.key_range()
    _, best_hi = best.key_range()
    record["ties_best"] = bool(row is not best and lo <= best_hi)
    if row.alternatives:
        record["alternatives"] = alternative_fields(row)
    record["envelope"] = envelope_flags(row.cand)


def annotate_batch(record: dict, model, cluster, gpu, batch) -> None:
    """Add the interval and envelope flags to the record of the one layout in ``batch`` (what
    ``planner evaluate`` and a priced recipe show)."""
    from search.envelope import Job, columns_of, flags
    from search.uncertainty import interval_fields, tokens_interval

    q = tokens_interval(model, cluster, gpu, batch, predicted=np.array([record["tokens_per_s_per_gpu"]]))
    record.update(interval_fields(record, q[:, 0]))
    record["envelope"] = flags(Job(model, gpu, int(record["gpus"]), int(batch.seq_len[0])), columns_of(batch))


def envelope_flags(cand) -> list[dict]:
    """The validated-envelope flags of one candidate (job and layout)."""
    from search.envelope import Job, columns_of, flags

    p = cand.problem
    return flags(Job(p.model, p.gpu, p.gpus, p.seq_len), columns_of(cand.result.batch))
