"""`planner comm`: the collective / P2P calculator. Expected values are derived here from the
textbook formulas (seed doc 003 sec. 4, Patarasuk & Yuan 2009, Thakur et al. 2005, the
collectives.py docstrings), never copied from the command's output."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from hardware_catalog.errors import PlannerInputError
from planner.comm import (
    CommArgs,
    applicable,
    build_setup,
    parse_bandwidth,
    parse_latency,
    parse_op,
    parse_size,
    parse_sweep,
    price,
    run_comm,
    sweep,
)

GiB = 2**30


def one_level(topology, n, B="100GB/s", alpha="5us", **kw):
    return build_setup(CommArgs(op="x", topology=topology, gpus=n, bandwidth=B, latency=alpha, **kw))


def hierarchical(n, g, b1="400GB/s", a1="2us", b2="50GB/s", a2="5us", **kw):
    return build_setup(CommArgs(op="x", topology="hierarchical", gpus=n, gpus_per_node=g, bandwidth=b1, latency=a1,
                                network_bandwidth=b2, network_latency=a2, **kw))


def cli(*args):
    proc = subprocess.run([sys.executable, "-m", "planner", "comm", *args], capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


# ---- units


@pytest.mark.parametrize("text,value", [
    ("1GiB", 1073741824), ("1 GiB", 2**30), ("64MB", 64e6), ("1KB", 1000), ("1kB", 1000), ("1.5MiB", 1.5 * 2**20),
    ("4096", 4096), ("2TB", 2e12), ("1e3B", 1000),
])
def test_sizes_parse_decimal_and_binary_prefixes(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text,value", [
    ("400Gb/s", 50e9), ("400GB/s", 400e9), ("400Gbps", 50e9), ("1TB/s", 1e12), ("1GiB/s", 2**30),
    ("800MB/s", 800e6), ("100Gbit/s", 12.5e9),
])
def test_bandwidth_units_bits_and_bytes(text, value):
    assert parse_bandwidth(text) == pytest.approx(value, rel=1e-15)


@pytest.mark.parametrize("text,value", [
    ("2us", 2e-6), ("2\u00b5s", 2e-6), ("2\u03bcs", 2e-6), ("500ns", 5e-7), ("1.5ms", 1.5e-3), ("1s", 1.0), ("0us", 0.0),
])
def test_latency_units(text, value):
    assert parse_latency(text) == pytest.approx(value, rel=1e-15)


@pytest.mark.parametrize("parse,text", [
    (parse_size, "1Gb"), (parse_size, "1GiBs"), (parse_size, "-1GB"), (parse_size, "0B"),
    (parse_bandwidth, "100"), (parse_bandwidth, "100GB"), (parse_latency, "5"), (parse_latency, "5 sec"),
    (parse_op, "gather"), (parse_sweep, "1KiB..1MiB:x1"), (parse_sweep, "1MiB..1KiB"),
])
def test_bad_values_raise_one_line_naming_the_value(parse, text):
    with pytest.raises(PlannerInputError) as err:
        parse(text)
    assert text in str(err.value) and "\n" not in str(err.value)


def test_op_names_accept_hyphens_underscores_and_run_together():
    assert {parse_op(t) for t in ("all-reduce", "all_reduce", "AllReduce")} == {"all_reduce"}
    assert parse_op("reduce-scatter") == "reduce_scatter" and parse_op("all_to_all") == "all_to_all"
    assert parse_op("p2p") == "p2p"


def test_sweep_sizes_double_or_grow_by_a_factor():
    assert list(parse_sweep("1KiB..16KiB")) == [1024, 2048, 4096, 8192, 16384]
    assert list(parse_sweep("1KB..1MB:x10")) == pytest.approx([1e3, 1e4, 1e5, 1e6])


# ---- one level: textbook formulas


def test_ring_all_reduce_8_gpus():
    N, M, B, a = 8, GiB, 100e9, 5e-6
    want = 2 * (N - 1) / N * M / B + 2 * (N - 1) * a  # Patarasuk & Yuan; seed doc 003 sec. 4.2
    for setup, algo in ((one_level("ring", N), "auto"), (one_level("switch", N), "ring")):
        rec = price(setup, "all_reduce", M, algo)
        assert rec["algorithm"] == "ring"
        assert rec["time_s"] == pytest.approx(want, rel=1e-12)
        assert rec["steps"] == {"link": 2 * (N - 1)}
        assert rec["bytes_charged"]["link"] == pytest.approx(2 * (N - 1) / N * M, rel=1e-8)
        assert rec["latency_s"] == pytest.approx(2 * (N - 1) * a, rel=1e-9)


def test_ring_all_gather():
    N, M, B, a = 8, GiB, 100e9, 5e-6
    rec = price(one_level("ring", N), "all_gather", M)
    assert rec["algorithm"] == "ring"
    assert rec["time_s"] == pytest.approx((N - 1) / N * M / B + (N - 1) * a, rel=1e-12)


def test_tree_all_reduce_on_a_switch_is_pipelined():
    N, M, B, a = 12, 64 * 2**20, 100e9, 5e-6
    rec = price(one_level("switch", N), "all_reduce", M, "tree")
    # NCCL's double binary tree over N nodes of one GPU (tuning.cc): 2 log2i(N) steps, log2i the
    # floor of log2 (src/include/utils.h): log2i(12) = 3 -> 6 steps; 2M through each GPU.
    assert rec["time_s"] == pytest.approx(2 * 3 * a + 2 * M / B, rel=1e-12)
    assert rec["steps"]["link"] == 6


def test_recursive_doubling_all_gather_on_a_switch():
    N, M, B, a = 16, 1e6, 100e9, 5e-6
    rec = price(one_level("switch", N), "all_gather", M, "tree")  # Thakur et al. 2005 sec. 3.1
    assert rec["time_s"] == pytest.approx(math.log2(N) * a + (N - 1) / N * M / B, rel=1e-12)


def test_torus_4x4_reduce_scatter_by_dimensions():
    # collectives.py dims_rs: a g-GPU torus dimension is a bidirectional ring, ceil((g-1)/2) steps;
    # a square torus moves (n-1)/n S at B; a square mesh takes g-1 steps a dimension, twice the bytes.
    g, M, B, a = 4, GiB, 100e9, 1e-6
    n = g * g
    torus = price(one_level("torus2d", None, "100GB/s", "1us", dims="4x4"), "reduce_scatter", M)
    assert torus["algorithm"] == "torus2d"
    assert torus["time_s"] == pytest.approx(2 * math.ceil((g - 1) / 2) * a + (n - 1) / n * M / B, rel=1e-12)
    mesh = price(one_level("mesh2d", n, "100GB/s", "1us"), "reduce_scatter", M, "mesh2d")
    assert mesh["time_s"] == pytest.approx(2 * (g - 1) * a + 2 * (n - 1) / n * M / B, rel=1e-12)


def test_p2p_is_alpha_plus_size_over_bandwidth():
    M, B, a = 64 * 2**20, 100e9, 5e-6
    rec = price(one_level("switch", 2), "p2p", M)
    assert rec["time_s"] == pytest.approx(a + M / B, rel=1e-12)  # seed doc 003 sec. 4.5
    assert rec["busbw_gbps"] == pytest.approx(M / (a + M / B) / 1e9, rel=1e-12)
    ring = price(one_level("ring", 8), "p2p", M)  # one of a ring GPU's two links: B/2
    assert ring["time_s"] == pytest.approx(a + M / (B / 2), rel=1e-12)
    # A ring of two GPUs: both of a GPU's links join the pair, as its all-gather already counts
    # (n = 2: one step of S/2 at B), so the one send runs at B, not B/2.
    pair = price(one_level("ring", 2), "p2p", M)
    assert pair["time_s"] == pytest.approx(a + M / B, rel=1e-12)
    gather = price(one_level("ring", 2), "all_gather", 2 * M)  # each GPU sends its M to the other
    assert pair["time_s"] == pytest.approx(gather["time_s"], rel=1e-12)


@pytest.mark.parametrize("op,factor", [
    ("all_reduce", 2 * 7 / 8), ("all_gather", 7 / 8), ("reduce_scatter", 7 / 8), ("all_to_all", 7 / 8), ("broadcast", 1.0),
])
def test_busbw_factors_as_nccl_tests(op, factor):
    rec = price(one_level("switch", 8), op, GiB)
    algbw = GiB / rec["time_s"] / 1e9
    assert rec["algbw_gbps"] == pytest.approx(algbw, rel=1e-12)
    assert rec["busbw_gbps"] == pytest.approx(algbw * factor, rel=1e-12)


# ---- two levels


def test_hierarchical_all_reduce_per_level_steps_and_bytes():
    r, q, M = 8, 4, GiB
    B1, a1, B2, a2 = 400e9, 2e-6, 50e9, 5e-6
    rec = price(hierarchical(r * q, r), "all_reduce", M, "hierarchical")
    # seed doc 003 sec. 4.4: RS inside the node, AR of M/r across nodes (a ring here: 1 GiB is
    # far past the ring/tree crossover on 4 nodes), AG inside the node.
    intra = 2 * ((r - 1) * a1 + (r - 1) / r * M / B1)
    inter = 2 * (q - 1) * a2 + 2 * (q - 1) / q * (M / r) / B2
    assert rec["time_s"] == pytest.approx(intra + inter, rel=1e-12)
    assert rec["steps"] == {"scale-up": 2 * (r - 1), "network": 2 * (q - 1)}
    assert rec["bytes_charged"]["scale-up"] == pytest.approx(2 * (r - 1) / r * M, rel=1e-8)
    assert rec["bytes_charged"]["network"] == pytest.approx(2 * (q - 1) / q * M / r, rel=1e-8)


def test_all_gather_on_nvlink_and_a_switched_network_is_a_ring_as_in_nccl():
    rec = price(hierarchical(64, 8), "all_gather", 256 * 2**20)
    assert rec["algorithm"] == "ring" and "tuning.cc" in rec["reason"]
    # one ring through all N GPUs: q(r-1) NVLink steps and q-1 network steps
    assert rec["steps"] == {"scale-up": 8 * 7, "network": 7}


def test_cluster_groups_fill_scale_up_domains():
    setup = build_setup(CommArgs(op="x", cluster="dgx-h100", gpus=64))
    assert (setup.n_local, setup.n_nodes) == (8, 8) and setup.two_level
    inside = build_setup(CommArgs(op="x", cluster="dgx-h100", gpus=4))
    assert (inside.n_local, inside.n_nodes) == (4, 1) and not inside.two_level


@pytest.mark.parametrize("kw,needle", [
    (dict(cluster="dgx-h100", gpus=16, bandwidth="1GB/s"), "--bandwidth"),
    (dict(topology="hierarchical", gpus=16, bandwidth="1GB/s", latency="1us"), "--gpus-per-node"),
    (dict(topology="ring", gpus=16, gpus_per_node=8, bandwidth="1GB/s", latency="1us"), "--gpus-per-node"),
    (dict(topology="torus2d", gpus=8, dims="4x4", bandwidth="1GB/s", latency="1us"), "--dims"),
    (dict(topology="ring", gpus=8, latency="1us"), "--bandwidth"),
])
def test_conflicting_or_missing_options_say_which(kw, needle):
    with pytest.raises(PlannerInputError, match=needle):
        build_setup(CommArgs(op="x", **kw))


# ---- sweep


def test_sweep_finds_the_tree_to_ring_crossover_on_a_tree():
    N, B, a = 64, 400e9, 2e-6
    res = sweep(one_level("tree", N, "400GB/s", "2us"), "all_reduce", parse_sweep("1KiB..16GiB"))
    assert res["algorithms"] == ["ring", "unpipelined_tree"]
    assert res["rows"][0]["auto"]["algorithm"] == "unpipelined_tree" and res["rows"][-1]["auto"]["algorithm"] == "ring"
    # ring 2(N-1)a + 2(N-1)/N S/B = the seed's tree 2L(a + S/B), L = log2 N = 6
    #   ->  S* = (N-1-L) a B / (L - (N-1)/N) = 57 * 2e-6 * 4e11 / (6 - 63/64) = 9.0916e6 B
    (cross,) = res["crossovers"]
    assert (cross["from"], cross["to"]) == ("unpipelined_tree", "ring")
    assert cross["size_bytes"] == pytest.approx(57 * a * B / (6 - 63 / 64), rel=1e-6)


def test_sweep_algorithm_columns_follow_the_topology():
    assert sweep(one_level("ring", 8), "all_reduce", parse_sweep("1KiB..1MiB"))["algorithms"] == ["ring"]
    assert sweep(hierarchical(64, 8), "all_reduce", parse_sweep("1KiB..1MiB"))["algorithms"] == ["ring", "tree", "hierarchical"]
    assert sweep(one_level("torus2d", 16), "all_to_all", parse_sweep("1KiB..1MiB"))["algorithms"] == ["direct", "torus2d"]


# ---- the command as a user runs it


def test_json_is_one_object_with_the_documented_keys():
    code, out, err = cli("all-reduce", "--size", "1GiB", "--topology", "ring", "--gpus", "8",
                         "--bandwidth", "100GB/s", "--latency", "5us", "--json")
    assert code == 0, err
    rec = json.loads(out)
    for key in ("op", "size_bytes", "gpus", "algorithm", "reason", "time_s", "steps", "bytes_per_gpu",
                "algbw_gbps", "busbw_gbps", "formula", "source"):
        assert key in rec
    assert rec["size_bytes"] == GiB and rec["op"] == "all_reduce"


@pytest.mark.parametrize("args,needle", [
    (("--size", "1GiB", "--bandwidth", "100GB", "--latency", "5us"), "100GB"),
    (("--size", "1Gb", "--bandwidth", "100GB/s", "--latency", "5us"), "1Gb"),
    (("--size", "1GiB", "--bandwidth", "100GB/s", "--latency", "5 weeks"), "5 weeks"),
])
def test_bad_unit_exits_2_with_one_line(args, needle):
    code, out, err = cli("all-reduce", "--topology", "ring", "--gpus", "8", *args)
    assert code == 2 and out == ""
    assert "Traceback" not in err and err.strip().count("\n") == 0 and needle in err


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "sweep.png"
    text = run_comm(CommArgs(op="all-reduce", topology="switch", gpus=64, bandwidth="400GB/s", latency="2us",
                             sweep="1KiB..1GiB:x8", plot=path))
    assert path.read_bytes().startswith(b"\x89PNG")
    assert "crossover" in text or "no crossover" in text


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "broadcast", "all_to_all", "p2p"])
def test_steps_and_bytes_rebuild_the_time(op):
    # Levels of different speed (B1 = 400 GB/s, r*B2 = 8 x 45 GB/s): no tie between them, so
    # t = sum(steps * alpha) + sum(bytes / B) for every algorithm that applies.
    setup = hierarchical(64, 8, b2="45GB/s")
    algos = ["auto"] if op == "p2p" else ["auto", *applicable(setup, op, 1e6)]
    for S in (1e3, 1e6, 1e9):
        for algo in algos:
            rec = price(setup, op, S, algo)
            levels = {lvl["name"]: lvl for lvl in rec["levels"]}
            lat = sum(k * levels[name]["latency_s"] for name, k in rec["steps"].items())
            each = [b / (levels[name]["bandwidth_gbps"] * 1e9) for name, b in rec["bytes_charged"].items()]
            # levels at once: the transfer is the slower level's; one after the other: the sum
            bw = max(each) if rec["levels_at_once"] else sum(each)
            assert lat + bw == pytest.approx(rec["time_s"], rel=1e-6), (S, algo)
            assert all(isinstance(k, int) for k in rec["steps"].values())
