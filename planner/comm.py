"""``planner comm``: one collective or P2P (or a sweep of message sizes) on a topology you
describe: time, algorithm, steps, the bytes each GPU sends and the bytes charged at B, algbw/busbw,
and the formula with its source.

This is the communication calculator of seed document 003 (sections 3 and 4). The pricing is
``costmodel.collectives``' own (the model the planner uses for every layout); this module parses
what a person types, maps the topology onto a ``Fabric``, reads steps and bytes off that model,
and formats. How a topology maps onto ``Fabric`` (``intra`` = scale-up level, ``inter`` =
network level; a group spans ``n_local`` GPUs in each of ``n_nodes`` domains):

* one level (``--topology ring|tree|switch|mesh2d|torus2d --gpus N``): every GPU is a domain
  of its own (r = 1, q = N), so the group lies on the ``inter`` level alone and the model's
  formulas are the one-level textbook ones; collectives.py then also offers recursive halving /
  doubling for all-gather / reduce-scatter on a switch (NCCL's PAT: one GPU per node). The
  calculator asks collectives.py for its textbook algorithms too (``textbook=True``; the training
  model does not): on a ``switch``, where any two GPUs are directly connected (seed doc 003 sec.
  3.2 and glossary), the one-shot ``direct`` ones (all-reduce in 2 steps, all-gather and
  reduce-scatter in 1, broadcast and reduce in 2); on a ``tree``, each GPU linked to its parent and
  children, the seed's unpipelined tree all-reduce (sec. 4.2) instead of NCCL's double binary tree,
  whose second tree would need links a physical tree lacks. So the two topologies differ: a switch
  offers ring, NCCL's tree, the unpipelined tree and direct; a tree offers ring and the unpipelined
  tree for an all-reduce, no one-shot algorithm (not every pair of GPUs is linked). Each tree link
  carries B per direction (a ring along the tree's Euler tour uses each directed link once, so
  rings get the full B). Its all-to-all is bound by its bisection, one link (GPU i linked to
  (i-1)//2: the link cutting off m GPUs carries m(n-m)/n of S, Leighton 1992 ch. 1), and recursive
  halving / doubling is not offered for all-gather / reduce-scatter (its first step sends n/4 of S
  through that one link: it needs a switch's full bisection); the binomial broadcast is, as a
  broadcast down the tree itself (depth floor(log2 n), no link shared in a step) is no slower.
* ``hierarchical`` (``--gpus-per-node G``): ``intra`` an NVSwitch-like switch of G GPUs at
  --bandwidth / --latency, ``inter`` the --network-topology at --network-bandwidth / -latency.
* ``--cluster NAME``: ``fabric_from_cluster`` (catalog bandwidths times their efficiencies),
  the group placed on whole scale-up domains as ``costmodel.placement.group_span`` places DP.

Steps and charged bytes are read off the model rather than written again: with the algorithm
fixed, every time it returns is a sum of ``steps_L * alpha_L`` and ``bytes_L / B_L`` terms over the
levels L (Hockney's alpha-beta model), the bytes of levels that work at once under a max; so
``steps_L = dt/d(alpha_L)`` (an integer, taken as an exact secant) and ``bytes_L = dt/d(1/B_L)``
("bytes at B": larger than what a GPU sends where B is spread over several links). Then ``t =
sum(steps_L * alpha_L) + sum(bytes_L / B_L)`` for levels one after the other, ``+ max(...)`` for
levels at once (``levels_at_once``). What each GPU sends (``bytes_sent``, "bytes/GPU", seed doc
003's 通信量) follows from the algorithm alone.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from costmodel.collectives import (
    ALGORITHMS,
    OPS,
    Fabric,
    LinkLevel,
    collective_time,
    fabric_from_cluster,
    level_best,
    p2p_time,
    ring_pair,
    square_grid,
)
from costmodel.options import GPUS, Bound
from hardware_catalog.limits import MAX_DOMAIN_GPUS

GROUP_GPUS = Bound("--gpus", minimum=2, maximum=GPUS.maximum)
"""GPUs taking part in one collective or P2P: at least two (the job-wide bound starts at one)."""
NODE_GPUS = Bound("--gpus-per-node", minimum=1, maximum=MAX_DOMAIN_GPUS)
"""GPUs on one node's switch: a cluster file's bound (``hardware_catalog.limits.MAX_DOMAIN_GPUS``)."""
from costmodel.placement import group_span
from hardware_catalog.errors import PlannerInputError

P2P = "p2p"
ALL_OPS = (*OPS, P2P)
USER_TOPOLOGIES = ("ring", "tree", "hierarchical", "switch", "mesh2d", "torus2d")
NETWORK_TOPOLOGIES = ("switch", "tree", "ring", "mesh2d", "torus2d")
_GRIDS = ("mesh2d", "torus2d")
_SWITCHED = ("switch", "tree")
_LINKS = {"ring": 2, "mesh2d": 4, "torus2d": 4}  # links a GPU's B is spread over (collectives.py)
MAX_SWEEP_POINTS = 200

# ---------------------------------------------------------------------------------------------
# Units, as people write them.

_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
           "ki": 2.0**10, "mi": 2.0**20, "gi": 2.0**30, "ti": 2.0**40}
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(\S*)\s*$")
_LATENCY = {"s": 1.0, "ms": 1e3, "us": 1e6, "\u00b5s": 1e6, "\u03bcs": 1e6, "ns": 1e9}  # units per second
SIZE_UNITS = "B, KB, MB, GB, TB (powers of 10), KiB, MiB, GiB, TiB (powers of 2)"
MAX_MESSAGE_BYTES = 2**50
"""The largest message (--size, --sweep ends), 1 PiB: a collective's message is a buffer in each
GPU's memory (all-gather's output, reduce-scatter's input, all one GPU sends in an all-to-all),
and the largest GPUs in the catalog hold 288 GB of HBM3e (B300, GB300: 276.8 GiB usable); 1 PiB
is even 16x the 64 TiB a GPU file may declare (hardware_catalog.limits.MAX_MEMORY_GIB). A size
beyond it is a typo or a unit slip (1e30 printed as 9.095e+17 TiB), not a transfer to time."""
BANDWIDTH_UNITS = "GB/s, MB/s, TB/s, GiB/s (bytes) or Gb/s, Gbps (bits), e.g. 400GB/s or 400Gb/s"
LATENCY_UNITS = "s, ms, us (or \u00b5s), ns, e.g. 2us"


def _split(text: Optional[str], what: str, allowed: str, bare_ok: bool = False,
           sign: str = "must be positive") -> tuple[float, str]:
    """(number, unit) of '400GB/s'; a bare number only where ``bare_ok`` (sizes: bytes)."""
    m = _NUMBER.match(text or "")
    if not m and (text or "").strip()[:1] == "-" and _NUMBER.match((text or "").strip()[1:]):
        raise PlannerInputError(f"{what} {text!r}: {sign} ({allowed})")
    if not m:
        raise PlannerInputError(f"{what} {text!r}: expected a number and a unit ({allowed})")
    if not m.group(2) and not bare_ok:
        raise PlannerInputError(f"{what} {text!r}: give a unit ({allowed})")
    return _finite(float(m.group(1)), what, text), m.group(2)


def _finite(value: float, what: str, text) -> float:
    """``value`` if it is a finite number, else one line saying the quantity is out of range."""
    if not math.isfinite(value) or value > 1e30:
        raise PlannerInputError(f"{what} {text!r}: too large (at most 1e30 of its unit)")
    return value


def _byte_scale(unit: str) -> Optional[float]:
    """'GiB' -> 2**30, 'KB'/'kB' -> 1e3, 'B' -> 1; None when ``unit`` is not bytes."""
    return _PREFIX.get(unit[:-1].lower()) if unit.endswith("B") else None


def _bit_scale(unit: str) -> Optional[float]:
    """'Gb' / 'Gbit' -> 1e9 / 8 bytes; None when ``unit`` is not bits."""
    for suffix in ("bit", "b"):
        if unit.endswith(suffix) and unit[: -len(suffix)].lower() in _PREFIX:
            return _PREFIX[unit[: -len(suffix)].lower()] / 8.0
    return None


def size_is_decimal(text: Optional[str]) -> bool:
    """True when a size was typed in powers of 10 (KB, MB, GB, TB): it is then shown in them;
    binary units (KiB...) and bare bytes are shown in powers of 2."""
    m = _NUMBER.match(text or "")
    unit = m.group(2) if m else ""
    return unit.endswith("B") and unit[:-1].lower() in ("k", "m", "g", "t")


def parse_size(text: Optional[str], what: str = "--size") -> float:
    """Bytes of a message: '1GiB' -> 1073741824, '64MB' -> 64e6, '4096' -> 4096."""
    value, unit = _split(text, what, SIZE_UNITS, bare_ok=True)
    scale = _byte_scale(unit) if unit else 1.0
    if scale is None:
        bits = " (sizes are bytes: B, not b)" if _bit_scale(unit) else ""
        raise PlannerInputError(f"{what} {text!r}: unknown unit '{unit}'{bits}; allowed {SIZE_UNITS}")
    if not value * scale >= 1:
        raise PlannerInputError(f"{what} {text!r}: a message is at least 1 byte")
    if value * scale > MAX_MESSAGE_BYTES:
        raise PlannerInputError(f"{what} {text!r}: more than 1 PiB (allowed: 1 B to 1,024 TiB; a message is a "
                                f"buffer in GPU memory, and the largest GPU holds under 300 GB)")
    return value * scale


def parse_bandwidth(text: Optional[str], what: str = "--bandwidth") -> float:
    """Bytes/s: '400GB/s' -> 4e11, '400Gb/s' -> 5e10 (bits), '1TiB/s' -> 2**40."""
    value, unit = _split(text, what, BANDWIDTH_UNITS)
    per = next((unit[: -len(s)] for s in ("/s", "ps") if unit.endswith(s)), None)
    scale = None if per is None else (_byte_scale(per) or _bit_scale(per))
    if scale is None:
        raise PlannerInputError(f"{what} {text!r}: unknown unit '{unit}'; allowed {BANDWIDTH_UNITS}")
    if not value * scale >= 1:
        raise PlannerInputError(f"{what} {text!r}: bandwidth must be at least 1 B/s")
    return value * scale


def parse_latency(text: Optional[str], what: str = "--latency") -> float:
    """Seconds: '2us' / '2\u00b5s' -> 2e-6, '1.5ms' -> 1.5e-3, '500ns' -> 5e-7."""
    value, unit = _split(text, what, LATENCY_UNITS, sign="must be 0 or positive")
    if unit.lower() not in _LATENCY:
        raise PlannerInputError(f"{what} {text!r}: unknown unit '{unit}'; allowed {LATENCY_UNITS}")
    if value / _LATENCY[unit.lower()] > 1.0:
        raise PlannerInputError(f"{what} {text!r}: a latency per algorithm step is at most 1 s")
    return value / _LATENCY[unit.lower()]


def parse_dims(text: str) -> tuple[int, int]:
    """'8x8' -> (8, 8): the X x Y grid of a 2-D mesh or torus."""
    m = re.match(r"^\s*(\d+)\s*[xX\u00d7*]\s*(\d+)\s*$", text)
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise PlannerInputError(f"--dims {text!r}: expected X x Y, two positive integers, e.g. 8x8 or 4x2")
    if int(m.group(1)) * int(m.group(2)) < 2:
        raise PlannerInputError(f"--dims {text!r}: a grid of at least 2 cells (GPUs, or nodes with "
                                "--topology hierarchical): a collective needs at least 2 GPUs, e.g. 2x1")
    return int(m.group(1)), int(m.group(2))


def parse_op(text: str) -> str:
    """'all-reduce', 'all_reduce', 'AllReduce' -> 'all_reduce'; 'p2p' / 'send-recv' -> 'p2p'."""
    key = re.sub(r"[-_\s]", "", text.lower())
    names = {op.replace("_", ""): op for op in OPS} | {"p2p": P2P, "sendrecv": P2P}
    if key not in names:
        allowed = ", ".join(op.replace("_", "-") for op in ALL_OPS)
        raise PlannerInputError(f"operation '{text}': allowed {allowed} (underscores too)")
    return names[key]


def parse_sweep(text: str) -> np.ndarray:
    """'1KiB..16GiB' -> powers of 2 from 1 KiB to 16 GiB; 'A..B:xF' -> factor F between points."""
    m = re.match(r"^\s*(.+?)\s*\.\.\s*(.+?)\s*(?::\s*[xX](.+))?$", text)
    if not m:
        raise PlannerInputError(f"--sweep {text!r}: expected A..B (doubling) or A..B:xF, e.g. 1KiB..16GiB or 1KB..1GB:x10")
    lo, hi = parse_size(m.group(1), "--sweep start"), parse_size(m.group(2), "--sweep end")
    try:
        factor = float(m.group(3)) if m.group(3) else 2.0
    except ValueError:
        factor = 0.0
    if not factor > 1.0:
        raise PlannerInputError(f"--sweep {text!r}: the factor after ':x' must be a number larger than 1")
    if hi < lo:
        raise PlannerInputError(f"--sweep {text!r}: the end must not be smaller than the start")
    count = int(math.floor(math.log(hi / lo) / math.log(factor) + 1e-9)) + 1
    if count > MAX_SWEEP_POINTS:
        raise PlannerInputError(f"--sweep {text!r}: {count} sizes; at most {MAX_SWEEP_POINTS} (use a larger factor :xF)")
    return lo * factor ** np.arange(count, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# Formatting of quantities.


_BINARY_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
_DECIMAL_UNITS = (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3))


def fmt_bytes(x: float, decimal: bool = False) -> str:
    """Bytes in powers of 2 (KiB...) or, with ``decimal``, of 10 (kB, MB...): the system the
    user typed the size in (``size_is_decimal``)."""
    for unit, scale in _DECIMAL_UNITS if decimal else _BINARY_UNITS:
        if x >= scale:
            return f"{x / scale:.4g} {unit}"
    return f"{x:.4g} B"


def fmt_time(s: float) -> str:
    """Four significant digits: sub-microsecond latencies matter here (report.human_seconds
    rounds to whole microseconds)."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("\u00b5s", 1e-6)):
        if s >= scale:
            return f"{s / scale:.4g} {unit}"
    return f"{s * 1e9:.4g} ns"


def fmt_bandwidth(bps: float) -> str:
    return f"{bps / 1e9:.4g} GB/s"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def op_label(op: str) -> str:
    return op.replace("_", "-")


# ---------------------------------------------------------------------------------------------
# The user's topology as a Fabric.


@dataclass(frozen=True)
class CommArgs:
    """The options of ``planner comm`` as typed (strings are parsed here)."""

    op: str
    size: Optional[str] = None
    sweep: Optional[str] = None
    topology: Optional[str] = None
    gpus: Optional[int] = None
    dims: Optional[str] = None
    bandwidth: Optional[str] = None
    latency: Optional[str] = None
    cluster: Optional[str] = None
    gpus_per_node: Optional[int] = None
    network_bandwidth: Optional[str] = None
    network_latency: Optional[str] = None
    network_topology: Optional[str] = None
    algorithm: str = "auto"
    plot: Optional[Path] = None
    as_json: bool = False


@dataclass(frozen=True)
class Level:
    """One fabric level the group uses."""

    name: str  # "link" (one level), "scale-up", "network"
    attr: str  # the Fabric field holding it: "intra" or "inter"
    link: LinkLevel
    gpus: int  # ranks of the group on this level (n, r or q)

    @property
    def bandwidth(self) -> float:
        """B as the model uses it (after oversubscription)."""
        return self.link.bandwidth / self.link.oversubscription


@dataclass(frozen=True)
class Setup:
    fabric: Fabric
    n_local: int
    n_nodes: int
    levels: tuple[Level, ...]
    topology: str  # the user's word, or "cluster:<name>"
    label: str

    @property
    def gpus(self) -> int:
        return self.n_local * self.n_nodes

    @property
    def two_level(self) -> bool:
        return len(self.levels) == 2


_OPTION = {"gpus_per_node": "--gpus-per-node", "network_bandwidth": "--network-bandwidth",
           "network_latency": "--network-latency", "network_topology": "--network-topology",
           "bandwidth": "--bandwidth", "latency": "--latency", "dims": "--dims", "gpus": "--gpus"}


def _reject(args: CommArgs, fields: tuple[str, ...], why: str) -> None:
    given = [_OPTION[f] for f in fields if getattr(args, f) is not None]
    if given:
        raise PlannerInputError(f"{', '.join(given)} not allowed here: {why}")


def _require(args: CommArgs, field: str, why: str):
    value = getattr(args, field)
    if value is None:
        raise PlannerInputError(f"{_OPTION[field]} is required: {why}")
    return value


def _grid_label(topology: str, n: int, dims: Optional[tuple[int, int]]) -> str:
    if topology not in _GRIDS:
        return topology
    gx, gy = dims or square_grid(n)
    how = "" if dims else ", the most square grid"
    return f"{topology} {gx}x{gy}{how}"


def _network_label(topology: str, n: int, dims: Optional[tuple[int, int]]) -> str:
    """The network between nodes as priced: a tree of switches there is a fat tree (full
    bisection, as a switch), not the one-level physical tree of --topology tree."""
    return "fat-tree (as a switch)" if topology == "tree" else _grid_label(topology, n, dims)


def _group_size(gpus: Optional[int], dims: Optional[tuple[int, int]], per_cell: int) -> int:
    """N from --gpus, or from --dims (X*Y cells of ``per_cell`` GPUs); both must agree."""
    if dims is None:
        if gpus is None:
            raise PlannerInputError("--gpus N is required (or --dims XxY for a mesh2d / torus2d)")
        n = GROUP_GPUS.parse(gpus)
    else:
        n = dims[0] * dims[1] * per_cell
        if gpus is not None and gpus != n:
            raise PlannerInputError(f"--gpus {gpus} does not match --dims {dims[0]}x{dims[1]} ({n} GPUs)")
        GROUP_GPUS.parse(n, where=f"--dims {dims[0]}x{dims[1]} ({_count(per_cell, 'GPU')} each): GPUs")
    if n < 2:
        raise PlannerInputError(f"--gpus {n}: a collective or P2P needs at least 2 GPUs")
    return n


def _grid_dims(args: CommArgs, topology: str) -> Optional[tuple[int, int]]:
    if args.dims is None:
        return None
    if topology not in _GRIDS:
        raise PlannerInputError(f"--dims {args.dims}: only for a mesh2d or torus2d (here: {topology})")
    return parse_dims(args.dims)


def _one_level(args: CommArgs, topology: str) -> Setup:
    _reject(args, ("gpus_per_node", "network_bandwidth", "network_latency", "network_topology"),
            f"--topology {topology} is one level; --topology hierarchical describes nodes and a network")
    dims = _grid_dims(args, topology)
    n = _group_size(args.gpus, dims, 1)
    B = parse_bandwidth(_require(args, "bandwidth", "bytes/s per GPU per direction, e.g. 400GB/s"))
    alpha = parse_latency(_require(args, "latency", "seconds per algorithm step, e.g. 2us"))
    link = LinkLevel(B, alpha, topology, dims)
    # Every GPU a domain of its own: the group lies on the level Fabric calls the network.
    fabric = Fabric(intra=link, inter=link, domain_size=1)
    label = f"{n} GPUs, {_grid_label(topology, n, dims)}: B {fmt_bandwidth(B)}, \u03b1 {fmt_time(alpha)}"
    return Setup(fabric, 1, n, (Level("link", "inter", link, n),), topology, label)


def _levels(fabric: Fabric, n_local: int, n_nodes: int) -> tuple[Level, ...]:
    used = []
    if n_local > 1:
        used.append(Level("scale-up", "intra", fabric.intra, n_local))
    if n_nodes > 1:
        used.append(Level("network", "inter", fabric.inter, n_nodes))
    return tuple(used)


def _hierarchical(args: CommArgs) -> Setup:
    why = "--topology hierarchical is GPUs in nodes (a switch inside) joined by a network"
    per_node = NODE_GPUS.parse(_require(args, "gpus_per_node", why))
    net = (args.network_topology or "switch").lower()
    if net not in NETWORK_TOPOLOGIES:
        raise PlannerInputError(f"--network-topology {net}: allowed {', '.join(NETWORK_TOPOLOGIES)}")
    dims = _grid_dims(args, net)  # a grid of nodes
    n = _group_size(args.gpus, dims, per_node)
    if n > per_node and n % per_node:
        raise PlannerInputError(f"--gpus {n}: a group across nodes fills them (a multiple of --gpus-per-node {per_node})")
    intra = LinkLevel(parse_bandwidth(_require(args, "bandwidth", why)), parse_latency(_require(args, "latency", why)), "switch")
    inter = LinkLevel(parse_bandwidth(_require(args, "network_bandwidth", why), "--network-bandwidth"),
                      parse_latency(_require(args, "network_latency", why), "--network-latency"), net, dims)
    fabric = Fabric(intra=intra, inter=inter, domain_size=per_node)
    r, q = (int(x) for x in group_span(n, 1, per_node))
    label = (f"{n} GPUs = {_count(q, 'node')} x {r}, hierarchical: switch in a node B1 {fmt_bandwidth(intra.bandwidth)}, "
             f"\u03b11 {fmt_time(intra.latency)}; {_network_label(net, q, dims)} network B2 "
             f"{fmt_bandwidth(inter.bandwidth)}, \u03b12 {fmt_time(inter.latency)}")
    return Setup(fabric, r, q, _levels(fabric, r, q), "hierarchical", label)


def _from_cluster(args: CommArgs) -> Setup:
    from hardware_catalog import get_cluster, get_gpu, get_interconnect

    why = "the cluster preset fixes the topology, bandwidths and latencies"
    _reject(args, ("bandwidth", "latency", "gpus_per_node", "network_bandwidth", "network_latency",
                   "network_topology", "dims"), why)
    if args.topology not in (None, "hierarchical"):
        raise PlannerInputError(f"--topology {args.topology} with --cluster: {why}; leave --topology out")
    cluster = get_cluster(args.cluster)
    fabric = fabric_from_cluster(cluster, get_gpu(cluster.gpu), get_interconnect(cluster.nic))
    n = _group_size(_require(args, "gpus", "the GPUs taking part"), None, 1)
    domain = cluster.scaleup_domain_size
    if n > domain and n % domain:
        raise PlannerInputError(f"--gpus {n}: a group across domains fills them (a multiple of {domain} on {cluster.name})")
    r, q = (int(x) for x in group_span(n, 1, domain))
    I, E = fabric.intra, fabric.inter
    label = (f"{n} GPUs of {cluster.name} = {_count(q, 'domain')} x {r}: scale-up {I.topology} "
             f"{fmt_bandwidth(I.bandwidth)}, \u03b1 {fmt_time(I.latency)}; network "
             f"{_grid_label(E.topology, q, E.dims)} {fmt_bandwidth(E.bandwidth / E.oversubscription)} per GPU, "
             f"\u03b1 {fmt_time(E.latency)} (catalog, times its efficiencies)")
    return Setup(fabric, r, q, _levels(fabric, r, q), f"cluster:{cluster.name}", label)


def build_setup(args: CommArgs) -> Setup:
    if args.cluster is not None:
        return _from_cluster(args)
    if args.topology is None:
        raise PlannerInputError(f"--topology is required (allowed {', '.join(USER_TOPOLOGIES)}), or give --cluster NAME")
    topology = args.topology.lower()
    if topology not in USER_TOPOLOGIES:
        raise PlannerInputError(f"--topology {args.topology}: allowed {', '.join(USER_TOPOLOGIES)}")
    return _hierarchical(args) if topology == "hierarchical" else _one_level(args, topology)


# ---------------------------------------------------------------------------------------------
# Formulas in words, with their sources (the code is costmodel/collectives.py; one level: n GPUs
# at B, alpha; two levels: r GPUs in each of q domains, N = r*q, B1/alpha1 scale-up, B2/alpha2
# network). Keys: (algorithm, op group, two levels?).

_PY = "Patarasuk & Yuan 2009 (bandwidth-optimal all-reduce)"
_THAKUR = "Thakur, Rabenseifner & Gropp 2005"
_NCCL = "NCCL src/graph/tuning.cc"
_SST = "Sanders, Speck & Traeff 2009 (double binary tree)"
_GRID_SRC = "Mikami et al. 2018 and Ying et al. 2018 (2-D torus all-reduce); seed doc 003 sec. 3.2"
_HIER_SRC = "seed doc 003 sec. 4.4 (L4 slide 38, L5 slide 4)"
_BISECT = "Leighton 1992 (bisection bound)"
_SCALEUP_MAX = "S \u00b7 max(1/B1, 1/(r\u00b7B2))"

FORMULAS: dict[tuple[str, str, bool], tuple[str, str]] = {
    ("ring", "all_reduce", False): (
        "t = 2(n-1)\u00b7\u03b1 + 2(n-1)/n \u00b7 S/B: reduce-scatter then all-gather round a ring, 2(n-1) steps of S/n",
        f"{_PY}; seed doc 003 sec. 4.2 (L4 slide 34); NCCL ring"),
    ("ring", "gather", False): (
        "t = (n-1)\u00b7\u03b1 + (n-1)/n \u00b7 S/B: n-1 steps of S/n round a ring",
        f"{_PY}; seed doc 003 sec. 4.3 (L4 slide 34); NCCL ring"),
    ("ring", "broadcast", False): (
        "t = (n-1)\u00b7\u03b1 + S/B: a pipelined chain from the root",
        "NCCL ring broadcast; nccl-tests doc/PERFORMANCE.md (broadcast busbw = algbw)"),
    ("tree", "all_reduce", False): (
        "t = 2\u230alog2 n\u230b\u00b7\u03b1 + 2\u00b7S/B: reduce up NCCL's double binary tree and broadcast down, "
        "pipelined, each GPU sending 2S; depth log2i(n), rounded down, as NCCL's model (on a switch: any two GPUs "
        "link, so both trees exist; the seed's unpipelined tree is unpipelined_tree)",
        f"{_SST}; {_NCCL} (tree latency, algBw = busBw/2); src/include/utils.h (log2i)"),
    ("unpipelined_tree", "all_reduce", False): (
        "t = 2\u2308log2 n\u2309\u00b7(\u03b1 + S/B): reduce up a binary tree, then broadcast down, each of the "
        "2\u2308log2 n\u2309 steps moving the whole message (unpipelined); on a physical tree (each GPU linked to "
        "its parent and children) NCCL's second tree has no links, so this is its tree all-reduce",
        "seed doc 003 sec. 4.2 (L4 slide 36)"),
    ("direct", "all_reduce", False): (
        "t = 2\u00b7\u03b1 + 2(n-1)/n \u00b7 S/B: one-shot reduce-scatter (each GPU sends its S/n block to each "
        "of the n-1 others at once) then one-shot all-gather, 2 steps; a switch links any two GPUs directly",
        f"seed doc 003 sec. 3.2 and glossary (switch: all-reduce in 2 steps); {_THAKUR} sec. 3.6 (pairwise)"),
    ("direct", "gather", False): (
        "t = \u03b1 + (n-1)/n \u00b7 S/B: one step, each GPU sending its S/n block to each of the n-1 others "
        "at once over the switch",
        f"seed doc 003 sec. 3.2 and glossary (switch: any two GPUs directly connected); {_THAKUR} sec. 3.6"),
    ("direct", "broadcast", False): (
        "t = 2\u00b7\u03b1 + 2(n-1)/n \u00b7 S/B: one-shot scatter of S/n blocks from the root, then one-shot "
        "all-gather, 2 steps over the switch",
        f"seed doc 003 sec. 3.2 (switch: few steps); van de Geijn; {_THAKUR} sec. 4.1"),
    ("tree", "gather", False): (
        "t = \u2308log2 n\u2309\u00b7\u03b1 + (n-1)/n \u00b7 S/B: recursive doubling (all-gather) or halving (reduce-scatter)",
        f"{_THAKUR} sec. 3.1, 3.3; NCCL PAT (one GPU per node)"),
    ("tree", "broadcast", False): (
        "t = \u2308log2 n\u2309\u00b7(\u03b1 + S/B): binomial tree", f"{_THAKUR} sec. 4.1"),
    ("direct", "all_to_all", False): (
        "t = (n-1)\u00b7\u03b1 + max((n-1)/n \u00b7 S/B, bisection): pairwise exchange of S/n with every peer; on a "
        "ring, mesh or torus the two halves also swap \u230an/2\u230b\u2308n/2\u2309/n \u00b7 S over the cut links; "
        "on a tree (GPU i linked to (i-1)//2) over one link: the link cutting off m GPUs carries m(n-m)/n \u00b7 S, "
        "the most even cut (n/4 \u00b7 S for n a power of 2) binds",
        f"{_THAKUR} sec. 3.6; {_BISECT}; Leighton 1992 ch. 1 (a complete binary tree's bisection is 1 link); "
        "seed doc 003 sec. 4.1 (CP all-to-all, L7) and glossary (full bisection: the switch)"),
    ("dims", "gather", False): (
        "t = (s_x + s_y)\u00b7\u03b1 + bandwidth term: one dimension after the other, half the data X then Y and "
        "half Y then X so all four links work; a dimension of g GPUs takes \u2308(g-1)/2\u2309 steps on a torus "
        "ring, g-1 on a mesh line; a square torus moves (n-1)/n \u00b7 S/B, a square mesh twice that", _GRID_SRC),
    ("dims", "all_reduce", False): (
        "t = 2 \u00d7 the dimension-ordered reduce-scatter (reduce-scatter, then all-gather): "
        "2(s_x + s_y)\u00b7\u03b1, and 2(n-1)/n \u00b7 S/B on a square torus", _GRID_SRC),
    ("dims", "broadcast", False): (
        "t = 2 \u00d7 the dimension-ordered reduce-scatter time: scatter, then all-gather",
        f"van de Geijn; {_THAKUR} sec. 4.1; {_GRID_SRC}"),
    ("dims", "all_to_all", False): (
        "t = \u03a3 over the two dimensions of g GPUs: (g-1)\u00b7\u03b1 + max((g-1)/g \u00b7 S over 2 links of B/4, "
        "\u230ag/2\u230b\u2308g/2\u2309/g \u00b7 S over the cut links): rows, then columns, each moving all of S",
        f"{_THAKUR} sec. 3.6; {_BISECT}"),
    ("ring", "all_reduce", True): (
        f"t = 2[q(r-1)\u00b7\u03b11 + (q-1)\u00b7\u03b12] + 2(N-1)/N \u00b7 {_SCALEUP_MAX}: one ring through all N "
        "GPUs, crossing the network once per domain; a domain's r GPUs share the crossing with their r NIC shares",
        f"{_NCCL} (ring latency model); {_PY}; seed doc 003 sec. 4.2"),
    ("ring", "gather", True): (
        f"t = q(r-1)\u00b7\u03b11 + (q-1)\u00b7\u03b12 + (N-1)/N \u00b7 {_SCALEUP_MAX}: one ring through all N GPUs",
        f"{_NCCL} (ring latency model); {_PY}; seed doc 003 sec. 4.3"),
    ("ring", "broadcast", True): (
        f"t = q(r-1)\u00b7\u03b11 + (q-1)\u00b7\u03b12 + {_SCALEUP_MAX}: a pipelined chain through all N GPUs",
        f"{_NCCL}; nccl-tests doc/PERFORMANCE.md"),
    ("tree", "all_reduce", True): (
        f"t = 2[(r-1)\u00b7\u03b11 + \u230alog2 q\u230b\u00b7\u03b12 + {_SCALEUP_MAX}]: NCCL's tree, a chain inside "
        "each domain and a double binary tree across domains (NCCL's depth log2i(q), rounded down)",
        f"{_NCCL}; src/include/utils.h (log2i); {_SST}"),
    ("tree", "broadcast", True): (
        "t = \u2308log2 q\u2309\u00b7(\u03b12 + S/B2) + the domain's best broadcast: a binomial tree across "
        "domains (one GPU each), then inside each domain", f"{_THAKUR} sec. 4.1"),
    ("hierarchical", "all_reduce", True): (
        "t = 2[(r-1)\u00b7\u03b11 + (r-1)/r \u00b7 S/B1] + AR_net(S/r): reduce-scatter inside the domain, "
        "all-reduce of S/r across domains on all r rails at once (the network's best of ring, tree, 2-D), "
        "all-gather inside the domain", _HIER_SRC),
    ("hierarchical", "gather", True): (
        "t = AG_net(S/r) + (r-1)\u00b7\u03b11 + (r-1)/r \u00b7 S/B1: all-gather of S/r across domains on each rail, "
        "then inside the domain (reduce-scatter: the same the other way round)", _HIER_SRC),
    ("hierarchical", "broadcast", True): (
        "t = 2[(r-1)\u00b7\u03b11 + (r-1)/r \u00b7 S/B1] + BC_net(S/r): scatter in the root's domain, broadcast "
        "of S/r on each rail, all-gather inside every domain", f"{_HIER_SRC}; van de Geijn"),
    ("direct", "all_to_all", True): (
        "t = (r-1)\u00b7\u03b11 + r(q-1)\u00b7\u03b12 + max(A2A_up(S/q), A2A_net(S)): pairwise exchange of S/N "
        "with every peer, scale-up and network traffic at the same time", f"{_THAKUR} sec. 3.6; {_BISECT}"),
    ("p2p", "p2p", False): (
        "t = \u03b1 + S/B_link: one send over the link joining the two GPUs (B on a switch; one of a ring "
        "GPU's two links, B/2, or both in a ring of two, B; one of a mesh/torus GPU's four, B/4)",
        "seed doc 003 sec. 4.5 (L6); Hockney's alpha-beta model"),
}

RING_ON_GRID = ("here B is the ring's bandwidth: B/2 on a 2-D mesh or torus (an embedded ring uses 2 of "
                "the 4 links), B/4 on a 1-D line")
NCCL_RING_RULE = ("hierarchical is not offered: on NVLink + switched networks NCCL runs all-gather and "
                  "reduce-scatter as rings over all GPUs (tuning.cc: only all-reduce chooses its algorithm)")
BUSBW_SOURCE = "nccl-tests doc/PERFORMANCE.md"


def formula(setup: Setup, op: str, algorithm: str) -> tuple[str, str]:
    """(formula in words, its source) of ``algorithm`` for ``op`` on this setup."""
    group = "gather" if op in ("all_gather", "reduce_scatter") else "broadcast" if op == "reduce" else op
    algo = "dims" if algorithm in _GRIDS else algorithm
    text, source = FORMULAS[(algo, group, setup.two_level and op != P2P)]
    if op == "reduce":
        text = f"{text} (reduce: this broadcast run backwards, sums where it copies: the same steps and bytes)"
        source = f"{source}; {_THAKUR} sec. 4.2 (reduce)"
    if algorithm == "ring" and any(lvl.link.topology in _GRIDS for lvl in setup.levels):
        text = f"{text} ({RING_ON_GRID})"
    return text, source


def busbw_factor(op: str, n: int) -> tuple[float, str]:
    """nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md): busbw = algbw x factor."""
    if op == "all_reduce":
        return 2.0 * (n - 1) / n, "2(n-1)/n"
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n, "(n-1)/n"
    return 1.0, "1"  # broadcast, reduce (PERFORMANCE.md: both 1) and one send/recv


# ---------------------------------------------------------------------------------------------
# Pricing one message: steps and charged bytes read off the model, the bytes each GPU sends.


def _with_level(fabric: Fabric, attr: str, **changes) -> Fabric:
    link = dataclasses.replace(getattr(fabric, attr), **changes)
    if fabric.intra is fabric.inter:  # one level: the same LinkLevel in both fields
        return dataclasses.replace(fabric, intra=link, inter=link)
    return dataclasses.replace(fabric, **{attr: link})


def _timer(setup: Setup, op: str, S, algorithm: str) -> Callable[[Fabric], np.ndarray]:
    """fabric -> seconds of ``op`` by ``algorithm`` (a name, never 'auto', so probes keep it)."""
    if op == P2P:
        crosses = setup.n_nodes > 1  # a group that spans domains: the hop between two of them
        return lambda fab: p2p_time(S, crosses, fab, setup.n_nodes)
    return lambda fab: collective_time(op, S, setup.n_local, setup.n_nodes, fab, algorithm, textbook=True)[0]


def _right_slope(f: Callable[[float], float], x0: float, t0: float) -> float:
    """Slope of ``f`` just right of ``x0``, for ``f`` piecewise linear and concave in x (a sum of
    x-linear terms and minima over inner algorithm choices). Secants over h and h/2 agree only
    where ``f`` is linear on [x0, x0 + h] (concavity), so h starts at max(t0, x0), where float
    rounding (~1e-16 t0 / h) is negligible, and shrinks until they agree."""
    h = max(t0, x0) or 1.0
    for _ in range(80):
        whole = (f(x0 + h) - t0) / h
        half = (f(x0 + h / 2) - t0) / (h / 2)
        if abs(whole - half) <= 1e-9 * max(abs(whole), 1.0):
            return whole
        h /= 8.0
    return half


def step_counts(setup: Setup, timer: Callable[[Fabric], np.ndarray], t: float) -> dict[str, int]:
    """Per level: the number of alpha terms of the algorithm's formula, an integer: t is linear
    in each alpha with the algorithm (and its inner choices) fixed, so steps_L = dt/d(alpha_L),
    taken as an exact secant (``_right_slope``), never a difference lost in t's rounding."""
    out = {}
    for lvl in setup.levels:
        f = lambda x, lvl=lvl: float(timer(_with_level(setup.fabric, lvl.attr, latency=x)))
        out[lvl.name] = int(round(_right_slope(f, lvl.link.latency, t)))
    return out


def levels_at_once(setup: Setup, op: str, algorithm: str) -> bool:
    """True where the two levels move their bytes at the same time, the transfer being the slower
    level's (collectives.py: one ring through every GPU, NCCL's tree, the all-to-all's pairwise
    exchange); False where one level's part follows the other's (hierarchical, the tree
    broadcast)."""
    return setup.two_level and (algorithm in ("ring", "direct") or (algorithm == "tree" and op == "all_reduce"))


def charged_bytes(setup: Setup, op: str, algorithm: str, timer: Callable[[Fabric], np.ndarray], t: float,
                  steps: dict) -> dict[str, float]:
    """Per level: the bytes the transfer time charges at that level's B (dt/d(1/B_L)): what the
    busiest GPU sends where B is one port's, more where B is spread over several links (ring, mesh,
    torus) or the bisection binds. Levels at once: each level's own, its bytes / B_L being the
    time it would take alone (the transfer is the largest of them)."""
    f = setup.fabric
    no_latency = {attr: dataclasses.replace(getattr(f, attr), latency=0.0) for attr in ("intra", "inter")}
    if f.intra is f.inter:
        no_latency["inter"] = no_latency["intra"]
    flat = dataclasses.replace(f, **no_latency)
    if levels_at_once(setup, op, algorithm):
        out = {}
        for lvl in setup.levels:  # the other level made 1e12 times faster: this one is the max
            other = "inter" if lvl.attr == "intra" else "intra"
            alone = _with_level(flat, other, bandwidth=getattr(flat, other).bandwidth * 1e12)
            out[lvl.name] = _bytes_probe(setup, timer, alone, 1e-4, 11)[lvl.name]
        return out
    # First probed with every latency at 0: beside the real latencies a change of 1e-6 of the
    # transfer can be 1e-8 of t and lost to float rounding. Zeroing the latencies can change a
    # choice inside the algorithm (hierarchical's network part is the best of ring and tree), so
    # those bytes are kept only when they rebuild t with the steps.
    nbytes = _bytes_probe(setup, timer, flat, 1e-4, 11)
    latency = sum(steps[lvl.name] * lvl.link.latency for lvl in setup.levels)
    transfer = sum(nbytes[lvl.name] / lvl.bandwidth for lvl in setup.levels)
    if abs(latency + transfer - t) <= 1e-9 * t:
        return nbytes
    return _bytes_probe(setup, timer, f, 1e-6, 9)


def _bytes_probe(setup: Setup, timer: Callable[[Fabric], np.ndarray], fabric: Fabric, d: float, digits: int) -> dict:
    """Per level: dt/d(1/B) on ``fabric`` by a one-sided difference of relative size ``d``, kept to
    ``digits`` significant digits (float noise is ~2e-16 t/(d x transfer) relative)."""
    t = float(timer(fabric))
    out = {}
    for lvl in setup.levels:
        narrower = _with_level(fabric, lvl.attr, bandwidth=getattr(fabric, lvl.attr).bandwidth / (1.0 + d))
        B = getattr(fabric, lvl.attr).bandwidth / getattr(fabric, lvl.attr).oversubscription
        out[lvl.name] = float(f"{(float(timer(narrower)) - t) * B / d:.{digits}g}")  # drop probe noise
    return out


def _one_level_of(level: LinkLevel, n: int) -> Setup:
    """One level of a setup as a setup of its own (the parts a composition runs there)."""
    return Setup(Fabric(intra=level, inter=level, domain_size=1), 1, n, (Level("link", "inter", level, n),),
                 level.topology, "")


def bytes_sent(setup: Setup, op: str, algorithm: str, S: float) -> float:
    """Bytes the busiest GPU sends (for a reduce: receives, the broadcast mirrored): seed doc 003
    sec. 4's 通信量, its sends summed over the steps, whatever the links. With f = (n-1)/n over the N GPUs:
    rings and the other bandwidth-optimal algorithms (one-shot, 2-D, recursive halving / doubling,
    Patarasuk & Yuan 2009; Thakur et al. 2005) send f*S for all-gather / reduce-scatter, 2f*S for
    all-reduce and scatter + all-gather broadcasts; a ring broadcast forwards S; NCCL's double
    binary tree 2S (S/2 up and 2 x S/2 down as an inner node of one tree, S/2 up as a leaf of the
    other); a binomial broadcast's root ceil(log2 n) x S; the seed's unpipelined tree the same
    through its busiest node; an all-to-all f*S (pairwise), its 2-D form S per dimension times
    (g-1)/g (store and forward). Compositions add their parts' sends."""
    n = setup.gpus
    f = (n - 1) / n
    if op == P2P:
        return S
    if op == "reduce":
        op = "broadcast"
    gather = op in ("all_gather", "reduce_scatter")
    if algorithm == "ring":
        return S if op == "broadcast" else (2.0 if op == "all_reduce" else 1.0) * f * S
    if algorithm in _GRIDS and op == "all_to_all":
        lvl = setup.levels[0]
        gx = min(n, lvl.link.dims[0]) if lvl.link.dims else square_grid(n)[0]
        gy = math.ceil(n / gx)
        return ((gx - 1) / gx + (gy - 1) / gy) * S
    if algorithm == "direct" or algorithm in _GRIDS:
        return f * S if gather or op == "all_to_all" else 2.0 * f * S
    if algorithm == "unpipelined_tree":
        return math.ceil(math.log2(n)) * S
    if algorithm == "tree":
        if op == "all_reduce":
            return 2.0 * S
        if gather:
            return f * S
        if not setup.two_level:
            return math.ceil(math.log2(n)) * S
        # Binomial across the domains (one GPU each), then the domain's best broadcast.
        intra = setup.fabric.intra
        inner = level_best("broadcast", S, intra, setup.n_local, setup.fabric.domain_size)
        return (math.ceil(math.log2(setup.n_nodes)) * S
                + bytes_sent(_one_level_of(intra, setup.n_local), "broadcast", inner, S))
    if algorithm == "hierarchical":
        r, q = setup.n_local, setup.n_nodes
        part = S / r
        inner = level_best(op, part, setup.fabric.inter, q)
        within = (1.0 if gather else 2.0) * (r - 1) / r * S  # RS and / or AG (scatter) inside the domain
        return within + bytes_sent(_one_level_of(setup.fabric.inter, q), op, inner, part)
    raise ValueError(f"no send count for {algorithm} {op}")  # pragma: no cover - every pair above


def applicable(setup: Setup, op: str, S) -> dict[str, np.ndarray]:
    """Seconds of every algorithm that applies to ``op`` here (hierarchical: two levels only)."""
    if op == P2P:
        return {P2P: np.asarray(p2p_time(S, setup.n_nodes > 1, setup.fabric, setup.n_nodes))}
    out = {}
    for name in ALGORITHMS:
        if name == "hierarchical" and not setup.two_level:
            continue  # within one level it is that level's best algorithm: no column of its own
        t = collective_time(op, S, setup.n_local, setup.n_nodes, setup.fabric, name, textbook=True)[0]
        if np.all(np.isfinite(t)):
            out[name] = t
    return out


def _nccl_ring_rule(setup: Setup, op: str) -> bool:
    """collective_time's auto drops hierarchical for AG/RS when both levels are switched."""
    f = setup.fabric
    return (op in ("all_gather", "reduce_scatter") and setup.two_level
            and f.intra.topology in _SWITCHED and f.inter.topology in _SWITCHED)


def _p2p_links(topology: str, gpus: int, definite: bool = False) -> str:
    """The links one neighbour send uses (``collectives._p2p_bandwidth``): both of a 2-GPU ring's."""
    if ring_pair(topology, gpus):
        return "the two links"
    return "the one link" if definite else "one link"


def _reason(setup: Setup, op: str, chosen: str, requested: str, alts: dict[str, float], S: float) -> str:
    if op == P2P:
        if not setup.two_level:
            return f"one send/recv between neighbours over {_p2p_links(setup.topology, setup.gpus, definite=True)} joining them"
        across, within = float(alts[P2P]), float(p2p_time(S, False, setup.fabric))
        than = "slower" if across > within else "faster" if across < within else "as fast"
        return (f"one send/recv between neighbours in two {_domain_word(setup)}s, over the network; "
                f"{than} than one inside a {_domain_word(setup)} ({fmt_time(within)})")
    best = min(alts, key=alts.get)
    if requested != "auto":
        extra = "" if best == chosen else f"; auto would pick {best} ({fmt_time(alts[best])})"
        return f"as asked (--algorithm {requested}){extra}"
    if len(alts) == 1:
        return f"the only algorithm for {op_label(op)} on this topology"
    others = ", ".join(f"{a} {fmt_time(t)}" for a, t in sorted(alts.items(), key=lambda kv: kv[1]) if a != chosen)
    if _nccl_ring_rule(setup, op):
        # Auto follows NCCL here, not the clock: the ring may be the slower one (small messages,
        # many nodes), so "the fastest" would contradict the times listed beside it.
        return f"NCCL's choice (auto), whatever the size; {NCCL_RING_RULE}; priced anyway: {others}"
    return f"the fastest for this size (auto; others: {others})"


def _domain_word(setup: Setup) -> str:
    return "domain" if setup.topology.startswith("cluster:") else "node"


def _choose(setup: Setup, op: str, S: float, algorithm: str, alts: dict) -> tuple[float, str]:
    if op == P2P:
        return float(alts[P2P]), P2P
    if algorithm != "auto" and algorithm not in alts:
        allowed = ", ".join(alts)
        raise PlannerInputError(f"--algorithm {algorithm} does not apply to {op_label(op)} on this topology (allowed: auto, {allowed})")
    t, code = collective_time(op, S, setup.n_local, setup.n_nodes, setup.fabric, algorithm, textbook=True)
    return float(t), ALGORITHMS[int(code)]


def price(setup: Setup, op: str, S: float, algorithm: str = "auto", decimal: bool = False) -> dict:
    """Everything ``planner comm`` says about one message, as the JSON record it prints
    (``decimal``: sizes were typed in powers of 10, and are printed so)."""
    alts = {name: float(t) for name, t in applicable(setup, op, S).items()}
    t, chosen = _choose(setup, op, S, algorithm, alts)
    timer = _timer(setup, op, S, chosen)
    steps = step_counts(setup, timer, t)
    charged = charged_bytes(setup, op, chosen, timer, t, steps)
    latency = sum(steps[lvl.name] * lvl.link.latency for lvl in setup.levels)
    factor, rule = busbw_factor(op, setup.gpus)
    text, source = formula(setup, op, chosen)
    return {
        "op": op, "size_bytes": S, "size_units": "decimal" if decimal else "binary",
        "gpus": 2 if op == P2P else setup.gpus, "system_gpus": setup.gpus,
        "topology": setup.topology, "setup": setup.label,
        "levels": [{"name": lvl.name, "topology": lvl.link.topology, "gpus": lvl.gpus,
                    "bandwidth_gbps": lvl.bandwidth / 1e9, "latency_s": lvl.link.latency,
                    "links_per_gpu": _links(lvl, setup.fabric)} for lvl in setup.levels],
        "algorithm": chosen, "requested_algorithm": algorithm,
        "reason": _reason(setup, op, chosen, algorithm, alts, S),
        "time_s": t, "latency_s": latency, "transfer_s": t - latency,
        "steps": steps,
        "bytes_per_gpu": bytes_sent(setup, op, chosen, S),
        "bytes_charged": charged, "levels_at_once": levels_at_once(setup, op, chosen),
        "algbw_gbps": S / t / 1e9, "busbw_gbps": S / t / 1e9 * factor,
        "busbw_factor": factor, "busbw_rule": rule,
        "formula": text, "source": source, "alternatives_s": alts,
        "units": JSON_UNITS,
        **_p2p_within(setup, op, S),
    }


JSON_UNITS = {
    "*_gbps": "GB/s: 10^9 bytes per second (bytes, not bits)",
    "*_s": "seconds",
    "size_bytes, bytes_per_gpu, bytes_charged": "bytes",
    "bytes_per_gpu": "what the busiest GPU sends (receives, for a reduce)",
    "bytes_charged": "per level, the bytes the transfer time charges at that level's bandwidth",
}
"""The ``units`` entry of ``planner comm --json``: the catalog's ``*_gbps`` name (kept, cluster
files use it) means gigaBYTES per second."""


def _links(lvl: Level, fabric: Fabric) -> Optional[int]:
    """Links a GPU's B is spread over at this level (collectives.py): None on a switch or tree."""
    if lvl.link.topology == "fully_connected":  # one xGMI link to each other GPU of the domain
        return max(fabric.domain_size - 1, 1)
    return _LINKS.get(lvl.link.topology)


def _p2p_within(setup: Setup, op: str, S: float) -> dict:
    """A P2P across domains also reports the hop inside one domain."""
    if op != P2P or not setup.two_level:
        return {}
    return {"time_within_domain_s": float(p2p_time(S, False, setup.fabric))}


# ---------------------------------------------------------------------------------------------
# A sweep of message sizes, and where the best algorithm changes.


def _auto_code(setup: Setup, op: str, S):
    return collective_time(op, S, setup.n_local, setup.n_nodes, setup.fabric, textbook=True)[1]


def crossovers(setup: Setup, op: str, sizes: np.ndarray, codes: np.ndarray) -> list[dict]:
    """Sizes where auto's choice changes, each found by bisection (in log size) between the
    two sweep points around it."""
    out = []
    for i in np.flatnonzero(codes[1:] != codes[:-1]):
        lo, hi = float(sizes[i]), float(sizes[i + 1])
        for _ in range(60):
            mid = math.sqrt(lo * hi)
            if _auto_code(setup, op, mid) == codes[i]:
                lo = mid
            else:
                hi = mid
        out.append({"size_bytes": hi, "from": ALGORITHMS[int(codes[i])],
                    "to": ALGORITHMS[int(_auto_code(setup, op, hi))]})
    return out


def sweep(setup: Setup, op: str, sizes: np.ndarray, decimal: bool = False) -> dict:
    """Seconds per applicable algorithm and auto's choice at every size (the JSON printed)."""
    columns = applicable(setup, op, sizes)
    if op == P2P:
        auto_t, names, cross = columns[P2P], [P2P] * len(sizes), []
    else:
        auto_t, codes = collective_time(op, sizes, setup.n_local, setup.n_nodes, setup.fabric, textbook=True)
        names, cross = [ALGORITHMS[int(c)] for c in codes], crossovers(setup, op, sizes, codes)
    factor, rule = busbw_factor(op, setup.gpus)
    rows = [{"size_bytes": float(S), "time_s": {a: float(t[i]) for a, t in columns.items()},
             "auto": {"algorithm": names[i], "time_s": float(auto_t[i]),
                      "algbw_gbps": float(S / auto_t[i] / 1e9), "busbw_gbps": float(S / auto_t[i] / 1e9 * factor)}}
            for i, S in enumerate(sizes)]
    return {"op": op, "gpus": 2 if op == P2P else setup.gpus, "system_gpus": setup.gpus,
            "topology": setup.topology, "setup": setup.label,
            "size_units": "decimal" if decimal else "binary", "units": JSON_UNITS,
            "algorithms": list(columns), "busbw_rule": rule,
            "nccl_ring_rule": NCCL_RING_RULE if _nccl_ring_rule(setup, op) else None,
            "rows": rows, "crossovers": cross}


# ---------------------------------------------------------------------------------------------
# Text output.


def _wrap(label: str, text: str) -> str:
    import textwrap

    return textwrap.fill(text, width=100, initial_indent=f"{label:<12}", subsequent_indent=" " * 12)


def _per_level(rec: dict, values: dict, unit: Callable[[float, dict], str], joiner: str = " + ") -> str:
    levels = {lvl["name"]: lvl for lvl in rec["levels"]}
    parts = [unit(v, levels[name]) + ("" if len(values) == 1 else f" ({name})")
             for name, v in values.items() if v > 0]
    return joiner.join(parts) or "0"


def _decimal(rec: dict) -> bool:
    return rec.get("size_units") == "decimal"


def _sent(rec: dict) -> str:
    """The bytes/GPU line: what each GPU sends (seed doc 003's 通信量)."""
    b = fmt_bytes(rec["bytes_per_gpu"], _decimal(rec))
    if rec["op"] == P2P:
        return f"{b}: the one message, sent by one GPU to the other"
    who = "the root receives" if rec["op"] == "reduce" else "the busiest GPU sends"
    # Summed over the steps: "data per step x steps" is false where the steps differ (recursive
    # halving) or where a GPU sends in only some of them (the unpipelined tree's busiest GPU
    # receives in its reduce steps and sends in its broadcast steps).
    verb = "receives" if rec["op"] == "reduce" else "sends"
    return f"{b}: what {who} in all (summed over the steps it {verb} in)"


def _charged(rec: dict) -> str:
    """The "bytes at B" line: per level, the bytes the transfer time charges at that level's B."""
    dec = _decimal(rec)
    if rec["op"] == P2P:  # one message of S bytes over the link(s) joining the pair: its rate is S / transfer
        links = _p2p_links(rec["topology"], rec["system_gpus"])
        if not rec["transfer_s"] > 0:  # lost in the rounding of a latency many orders larger
            return f"{fmt_bytes(rec['size_bytes'], dec)} over {links} (its transfer time vanishes next to the latency)"
        return f"{fmt_bytes(rec['size_bytes'], dec)} over {links} at {rec['size_bytes'] / rec['transfer_s'] / 1e9:.4g} GB/s"
    levels = {lvl["name"]: lvl for lvl in rec["levels"]}
    if rec["levels_at_once"]:
        parts = [f"{fmt_bytes(b, dec)} at {levels[name]['bandwidth_gbps']:.4g} GB/s ({name}, "
                 f"{fmt_time(b / (levels[name]['bandwidth_gbps'] * 1e9))})" for name, b in rec["bytes_charged"].items()]
        moved = (f"{' and '.join(parts)}, at the same time: the transfer is the slower level's, "
                 f"{fmt_time(rec['transfer_s'])}, not the sum")
    else:
        joiner = " then " if len(rec["bytes_charged"]) > 1 else ""
        moved = _per_level(rec, rec["bytes_charged"],
                           lambda b, lvl: f"{fmt_bytes(b, dec)} at {lvl['bandwidth_gbps']:.4g} GB/s", joiner)
        hidden = [n for n, b in rec["bytes_charged"].items() if b == 0 and rec["steps"].get(n)]
        if hidden:
            moved += f"; {', '.join(hidden)}: overlapped by the slower level"
    shared = sorted({(lvl["topology"], lvl["links_per_gpu"]) for lvl in rec["levels"] if lvl["links_per_gpu"]})
    if shared:
        counts, names = " / ".join(str(k) for _, k in shared), " / ".join(t for t, _ in shared)
        moved += (f"; B is a GPU's total over its {counts} {names} links, so traffic that one link or the "
                  "bisection limits is charged more bytes than the GPU sends")
    elif rec["op"] == "all_to_all" and any(lvl["topology"] == "tree" for lvl in rec["levels"]) and len(rec["levels"]) == 1:
        moved += ("; the tree's halves swap their data over the one link joining them (its bisection), so it "
                  "is charged more bytes than a GPU sends")
    elif rec["algorithm"] == "unpipelined_tree":
        moved += ("; its busiest GPU receives the whole message in each reduce step and sends it in each "
                  "broadcast step, one after the other")
    return moved


def _where(rec: dict) -> str:
    if rec["op"] == P2P:
        return f"between 2 GPUs of {rec['setup']}"
    return f"on {rec['setup']}"


def format_single(rec: dict) -> str:
    S = rec["size_bytes"]
    steps = _per_level(rec, rec["steps"], lambda k, lvl: f"{k} x {fmt_time(lvl['latency_s'])}")
    busbw = (f"{rec['busbw_gbps']:.4g} GB/s = algbw (one send over {_p2p_links(rec['topology'], rec['system_gpus'])})"
             if rec["op"] == P2P else
             f"{rec['busbw_gbps']:.4g} GB/s = algbw x {rec['busbw_rule']}, n = {rec['gpus']} ({BUSBW_SOURCE})")
    lines = [
        f"{op_label(rec['op'])} of {fmt_bytes(S, _decimal(rec))} ({S:,.0f} B) {_where(rec)}",
        f"{'time':<12}{fmt_time(rec['time_s'])} = latency {fmt_time(rec['latency_s'])} + transfer {fmt_time(rec['transfer_s'])}",
        _wrap("algorithm", f"{rec['algorithm']}: {rec['reason']}"),
        f"{'steps':<12}{steps}",
        _wrap("bytes/GPU", _sent(rec)),
        _wrap("bytes at B", _charged(rec)),
        f"{'algbw':<12}{rec['algbw_gbps']:.4g} GB/s (size / time)",
        f"{'busbw':<12}{busbw}",
        _wrap("formula", rec["formula"]),
        _wrap("source", rec["source"]),
    ]
    return "\n".join(lines)


def _auto_meaning(res: dict) -> str:
    return "NCCL's choice, see the note" if res["nccl_ring_rule"] else "the fastest at each size"


def format_sweep(res: dict) -> str:
    algos = res["algorithms"]
    dec = _decimal(res)
    width = max(14, *(len(a) + 2 for a in algos))
    head = f"{'size':>10}" + "".join(f"{a:>{width}}" for a in algos) + f"{'auto':>14}  {'algorithm':<17}{'algbw':>8}{'busbw':>8}"
    where = f"between 2 GPUs of {res['setup']}" if res["op"] == P2P else f"on {res['setup']}"
    busbw = (f"busbw = algbw: one send over {_p2p_links(res['topology'], res['system_gpus'])}" if res["op"] == P2P else
             f"busbw = algbw x {res['busbw_rule']}, n = {res['gpus']}: {BUSBW_SOURCE}")
    lines = [f"{op_label(res['op'])} {where}",
             f"time in \u00b5s per algorithm; auto = {_auto_meaning(res)}; algbw, busbw in GB/s ({busbw})",
             head]
    for row in res["rows"]:
        auto = row["auto"]
        lines.append(f"{fmt_bytes(row['size_bytes'], dec):>10}" + "".join(f"{row['time_s'][a] * 1e6:>{width}.2f}" for a in algos)
                     + f"{auto['time_s'] * 1e6:>14.2f}  {auto['algorithm']:<17}{auto['algbw_gbps']:>8.2f}{auto['busbw_gbps']:>8.2f}")
    if res["nccl_ring_rule"]:
        lines.append(f"note: {res['nccl_ring_rule']}")
    for c in res["crossovers"]:
        lines.append(f"crossover: {c['from']} -> {c['to']} at {fmt_bytes(c['size_bytes'], dec)} ({c['size_bytes']:,.0f} B)")
    if not res["crossovers"] and res["op"] != P2P:
        lines.append(f"no crossover in this range: {res['rows'][0]['auto']['algorithm']} throughout")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Plot (matplotlib, Agg; imported here only, so `planner --help` stays fast).


def _size_ticks(lo: float, hi: float, every: Optional[int] = None, decimal: bool = False) -> list[float]:
    """Powers of 2 between lo and hi, every 1, 2, 5 or 10 (1 KiB, 1 MiB, 1 GiB...) octaves; with
    ``decimal`` powers of 10, every 1 or 3 decades (1 kB, 1 MB, 1 GB...)."""
    if decimal:
        k0, k1 = math.ceil(math.log10(lo) - 1e-9), math.floor(math.log10(hi) + 1e-9)
        step = every or (1 if k1 - k0 <= 6 else 3)
        return [10.0**k for k in range(k0, k1 + 1) if k % step == 0]
    k0, k1 = math.ceil(math.log2(lo) - 1e-9), math.floor(math.log2(hi) + 1e-9)
    step = every or next(s for limit, s in ((8, 1), (16, 2), (20, 5), (math.inf, 10)) if k1 - k0 <= limit)
    return [2.0**k for k in range(k0, k1 + 1) if k % step == 0]


def plot_sweep(res: dict, path: Path) -> None:
    import textwrap

    from planner.reports.plots import pyplot, save_figure

    plt = pyplot()
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    sizes = [row["size_bytes"] for row in res["rows"]]
    dec = _decimal(res)
    fig, ax = plt.subplots(figsize=(9, 5.5), layout="constrained")
    auto = [row["auto"]["time_s"] for row in res["rows"]]
    ax.loglog(sizes, auto, color="0.2", lw=7, alpha=0.18, solid_capstyle="round", label=f"auto ({_auto_meaning(res)})")
    for algo in res["algorithms"]:
        ax.loglog(sizes, [row["time_s"][algo] for row in res["rows"]], marker="o", ms=3, lw=1.6, label=algo)
    for c in res["crossovers"]:
        ax.axvline(c["size_bytes"], color="0.35", ls="--", lw=1)
        ax.annotate(f"{c['from']} \u2192 {c['to']}\n{fmt_bytes(c['size_bytes'], dec)}", (c["size_bytes"], 0.97),
                    xycoords=("data", "axes fraction"), ha="right", va="top", fontsize=9,
                    xytext=(-4, 0), textcoords="offset points")
    ax.set_xticks(_size_ticks(sizes[0], sizes[-1], decimal=dec))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: fmt_bytes(x, dec)))
    ax.xaxis.set_minor_locator(FixedLocator(_size_ticks(sizes[0], sizes[-1], every=1, decimal=dec)))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: fmt_time(y)))
    ax.set_xlabel("message size")
    ax.set_ylabel("time (log scale)")
    ax.grid(True, which="major", alpha=0.35)
    ax.legend(loc="lower right")
    ax.set_title(textwrap.fill(f"{op_label(res['op'])}: time vs message size. {res['setup']}", 95), fontsize=10)
    save_figure(fig, path)


# ---------------------------------------------------------------------------------------------
# The command.


def _algorithm(text: str, op: str) -> str:
    name = text.lower()
    if name not in ("auto", *ALGORITHMS):
        raise PlannerInputError(f"--algorithm {text}: allowed auto, {', '.join(ALGORITHMS)}")
    if op == P2P and name != "auto":
        raise PlannerInputError(f"--algorithm {text}: p2p is one send/recv, it has no algorithm to choose")
    return name


def _plot_path(args: CommArgs) -> Optional[Path]:
    if args.plot is None:
        return None
    if args.sweep is None:
        raise PlannerInputError("--plot draws a --sweep: add --sweep A..B, e.g. --sweep 1KiB..16GiB")
    from planner.reports.plots import check_plot_path

    return check_plot_path(args.plot)


def run_comm(args: CommArgs) -> str:
    """The text (or JSON) ``planner comm`` prints."""
    op = parse_op(args.op)
    algorithm = _algorithm(args.algorithm, op)
    plot = _plot_path(args)
    setup = build_setup(args)
    if args.sweep is None:
        size = parse_size(_require_size(args))
        _one_block_per_gpu(op, size, setup, "--size", args.size)
        record = price(setup, op, size, algorithm, size_is_decimal(args.size))
        return json.dumps(record, indent=2) if args.as_json else format_single(record)
    if args.size is not None:
        raise PlannerInputError("--size and --sweep: give one (a message, or a range of them)")
    if algorithm != "auto":
        raise PlannerInputError(f"--algorithm {algorithm} with --sweep: a sweep prices every algorithm; leave it out")
    sizes = parse_sweep(args.sweep)
    _one_block_per_gpu(op, float(sizes[0]), setup, "--sweep start", args.sweep.split("..")[0].strip())
    res = sweep(setup, op, sizes, _sweep_is_decimal(args.sweep))
    if plot is not None:
        plot_sweep(res, plot)
        res["plot"] = str(plot)
    if args.as_json:
        return json.dumps(res, indent=2)
    return format_sweep(res) + (f"\nwrote {plot}" if plot is not None else "")


def _sweep_is_decimal(text: str) -> bool:
    """The sweep's sizes are shown in the system its start was typed in (its end's, for bare bytes)."""
    start, _, rest = text.partition("..")
    end = rest.partition(":")[0]
    bare = _NUMBER.match(start) is not None and not _NUMBER.match(start).group(2)
    return size_is_decimal(end if bare else start)


def _one_block_per_gpu(op: str, size: float, setup: Setup, what: str, text: str) -> None:
    """An all-gather's output, a reduce-scatter's input and an all-to-all's sends are split into one
    block per GPU: at least one byte each."""
    if op in ("all_gather", "reduce_scatter", "all_to_all") and size < setup.gpus:
        whose = {"all_gather": "an all-gather's output", "reduce_scatter": "a reduce-scatter's input",
                 "all_to_all": "what an all-to-all's GPU sends"}[op]
        raise PlannerInputError(f"{what} {text}: {whose} holds one block per GPU, so at least "
                                f"{setup.gpus:,} B on {setup.gpus:,} GPUs")


def _require_size(args: CommArgs) -> str:
    if args.size is None:
        raise PlannerInputError("--size is required (e.g. --size 1GiB), or --sweep A..B for a table")
    return args.size
