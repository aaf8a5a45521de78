"""Tests of the layout search: rules, space enumeration, exhaustive and optuna search, CLI.

The cost model is only ever compared with itself (a brute-force loop of single-layout
``evaluate_batch`` calls vs the vectorized search), so these tests hold whatever its numbers.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from costmodel import Layout, LayoutBatch, evaluate_batch
from costmodel.layout import RECOMPUTE
from costmodel.pipeline import stage_layer_split, vpp_divides_stages
from hardware_catalog.errors import PlannerInputError
from hardware_catalog.schema import ClusterSpec, GPUSpec, ModelSpec, MoESpec
from planner import search
from search import parse_gpu_counts
from search.exhaustive import memory_limit_gib, pareto_mask
from search.rules import RULES, RuleContext, check_layout, first_violation, valid_mask, violations
from search.space import Problem, build_space, domains, normalize_pins

CITED = {"*": "test fixture"}


def gpu_spec(memory_gib: float = 79.18, fp8: bool = True, name: str = "test-gpu") -> GPUSpec:
    return GPUSpec(
        name=name, vendor="nvidia", bf16_tflops=989.4, fp16_tflops=989.4, fp8_tflops=1978.9 if fp8 else None,
        tf32_tflops=494.7, fp32_tflops=66.9, memory_gib=memory_gib, memory_bandwidth_gbps=3350,
        scaleup_bandwidth_gbps=450, scaleup_link="NVLink 4", sources=CITED,
    )


def cluster_spec(gpu: GPUSpec, domain: int = 8) -> ClusterSpec:
    return ClusterSpec(
        name="test-cluster", gpu=gpu.name, gpus_per_node=8, scaleup_domain_size=domain, scaleup_latency_us=3.0,
        scaleup_efficiency=0.8, nic="ib-ndr", nics_per_node=8, network_efficiency=0.8, sources=CITED,
    )


SMALL = ModelSpec(name="small-8l", num_layers=8, hidden_size=1024, num_attention_heads=8, num_kv_heads=4,
                  ffn_hidden_size=4096, vocab_size=32000, default_seq_len=1024, default_tokens_per_batch=16 * 1024)
SMALL_MOE = ModelSpec(name="small-moe", num_layers=4, hidden_size=1024, num_attention_heads=8, num_kv_heads=8,
                      ffn_hidden_size=4096, vocab_size=32000, default_seq_len=1024, default_tokens_per_batch=16 * 1024,
                      moe=MoESpec(num_experts=4, top_k=2, expert_ffn_hidden_size=2048))
MID = ModelSpec(name="mid-8b", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                ffn_hidden_size=14336, vocab_size=128256, default_seq_len=8192,
                default_tokens_per_batch=4 * 1024 * 1024)
LLAMA405 = ModelSpec(name="l405", num_layers=126, hidden_size=16384, num_attention_heads=128, num_kv_heads=8,
                     ffn_hidden_size=53248, vocab_size=128256, default_seq_len=8192,
                     default_tokens_per_batch=16 * 1024 * 1024)

GPU = gpu_spec()
CLUSTER = cluster_spec(GPU)
HEADROOM = 0.05


# ------------------------------------------------------------------------- independent brute force


def plain_valid(model: ModelSpec, gpus: int, domain: int, lay: Layout) -> bool:
    """The hard rules, written again in plain Python (independent of search.rules)."""
    tp, cp, pp, dp, ep, etp, vpp, mbs = lay.tp, lay.cp, lay.pp, lay.dp, lay.ep, lay.etp, lay.vpp, lay.mbs
    if tp * cp * pp * dp != gpus:
        return False
    if model.num_attention_heads % tp or (model.kv_heads % tp and tp % model.kv_heads):
        return False
    if tp > domain or (domain % tp and tp % domain):
        return False
    f, m, l, ok = (int(x) for x in stage_layer_split(model.num_layers, pp))
    if not ok or pp > model.num_layers:
        return False
    if vpp > 1 and (pp == 1 or not vpp_divides_stages(f, m, l, vpp)):  # the cost model's chunking rule
        return False
    if cp > 1 and lay.seq_len % (2 * cp):
        return False
    experts = model.moe.num_experts if model.moe else 1
    if experts % ep or (tp * dp * cp) % (ep * etp):  # MoE parallel folding
        return False
    if model.moe is None and etp != 1:
        return False
    if model.moe is not None and model.moe.expert_ffn_hidden_size % etp:
        return False
    if lay.gbs % (dp * mbs):
        return False
    if vpp > 1 and (lay.gbs // (dp * mbs)) % pp:
        return False
    return True


def brute_force(model, gpus, gbs, seq, gpu=GPU, cluster=CLUSTER, fixed=None):
    """Every layout of the default space, priced one at a time; (best step, its peak, count)."""
    fixed = fixed or {}
    pow2 = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    moe = model.moe
    grid = {
        "tp": [t for t in pow2 if t <= 8],
        "cp": [c for c in pow2 if c <= gpus],
        "pp": list(range(1, model.num_layers + 1)),
        "vpp": list(range(1, 9)),
        "mbs": [1, 2, 4, 8, 16],
        "ep": [e for e in range(1, (moe.num_experts if moe else 1) + 1) if (moe.num_experts if moe else 1) % e == 0],
        "etp": ["1", "tp"] if moe else ["1"],
        "zero": [0, 1, 2, 3],
        "recompute": list(RECOMPUTE),
    }
    grid.update({k: [v] for k, v in fixed.items()})
    limit = memory_limit_gib(gpu.memory_gib, HEADROOM)
    best = None
    n = 0
    seen = set()
    for tp, cp, pp, vpp, mbs, ep, etp_mode, zero, rec in itertools.product(*grid.values()):
        if gpus % (tp * cp * pp):
            continue
        etp = tp if etp_mode == "tp" else 1
        # Full recompute also comes partial: 3, 2 or 1 quarters of each stage's layers, where the
        # search chooses the mode (a pinned --recompute full recomputes every layer).
        for share in ((None, 3, 2, 1) if rec == "full" and "recompute" not in fixed else (None,)):
            lay = Layout(tp=tp, cp=cp, pp=pp, dp=gpus // (tp * cp * pp), ep=ep, etp=etp, vpp=vpp, zero=zero,
                         mbs=mbs, gbs=gbs, seq_len=seq, recompute=rec, recompute_share=share)
            if lay in seen or not plain_valid(model, gpus, cluster.scaleup_domain_size, lay):
                continue
            seen.add(lay)
            n += 1
            r = evaluate_batch(model, cluster, LayoutBatch.from_layouts([lay]), gpu=gpu)
            step, peak = float(r.step_time_s[0]), float(r.memory_gib["peak"][0])
            # Same order as the search: step time, then the lower ZeRO stage, then memory.
            if peak <= limit and (best is None or (step, lay.zero, peak) < (best[0], best[2].zero, best[1])):
                best = (step, peak, lay)
    return best, n


@pytest.mark.slow
@pytest.mark.parametrize(
    "model,gpus,gbs,fixed",
    [
        (SMALL, 8, 16, {}),
        (SMALL, 16, 32, {"recompute": "selective", "zero": 1}),
        (SMALL_MOE, 8, 16, {"zero": 1, "recompute": "full"}),
    ],
    ids=["dense-8gpu", "dense-16gpu", "moe-8gpu"],
)
def test_exhaustive_finds_the_brute_force_optimum(model, gpus, gbs, fixed):
    seq = model.default_seq_len
    best, n = brute_force(model, gpus, gbs, seq, fixed=fixed)
    res = search(model, gpus, GPU, CLUSTER, gbs=gbs, seq_len=seq, method="exhaustive", top=3,
                 memory_headroom=HEADROOM, pins=dict(fixed))
    assert res.stats["method"] == "exhaustive"
    assert res.stats["feasible"] == n, "search and brute force disagree on the number of valid layouts"
    assert best is not None and res.results
    assert res.results[0]["step_time_s"] == pytest.approx(best[0], rel=1e-9)
    assert res.results[0]["memory_gib"]["peak"] == pytest.approx(best[1], rel=1e-9)
    steps = [r["step_time_s"] for r in res.results]
    assert steps == sorted(steps)


def _layout_of(rec) -> Layout:
    lay = dict(rec["layout"])
    keep = {k: lay[k] for k in ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "zero", "mbs", "gbs", "seq_len",
                                "recompute", "precision", "sequence_parallel")}
    return Layout(**keep)


def test_every_result_obeys_every_rule():
    for model, gpus in ((SMALL, 16), (SMALL_MOE, 16), (MID, 64)):
        res = search(model, gpus, GPU, CLUSTER, method="exhaustive", top=20)
        assert res.results
        ctx = RuleContext.build(model, gpus, CLUSTER, GPU)
        for rec in res.results:
            lay = _layout_of(rec)
            assert first_violation(ctx, lay) is None, (rec["layout"], violations(ctx, lay))
            assert plain_valid(model, gpus, CLUSTER.scaleup_domain_size, lay)
            assert rec["gpus"] == gpus
            assert rec["memory_gib"]["peak"] <= memory_limit_gib(GPU.memory_gib, 0.05) + 1e-9
            for key in ("model", "gpu", "cluster", "layout", "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu",
                        "mfu", "hfu", "memory_gib", "fits", "breakdown", "largest_term"):
                assert key in rec
            assert "grad_accum" in rec["layout"] and "dp" in rec["layout"]


RULE_MODEL = ModelSpec(name="rules-8l", num_layers=8, hidden_size=2048, num_attention_heads=32, num_kv_heads=4,
                       ffn_hidden_size=8192, vocab_size=32000)
BAD = [
    (dict(tp=8, pp=2, dp=2), 16, "degrees_multiply_to_gpus"),
    (dict(tp=3, dp=1), 3, "tp_divides_heads"),
    (dict(tp=16, dp=1), 16, "tp_within_scaleup_domain"),
    (dict(pp=9, dp=1), 9, "pp_stage_split"),
    (dict(pp=1, dp=1, pp_first_layers=3), 1, "pp_stage_split"),  # one stage: nothing to split
    (dict(pp=2, vpp=3, dp=1), 2, "vpp_divides_stage_layers"),
    (dict(vpp=2, dp=1), 1, "vpp_needs_pipeline"),
    (dict(cp=3, dp=1, seq_len=1024), 3, "cp_divides_seq"),
    (dict(ep=2, dp=2), 2, "ep_divides_experts"),
    (dict(etp=2, dp=2), 2, "etp_divides_expert_ffn"),
    (dict(mbs=0, dp=1), 1, "mbs_positive"),
    (dict(dp=4, mbs=2, gbs=12), 4, "gbs_divisible_by_dp_mbs"),
    (dict(pp=4, vpp=2, dp=1, gbs=6), 4, "interleaved_microbatches_divisible_by_pp"),
    (dict(zero=4, dp=1), 1, "zero_stage_valid"),
    (dict(sequence_parallel=True, dp=1), 1, "sequence_parallel_needs_tp"),
    (dict(recompute="sometimes", dp=1), 1, "recompute_valid"),
    (dict(precision="fp8", dp=1), 1, "precision_supported"),
    (dict(tp=0, dp=1), 1, "degrees_positive"),
    # Ring-exchange reduce-scatters are a userbuffers method (TE initialize_ub): not without TP overlap,
    # nor under AsyncTP.
    (dict(tp=2, dp=1, sequence_parallel=True, tp_overlap_rs_ring=True), 2, "tp_overlap_rs_ring_needs_userbuffers"),
    (dict(tp=2, dp=1, sequence_parallel=True, tp_comm_overlap=True, tp_overlap_kind="asynctp", tp_overlap_rs_ring=True),
     2, "tp_overlap_rs_ring_needs_userbuffers"),
]


@pytest.mark.parametrize("kw,gpus,rule", BAD, ids=[b[2] for b in BAD])
def test_rules_reject_known_bad_layouts(kw, gpus, rule):
    kw = {"gbs": 16, "seq_len": 1024, **kw}
    lay = Layout(**kw)
    ctx = RuleContext.build(RULE_MODEL, gpus, CLUSTER, gpu_spec(fp8=False))
    hit = first_violation(ctx, lay)
    assert hit is not None and hit[0] == rule, violations(ctx, lay)
    assert "\n" not in hit[1]
    # Vectorized form: the same rule flags it inside a batch of good layouts.
    checks = {r.name: r for r in RULES}
    from search.rules import columns_of

    assert not checks[rule](ctx, columns_of(lay)).all()


def test_kv_replication_allowed_and_cross_node_tp_flag():
    ctx = RuleContext.build(SMALL, 8, CLUSTER, GPU)  # 4 kv heads, tp 8 -> replicate KV heads
    assert first_violation(ctx, Layout(tp=8, dp=1, gbs=16, seq_len=1024)) is None
    wide = ModelSpec(name="wide", num_layers=4, hidden_size=2048, num_attention_heads=32, ffn_hidden_size=8192,
                     vocab_size=1000)
    lay = Layout(tp=16, dp=1, gbs=16, seq_len=1024)
    assert first_violation(RuleContext.build(wide, 16, CLUSTER, GPU), lay)[0] == "tp_within_scaleup_domain"
    assert first_violation(RuleContext.build(wide, 16, CLUSTER, GPU, allow_cross_node_tp=True), lay) is None


def test_check_layout_raises_one_line_naming_rule_and_value():
    with pytest.raises(PlannerInputError) as err:
        check_layout(SMALL, CLUSTER, GPU, Layout(tp=16, dp=1, gbs=16, seq_len=1024))
    msg = str(err.value)
    assert "tp_within_scaleup_domain" in msg and "tp=16" in msg and "\n" not in msg
    check_layout(SMALL, CLUSTER, GPU, Layout(tp=2, pp=2, dp=2, gbs=16, seq_len=1024))


def test_valid_mask_is_vectorized():
    b = LayoutBatch.from_arrays(tp=np.array([1, 2, 4, 8, 16]), dp=np.array([16, 8, 4, 2, 1]), gbs=16, seq_len=1024)
    ok = valid_mask(RuleContext.build(SMALL, 16, CLUSTER, GPU), b)
    assert ok.tolist() == [True, True, True, True, False]


@pytest.mark.parametrize(
    "model,gpus,gbs,stage_splits,pins",
    [
        (SMALL, 16, 32, False, {}),
        (SMALL_MOE, 32, 64, False, {}),
        (MID, 256, 512, True, {}),
        (LLAMA405, 16384, 2048, False, {}),
        (MID, 64, 128, False, {"tp": 2, "vpp": 2}),
    ],
)
def test_cpsat_and_numpy_enumerate_the_same_space(model, gpus, gbs, stage_splits, pins):
    p = Problem(model, CLUSTER, GPU, gpus, gbs, model.default_seq_len, normalize_pins(pins), stage_splits=stage_splits)
    a, b = build_space(p, "cpsat"), build_space(p, "numpy")
    assert a.n_skeleton > 0
    for k in a.skeleton:
        assert np.array_equal(a.skeleton[k], b.skeleton[k]), k
    # Every candidate is either valid or charged to exactly one rule.
    assert a.raw_size - len(a) == sum(a.removed_by_rule.values())
    assert valid_mask(p.ctx, a.take(np.arange(len(a)))).all()


def test_pins_are_honoured():
    pins = {"tp": 2, "pp": 2, "zero": 3, "recompute": "full", "mbs": 2}
    res = search(MID, 64, GPU, CLUSTER, gbs=128, pins=pins, method="exhaustive", top=10)
    assert res.results
    for rec in res.results:
        lay = rec["layout"]
        assert (lay["tp"], lay["pp"], lay["zero"], lay["recompute"], lay["mbs"]) == (2, 2, 3, "full", 2)
    res = search(MID, 64, GPU, CLUSTER, gbs=128, pins={"sequence_parallel": False, "tp": 4}, top=3)
    assert all(not r["layout"]["sequence_parallel"] for r in res.results)
    with pytest.raises(PlannerInputError):
        search(MID, 64, GPU, CLUSTER, pins={"recompute": "sometimes"})
    with pytest.raises(PlannerInputError):
        search(MID, 64, GPU, CLUSTER, pins={"warp": 2})


def test_pin_breaking_a_rule_explains_which_rule():
    # Refused before anything is enumerated: bad input naming the rule, as evaluate does.
    from hardware_catalog.errors import PlannerInputError

    with pytest.raises(PlannerInputError, match="tp_within_scaleup_domain"):
        search(MID, 64, GPU, CLUSTER, gbs=128, pins={"tp": 16}, method="exhaustive")
    with pytest.raises(PlannerInputError, match="precision_supported"):
        search(MID, 64, gpu_spec(fp8=False), cluster_spec(gpu_spec(fp8=False)), gbs=128,
               pins={"precision": "fp8"}, method="exhaustive")


def test_nothing_fits_returns_closest_with_reasons():
    tiny = gpu_spec(memory_gib=0.5)
    res = search(MID, 8, tiny, cluster_spec(tiny), gbs=16, method="exhaustive", top=5)
    assert res.results == []
    assert res.stats["feasible"] > 0 and res.stats["fits"] == 0
    assert res.closest
    peaks = [c["memory_gib"]["peak"] for c in res.closest]
    assert peaks == sorted(peaks)
    for c in res.closest:
        assert c["exceeds_gib"] > 0
        assert c["stopped_by"].startswith("memory")
    assert "no layout fits in memory" in res.message
    assert res.to_dict()["closest"]


def test_headroom_changes_what_fits():
    a = search(MID, 8, GPU, CLUSTER, gbs=16, method="exhaustive", memory_headroom=0.0)
    b = search(MID, 8, GPU, CLUSTER, gbs=16, method="exhaustive", memory_headroom=0.5)
    assert a.stats["fits"] >= b.stats["fits"]
    for r in b.results:
        assert r["memory_gib"]["peak"] <= 0.5 * GPU.memory_gib + 1e-9


OPTUNA_CASES = [
    pytest.param(MID, 256, 512, id="mid-8b-256gpu"),
    pytest.param(LLAMA405, 16384, 2048, id="405b-16k"),  # Llama 3 405B shape, 16M-token batch
]


@pytest.mark.parametrize("model,gpus,gbs", OPTUNA_CASES)
def test_optuna_gets_within_2_percent_of_exhaustive(model, gpus, gbs):
    ex = search(model, gpus, GPU, CLUSTER, gbs=gbs, method="exhaustive", top=1)
    op = search(model, gpus, GPU, CLUSTER, gbs=gbs, method="optuna", trials=300, seed=0, top=1)
    # 300 trials, or every degree core once when the space has fewer (search.optuna_search).
    assert op.stats["method"] == "optuna" and op.stats.get("trials_requested", op.stats["trials"]) == 300
    assert op.results[0]["step_time_s"] <= ex.results[0]["step_time_s"] * 1.02
    ctx = RuleContext.build(model, gpus, CLUSTER, GPU)
    assert first_violation(ctx, _layout_of(op.results[0])) is None


def test_optuna_sweeps_gpu_counts_and_samplers():
    for sampler in ("random", "tpe"):
        res = search(MID, "64..256", GPU, CLUSTER, gbs=512, method="optuna", trials=40, seed=1, sampler=sampler, top=3)
        assert res.results and res.stats["sampler"] == sampler
        assert {r["gpus"] for r in res.results} <= {64, 128, 256}
    a = search(MID, "64..256", GPU, CLUSTER, gbs=512, method="optuna", trials=30, seed=3)
    b = search(MID, "64..256", GPU, CLUSTER, gbs=512, method="optuna", trials=30, seed=3)
    assert [r["layout"] for r in a.results] == [r["layout"] for r in b.results]


def test_pareto_front_time_vs_cost():
    res = search(MID, "64..256", GPU, CLUSTER, gbs=512, pareto=True, price_per_gpu_hour=2.0,
                 train_tokens=1e12, method="exhaustive", top=50)
    assert res.results
    assert res.stats["objectives"] == ["run_time_s", "run_cost_usd"]
    t = np.array([r["run_time_s"] for r in res.results])
    c = np.array([r["run_cost_usd"] for r in res.results])
    assert pareto_mask(t, c).all()  # no point dominates another
    assert np.all(np.diff(t) >= 0) and np.all(np.diff(c) <= 0)
    r = res.results[0]
    assert r["cost_per_step_usd"] == pytest.approx(r["gpus"] * r["step_time_s"] * 2.0 / 3600)
    nsga = search(MID, "64..256", GPU, CLUSTER, gbs=512, pareto=True, method="optuna", trials=40, seed=0)
    assert nsga.results and nsga.stats["sampler"] == "nsga2"


def test_auto_method_says_what_ran():
    res = search(SMALL, 16, GPU, CLUSTER, gbs=32)
    assert res.stats["method"] == "exhaustive" and res.stats["method_requested"] == "auto"


def test_parse_gpu_counts():
    assert parse_gpu_counts(16384) == [16384]
    assert parse_gpu_counts("4096..16384") == [4096, 8192, 16384]
    assert parse_gpu_counts("3072..12288") == [3072, 6144, 12288]
    assert parse_gpu_counts("4096..8192:2048") == [4096, 6144, 8192]
    assert parse_gpu_counts("1024, 4096..8192") == [1024, 4096, 8192]
    assert parse_gpu_counts([8, 16, 8]) == [8, 16]
    for bad in ("", "abc", "16..8", "0", "8..16:0", "-8"):
        with pytest.raises(PlannerInputError):
            parse_gpu_counts(bad)


def test_domains_defaults():
    p = Problem(LLAMA405, CLUSTER, GPU, 16384, 2048, 8192, {})
    d = domains(p)
    assert d["tp"] == (1, 2, 4, 8)
    assert d["vpp"] == tuple(range(1, 9))
    assert d["mbs"] == (1, 2, 4, 8, 16)
    assert d["precision"] == (0,) and d["ep"] == (1,)
    assert max(d["pp"]) <= 126 and all(16384 % x == 0 for x in d["pp"])


# ------------------------------------------------------------------------------------------ CLI


def _cli():
    import typer

    from planner.cli.errors import PlannerGroup
    from planner.cli.search import register

    # Errors are answered by planner's group (planner.cli.errors), as on the real command line.
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, cls=PlannerGroup)

    @app.callback()
    def _main():  # keep "search" as a subcommand
        pass

    register(app)
    return app


def test_cli_table_json_csv(tmp_path):
    from typer.testing import CliRunner

    runner = CliRunner()
    app = _cli()
    r = runner.invoke(app, ["search", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--top", "3", "--no-progress"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert any(line.lstrip().startswith("rank") and "ZeRO" in line and "MFU" in line for line in lines)
    assert "enumerated" in lines[-1] and "method exhaustive" in lines[-1]
    csv = tmp_path / "out.csv"
    r = runner.invoke(app, ["search", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--top", "2", "--json",
                            "--csv", str(csv), "--no-progress"])
    assert r.exit_code == 0
    data = json.loads(r.stdout)
    assert len(data["results"]) == 2 and {"enumerated", "feasible", "fits", "seconds", "method"} <= set(data["stats"])
    assert csv.read_text().count("\n") == 3


def test_cli_nothing_fits_exits_three_and_bad_input_exits_two():
    from typer.testing import CliRunner

    runner = CliRunner()
    app = _cli()
    r = runner.invoke(app, ["search", "--model", "405b", "--gpus", "8", "--gpu", "h100", "--no-progress"])
    assert r.exit_code == 3, r.output
    assert "nothing fits" in r.output and "closest" in r.output
    for args in (["--gpus", "8x"], ["--gpus", "8", "--method", "magic"], ["--gpus", "8", "--recompute", "some"]):
        r = runner.invoke(app, ["search", "--model", "405b", "--gpu", "h100", "--no-progress", *args])
        assert r.exit_code == 2
        err = r.stderr if hasattr(r, "stderr") else r.output
        assert err.strip().startswith("error:") and len(err.strip().splitlines()) == 1


def test_zero_2_under_a_pipeline_is_listed_only_when_asked_for():
    # ZeRO-2 under PP (gradients sharded, Llama 3's FSDP) runs in no exported launcher, so search
    # lists it only where ZeRO-2 is pinned.
    res = search(MID, 64, GPU, CLUSTER, gbs=128, pins={"pp": 2}, method="exhaustive", top=50)
    assert res.results and all(r["layout"]["zero"] != 2 for r in res.results)
    pinned = search(MID, 64, GPU, CLUSTER, gbs=128, pins={"pp": 2, "zero": 2}, method="exhaustive", top=3)
    assert pinned.results and all(r["layout"]["zero"] == 2 for r in pinned.results)


@pytest.mark.slow
def test_auto_returns_the_exhaustive_optimum_where_the_upper_bound_is_large():
    # Issue 28: Mixtral 8x22B on 65,536 A100s bounds 8.8M candidates (auto used to sample it),
    # but only ~210k are valid: auto must enumerate and so find the exhaustive optimum.
    from planner import search as run

    auto = run("mixtral-8x22b", 65536, "a100", top=1)
    full = run("mixtral-8x22b", 65536, "a100", top=1, method="exhaustive")
    assert auto.stats["method"] == "exhaustive" and auto.stats["space_upper_bound"] > 5_000_000
    assert auto.best["layout"] == full.best["layout"]
    assert auto.best["step_time_s"] == full.best["step_time_s"]


def test_auto_samples_only_when_enumerating_is_predicted_too_slow():
    from hardware_catalog import get_model
    from search.exhaustive import choose_method

    problems = [Problem(model=get_model("llama3-8b"), cluster=CLUSTER, gpu=GPU, gpus=n, gbs=512, seq_len=8192)
                for n in (64, 128)]
    enumerate_all = choose_method(problems, seconds=1e9)
    assert enumerate_all.method == "exhaustive"
    assert enumerate_all.layouts == sum(len(build_space(p)) for p in problems) > 0
    assert choose_method(problems, seconds=0.0).method == "optuna"


def test_cp_model_loads_without_pandas_and_its_pandas_helpers_still_work():
    # ortools' cp_model imports pandas (0.2 s CPU) for helpers planner never calls: the search
    # enumerates without it, and the helpers load the real pandas when first used.
    import subprocess
    import sys

    code = ("import sys; from search.space import import_cp_model; cp = import_cp_model(); "
            "import planner; planner.search('8b', 8, 'h100', top=1, method='exhaustive'); "
            "assert 'pandas' not in sys.modules; "
            "x = cp.CpModel().new_int_var_series('x', cp.pd.Index(range(3)), 0, 5); "
            "assert len(x) == 3 and 'pandas' in sys.modules")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_zero_2_under_a_pipeline_offered_when_asked_or_when_nothing_else_fits():
    # ZeRO-2 under PP (gradients sharded, Llama 3's FSDP) runs in none of the exported launchers:
    # the search drops it unless --zero is pinned or the sharded-gradient retry is on.
    from types import SimpleNamespace

    from search.exhaustive import _offered_zero

    batch = LayoutBatch.from_arrays(zero=np.array([1, 2, 2, 3]), pp=np.array([4, 4, 1, 4]))
    free, pinned = SimpleNamespace(pins={}), SimpleNamespace(pins={"zero": 2})
    np.testing.assert_array_equal(_offered_zero(free, batch, False), [True, False, True, True])
    assert _offered_zero(free, batch, True).all() and _offered_zero(pinned, batch, False).all()


def test_a_pinned_full_recompute_recomputes_every_layer():
    """'--recompute full recomputes every layer' (README), but the search also tried 1-3 quarters of
    each stage under the pin (#1 for 70B on 64 H100s: 'full 40L/stage'). Partial recompute stays a
    choice where the search picks the mode."""
    from planner import search as planner_search

    pinned = planner_search("llama3-70b", 64, "h100", top=5, pins={"recompute": "full"})
    assert all(r["layout"]["recompute"] == "full" and not r["layout"]["recompute_layers"] for r in pinned.results)
    free = planner_search("llama3-70b", 64, "h100", top=40)
    assert any(r["layout"]["recompute_layers"] for r in free.results)
