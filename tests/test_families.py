"""Row families (planner.validate.families): named predicates and their error figures."""

from __future__ import annotations

import pytest

from planner.validate.families import FAMILIES, RowTraits, family_stats


def _traits(gpus=64, seq_len=4096, zero=1, net=50.0):
    return RowTraits(gpus=gpus, seq_len=seq_len, zero=zero, network_gbps_per_gpu=net, moe=False)


def test_family_predicates():
    names = [f.name for f in FAMILIES]
    assert names == ["MoE", "> 4,096 GPUs", "long context >= 32K", "ZeRO-3 on thin networks"]
    moe, big, long_ctx, thin = FAMILIES
    assert moe.predicate(RowTraits(gpus=8, seq_len=4096, zero=1, network_gbps_per_gpu=50.0, moe=True))
    assert not moe.predicate(_traits())
    assert big.predicate(_traits(gpus=8192)) and not big.predicate(_traits(gpus=4096))
    assert long_ctx.predicate(_traits(seq_len=32768)) and not long_ctx.predicate(_traits(seq_len=16384))
    # AWS p4d: 4 x 100 Gb/s EFA for 8 GPUs = 6.25 GB/s per GPU; a DGX A100 rail gives 25 GB/s.
    assert thin.predicate(_traits(zero=3, net=6.25))
    assert not thin.predicate(_traits(zero=3, net=25.0)) and not thin.predicate(_traits(zero=2, net=6.25))


def test_family_stats_median_and_p90():
    # Two long-context rows with errors -10% and +20%: median |err| 15%, p90 19% (linear
    # interpolation between 10 and 20 at 0.9); the short row counts nowhere but in no family.
    traits = [_traits(seq_len=65536), _traits(seq_len=131072), _traits()]
    stats = {s["family"]: s for s in family_stats(traits, [-0.10, 0.20, 0.5])}
    assert stats["long context >= 32K"]["rows"] == 2
    assert stats["long context >= 32K"]["median_abs_error"] == pytest.approx(0.15)
    assert stats["long context >= 32K"]["p90_abs_error"] == pytest.approx(0.19)
    assert stats["> 4,096 GPUs"]["rows"] == 0 and stats["> 4,096 GPUs"]["median_abs_error"] is None
