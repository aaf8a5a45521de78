"""Alpha-beta (latency-bandwidth) time of collectives and P2P on a two-level fabric (vectorized).

Every time is ``steps * alpha + bytes_on_the_busiest_port / bandwidth`` (Hockney's model, as in
Thakur, Rabenseifner & Gropp 2005, "Optimization of collective communication operations in
MPICH", IJHPCA 19(1)). Notation used in the comments below:

* ``S``  message bytes: the buffer for all_reduce/broadcast, the gathered OUTPUT for all_gather,
  the INPUT for reduce_scatter, everything one rank sends (itself included) for all_to_all.
* ``n``  ranks taking part at one level; ``r`` ranks per scale-up domain, ``q`` domains spanned,
  ``N = r*q`` (``n_local`` and ``n_nodes`` in ``collective_time``).
* ``B``  achievable bandwidth per GPU per direction at a level (already times efficiency and
  divided by oversubscription); ``alpha`` the latency of one algorithm step at that level;
  ``D`` the GPUs of a scale-up domain (costmodel/NOTATION.md has the project-wide table).

Per-level physical topologies and how a GPU's ``B`` is spread over its ports:

* ``switch`` (NVSwitch, non-blocking fat tree) and ``tree`` (a switched tree; its thinner upper
  levels are expressed by ``oversubscription``): any-to-any at the full ``B``.
* ``ring``: two ports (left, right) of ``B/2`` each. Rings are run bidirectionally (two
  counter-rotating rings, half the data each), so a ring algorithm gets the full ``B``.
* ``fully_connected`` (xGMI full mesh, one link to each of the ``D-1`` other GPUs of the
  domain): each link ``B/(D-1)``.
* ``torus2d`` / ``mesh2d``: four ports (+-X, +-Y) of ``B/4`` each; the torus wraps around, so each
  dimension is a ring (diameter g/2), the mesh's dimensions are lines (diameter g-1, half the
  bisection). A group of ``n`` ranks forms a ``gx x gy`` grid: ``dims=None`` -> the most square
  factorization of ``n`` (a whole torus); given ``(X, Y)`` -> ranks fill rows of ``X`` first and a
  dimension wraps only when the group spans all of it.

Hardware routing is assumed on every level: a message crossing several hops costs one ``alpha``.
Tree algorithms (NCCL's double binary tree, binomial broadcast, PAT/recursive halving) need a
switched level; on ring/mesh/torus/fully-connected levels their edges would share links.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from hardware_catalog.schema import ClusterSpec, GPUSpec, InterconnectSpec

ALGORITHMS = ("ring", "tree", "hierarchical", "direct", "torus2d", "mesh2d", "unpipelined_tree")
"""Algorithm names; ``collective_time`` reports the index (code) of the one it priced.
``unpipelined_tree`` and ``direct`` for any op but all_to_all are textbook algorithms of the
``planner comm`` calculator only (``textbook=True``); the training model never offers them."""
RING, TREE, HIERARCHICAL, DIRECT, TORUS2D, MESH2D, UNPIPELINED_TREE = range(len(ALGORITHMS))

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "reduce")
"""``reduce`` (to one root) is priced as the broadcast run backwards: every broadcast schedule
reversed, with sums where copies were, moves the same bytes in the same steps (Thakur,
Rabenseifner & Gropp 2005 sec. 4.1-4.2: binomial tree for short messages, reduce-scatter +
gather (the mirror of scatter + all-gather) for long ones; NCCL's ring reduce is the mirror of
its ring broadcast, both busbw = algbw in nccl-tests doc/PERFORMANCE.md). Reduction arithmetic
is not priced, as for every reducing collective here."""
TOPOLOGIES = ("switch", "ring", "tree", "mesh2d", "torus2d", "fully_connected")
_SWITCHED = ("switch", "tree")
_GRID = ("mesh2d", "torus2d")
_INF = np.inf
_TABLE_MAX = 1 << 22  # largest group size priced through per-size tables
_TIE = 1.0 - 1e-12  # a candidate must beat the incumbent by more than this relative margin


@dataclass(frozen=True)
class LinkLevel:
    """One level of the fabric, as seen by one GPU."""

    bandwidth: float
    """Achievable bytes/s per GPU per direction at this level (already times efficiency)."""
    latency: float
    """Seconds per algorithm step at this level."""
    topology: str
    """'switch' | 'ring' | 'tree' | 'mesh2d' | 'torus2d' | 'fully_connected'."""
    dims: tuple[int, int] | None = None
    """Grid for mesh2d/torus2d (None: the most square factorization of the group)."""
    oversubscription: float = 1.0
    """Fat-tree oversubscription: bandwidth is divided by this (every level crossing pays it)."""

    def __post_init__(self):
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"unknown topology {self.topology!r}; expected one of {TOPOLOGIES}")
        if not self.bandwidth > 0:
            raise ValueError(f"bandwidth must be > 0, got {self.bandwidth}")
        if not self.latency >= 0:
            raise ValueError(f"latency must be >= 0, got {self.latency}")
        if not self.oversubscription > 0:
            raise ValueError(f"oversubscription must be > 0, got {self.oversubscription}")
        if self.dims is not None and (len(self.dims) != 2 or min(self.dims) < 1):
            raise ValueError(f"dims must be two positive ints, got {self.dims}")


@dataclass(frozen=True)
class Fabric:
    """Scale-up domain (NVLink / xGMI) plus the network between domains."""

    intra: LinkLevel
    """Scale-up domain (NVLink)."""
    inter: LinkLevel
    """Network: per-GPU share of NIC bandwidth (nics_per_node * nic_bw / gpus_per_node * eff)."""
    domain_size: int
    """GPUs per scale-up domain (the peers of a fully_connected intra level)."""


def fabric_from_cluster(cluster: ClusterSpec, gpu: GPUSpec, nic: InterconnectSpec) -> Fabric:
    """Fabric of a catalog cluster. Catalog bandwidths are GB/s per direction, latencies us."""
    intra = LinkLevel(
        bandwidth=gpu.scaleup_bandwidth_gbps * 1e9 * cluster.scaleup_efficiency,
        latency=cluster.scaleup_latency_us * 1e-6,
        topology=cluster.scaleup_topology,
    )
    # Rail-optimized nodes: every GPU owns nics_per_node/gpus_per_node of the node's NICs.
    inter = LinkLevel(
        bandwidth=cluster.nics_per_node * nic.bandwidth_gbps * 1e9 / cluster.gpus_per_node
        * cluster.network_efficiency,
        latency=nic.latency_us * 1e-6,
        topology=cluster.network_topology,
        dims=tuple(cluster.network_dims) if cluster.network_dims else None,
        oversubscription=cluster.network_oversubscription,
    )
    return Fabric(intra=intra, inter=inter, domain_size=cluster.scaleup_domain_size)


# ---------------------------------------------------------------------------------------------
# Masks as arithmetic: np.where on unpredictable masks costs ~6 multiplies, and this prices
# ~1e6 layouts per call. Candidate times are finite except "not applicable" = +inf.


def _flag(mask):
    return np.asarray(mask, dtype=np.float64)


def _barrier(mask):
    """0 where ``mask`` holds, +inf elsewhere: adding it rules a term out there."""
    with np.errstate(divide="ignore"):
        return np.divide(1.0, _flag(mask)) - 1.0


def _choose(mask, x, y):
    """mask ? x : y, where x or y may be the scalar inf (not applicable at all)."""
    x_inf = np.isscalar(x) and x == _INF
    y_inf = np.isscalar(y) and y == _INF
    if x_inf and y_inf:
        return _INF
    if x_inf:
        return y + _barrier(~mask)
    if y_inf:
        return x + _barrier(mask)
    f = _flag(mask)
    return x * f + y * (1.0 - f)  # exact for finite x, y: x*1 + y*0


# ---------------------------------------------------------------------------------------------
# Most square factorization n = gx * gy (gx >= gy), by table lookup so it stays vectorized.

_SQUARE = np.ones(2, dtype=np.int64)


def _square_factor(n) -> np.ndarray:
    """Largest divisor of n that is <= sqrt(n) (so n = (n/gy) x gy is the most square grid)."""
    global _SQUARE
    ni = np.maximum(np.asarray(n), 1).astype(np.int64)
    top = int(ni.max()) if ni.size else 1
    if top >= len(_SQUARE):
        size = max(top + 1, 2 * len(_SQUARE), 1024)
        table = np.ones(size, dtype=np.int64)
        for d in range(2, math.isqrt(size - 1) + 1):  # loop over divisors, not elements
            table[d * d :: d] = d  # a larger d <= sqrt(k) overwrites smaller ones
        _SQUARE = table
    return _SQUARE[ni].astype(np.float64)


def square_grid(n: int) -> tuple[int, int]:
    """(gx, gy), gx >= gy: the grid a mesh2d/torus2d level without ``dims`` lays n ranks on."""
    gy = int(_square_factor(n))
    return n // gy, gy


# ---------------------------------------------------------------------------------------------
# One level as seen by a group of n ranks on it (n an array; n <= 1: the level is not used).


class _Span:
    def __init__(self, level: LinkLevel, n, peers: int | None):
        self.level = level
        self.topo = level.topology
        self.B = level.bandwidth / level.oversubscription
        self.alpha = level.latency
        self.dims = level.dims
        self.peers = peers
        self.n = n
        self.switched = self.topo in _SWITCHED

    @cached_property
    def used(self):
        return self.n > 1

    @cached_property
    def used_f(self):
        return _flag(self.used)

    @cached_property
    def nm1(self):
        return self.n - 1.0  # ring steps

    @cached_property
    def frac(self):
        return 1.0 - 1.0 / self.n  # (n-1)/n: share of the data a rank sends / receives

    @cached_property
    def log2n(self):
        return np.ceil(np.log2(self.n))

    @cached_property
    def log2n_floor(self):
        # NCCL's log2i (src/include/utils.h): floor(log2 n), the tree depth its tuning model uses.
        return np.floor(np.log2(self.n))

    @cached_property
    def _table(self):
        """Gather index into per-size tables, and a span over sizes 0..max(n) (None when n is
        not integral or too large: then formulas run elementwise). Grid shapes depend on n only,
        so evaluating them once per distinct size and gathering is much cheaper."""
        n = np.asarray(self.n)
        top = float(n.max()) if n.size else 1.0
        if top > _TABLE_MAX:
            return None
        idx = n.astype(np.intp)
        if not np.array_equal(idx, n):
            return None
        sizes = np.maximum(np.arange(int(top) + 1, dtype=np.float64), 1.0)
        return idx, _Span(self.level, sizes, self.peers)

    def _lookup(self, raw):
        """raw(span) -> tuple of per-size values, evaluated on the table and gathered at n."""
        memo = self.__dict__.setdefault("_memo", {})
        if raw not in memo:
            table = self._table
            if table is None:
                memo[raw] = raw(self)
            else:
                idx, span = table
                memo[raw] = tuple(v[idx] if np.ndim(v) else v for v in raw(span))
        return memo[raw]

    @cached_property
    def grid(self):
        """(gx, gy, wrap_x, wrap_y) of the group on a mesh/torus; wraps as 0./1. flags."""
        n = self.n
        torus = self.topo == "torus2d"
        if self.dims is None:
            gy = _square_factor(n)
            w = 1.0 if torus else 0.0
            return n / gy, gy, w, w
        X, Y = self.dims
        gx = np.minimum(n, float(X))
        gy = np.ceil(n / gx)
        return gx, gy, torus * _flag(gx == X), torus * _flag(gy == Y)

    @cached_property
    def ring_bw(self):
        """Bandwidth of NCCL-style rings over this level's n ranks."""
        if self.topo in ("switch", "tree", "ring"):
            return self.B  # on a physical ring: both ports (B/2 each), counter-rotating rings
        return self._lookup(_Span._ring_bw_raw)[0]

    def _ring_bw_raw(self):
        if self.topo == "fully_connected":
            # Directed K_n splits into n-1 Hamiltonian cycles (Tillson 1980, n != 4, 6), so rings
            # over n of the D domain GPUs drive n-1 links of B/(D-1) each.
            d = np.maximum(float(self.peers or 1), self.n)
            return (self.B * np.maximum(self.n - 1.0, 1.0) / np.maximum(d - 1.0, 1.0),)
        gx, gy, wx, wy = self.grid
        # A Hamiltonian ring embedded in the grid uses 2 of the 4 ports both ways: B/2. A line
        # (1-D mesh, partial torus row) folds the ring back over itself: each link direction
        # carries it once -> B/4.
        one_d = _flag((gx == 1) | (gy == 1))
        wrap_1d = _choose(gy == 1, wx + 0.0 * gx, wy + 0.0 * gy)
        return (self.B / 2.0 - (self.B / 4.0) * one_d * (1.0 - wrap_1d),)

    # ---- ring (Patarasuk & Yuan 2009; NCCL; seed 003 sec. 4.2-4.3, L4 slide 34)
    def ring_rs(self, S):
        # RS or AG: n-1 steps of S/n -> (n-1) alpha + (n-1)/n * S/B. Zero when n == 1.
        return self.nm1 * self.alpha + self.frac * S / self.ring_bw

    def ring_ar(self, S):
        # AR = RS + AG: 2(n-1) alpha + 2(n-1)/n * S/B (bandwidth-optimal, Patarasuk & Yuan 2009).
        return 2.0 * self.ring_rs(S)

    def ring_bcast(self, S):
        # Pipelined chain from the root (NCCL ring broadcast; nccl-tests busbw factor 1):
        # (n-1) alpha + S/B.
        return self.nm1 * self.alpha + self.used_f * S / self.ring_bw

    # ---- trees (switched levels only; elsewhere tree edges would share links)
    def tree_ar(self, S):
        # NCCL double binary tree (Sanders, Speck & Traeff 2009): reduce up + broadcast down,
        # pipelined -> 2 floor(log2 n) alpha, the depth of a binary tree whose every node is a
        # rank (NCCL's log2i, src/include/utils.h, as across domains in _tree; 6 ranks: depth 2,
        # not 3). Bandwidth 2S/B: each rank is inner node of one tree
        # and leaf of the other and sends S/2 + 2(S/2) + S/2 = 2S in all; NCCL's model says
        # the same (tuning.cc: tree algBw = busBw/2). So the ring (2(n-1)/n S/B) keeps a small
        # bandwidth edge and the tree wins on latency: small messages, many ranks.
        if not self.switched:
            return _INF
        return 2.0 * self.log2n_floor * self.alpha + self.used_f * 2.0 * S / self.B

    def tree_rs(self, S):
        # Recursive halving (RS) / doubling (AG) (Thakur et al. 2005 sec. 3.1, 3.3), as NCCL's
        # PAT (2.23+, one GPU per node only): ceil(log2 n) alpha + (n-1)/n * S/B.
        if not self.switched:
            return _INF
        return self.log2n * self.alpha + self.frac * S / self.B

    def tree_bcast(self, S):
        # Binomial tree (Thakur et al. 2005 sec. 4.1, short messages): ceil(log2 n)(alpha + S/B).
        if not self.switched:
            return _INF
        return self.log2n * (self.alpha + S / self.B)

    # ---- textbook algorithms of the calculator (planner comm), one level only
    def direct_op(self, op, S):
        # One-shot on a switch (seed doc 003 sec. 3.2 and its glossary: any two GPUs directly
        # connected, all-reduce in 2 steps). One step: every GPU sends its S/n block to each of
        # the n-1 others at once, (n-1)/n * S through its port: alpha + (n-1)/n * S/B is a direct
        # reduce-scatter or all-gather. All-reduce = RS + AG; broadcast = scatter + AG
        # (van de Geijn; Thakur et al. 2005 sec. 4.1), the root's port busiest; reduce its
        # mirror. Only where every pair is one hop: a switch.
        if self.topo != "switch":
            return _INF
        one = self.used_f * (self.alpha + self.frac * S / self.B)
        return one if op in ("all_gather", "reduce_scatter") else 2.0 * one

    def unpipelined_tree_ar(self, S):
        # Seed doc 003 sec. 4.2 (L4 slide 36): reduce up a binary tree, then broadcast down,
        # 2 ceil(log2 n) steps each moving the whole message: 2 ceil(log2 n) (alpha + S/B).
        if not self.switched:
            return _INF
        return 2.0 * self.log2n * (self.alpha + self.used_f * S / self.B)

    # ---- dimension-ordered 2-D algorithms (torus2d / mesh2d levels)
    def dims_rs(self, S):
        """Reduce-scatter (= all-gather) one dimension after the other.

        Half the data goes X then Y, the other half Y then X, so all four ports work at once
        (2-D torus all-reduce: Mikami et al. 2018; Ying et al. 2018 on TPU pods). A dimension of
        g ranks is, on a torus, a bidirectional ring: both directions of the +-links (B/2) and
        ceil((g-1)/2) steps, blocks travelling half-way round either way; on a mesh, a line:
        its end links carry (g-1)/g of the data one way (B/4) in g-1 steps (the diameter).
        Time = steps * alpha + max(each half's path, each dimension's link load). A square torus
        gives (n-1)/n * S/B, the switch's figure, in 2 ceil((g-1)/2) steps; a square mesh
        twice that bandwidth term.
        """
        steps, per_byte = self._lookup(_Span._dims_rs_raw)
        return steps * self.alpha + per_byte * S

    def _dims_rs_raw(self):
        gx, gy, wx, wy = self.grid
        bx = (self.B / 4.0) * (1.0 + wx)
        by = (self.B / 4.0) * (1.0 + wy)
        sx = gx - 1.0 - wx * np.floor((gx - 1.0) / 2.0)  # torus: ceil((g-1)/2), mesh: g-1
        sy = gy - 1.0 - wy * np.floor((gy - 1.0) / 2.0)
        fx = (gx - 1.0) / gx
        fy = (gy - 1.0) / gy
        h = 0.5  # per byte of S: each half carries S/2
        path_a = fx * h / bx + fy * h / (gx * by)  # X first, then Y on the 1/gx that is left
        path_b = fy * h / by + fx * h / (gy * bx)
        load_x = fx * h * (1.0 + 1.0 / gy) / bx  # X links: half A's phase 1 + half B's phase 2
        load_y = fy * h * (1.0 + 1.0 / gx) / by
        return sx + sy, np.maximum(np.maximum(path_a, path_b), np.maximum(load_x, load_y))

    def dims_a2a(self, S):
        # Dimension-ordered all-to-all (rows, then columns, store and forward: each phase
        # moves all of S): per dimension (g-1) alpha + max(injection over 2 ports of B/4,
        # bisection floor(g/2)ceil(g/2)/g * S over 2 (torus) or 1 (mesh) cut links of B/4).
        steps, per_byte = self._lookup(_Span._dims_a2a_raw)
        return steps * self.alpha + per_byte * S

    def _dims_a2a_raw(self):
        gx, gy, wx, wy = self.grid
        steps, per_byte = 0.0, 0.0
        for g, w in ((gx, wx), (gy, wy)):
            inj = (g - 1.0) / g / (self.B / 2.0)
            cross = np.floor(g / 2.0) * np.ceil(g / 2.0) / g
            steps = steps + (g - 1.0)
            per_byte = per_byte + np.maximum(inj, cross / ((1.0 + w) * self.B / 4.0))
        return steps, per_byte

    def dims_op(self, op, S):
        if op == "all_to_all":
            return self.dims_a2a(S)
        rs = self.dims_rs(S)
        # AR = RS + AG; broadcast = scatter + all-gather (van de Geijn; Thakur et al. sec. 4.1).
        return rs if op in ("all_gather", "reduce_scatter") else 2.0 * rs

    # ---- all-to-all
    def a2a_bw(self, S):
        """Bandwidth term of a direct all-to-all (each rank sends S/n to every rank).

        max(injection: (n-1)/n * S over the usable ports, bisection: the two halves swap
        floor(n/2)ceil(n/2) * S/n each way over the cut links (Leighton 1992)). On a switch the
        injection bound rules; on a ring (2 cut links x B/2) it is ~ n S/(4B); on a g x g torus
        ~ g S/(2B), on a mesh twice that.
        """
        n = self.n
        if self.switched:
            t = self.frac * S / self.B
        elif self.topo == "ring":
            cross = np.floor(n / 2.0) * np.ceil(n / 2.0) / n * S
            t = np.maximum(self.frac * S / self.B, cross / self.B)
        elif self.topo == "fully_connected":
            d = np.maximum(float(self.peers or 1), n)
            t = S / n * np.maximum(d - 1.0, 1.0) / self.B  # S/n on each own link of B/(D-1)
        else:
            return self._lookup(_Span._grid_a2a_raw)[0] * S
        return self.used_f * t

    def physical_tree_a2a(self, S):
        """Pairwise all-to-all on a physical tree (the calculator's one-level ``tree``: GPU i
        linked to its parent (i-1)//2 and its children, each link B per direction, as the Euler-tour
        ring and the unpipelined tree all-reduce price it): (n-1) alpha + (busiest link) / B.

        Routes in a tree are unique, so the link that cuts off a subtree of m GPUs carries exactly
        m(n-m)/n * S each way (each of its m GPUs sends S/n to each of the n-m others). The
        busiest is the cut nearest to halves: the tree's bisection, one link (a complete binary
        tree has bisection width 1: Leighton 1992, ch. 1, arrays and trees; seed doc 003's glossary keeps full
        bisection for the switch alone), floor(n/2)ceil(n/2)/n * S = n/4 * S for n a power of two,
        where a switch moves (n-1)/n * S per port. A leaf's own link, (n-1)/n * S, never binds more."""
        share = np.vectorize(_tree_busiest_share, otypes=[np.float64])(np.asarray(self.n, dtype=np.float64))
        return self.nm1 * self.alpha + self.used_f * share * S / self.B

    def _grid_a2a_raw(self):
        gx, gy, wx, wy = self.grid
        ports = 2.0 * _flag(gx > 1) + 2.0 * _flag(gy > 1)
        per_byte = self.frac / (np.maximum(ports, 1.0) * self.B / 4.0)
        for g, other, w in ((gx, gy, wx), (gy, gx, wy)):
            # Halving dimension g cuts `other` lines, twice each when it wraps.
            cross = np.floor(g / 2.0) * np.ceil(g / 2.0) * other / g
            per_byte = np.maximum(per_byte, cross / (other * (1.0 + w) * self.B / 4.0))
        return (per_byte,)  # 0 for n == 1

    # ---- best algorithm on this level alone (parts of the hierarchical composition; 0 if n<=1)
    def candidates(self, op, S, allow_tree=True) -> dict:
        """Seconds of each algorithm this level offers for ``op`` ("all_reduce", "broadcast", or a
        reduce-scatter / all-gather), in the order ties keep: the ring, NCCL's tree (only on a
        switch) and, on a 2-D mesh or torus, the dimension-ordered algorithm (all-reduce and
        broadcast as two reduce-scatter passes). Absent ones are infinite."""
        if op == "all_reduce":
            out = {"ring": self.ring_ar(S), "tree": self.tree_ar(S)}
        elif op == "broadcast":
            out = {"ring": self.ring_bcast(S), "tree": self.tree_bcast(S)}
        else:
            out = {"ring": self.ring_rs(S), "tree": self.tree_rs(S) if allow_tree else _INF}
        passes = 2.0 if op in ("all_reduce", "broadcast") else 1.0  # reduce-scatter, then all-gather
        if self.topo in _GRID:
            out[self.topo] = passes * self.dims_rs(S)
        else:
            out["grid"] = _INF
        return out

    def _fastest(self, op, S, allow_tree=True):
        times = list(self.candidates(op, S, allow_tree).values())
        t = times[0]
        for other in times[1:]:
            t = np.minimum(t, other)
        return t

    def rs_best(self, S, allow_tree):
        return self._fastest("reduce_scatter", S, allow_tree)

    def ar_best(self, S):
        return self._fastest("all_reduce", S)

    def bcast_best(self, S):
        return self._fastest("broadcast", S)


def _tree_busiest_share(n: float) -> float:
    """max over the links of the heap-ordered binary tree of n GPUs of m(n-m)/n, m the GPUs on
    the link's child side (``_Span.physical_tree_a2a``). Subtrees larger than n/2 form one chain
    from the root (no node has two), and the largest subtree of at most n/2 GPUs hangs off that
    chain, so walking the chain and its children's sizes finds the most even cut."""
    n = int(n)
    if n < 2:
        return 0.0

    def size(j: int) -> int:  # GPUs in the subtree of heap node j (1-based)
        count, lo, width = 0, j, 1
        while lo <= n:
            count += min(n, lo + width - 1) - lo + 1
            lo, width = 2 * lo, 2 * width
        return count

    best, j = 0, 1
    while True:
        kids = [(c, size(c)) for c in (2 * j, 2 * j + 1) if c <= n]
        best = max([best] + [m * (n - m) for _, m in kids])
        bigger = [c for c, m in kids if 2 * m > n]
        if not bigger:
            return best / n
        j = bigger[0]


# ---------------------------------------------------------------------------------------------
# Algorithms over the whole group: r ranks in each of q domains (I: scale-up, E: network).


def _ring(op, S, I: _Span, E: _Span):
    """NCCL rings through all N ranks, crossing the network once per domain.

    Bandwidth: the slower of the scale-up ring and the network, the r ranks of a domain
    sharing r per-GPU NIC shares (NCCL runs a ring per NIC). Latency as NCCL's tuning model
    (src/graph/tuning.cc): (steps - inter_steps) scale-up steps + inter_steps network steps,
    inter_steps = 2(q-1) for AR and q-1 otherwise.
    """
    r, q = I.n, E.n
    # Seconds per byte of the slower level; a level the group does not use does not count.
    per_byte = np.maximum(I.used_f / I.ring_bw, E.used_f / (r * E.ring_bw))
    # N-1 steps, q-1 of them on the network: N-1-(q-1) = q(r-1) scale-up steps.
    lat = (I.nm1 * I.alpha) * q + E.nm1 * E.alpha
    if op == "broadcast":
        return lat + S * per_byte
    share = 1.0 - 1.0 / (r * q)  # (N-1)/N
    if op == "all_reduce":
        return 2.0 * (lat + share * per_byte * S)  # twice the steps and the bytes
    return lat + share * per_byte * S


def _tree(op, S, I: _Span, E: _Span):
    r = I.n
    if op == "all_reduce":
        # One domain: double binary tree over its switch (_Span.tree_ar). Several domains:
        # NCCL's tree, a chain inside each domain + a double binary tree across domains;
        # tuning.cc latency 2((r-1) alpha_intra + log2i(q) alpha_net), log2i = floor(log2)
        # (src/include/utils.h), bandwidth 2S over the slower of the chain and the domain's r
        # NIC shares.
        t_one = I.tree_ar(S)
        t_many = _INF
        if E.switched:
            per_byte = np.maximum(I.used_f / I.ring_bw, 1.0 / (r * E.B))
            t_many = 2.0 * (I.nm1 * I.alpha + E.log2n_floor * E.alpha + S * per_byte)
        return _choose(E.used, t_many, t_one)
    if op == "broadcast":
        # Binomial tree across domains (one GPU each), then each domain's own best broadcast.
        t_one = I.tree_bcast(S)
        t_many = E.tree_bcast(S) + I.bcast_best(S) if E.switched else _INF
        return _choose(E.used, t_many, t_one)
    if op in ("all_gather", "reduce_scatter") and E.switched:
        return E.tree_rs(S) + _barrier((r <= 1) & E.used)  # PAT: one GPU per node only
    return _INF


def _hierarchical(op, S, I: _Span, E: _Span):
    """Scale-up level first, then the network (seed 003 sec. 4.4; L4 slide 38, L5 slide 4).

    AR: intra RS of S, inter AR of S/r on the r "rails" in parallel (best of ring / tree / 2-D
    for the network), intra AG of S. AG: inter AG of S/r, then intra AG of S; RS the reverse.
    Broadcast: scatter in the root's domain, inter broadcast of S/r per rail, intra AG.
    In this model an intra RS costs the same as an intra AG.
    """
    part = S / I.n
    if op == "all_reduce":
        return 2.0 * I.rs_best(S, False) + E.ar_best(part)
    if op in ("all_gather", "reduce_scatter"):
        return E.rs_best(part, True) + I.rs_best(S, False)  # a rail has one GPU per node
    if op == "broadcast":
        return 2.0 * I.rs_best(S, False) + E.bcast_best(part)
    return _INF


def _direct(op, S, I: _Span, E: _Span):
    """All-to-all by pairwise exchange, scale-up and network traffic at the same time.

    A rank sends S/N to each of its r-1 domain peers (an r-rank all-to-all of S/q) and the
    other (N-r)/N of S over its NIC share (a q-rank all-to-all of S per rail, bisection-bound
    on ring / torus / mesh networks). Latency (r-1) alpha_intra + (N-r) alpha_net (Thakur
    sec. 3.6).
    """
    if op != "all_to_all":
        return _INF
    r, q = I.n, E.n
    lat = (r - 1.0) * I.alpha + r * (q - 1.0) * E.alpha
    return lat + np.maximum(I.a2a_bw(S / q), E.a2a_bw(S))


def _dims(op, S, I: _Span, E: _Span, topo):
    """Dimension-ordered algorithm, for a group that lies within one torus/mesh level."""
    parts = []
    if I.topo == topo:
        parts.append(I.dims_op(op, S) + _barrier(~E.used))
    if E.topo == topo:
        parts.append(E.dims_op(op, S) + _barrier(~I.used & E.used))
    return parts[0] if len(parts) == 1 else np.minimum(*parts)


def _candidates(op, S, I, E, want, textbook=False):
    """code -> seconds (array, or the scalar inf where it never applies)."""
    out = {}
    a2a = op == "all_to_all"
    one_level = ~I.used  # the calculator's one-level topologies: r = 1, the group on E alone
    if RING in want and not a2a:
        out[RING] = _ring(op, S, I, E)
    if TREE in want and not a2a and (I.switched or E.switched):
        out[TREE] = _tree(op, S, I, E)
        if textbook and op == "all_reduce" and E.topo == "tree":
            # A physical tree (the seed's: each GPU linked to its parent and children) has no
            # links for NCCL's second, complementary tree: there the tree all-reduce is the
            # seed's unpipelined one (UNPIPELINED_TREE).
            out[TREE] = out[TREE] + _barrier(~one_level)
        if textbook and op in ("all_gather", "reduce_scatter") and E.topo == "tree":
            # Recursive halving / doubling (TREE here) prices (n-1)/n * S/B on full bisection: its
            # first step pairs every GPU with one n/2 ranks away, n/2 pairs swapping S/2 at once;
            # on a physical tree all of them cross the one link joining the halves (n/4 * S each
            # way, not S/2). Not offered there: the ring along the tree's Euler tour is.
            out[TREE] = out[TREE] + _barrier(~one_level)
    if HIERARCHICAL in want and not a2a:
        out[HIERARCHICAL] = _hierarchical(op, S, I, E)
    if DIRECT in want and a2a:
        out[DIRECT] = _direct(op, S, I, E)
        if textbook and E.topo == "tree":
            # The calculator's one-level tree is a physical tree, not a switched one: its
            # all-to-all is bound by the one link of its bisection (_Span.physical_tree_a2a).
            out[DIRECT] = _choose(one_level, E.physical_tree_a2a(S), out[DIRECT])
    elif DIRECT in want and textbook and E.topo == "switch":
        out[DIRECT] = E.direct_op(op, S) + _barrier(one_level)
    if UNPIPELINED_TREE in want and textbook and op == "all_reduce" and E.switched:
        out[UNPIPELINED_TREE] = E.unpipelined_tree_ar(S) + _barrier(one_level)
    for code, topo in ((TORUS2D, "torus2d"), (MESH2D, "mesh2d")):
        if code in want and topo in (I.topo, E.topo):
            out[code] = _dims(op, S, I, E, topo)
    return out


_MEMO: dict | None = None
"""While ``remembered()`` is active: collective_time results by their inputs."""


@contextmanager
def remembered(memo: dict | None = None):
    """Within this block ``collective_time`` remembers its results by its inputs (in ``memo``
    when given, so a caller keeps them across blocks). For callers that price the same layouts
    many times under constants that do not touch communication (fitting the compute constants:
    ``planner.validate.fit``); pointless for the search, whose chunks never repeat."""
    global _MEMO
    outer = _MEMO
    _MEMO = memo if memo is not None else ({} if outer is None else outer)
    try:
        yield
    finally:
        _MEMO = outer


def collective_time(op: str, message_bytes, n_local, n_nodes, fabric: Fabric, algorithm: str = "auto",
                    textbook: bool = False):
    """Seconds of one collective over a group of ``n_local * n_nodes`` ranks (vectorized).

    op in {'all_reduce','all_gather','reduce_scatter','broadcast','all_to_all'}.
    message_bytes: for all_reduce/broadcast the buffer size; for all_gather the gathered OUTPUT
    size; for reduce_scatter the INPUT size; for all_to_all the bytes each rank sends in total
    (incl. to itself). The group has n_local ranks in each scale-up domain, spread over n_nodes
    domains (n_nodes == 1: intra level only). Numeric arguments broadcast.

    Returns (seconds float64, algorithm code int64), both of the broadcast shape. 'auto' picks
    the fastest algorithm per element (ties within 1e-12 go to the lower code; 'hierarchical'
    is offered only when n_local > 1 and n_nodes > 1). A named algorithm that does not apply to an element
    ('tree' off a switch, 'direct' for all_reduce, 'torus2d' off a torus...) costs inf there;
    'hierarchical' for a group within one level is that level's best algorithm. A group of
    one rank costs 0 (code 0).

    ``textbook``: also the calculator's textbook algorithms for a group on one level (seed doc
    003): the one-shot ``direct`` all-reduce / all-gather / reduce-scatter / broadcast / reduce on
    a switch, and the seed's ``unpipelined_tree`` all-reduce; on a one-level ``tree`` topology (a
    physical tree) the tree all-reduce is the unpipelined one, the all-to-all is bound by the
    tree's one-link bisection, and recursive halving / doubling is not offered. NCCL runs none of these at scale, so the training
    model (the default, False) keeps to NCCL's algorithms.
    """
    if _MEMO is not None:
        key = (op, algorithm, fabric, textbook) + tuple(
            (a.tobytes(), a.dtype.str, a.shape) for a in map(np.asarray, (message_bytes, n_local, n_nodes)))
        if key not in _MEMO:
            _MEMO[key] = _collective_time(op, message_bytes, n_local, n_nodes, fabric, algorithm, textbook)
        return _MEMO[key]
    return _collective_time(op, message_bytes, n_local, n_nodes, fabric, algorithm, textbook)


def _collective_time(op: str, message_bytes, n_local, n_nodes, fabric: Fabric, algorithm: str = "auto",
                     textbook: bool = False):
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; expected one of {OPS}")
    if op == "reduce":
        op = "broadcast"  # its mirror: same steps, same bytes (OPS)
    if algorithm != "auto" and algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; expected 'auto' or one of {ALGORITHMS}")
    S = np.asarray(message_bytes, dtype=np.float64)
    r = np.maximum(np.asarray(n_local, dtype=np.float64), 1.0)
    q = np.maximum(np.asarray(n_nodes, dtype=np.float64), 1.0)
    shape = np.broadcast_shapes(S.shape, r.shape, q.shape)
    I = _Span(fabric.intra, r, fabric.domain_size)
    E = _Span(fabric.inter, q, None)
    alone = (r * q) <= 1
    zero_if_alone = _barrier(alone)  # 0 where alone, inf elsewhere: np.minimum with it
    t = np.empty(shape)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if algorithm != "auto":
            code = ALGORITHMS.index(algorithm)
            np.minimum(_candidates(op, S, I, E, {code}, textbook).get(code, _INF), zero_if_alone, out=t)
            algo = np.full(shape, code, dtype=np.int64)
            algo[np.broadcast_to(alone, shape)] = 0
            return t, algo
        offered = set(range(len(ALGORITHMS)))
        if op in ("all_gather", "reduce_scatter") and I.switched and E.switched:
            # On NVLink + switched-network clusters (NCCL's) only all_reduce chooses an algorithm;
            # all_gather / reduce_scatter run as rings over every rank (tuning.cc:
            # "if (coll != ncclFuncAllReduce && a != NCCL_ALGO_RING) continue"), or PAT with
            # one GPU per node. No domain-then-network split: ring latency is N-1 steps.
            offered.discard(HIERARCHICAL)
        cands = _candidates(op, S, I, E, offered, textbook)
        if HIERARCHICAL in cands:
            # Within one level it equals that level's best: report that algorithm instead.
            cands[HIERARCHICAL] = cands[HIERARCHICAL] + _barrier(I.used & E.used)
        t.fill(_INF)
        algo = np.zeros(shape, dtype=np.int8)
        for code, c in cands.items():  # a handful of candidates, in code order (ties: lowest)
            if np.isscalar(c) and c == _INF:
                continue
            # Strictly better beyond rounding noise, so exact ties keep the simpler algorithm.
            better = np.less(c, t * _TIE).view(np.int8)
            np.minimum(t, c, out=t)
            algo += better * (np.int8(code) - algo)
        np.minimum(t, zero_if_alone, out=t)
        algo *= np.broadcast_to(~alone, shape).view(np.int8)
    return t, algo.astype(np.int64)


def ring_pair(topology: str, peers: int | None) -> bool:
    """A ring of two GPUs: both of a GPU's two ring links join the pair (its all-gather runs at B)."""
    return topology == "ring" and peers == 2


def _p2p_bandwidth(level: LinkLevel, peers: int | None) -> float:
    """Bandwidth of one send between neighbours: the links that join them (one, except on a ring
    of two GPUs: ``ring_pair``)."""
    B = level.bandwidth / level.oversubscription
    if level.topology in _SWITCHED:
        return B
    if level.topology == "ring":
        return B if ring_pair(level.topology, peers) else B / 2.0  # the neighbour link of a ring
    if level.topology == "fully_connected":
        return B / max((peers or 2) - 1, 1)  # one xGMI link
    return B / 4.0  # one of the 4 mesh/torus links


def p2p_time(message_bytes, crosses_network, fabric: Fabric, network_peers: int | None = None) -> np.ndarray:
    """One send/recv between pipeline neighbours: alpha + S/B (seed 003 sec. 4.5, L6), with the
    network's a/B when ``crosses_network`` else the scale-up level's. ``network_peers``: the
    endpoints of the network level where it is a ring (``planner comm``'s one-level ring)."""
    S, x = np.broadcast_arrays(np.asarray(message_bytes, dtype=np.float64), np.asarray(crosses_network, dtype=bool))
    intra = fabric.intra.latency + S / _p2p_bandwidth(fabric.intra, fabric.domain_size)
    inter = fabric.inter.latency + S / _p2p_bandwidth(fabric.inter, network_peers)
    return np.where(x, inter, intra)


def level_best(op: str, message_bytes: float, level: LinkLevel, n: int, peers: int | None = None,
               allow_tree: bool = True) -> str:
    """The algorithm a part of a composition runs on one level (``_Span.ar_best`` /
    ``rs_best`` / ``bcast_best``: the hierarchical algorithm's network part, the two-level tree
    broadcast's domain part) for ``n`` ranks and that part's bytes: ring, tree or the level's
    2-D algorithm. For ``planner comm``, which reports what each GPU sends by that algorithm."""
    span = _Span(level, np.float64(n), peers)
    S = float(message_bytes)
    op = "broadcast" if op == "reduce" else op
    with np.errstate(divide="ignore", invalid="ignore"):
        cands = span.candidates(op, S, allow_tree)
    best = "ring"  # the composition's np.minimum keeps the first of equal times: ring, tree, 2-D
    for name, t in cands.items():
        if float(t) < float(cands[best]):
            best = name
    return best
