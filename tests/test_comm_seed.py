"""`planner comm` against seed doc 003 (switch, tree, 通信量), NCCL and nccl-tests: every expected value
is derived by hand in the comment beside it, never copied from the command's output."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from hardware_catalog.errors import PlannerInputError
from planner.comm import CommArgs, applicable, build_setup, format_single, format_sweep, parse_dims, parse_sweep, price, run_comm, sweep


def one_level(topology, n, B="100GB/s", alpha="5us"):
    return build_setup(CommArgs(op="x", topology=topology, gpus=n, bandwidth=B, latency=alpha))


def hierarchical(n, g, b1="400GB/s", a1="2us", b2="50GB/s", a2="5us"):
    return build_setup(CommArgs(op="x", topology="hierarchical", gpus=n, gpus_per_node=g, bandwidth=b1, latency=a1,
                                network_bandwidth=b2, network_latency=a2))


def cli(*args):
    proc = subprocess.run([sys.executable, "-m", "planner", "comm", *args], capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


# ---- 1. the switch's one-shot algorithms (seed doc 003 sec. 3.2 and glossary: all-reduce in 2 steps)


def test_switch_all_reduce_takes_the_seeds_two_steps():
    # 64 GPUs, B 400 GB/s, a 2 us, S 1 KiB. One-shot reduce-scatter (each GPU sends S/64 to each
    # of 63 others at once) + one-shot all-gather: 2a + 2(63/64) S/B = 4 us + 2*63/64*1024/4e11 s
    # = 4e-6 + 5.04e-9 s. NCCL's tree would take 2*6 a = 24 us; the ring 2*63 a = 252 us.
    rec = price(one_level("switch", 64, "400GB/s", "2us"), "all_reduce", 1024.0)
    assert rec["algorithm"] == "direct"
    assert rec["time_s"] == pytest.approx(4e-6 + 2 * 63 / 64 * 1024 / 4e11, rel=1e-12)
    assert rec["steps"] == {"link": 2}
    assert rec["bytes_per_gpu"] == pytest.approx(2 * 63 / 64 * 1024, rel=1e-12)
    assert "2 steps" in rec["formula"] and "seed doc 003 sec. 3.2" in rec["source"]


@pytest.mark.parametrize("op,steps,factor", [
    ("all_gather", 1, 1.0),      # one step: alpha + (n-1)/n S/B
    ("reduce_scatter", 1, 1.0),
    ("broadcast", 2, 2.0),       # one-shot scatter + one-shot all-gather: 2 alpha + 2(n-1)/n S/B
    ("reduce", 2, 2.0),          # its mirror: one-shot reduce-scatter + gather to the root
])
def test_switch_one_shot_gather_scatter_broadcast_reduce(op, steps, factor):
    # 16 GPUs, B 100 GB/s, a 5 us, S = 1 MB: steps * 5 us + factor * 15/16 * 1e6 / 1e11 s.
    rec = price(one_level("switch", 16), op, 1e6, "direct")
    assert rec["steps"] == {"link": steps}
    assert rec["time_s"] == pytest.approx(steps * 5e-6 + factor * 15 / 16 * 1e6 / 1e11, rel=1e-12)


def test_direct_is_not_offered_off_a_switch():
    # A tree, ring, mesh or torus does not link every pair: no one-shot algorithm there.
    for topology in ("tree", "ring", "mesh2d", "torus2d"):
        assert "direct" not in applicable(one_level(topology, 16), "all_reduce", 1e6)


def test_training_model_keeps_to_nccls_algorithms():
    # collective_time without textbook=True (the training model) never offers the one-shot or the
    # unpipelined tree: on a one-level switch of 64 GPUs at 1 KiB NCCL's tree wins, 2 log2i(64) a.
    import numpy as np

    from costmodel.collectives import ALGORITHMS, Fabric, LinkLevel, collective_time

    link = LinkLevel(400e9, 2e-6, "switch")
    t, code = collective_time("all_reduce", np.float64(1024), 1, 64, Fabric(link, link, 1))
    assert ALGORITHMS[int(code)] == "tree"
    assert float(t) == pytest.approx(12 * 2e-6 + 2 * 1024 / 4e11, rel=1e-12)


# ---- 2. a tree topology is not a switch: the seed's tree formula (sec. 4.2)


def test_tree_topology_prices_the_seeds_unpipelined_tree():
    # 64 GPUs, B 400 GB/s, a 2 us, S 1 KiB: 2 ceil(log2 64) (a + S/B) = 12 (2e-6 + 1024/4e11) s.
    tree = price(one_level("tree", 64, "400GB/s", "2us"), "all_reduce", 1024.0)
    assert tree["algorithm"] == "unpipelined_tree"
    assert tree["time_s"] == pytest.approx(12 * (2e-6 + 1024 / 4e11), rel=1e-12)
    assert tree["steps"] == {"link": 12}
    # each of the 12 steps moves the whole message: 12 S charged at B; the busiest GPU sends
    # log2(64) S = 6 S (the broadcast root, or the root's first child: S up + 5 S down)
    assert tree["bytes_charged"] == {"link": 12 * 1024}
    assert tree["bytes_per_gpu"] == 6 * 1024
    assert "seed doc 003 sec. 4.2" in tree["source"]
    switch = price(one_level("switch", 64, "400GB/s", "2us"), "all_reduce", 1024.0)
    assert switch["time_s"] < tree["time_s"]  # the switch's one-shot: 2 steps


def test_tree_topology_has_no_nccl_double_binary_tree_all_reduce():
    setup = one_level("tree", 16)
    assert set(applicable(setup, "all_reduce", 1e6)) == {"ring", "unpipelined_tree"}
    with pytest.raises(PlannerInputError, match="does not apply"):
        price(setup, "all_reduce", 1e6, "tree")
    # on a switch both trees are offered (both of NCCL's trees' edges exist there)
    assert {"tree", "unpipelined_tree", "direct", "ring"} == set(applicable(one_level("switch", 16), "all_reduce", 1e6))


# ---- 3. bytes each GPU sends (seed's 通信量) vs bytes charged at B


def test_mesh_bytes_sent_and_bytes_charged_are_told_apart():
    # 7 GPUs on a mesh2d: the most square grid of 7 is 7x1, a line. Ring all-reduce: each GPU
    # sends 2 (6/7) 1e9 B = 1.714 GB; a ring folded on a line gets B/4 (collectives.py
    # ring_bw), so the transfer charges 4 x that at B: 6.857 GB. Ring: 12 a + 6.857e9/1e11 s.
    rec = price(one_level("mesh2d", 7, "100GB/s", "10us"), "all_reduce", 1e9, decimal=True)
    assert rec["algorithm"] == "ring"
    assert rec["bytes_per_gpu"] == pytest.approx(2 * 6 / 7 * 1e9, rel=1e-12)
    assert rec["bytes_charged"]["link"] == pytest.approx(4 * 2 * 6 / 7 * 1e9, rel=1e-9)
    text = format_single(rec)
    assert "bytes/GPU   1.714 GB" in text and "bytes at B  6.857 GB at 100 GB/s" in text
    assert "GiB" not in text and "MiB" not in text


def test_hierarchical_bytes_sent_add_the_parts():
    # Hierarchical all-reduce, 64 GPUs = 8 nodes x 8, S = 1 GB: reduce-scatter + all-gather in the
    # node (2 x 7/8 S) and the network's all-reduce of S/8 by ring (2 x 7/8 x S/8; large S):
    # 2(7/8)(1e9) + 2(7/8)(1.25e8) = 1.75e9 + 2.1875e8 B.
    rec = price(hierarchical(64, 8), "all_reduce", 1e9, "hierarchical")
    assert rec["bytes_per_gpu"] == pytest.approx(1.75e9 + 2.1875e8, rel=1e-12)


# ---- 4. reduce on every topology (seed doc 000's primitive table; nccl-tests busbw factor 1)


@pytest.mark.parametrize("topology,algorithm,want", [
    ("ring", "ring", 15 * 5e-6 + 1e6 / 1e11),                   # chain into the root: (n-1) a + S/B
    ("tree", "tree", 4 * (5e-6 + 1e6 / 1e11)),                  # binomial: ceil(log2 16)(a + S/B)
    ("switch", "direct", 2 * 5e-6 + 2 * 15 / 16 * 1e6 / 1e11),  # reduce-scatter + gather, 2 steps
    ("torus2d", "torus2d", 2 * 4 * 5e-6 + 2 * 15 / 16 * 1e6 / 1e11),  # 4x4: 2 x (2+2 steps, 15/16 S/B)
    ("mesh2d", "ring", 15 * 5e-6 + 1e6 / 5e10),                 # ring on a 4x4 mesh: B/2
])
def test_reduce_on_every_one_level_topology(topology, algorithm, want):
    # 16 GPUs, B 100 GB/s, a 5 us, S = 1 MB; auto picks the fastest: the values above.
    rec = price(one_level(topology, 16), "reduce", 1e6)
    assert (rec["algorithm"], rec["time_s"]) == (algorithm, pytest.approx(want, rel=1e-12))
    assert rec["busbw_factor"] == 1.0  # nccl-tests doc/PERFORMANCE.md: reduce busbw = algbw


def test_reduce_hierarchical_and_cli():
    # 32 GPUs = 4 nodes x 8, ring through all: q(r-1) a1 + (q-1) a2 = 28*2 + 3*5 = 71 us, transfer
    # S max(1/B1, 1/(r B2)) = 64e6/4e11 = 160 us.
    rec = price(hierarchical(32, 8), "reduce", 64e6)
    assert rec["algorithm"] == "ring" and rec["time_s"] == pytest.approx(231e-6, rel=1e-12)
    code, out, err = cli("reduce", "--topology", "switch", "--gpus", "8", "--bandwidth", "100GB/s",
                         "--latency", "2us", "--size", "1MB")
    assert code == 0, err
    assert out.startswith("reduce of 1 MB")


# ---- 5. NCCL's tree across nodes: log2i(nNodes), the floor (src/include/utils.h)


def test_two_level_tree_uses_nccls_floor_log2():
    # 48 GPUs = 6 nodes x 8, tuning.cc: 2((r-1) a1 + log2i(6) a2) = 2(7*2us + 2*5us) = 48 us
    # (ceil would give 2(14 + 15) = 58 us), + 2S max(1/B1, 1/(r B2)) = 2 * 1e6 / 4e11.
    rec = price(hierarchical(48, 8), "all_reduce", 1e6, "tree")
    assert rec["steps"] == {"scale-up": 14, "network": 4}
    assert rec["time_s"] == pytest.approx(48e-6 + 2e6 / 4e11, rel=1e-12)


# ---- 6. exact step counts


@pytest.mark.parametrize("latency", ["1ns", "0.01ns", "1s"])
def test_ring_steps_are_exact_integers_whatever_the_latency(latency):
    # Ring all-reduce on 8 GPUs: 2(8-1) = 14 steps (seed doc 003 sec. 4.2), even where the
    # latency is 1e-20 of a 1 TB transfer (it read 13.87 and 0).
    rec = price(one_level("ring", 8, "1GB/s", latency), "all_reduce", 1e12)
    assert rec["steps"] == {"link": 14} and isinstance(rec["steps"]["link"], int)


def test_hierarchical_steps_exact_next_to_a_large_transfer():
    # Hierarchical all-reduce, 64 = 8 x 8, 1 TB: 2(r-1) = 14 scale-up steps; the network's
    # all-reduce of S/8 by ring (the larger message): 2(q-1) = 14 network steps.
    rec = price(hierarchical(64, 8, a1="0.01ns", a2="0.01ns"), "all_reduce", 1e12, "hierarchical")
    assert rec["steps"] == {"scale-up": 14, "network": 14}


# ---- 7. P2P tells the truth about its hops


def test_p2p_explanation_compares_the_two_hops():
    # 16 GPUs = 2 nodes x 8: across the network 5 us + 64e6/5e10 = 1.285 ms; inside a node
    # 2 us + 64e6/1e10 = 6.402 ms: the network hop is the FASTER one here.
    setup = hierarchical(16, 8, b1="10GB/s", a1="2us", b2="50GB/s", a2="5us")
    rec = price(setup, "p2p", 64e6)
    assert rec["time_s"] == pytest.approx(5e-6 + 64e6 / 5e10, rel=1e-12)
    assert "slowest" not in rec["reason"] and "faster than one inside a node" in rec["reason"]
    text = format_single(rec)
    assert "between 2 GPUs" in text and "n = 16" not in text and "on 16 GPUs" not in text
    assert rec["gpus"] == 2


# ---- 8. two levels at once: the transfer is the slower level's, not the sum


def test_levels_at_once_are_said_so():
    # 32 GPUs = 4 nodes x 8, S 64 MB, NCCL's tree: the chain in a node moves 2S at B1 =
    # 128e6/4e11 = 320 us while the network moves 2S/r = 16e6 B at B2 = 320 us: a tie; transfer
    # = max = 320 us, latency 2(7*2 + 2*5) = 48 us.
    rec = price(hierarchical(32, 8), "all_reduce", 64e6)
    assert rec["algorithm"] == "tree" and rec["levels_at_once"]
    assert rec["transfer_s"] == pytest.approx(320e-6, rel=1e-9)
    assert rec["bytes_charged"]["scale-up"] == pytest.approx(128e6, rel=1e-9)
    assert rec["bytes_charged"]["network"] == pytest.approx(16e6, rel=1e-9)
    text = " ".join(format_single(rec).split())
    assert "at the same time" in text and "not the sum" in text
    # hierarchical: one after the other (reduce-scatter, network, all-gather)
    assert not price(hierarchical(32, 8), "all_reduce", 64e6, "hierarchical")["levels_at_once"]


# ---- 9. units as typed


def test_sizes_print_in_the_system_typed():
    base = dict(op="all-reduce", topology="ring", gpus=8, bandwidth="100GB/s", latency="5us")
    assert run_comm(CommArgs(size="1GB", **base)).startswith("all-reduce of 1 GB (1,000,000,000 B)")
    assert run_comm(CommArgs(size="1GiB", **base)).startswith("all-reduce of 1 GiB (1,073,741,824 B)")
    # 2 (7/8) 1 GB = 1.75 GB sent, decimal beside the decimal GB/s
    assert "bytes/GPU   1.75 GB" in run_comm(CommArgs(size="1GB", **base))
    rows = run_comm(CommArgs(sweep="1KB..1GB:x10", **base)).splitlines()[3:10]
    assert [r.split()[0:2] for r in rows] == [["1", "kB"], ["10", "kB"], ["100", "kB"], ["1", "MB"],
                                              ["10", "MB"], ["100", "MB"], ["1", "GB"]]


def test_json_says_gbps_means_bytes():
    rec = json.loads(run_comm(CommArgs(op="all-reduce", topology="ring", gpus=8, bandwidth="100GB/s",
                                       latency="5us", size="1GB", as_json=True)))
    assert "10^9 bytes per second" in rec["units"]["*_gbps"]
    assert rec["size_units"] == "decimal"


# ---- 10. errors: one line, exit 2


@pytest.mark.parametrize("flag,value", [("--size", "-1GB"), ("--bandwidth", "-5GB/s"), ("--latency", "-1us")])
def test_negative_values_say_positive(flag, value):
    args = {"--size": "1GB", "--bandwidth": "100GB/s", "--latency": "5us"} | {flag: value}
    code, out, err = cli("all-reduce", "--topology", "ring", "--gpus", "8", *[x for kv in args.items() for x in kv])
    assert code == 2 and out == "" and err.strip().count("\n") == 0
    # a latency may be 0 (an ideal link): "0 or positive" there
    assert ("must be 0 or positive" if flag == "--latency" else "must be positive") in err and value in err


def test_a_one_cell_grid_says_two_gpus():
    with pytest.raises(PlannerInputError, match="at least 2"):
        parse_dims("1x1")


def test_all_gather_needs_a_byte_per_gpu():
    # 1,048,576 GPUs gathering 4 B: the output holds one block per GPU, at least 1,048,576 B.
    code, out, err = cli("all-gather", "--topology", "switch", "--gpus", "1048576", "--bandwidth", "1GB/s",
                         "--latency", "1us", "--size", "4")
    assert code == 2 and out == "" and err.strip().count("\n") == 0 and "1,048,576 B" in err
    assert cli("all-gather", "--topology", "switch", "--gpus", "8", "--bandwidth", "1GB/s",
               "--latency", "1us", "--size", "8")[0] == 0  # one byte each: allowed


def test_tree_inside_one_domain_has_the_depth_of_the_tree_across_domains():
    # 6 GPUs on one 8-GPU switch: a binary tree of 6 ranks is 2 deep (log2i(6) = 2), so 2 x 2 = 4
    # steps of 10 us, + 2S/B = 2e3 / 1e11; the same 6 GPUs as one switch level said 4 steps, the
    # hierarchical form said 2 ceil(log2 6) = 6. 72 GPUs of an NVL72: log2i(72) = 6, 12 x 1.9 us.
    args = ("all-reduce", "--size", "1KB", "--algorithm", "tree", "--json")
    one = ("--bandwidth", "100GB/s", "--latency", "10us")
    code, out, err = cli(*args, "--topology", "hierarchical", "--gpus", "6", "--gpus-per-node", "8", *one,
                         "--network-bandwidth", "50GB/s", "--network-latency", "5us")
    assert code == 0, err
    assert json.loads(out)["time_s"] == pytest.approx(4 * 10e-6 + 2e3 / 1e11, rel=1e-12)
    code, out, err = cli(*args, "--topology", "switch", "--gpus", "6", *one)
    assert json.loads(out)["time_s"] == pytest.approx(4 * 10e-6 + 2e3 / 1e11, rel=1e-12)
    code, out, err = cli(*args, "--cluster", "gb200-nvl72", "--gpus", "72")
    assert code == 0, err
    assert json.loads(out)["time_s"] == pytest.approx(12 * 1.9e-6, rel=1e-3)


def test_a_tree_network_between_nodes_is_a_fat_tree_and_says_so():
    # Between nodes "tree" is priced with full bisection (a fat tree of switches), the same as a
    # switch; the header said "tree network", read as the one-level physical tree (4x slower here).
    args = ("all-to-all", "--topology", "hierarchical", "--gpus", "128", "--gpus-per-node", "8", "--bandwidth",
            "400GB/s", "--latency", "2us", "--network-bandwidth", "50GB/s", "--network-latency", "5us", "--size", "1GB")
    tree = cli(*args, "--network-topology", "tree")
    switch = cli(*args, "--network-topology", "switch")
    assert tree[0] == 0 and switch[0] == 0, tree[2]
    assert "fat-tree (as a switch) network" in tree[1].splitlines()[0]
    assert tree[1].splitlines()[1] == switch[1].splitlines()[1]  # the time line
