"""Collective and P2P time models: hand-derived values and properties (fast)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodel.collectives import (
    ALGORITHMS,
    OPS,
    TOPOLOGIES,
    Fabric,
    LinkLevel,
    collective_time,
    fabric_from_cluster,
    p2p_time,
)
from hardware_catalog import get_cluster, get_gpu, get_interconnect, list_clusters

GB = 1e9
B = 100e9  # 100 GB/s per GPU per direction
CODE = {name: i for i, name in enumerate(ALGORITHMS)}


def fabric(intra="switch", inter="switch", b_intra=B, b_inter=B, a_intra=0.0, a_inter=0.0, domain=8, **kw):
    return Fabric(
        LinkLevel(b_intra, a_intra, intra),
        LinkLevel(b_inter, a_inter, inter, **kw),
        domain,
    )


def t_of(op, S, L, m, fab, algo="auto"):
    t, code = collective_time(op, S, L, m, fab, algo)
    return float(t), ALGORITHMS[int(code)]


# ----------------------------------------------------------------------------- hand-derived


def test_ring_all_reduce_8_gpus():
    # 2 (n-1)/n S/B = 2 * 7/8 * 1e9 / 1e11 = 17.5 ms (Patarasuk & Yuan; seed 003 sec. 4.2)
    t, algo = t_of("all_reduce", GB, 8, 1, fabric())
    assert t == pytest.approx(17.5e-3, rel=1e-12)
    assert algo == "ring"


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_ring_all_gather_reduce_scatter(op):
    assert t_of(op, GB, 8, 1, fabric())[0] == pytest.approx(7 / 8 * GB / B, rel=1e-12)


def test_ring_latency_steps():
    # 2(n-1) steps of alpha for all-reduce, n-1 for all-gather (zero bytes)
    fab = fabric(a_intra=1e-6)
    assert t_of("all_reduce", 0.0, 8, 1, fab, "ring")[0] == pytest.approx(14e-6)
    assert t_of("all_gather", 0.0, 8, 1, fab, "ring")[0] == pytest.approx(7e-6)


def test_broadcast_pipelined_chain_and_binomial_tree():
    fab = fabric(a_intra=1e-6)
    assert t_of("broadcast", GB, 8, 1, fab, "ring")[0] == pytest.approx(7e-6 + GB / B)
    assert t_of("broadcast", GB, 8, 1, fab, "tree")[0] == pytest.approx(3 * (1e-6 + GB / B))
    t, algo = t_of("broadcast", 1e3, 8, 1, fab)  # tiny: 3 tree steps beat 7 chain steps
    assert algo == "tree"


def test_tree_all_reduce_value():
    # Double binary tree: 2 floor(log2 n) alpha + 2 S/B (64 ranks: depth 6)
    fab = fabric(a_inter=5e-6)
    t, _ = t_of("all_reduce", GB, 1, 64, fab, "tree")
    assert t == pytest.approx(2 * 6 * 5e-6 + 2 * GB / B)


def test_tree_beats_ring_for_small_messages_at_large_n():
    fab = fabric(a_inter=5e-6)
    ring, _ = t_of("all_reduce", 1024, 1, 64, fab, "ring")
    tree, _ = t_of("all_reduce", 1024, 1, 64, fab, "tree")
    assert ring == pytest.approx(2 * 63 * 5e-6 + 2 * 63 / 64 * 1024 / B)
    assert tree < ring / 5
    assert t_of("all_reduce", 1024, 1, 64, fab)[1] == "tree"
    # ... and the ring wins large messages (2(n-1)/n < 2).
    assert t_of("all_reduce", 10 * GB, 1, 64, fab)[1] == "ring"


def test_pat_only_with_one_gpu_per_node():
    fab = fabric(a_intra=1e-6, a_inter=5e-6)
    t, _ = t_of("all_gather", 1024, 1, 64, fab, "tree")
    assert t == pytest.approx(6 * 5e-6 + 63 / 64 * 1024 / B)
    assert t_of("all_gather", 1024, 2, 64, fab, "tree")[0] == np.inf
    assert t_of("all_gather", 1024, 8, 1, fab, "tree")[0] == np.inf


def test_hierarchical_2_nodes_x_8():
    # Intra 100 GB/s, network 10 GB/s per GPU, S = 1 GB, no latency.
    fab = fabric(b_inter=10e9)
    hier, _ = t_of("all_reduce", GB, 8, 2, fab, "hierarchical")
    # intra RS + AG: 2 * 7/8 S/B1 = 17.5 ms; inter ring AR of S/8 over 2: 2 * 1/2 * 1.25e8/1e10 = 12.5 ms
    assert hier == pytest.approx(17.5e-3 + 12.5e-3)
    ring, _ = t_of("all_reduce", GB, 8, 2, fab, "ring")
    # flat ring: 8 GPUs share 8 x 10 GB/s of NIC -> min(100, 80) GB/s: 2 * 15/16 S / 80e9
    assert ring == pytest.approx(2 * 15 / 16 * GB / 80e9)
    assert t_of("all_reduce", GB, 8, 2, fab) == (pytest.approx(ring), "ring")
    # With a much faster scale-up level the hierarchical algorithm wins:
    fast = fabric(b_intra=1000e9, b_inter=10e9)
    t, algo = t_of("all_reduce", GB, 8, 2, fast)
    assert algo == "hierarchical"
    assert t == pytest.approx(2 * 7 / 8 * GB / 1000e9 + 12.5e-3)


def test_hierarchical_latency_and_ring_latency_mix():
    fab = fabric(a_intra=1e-6, a_inter=10e-6)
    # NCCL tuning model: 2(N-1) - 2(m-1) = 28 intra steps + 2 network steps
    assert t_of("all_reduce", 0.0, 8, 2, fab, "ring")[0] == pytest.approx(28e-6 + 20e-6)
    # hierarchical: 2 * 7 intra steps + ring over 2 nodes: 2 network steps (tree: 2 * 1)
    assert t_of("all_reduce", 0.0, 8, 2, fab, "hierarchical")[0] == pytest.approx(14e-6 + 20e-6)
    # NCCL tree: 2 ((L-1) a1 + log2(m) a2)
    assert t_of("all_reduce", 0.0, 8, 2, fab, "tree")[0] == pytest.approx(2 * (7e-6 + 10e-6))


def test_hierarchical_all_gather():
    fab = fabric(b_inter=10e9)
    # inter AG of S/8 over 2 nodes: 1/2 * 1.25e8 / 1e10; intra AG of S: 7/8 S/B
    t, _ = t_of("all_gather", GB, 8, 2, fab, "hierarchical")
    assert t == pytest.approx(0.5 * GB / 8 / 10e9 + 7 / 8 * GB / B)


def test_all_to_all_switch_value():
    fab = fabric(a_intra=1e-6)
    t, algo = t_of("all_to_all", GB, 8, 1, fab)
    assert algo == "direct"
    assert t == pytest.approx(7e-6 + 7 / 8 * GB / B)


def test_all_to_all_two_levels():
    fab = fabric(b_inter=10e9)
    # 8 x 4 ranks: intra part S/32 to each of 7 peers -> 7/32 S over 100 GB/s,
    # network part 24/32 S over 10 GB/s; they overlap, the network rules.
    t, _ = t_of("all_to_all", GB, 8, 4, fab)
    assert t == pytest.approx(0.75 * GB / 10e9)


def test_all_to_all_bisection_bound_on_ring_and_torus():
    # Physical ring of 16: 8*8 S/16 = 4 S cross 2 cut links of B/2 (= B) -> 4 S/B
    ring = fabric(intra="ring", domain=16)
    assert t_of("all_to_all", GB, 16, 1, ring)[0] == pytest.approx(4 * GB / B)
    # 4 x 4 torus: 4 S cross 8 cut links of B/4 -> 2 S/B; 4 x 4 mesh: 4 cut links -> 4 S/B
    assert t_of("all_to_all", GB, 1, 16, fabric(inter="torus2d"))[0] == pytest.approx(2 * GB / B)
    assert t_of("all_to_all", GB, 1, 16, fabric(inter="mesh2d"))[0] == pytest.approx(4 * GB / B)
    # On a switch the injection bound rules: 15/16 S/B
    assert t_of("all_to_all", GB, 1, 16, fabric())[0] == pytest.approx(15 / 16 * GB / B)


def test_torus_dimension_ordered_all_reduce():
    fab = fabric(inter="torus2d", a_inter=1e-6)
    # 4 x 4 torus, all 4 ports: 2 (n-1)/n S/B; 2 x (2 + 2) bidirectional-ring steps
    t, algo = t_of("all_reduce", GB, 1, 16, fab)
    assert algo == "torus2d"
    assert t == pytest.approx(2 * 15 / 16 * GB / B + 8e-6)
    # NCCL ring on the torus: one embedded ring, 2 of 4 ports -> B/2, 30 steps
    assert t_of("all_reduce", GB, 1, 16, fab, "ring")[0] == pytest.approx(2 * 15 / 16 * GB / (B / 2) + 30e-6)
    assert t_of("all_reduce", GB, 1, 16, fab, "tree")[0] == np.inf


def test_mesh_dimension_ordered_all_reduce():
    fab = fabric(inter="mesh2d", a_inter=1e-6)
    # lines instead of rings: half the bandwidth (B/4 per dimension), g-1 = 3 steps per dimension
    t, algo = t_of("all_reduce", GB, 1, 16, fab)
    assert algo == "mesh2d"
    assert t == pytest.approx(4 * 15 / 16 * GB / B + 12e-6)


def test_torus_given_dims_partial_group():
    # 2 nodes of an 8 x 8 torus: a row segment without wraparound = a 2-node line (B/4)
    fab = fabric(inter="torus2d", dims=(8, 8))
    assert t_of("all_reduce", GB, 1, 2, fab, "torus2d")[0] == pytest.approx(2 * 0.5 * GB / (B / 4))
    # a full row wraps: 8-ring, both directions -> B/2
    assert t_of("all_reduce", GB, 1, 8, fab, "torus2d")[0] == pytest.approx(2 * 7 / 8 * GB / (B / 2))


def test_mesh_never_faster_than_torus():
    S = np.logspace(2, 10, 9)[:, None]
    n = np.array([2, 4, 6, 9, 12, 16, 64, 100])[None, :]
    for op in OPS:
        tor = collective_time(op, S, 1, n, fabric(inter="torus2d", a_inter=2e-6))[0]
        mesh = collective_time(op, S, 1, n, fabric(inter="mesh2d", a_inter=2e-6))[0]
        assert np.all(mesh >= tor * (1 - 1e-12)), op


def test_fully_connected_scaleup():
    fab = fabric(intra="fully_connected", domain=8)
    # all 8 GPUs: 7 Hamiltonian rings use every link -> same as a switch
    assert t_of("all_reduce", GB, 8, 1, fab)[0] == pytest.approx(17.5e-3)
    # 4 of the 8: 3 of the 7 links of B/7
    assert t_of("all_reduce", GB, 4, 1, fab)[0] == pytest.approx(2 * 3 / 4 * GB / (3 * B / 7))
    # all-to-all: S/n on each own link of B/7
    assert t_of("all_to_all", GB, 4, 1, fab)[0] == pytest.approx(GB / 4 / (B / 7))
    assert t_of("all_reduce", GB, 8, 1, fab, "tree")[0] == np.inf


def test_physical_ring_uses_both_directions():
    fab = fabric(intra="ring", domain=8)
    assert t_of("all_reduce", GB, 8, 1, fab)[0] == pytest.approx(17.5e-3)


def test_oversubscription_divides_network_bandwidth():
    plain = t_of("all_reduce", GB, 1, 16, fabric())[0]
    over = t_of("all_reduce", GB, 1, 16, fabric(oversubscription=2.0))[0]
    assert over == pytest.approx(2 * plain)
    # ...and never touches a group inside one domain
    assert t_of("all_reduce", GB, 8, 1, fabric(oversubscription=2.0))[0] == pytest.approx(17.5e-3)


def test_not_applicable_is_inf():
    fab = fabric()
    assert t_of("all_reduce", GB, 8, 2, fab, "direct")[0] == np.inf
    assert t_of("all_to_all", GB, 8, 2, fab, "ring")[0] == np.inf
    assert t_of("all_reduce", GB, 8, 2, fab, "torus2d")[0] == np.inf
    with pytest.raises(ValueError):
        collective_time("gather", GB, 8, 1, fab)
    with pytest.raises(ValueError):
        collective_time("all_reduce", GB, 8, 1, fab, "nvls")
    with pytest.raises(ValueError):
        LinkLevel(B, 0.0, "hypercube")


def test_group_of_one_is_free():
    fab = fabric(a_intra=1e-6, a_inter=1e-6)
    for op in OPS:
        for algo in ("auto",) + ALGORITHMS:
            t, code = collective_time(op, GB, 1, 1, fab, algo)
            assert float(t) == 0.0 and int(code) == 0


def test_p2p():
    fab = fabric(a_intra=1e-6, b_inter=50e9, a_inter=3e-6)
    t = p2p_time([GB, GB], [False, True], fab)
    np.testing.assert_allclose(t, [1e-6 + GB / B, 3e-6 + GB / 50e9])
    # one xGMI link of a fully connected domain; one link of 4 on a torus
    fc = fabric(intra="fully_connected", inter="torus2d", domain=8)
    np.testing.assert_allclose(p2p_time(GB, [False, True], fc), [GB / (B / 7), GB / (B / 4)])


def test_fabric_from_catalog_cluster():
    c = get_cluster("dgx-h100")
    fab = fabric_from_cluster(c, get_gpu(c.gpu), get_interconnect(c.nic))
    assert fab.intra.bandwidth == pytest.approx(450e9 * c.scaleup_efficiency)
    assert fab.inter.bandwidth == pytest.approx(8 * 50e9 / 8 * c.network_efficiency)
    assert fab.intra.latency == pytest.approx(c.scaleup_latency_us * 1e-6)
    assert fab.domain_size == 8
    # Every catalog cluster gives finite, positive times for every op on a mixed batch.
    for name in list_clusters():
        c = get_cluster(name if isinstance(name, str) else name.name)
        fab = fabric_from_cluster(c, get_gpu(c.gpu), get_interconnect(c.nic))
        L = np.array([1, 2, c.scaleup_domain_size, 1, c.scaleup_domain_size])
        m = np.array([2, 1, 1, 64, 16])
        for op in OPS:
            t, _ = collective_time(op, 1e8, L, m, fab)
            assert np.all(np.isfinite(t)) and np.all(t > 0), (name, op)


# ----------------------------------------------------------------------------- properties

levels = st.builds(
    LinkLevel,
    bandwidth=st.floats(1e9, 2e12),
    latency=st.floats(0.0, 2e-5),
    topology=st.sampled_from(TOPOLOGIES),
    dims=st.one_of(st.none(), st.tuples(st.integers(1, 12), st.integers(1, 12))),
    oversubscription=st.floats(1.0, 4.0),
)


@st.composite
def cases(draw):
    fab = Fabric(draw(levels), draw(levels), draw(st.sampled_from([1, 2, 4, 6, 8, 16, 72])))
    k = draw(st.integers(1, 6))
    L = draw(st.lists(st.integers(1, fab.domain_size), min_size=k, max_size=k))
    m = draw(st.lists(st.integers(1, 300), min_size=k, max_size=k))
    S = draw(st.lists(st.floats(0.0, 1e11), min_size=k, max_size=k))
    op = draw(st.sampled_from(OPS))
    return op, np.array(S), np.array(L), np.array(m), fab


ALGOS = ("auto",) + ALGORITHMS
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _le(a, b):
    """a <= b up to rounding, inf-aware."""
    return np.all((a <= b * (1 + 1e-9) + 1e-18) | np.isinf(b))


@FAST
@given(cases(), st.floats(1.0, 10.0), st.floats(1.0, 10.0))
def test_more_bandwidth_never_slower(case, f_intra, f_inter):
    op, S, L, m, fab = case
    faster = Fabric(
        dataclasses.replace(fab.intra, bandwidth=fab.intra.bandwidth * f_intra),
        dataclasses.replace(fab.inter, bandwidth=fab.inter.bandwidth * f_inter),
        fab.domain_size,
    )
    for algo in ALGOS:
        assert _le(collective_time(op, S, L, m, faster, algo)[0], collective_time(op, S, L, m, fab, algo)[0]), algo
    crosses = m > 1
    assert _le(p2p_time(S, crosses, faster), p2p_time(S, crosses, fab))


@FAST
@given(cases(), st.floats(0.0, 1e-5), st.floats(0.0, 1e-5))
def test_more_latency_never_faster(case, d_intra, d_inter):
    op, S, L, m, fab = case
    slower = Fabric(
        dataclasses.replace(fab.intra, latency=fab.intra.latency + d_intra),
        dataclasses.replace(fab.inter, latency=fab.inter.latency + d_inter),
        fab.domain_size,
    )
    for algo in ALGOS:
        assert _le(collective_time(op, S, L, m, fab, algo)[0], collective_time(op, S, L, m, slower, algo)[0]), algo


@FAST
@given(cases(), st.floats(0.0, 1e10))
def test_monotone_in_message_size(case, extra):
    op, S, L, m, fab = case
    for algo in ALGOS:
        assert _le(collective_time(op, S, L, m, fab, algo)[0], collective_time(op, S + extra, L, m, fab, algo)[0]), algo
    assert _le(p2p_time(S, m > 1, fab), p2p_time(S + extra, m > 1, fab))


@FAST
@given(cases())
def test_group_of_one_costs_zero(case):
    op, S, L, m, fab = case
    for algo in ALGOS:
        t, code = collective_time(op, S, 1, 1, fab, algo)
        assert np.all(t == 0.0) and np.all(code == 0)


@FAST
@given(cases())
def test_auto_never_slower_than_any_algorithm(case):
    op, S, L, m, fab = case
    auto, code = collective_time(op, S, L, m, fab)
    assert np.all(np.isfinite(auto)) and np.all(auto >= 0)
    nccl_rings = op in ("all_gather", "reduce_scatter") and all(
        lvl.topology in ("switch", "tree") for lvl in (fab.intra, fab.inter))
    for algo in ALGORITHMS:
        if nccl_rings and algo == "hierarchical":
            continue  # not offered: NCCL runs AG/RS as rings (test_nccl_all_gather_is_a_ring)
        assert _le(auto, collective_time(op, S, L, m, fab, algo)[0]), algo
    # the reported algorithm prices what auto returned
    for i in range(len(S)):
        if L[i] * m[i] > 1:
            forced = collective_time(op, S[i], L[i], m[i], fab, ALGORITHMS[code[i]])[0]
            assert float(forced) == pytest.approx(float(auto[i]), rel=1e-9)


@FAST
@given(cases())
def test_vectorized_equals_scalar_calls(case):
    op, S, L, m, fab = case
    for algo in ("auto", "hierarchical"):
        t, code = collective_time(op, S, L, m, fab, algo)
        assert t.shape == S.shape and code.shape == S.shape
        for i in range(len(S)):
            ti, ci = collective_time(op, S[i], L[i], m[i], fab, algo)
            assert float(ti) == pytest.approx(float(t[i]), rel=1e-12, abs=0.0) or ti == t[i]
            assert int(ci) == int(code[i])
    # broadcasting: scalar message, array group sizes
    t, _ = collective_time(op, 1e6, L, m, fab)
    assert t.shape == L.shape


def test_nccl_all_gather_is_a_ring():
    # NVLink domains + a switched network: all_gather / reduce_scatter are NCCL rings over all
    # N ranks, (N-1) steps of latency, m-1 of them on the network (tuning.cc), even where a
    # domain-then-network split would have fewer steps.
    fab = fabric(b_intra=450e9, b_inter=50e9, a_intra=1e-6, a_inter=5e-6)
    for op in ("all_gather", "reduce_scatter"):
        auto, code = collective_time(op, 0.0, 8, 64, fab)
        assert ALGORITHMS[int(code)] == "ring"
        assert float(auto) == pytest.approx(63 * 5e-6 + 64 * 7 * 1e-6)
        hier, _ = collective_time(op, 0.0, 8, 64, fab, "hierarchical")
        assert float(hier) < float(auto)  # still priced when asked for by name
