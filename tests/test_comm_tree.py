"""`planner comm` on a physical tree (--topology tree: GPU i linked to its parent (i-1)//2 and its
children, each link B per direction): the all-to-all goes through the tree's bisection, one link;
recursive halving / doubling, which needs a switch's full bisection, is not offered; and the
bytes/GPU label says what the number is for every algorithm. Values derived by hand here."""

from __future__ import annotations

import pytest

from costmodel.collectives import Fabric, LinkLevel, collective_time
from planner.comm import CommArgs, build_setup, format_single, price

GiB = 2.0**30
B, ALPHA = 400e9, 2e-6


def _one(topology, n):
    return build_setup(CommArgs(op="x", topology=topology, gpus=n, bandwidth="400GB/s", latency="2us"))


@pytest.mark.parametrize("n, share", [
    (2, 1 * 1 / 2),      # one link, 1 GPU each side
    (7, 3 * 4 / 7),      # complete binary tree: the root's subtrees hold 3 and 3, a cut leaves 3 | 4
    (8, 4 * 4 / 8),      # heap of 8: GPU 1's subtree {1, 3, 4, 7} is exactly half
    (12, 7 * 5 / 12),    # heap of 12: subtrees of GPUs 1 and 2 hold 7 and 4; below 1: 3 and 3; 7 | 5 is the most even
])
def test_the_busiest_tree_link_is_its_most_even_cut(n, share):
    from costmodel.collectives import _tree_busiest_share

    assert _tree_busiest_share(n) == pytest.approx(share, rel=1e-12)


def test_all_to_all_on_a_tree_is_bound_by_its_one_link_bisection():
    # The review's case: 8 GPUs, 400 GB/s, 2 us, 1 GiB. Pairwise exchange: 7 steps of 2 us; the link
    # joining the halves carries 4 x 4 / 8 x S = 2 S each way: 2 x 2^30 / 4e11 = 5.369 ms.
    # It was priced as on a switch: 7/8 x 2^30 / 4e11 + 14 us = 2.363 ms.
    rec = price(_one("tree", 8), "all_to_all", GiB)
    assert rec["algorithm"] == "direct"
    assert rec["time_s"] == pytest.approx(7 * ALPHA + 2 * GiB / B, rel=1e-12)
    assert rec["bytes_charged"]["link"] == pytest.approx(2 * GiB, rel=1e-6)
    assert rec["bytes_per_gpu"] == pytest.approx(7 / 8 * GiB)  # what it sends: S/8 to each of 7 peers
    # a switch keeps its full bisection: the injection bound
    sw = price(_one("switch", 8), "all_to_all", GiB)
    assert sw["time_s"] == pytest.approx(7 * ALPHA + 7 / 8 * GiB / B, rel=1e-12)
    assert "one link joining them" in format_single(rec)


def test_the_training_model_keeps_its_switched_tree_level():
    # Without textbook=True (the training cost model) a "tree" level stays a switched fat tree.
    link = LinkLevel(B, ALPHA, "tree")
    t, _ = collective_time("all_to_all", GiB, 1, 8, Fabric(intra=link, inter=link, domain_size=1))
    assert float(t) == pytest.approx(7 * ALPHA + 7 / 8 * GiB / B, rel=1e-12)
    t, _ = collective_time("reduce_scatter", GiB, 1, 8, Fabric(intra=link, inter=link, domain_size=1), "tree")
    assert float(t) == pytest.approx(3 * ALPHA + 7 / 8 * GiB / B, rel=1e-12)  # recursive halving


@pytest.mark.parametrize("op", ["reduce_scatter", "all_gather"])
def test_recursive_halving_is_not_offered_on_a_tree(op):
    # Its first step swaps S/2 between n/2 pairs across the halves: 4 x S/2 = 2 S through the one
    # link on a tree of 8, not S/2. The ring along the Euler tour is: 7 x 2 us + 7/8 x S/B.
    rec = price(_one("tree", 8), op, GiB)
    assert set(rec["alternatives_s"]) == {"ring"}
    assert rec["time_s"] == pytest.approx(7 * ALPHA + 7 / 8 * GiB / B, rel=1e-12)
    from hardware_catalog.errors import PlannerInputError

    with pytest.raises(PlannerInputError, match="does not apply"):
        price(_one("tree", 8), op, GiB, algorithm="tree")
    # on a switch it still is: ceil(log2 8) x 2 us + 7/8 x S/B
    assert price(_one("switch", 8), op, GiB)["alternatives_s"]["tree"] == pytest.approx(
        3 * ALPHA + 7 / 8 * GiB / B, rel=1e-12)


def test_the_bytes_per_gpu_label_holds_for_the_unpipelined_tree():
    # Seed doc 003 sec. 4.2: 2 ceil(log2 8) = 6 steps, each moving the whole 1 GiB (6 GiB in all);
    # the busiest GPU sends in the 3 broadcast steps only: 3 GiB. "data per step x steps" (6 GiB)
    # was false; the label says the sends summed over the steps it sends in.
    rec = price(_one("tree", 8), "all_reduce", GiB, algorithm="unpipelined_tree")
    assert rec["steps"]["link"] == 6 and rec["bytes_per_gpu"] == pytest.approx(3 * GiB)
    line = next(ln for ln in format_single(rec).splitlines() if ln.startswith("bytes/GPU"))
    assert "data per step x steps" not in line and "summed over the steps it sends in" in line
    red = price(_one("tree", 8), "reduce", GiB)
    line = next(ln for ln in format_single(red).splitlines() if ln.startswith("bytes/GPU"))
    assert "the root receives in all (summed over the steps it receives in)" in line
