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
