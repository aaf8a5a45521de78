"""Review of `planner comm` against seed doc 003 sec. 4 and NCCL: values derived by hand here."""

from __future__ import annotations

import pytest

from planner.comm import CommArgs, build_setup, price


def _hier(n, g, **kw):
    return build_setup(CommArgs(op="x", topology="hierarchical", gpus=n, gpus_per_node=g, bandwidth="400GB/s",
                                latency="1us", network_bandwidth="50GB/s", network_latency="5us", **kw))


def test_nccl_ring_rule_reason_does_not_call_the_slower_ring_the_fastest():
    # 128 GPUs = 16 nodes x 8, B1 400 GB/s a1 1us, B2 50 GB/s a2 5us, all-gather of S = 64 KiB.
    # Ring through all N (NCCL tuning.cc latency model; seed 003 sec. 4.3):
    #   q(r-1) a1 + (q-1) a2 + (N-1)/N S max(1/B1, 1/(r B2)) = 112 us + 75 us + 127/128*65536/4e11
    # Hierarchical (seed 003 sec. 4.4): AG of S/r = 8192 B across 16 nodes by recursive doubling,
    #   ceil(log2 16) a2 + 15/16 * 8192/5e10, then the node's ring AG: 7 a1 + 7/8 * 65536/4e11.
    S = 65536.0
    ring = 112e-6 + 75e-6 + 127 / 128 * S / 4e11
    hier = 4 * 5e-6 + 15 / 16 * 8192 / 5e10 + 7e-6 + 7 / 8 * S / 4e11
    rec = price(_hier(128, 8), "all_gather", S)
    assert rec["algorithm"] == "ring"  # NCCL runs AG as a ring on NVLink + switched networks
    assert rec["time_s"] == pytest.approx(ring, rel=1e-9)
    assert rec["alternatives_s"]["hierarchical"] == pytest.approx(hier, rel=1e-9)
    assert hier < ring
    # The reason must not claim the ring is the fastest when a listed alternative is faster.
    assert "fastest" not in rec["reason"]
    assert "NCCL" in rec["reason"]


def _one(topology, n, B, alpha):
    return build_setup(CommArgs(op="x", topology=topology, gpus=n, bandwidth=B, latency=alpha))


@pytest.mark.parametrize("S", [1.0, 16.0, 1024.0, 2.0**30])
def test_bytes_per_gpu_exact_when_latency_dwarfs_transfer(S):
    # 1024 GPUs on a switch, B 900 GB/s, a 5 us, NCCL's double binary tree: 2*10 a + 2S/B. Each GPU sends 2S
    # (Sanders, Speck & Traeff 2009; NCCL tuning.cc tree algBw = busBw/2). The probe used to read
    # 2.00035 B for S = 1 B (transfer 2e-12 s next to 100 us of latency).
    rec = price(_one("switch", 1024, "900GB/s", "5us"), "all_reduce", S, "tree")
    assert rec["algorithm"] == "tree"
    assert rec["steps"] == {"link": 20}
    assert rec["bytes_charged"] == {"link": 2 * S}


def test_one_level_bytes_not_lost_next_to_a_huge_latency():
    # Ring all-reduce of 1 B on 1000 GPUs, a 0.9 s (the largest the parser allows is 1 s):
    # 2(n-1)/n S = 1.998 B per GPU (seed 003 sec. 4.2). It read 0 B and "link: overlapped by the
    # slower level" on a topology with one level.
    rec = price(_one("ring", 1000, "10TB/s", "0.9s"), "all_reduce", 1.0)
    assert rec["steps"] == {"link": 2 * 999}
    assert rec["bytes_charged"]["link"] == pytest.approx(2 * 999 / 1000, rel=1e-9)


def test_fully_connected_bytes_are_explained_like_ring_and_grid_links():
    # mi300x-8: 8 GPUs, each with one xGMI link to each of the 7 others (collectives.py:
    # fully_connected, each link B/7). A 2-GPU ring all-reduce moves 2(n-1)/n S = S per GPU over the
    # one link joining them (seed 003 sec. 4.2), i.e. 7 S charged at the GPU's total B. The text
    # printed "7 GiB at B" for a 1 GiB all-reduce without the note it gives for ring / mesh / torus.
    from planner.comm import format_single

    S = float(2**30)
    rec = price(build_setup(CommArgs(op="x", cluster="mi300x-8", gpus=2)), "all_reduce", S)
    assert rec["levels"][0]["links_per_gpu"] == 7
    assert rec["bytes_charged"]["scale-up"] == pytest.approx(7 * S, rel=1e-9)
    assert "its 7 fully_connected links" in format_single(rec)
    # On a switch there is no per-link split: no count, no note.
    sw = price(_one("switch", 8, "100GB/s", "2us"), "all_reduce", S)
    assert sw["levels"][0]["links_per_gpu"] is None
    assert "links:" not in format_single(sw)


def test_dims_over_the_gpu_limit_names_the_group_bound():
    # 2048 x 1024 = 2,097,152 GPUs > 2**20; a collective needs at least 2 GPUs, as --gpus says
    # ("from 2 to 1,048,576"); the message said "from 1" and "(1 GPUs each)".
    from hardware_catalog.errors import PlannerInputError

    with pytest.raises(PlannerInputError) as err:
        build_setup(CommArgs(op="x", topology="torus2d", dims="2048x1024", bandwidth="1GB/s", latency="1us"))
    msg = str(err.value)
    assert "2097152" in msg and "from 2 to 1,048,576" in msg and "(1 GPU each)" in msg
