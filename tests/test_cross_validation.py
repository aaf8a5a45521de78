"""Generalization as the accuracy figure: leave one source out (``planner validate --cross-validate``).

The regression test runs the real cross-validation on the shipped reference set (about three
minutes on 2 cores); the fit itself is checked on a synthetic predictor whose optimum is known.
"""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.calibration import DEFAULT, PRIOR
from planner.validate.fit import CLIP, FIT_RANGES, bootstrap, fit, objective


class _Synthetic:
    """A predictor whose row errors depend on one constant in a known way: row i's error is
    gemm_efficiency_bf16 - target_i, so the fit's value is the weighted median target (the
    capped L1 objective) and no other constant moves from the prior."""

    def __init__(self, targets, sources):
        self.targets = np.asarray(targets)
        self.rows = [type("Row", (), {"source": s})() for s in sources]

    def errors(self, calib):
        return calib.gemm_efficiency_bf16 - self.targets


def test_objective_caps_each_row():
    assert objective(np.array([0.05, -0.5]), np.ones(2)) == pytest.approx((0.05 + CLIP) / 2)


def test_fit_finds_the_minimum_on_the_grid():
    p = _Synthetic([0.70, 0.74, 0.74], ["a", "b", "b"])
    fitted = fit(p, np.ones(3))
    # Weighted L1: the median target, 0.74, is on the grid (0.56 + 0.02k); the rest stay put.
    assert fitted.gemm_efficiency_bf16 == pytest.approx(0.74)
    assert fitted.comm_sm_fraction == PRIOR.comm_sm_fraction
    # Rows with weight 0 do not count.
    assert fit(p, np.array([1.0, 0.0, 0.0])).gemm_efficiency_bf16 == pytest.approx(0.70)


class _Ridge:
    """Three constants that must move together, in grid steps from the prior: x of
    gemm_efficiency_bf16 (0.02 a step), y of sustained_clock_fraction (0.02), z of
    attention_efficiency (0.05). Row errors 0.01 (x - y), 0.01 (y - z) and 0.001 (x + y + z - 6):
    any move of one or two of them opens a 0.01 error on the first two rows for at most 0.002
    gained on the third, so only the three together, one step each, lower the objective, down to
    0 at x = y = z = 2."""

    rows = [type("Row", (), {"source": s})() for s in "abc"]

    def errors(self, calib):
        x = (calib.gemm_efficiency_bf16 - PRIOR.gemm_efficiency_bf16) / 0.02
        y = (calib.sustained_clock_fraction - PRIOR.sustained_clock_fraction) / 0.02
        z = (calib.attention_efficiency - PRIOR.attention_efficiency) / 0.05
        return np.array([0.01 * (x - y), 0.01 * (y - z), 0.001 * (x + y + z - 6)])


def test_fit_crosses_a_ridge_of_three_constants(monkeypatch):
    import planner.validate.fit as fit_module

    fitted = fit(_Ridge(), np.ones(3))
    # x = y = z = 2 from the prior (0.80, 0.90, 0.30): 0.84, 0.94 and 0.40, where every row's error is 0.
    assert fitted.gemm_efficiency_bf16 == pytest.approx(0.84)
    assert fitted.sustained_clock_fraction == pytest.approx(0.94)
    assert fitted.attention_efficiency == pytest.approx(0.40)
    # Constants no row depends on stay where they started.
    assert fitted.kernel_overhead_us == PRIOR.kernel_overhead_us
    assert fitted.native_attention_speedup == PRIOR.native_attention_speedup
    # Moves of at most two constants stop at the prior (objective 0.006 / 3), as the fit did before
    # 2026-11-28 (coordinate descent, then pairs).
    monkeypatch.setattr(fit_module, "JOINT_MOVE_SIZES", (2,))
    stuck = fit(_Ridge(), np.ones(3))
    assert (stuck.gemm_efficiency_bf16, stuck.sustained_clock_fraction, stuck.attention_efficiency) == (
        PRIOR.gemm_efficiency_bf16, PRIOR.sustained_clock_fraction, PRIOR.attention_efficiency)


def test_bootstrap_spans_the_sources():
    p = _Synthetic([0.70, 0.74], ["a", "b"])
    out = bootstrap(p, resamples=20, seed=1)
    lo, hi = out["gemm_efficiency_bf16"]["p5"], out["gemm_efficiency_bf16"]["p95"]
    assert lo == pytest.approx(0.70) and hi == pytest.approx(0.74)
    assert out["gemm_efficiency_bf16"]["value"] == DEFAULT.gemm_efficiency_bf16
    assert set(out) == set(FIT_RANGES)


def test_prior_lies_inside_the_fitted_ranges():
    for name, values in FIT_RANGES.items():
        assert values.min() <= getattr(PRIOR, name) <= values.max(), name


@pytest.mark.slow  # about three minutes on 2 cores: run by `pytest -m slow` (CI runs it after the quick suite)
def test_leave_one_source_out_on_the_reference_set():
    from planner.validate.crossval import prepared_rows
    from planner.validate.fit import Predictor, cross_validate

    cv = cross_validate(Predictor(prepared_rows(None)))
    held, inside = cv["held_out"], cv["in_sample"]
    assert held["rows"] == inside["rows"] >= 117
    # In-sample (the shipped constants), on the set enlarged on 2026-11-27: median 3.7%, p90 10.9%
    # (10.4% before torchtitan's FP8 rows were priced with its own recipe, current scaling; 11.0%
    # before NCCL user buffers, nccl_ub).
    # 11.0% with torchtitan's FSDP2 copy-out priced as its framework table says.
    # 11.6% since gpt-oss's 128-key sliding window is priced (26.04's micro-batch-1 row, +8.9% -> +13.1%).
    # 11.0% since the GPT-OSS experts' unfused bias and clamp are priced (costmodel.moe.expert_epilogues)
    # and its 25.11 row runs micro-batch 1 as the release's preset sets (both rows within 0.4%).
    # 3.2% / 11.14% with Megatron-LM 2021-22's blocking pipeline sends and the constants refitted.
    # 3.1% / 11.0% with Megatron-Bridge's H100 FP8 reduce-scatters as ring exchange (tp_overlap_rs_ring).
    # 3.2% / 10.8% with the gradient accumulation pass of DeepSpeed and autograd (grad_accum_pass), the
    # Megatron-Bridge 25.09 MoE presets priced with current scaling as their perf matrix keys say, and
    # the per-expert quantise kernels at the back-to-back short-kernel cost (costmodel.quantize).
    # 3.1% / 10.1% with the fit run to convergence and the constants refitted so (2026-11-28).
    # 3.6% / 9.9% with 2024 containers' cuDNN attention at 0.86 of today's (Layout.cudnn): one native
    # speed-up no longer trades the 2024 rows against the 2025-26 ones, so the fit stops splitting them
    # (native speed-up 1.5 -> 1.7); the median rises, the p90 and the held-out errors below fall.
    assert inside["median_abs_error"] <= 0.036 and inside["p90_abs_error"] <= 0.100
    # Held out (constants fitted without the row's source): the goal is median <= 5%, p90 <= 12%;
    # measured 4.5% and 11.3% (4.3% / 11.7% with torchtitan's FP8 rows priced as delayed scaling;
    # 12.2% p90 before NCCL user buffers; 4.7% and 14.7% before DeepSeek-V3's MTP module, the
    # Megatron-Bridge MoE presets and the per-expert quantise kernels, issue 24), held here so
    # that neither gets worse. 4.2% / 12.6% since gpt-oss's sliding window is priced: the p90 goal is
    # not met (its 26.04 row +11.2% -> +15.0% held out, and the torchtitan fold one grid step along the
    # GEMM x clock ridge to a lower objective, 5.3% -> 6.0% median on its rows; README "Accuracy").
    # 4.2% / 11.7% since the GPT-OSS experts' unfused bias and clamp are priced (its rows +2.4% and
    # +1.9% held out): the p90 goal is met again. 3.1% / 11.2% since Megatron-LM 2021-22's interleaved
    # pipeline sends block, as its p2p_communication.py did until 2023 (narayanan2021 5.5% -> 1.1%,
    # korthikanti2022 8.1% -> 4.2% median held out).
    # 3.0% / 11.1% with Megatron-Bridge's H100 FP8 reduce-scatters as ring exchange; 3.3% / 11.0% with
    # Composer's FSDP backward gathers exposed (zero3_gather post: llmfoundry_bench 2.8%/18.4% ->
    # 2.6%/9.8%, the other folds' refits one step along the GEMM x HBM ridge). 3.1% / 11.0% with
    # Megatron-DeepSpeed's 2022 runs without sequence parallelism (bloom_tr11 23.1% -> 20.4%).
    # 3.1% / 10.9% with the gradient accumulation pass (grad_accum_pass). 3.9% / 10.9% with the 25.09 MoE
    # presets' current scaling and the per-expert quantise kernels at 3.8 us: the MoE rows come closer
    # (MoE family 3.7% / 17.2% -> 5.1% / 12.3%), but the nemo_longseq fold's refit now stops at native
    # attention 1.6 and predicts its rows 8.3% off (1.7% before). A fit run to convergence lands that fold
    # there on main before these changes too (3.9% / 10.8% overall; README "Accuracy").
    # 4.2% / 11.1% with DeepSpeed's BF16_Optimizer at 26 B (its gradients zeroed and added into first) and
    # FSDP's accumulation in FP32: BLOOM 176B +3.7% -> +1.4%, and the llmfoundry and mbridge_archive folds
    # refitting one grid step (their held-out medians 2.8% -> 2.9%, 3.8% -> 4.3%).
    # 4.0% / 10.8% with the fit run to convergence (planner.validate.fit.fit: moves of up to three
    # constants at once until none lowers the objective; the folds had stopped short of that):
    # nemo_longseq 8.3% -> 6.9%, the long-context family 8.8% -> 7.4%. 4.1% / 10.8% (MAPE 6.1% -> 6.0%) with
    # TransformerEngine's per-step FP8 weight cache and FP8 parameters (--fp8-param-gather) counted:
    # mbridge_2509 5.0% -> 6.0%, nemo_longseq 6.9% -> 6.1%, narayanan2021 1.8% -> 1.3%.
    # 3.7% / 10.1% (MAPE 5.9%) with 2024 containers' cuDNN attention at 0.86 of today's and the
    # native speed-up's prior at the lent H200's measured 1.7: nemo_longseq 6.1% -> 3.1%, the
    # long-context family 7.4% -> 5.0%, megatron_readme_2024 3.0% -> 5.1%.
    # 3.7% / 10.1% (MAPE 5.7%) with ZeRO-1's gradient all-reduces priced (--grad-reduce: DeepSpeed's
    # BF16_Optimizer, Aleph Alpha's FP32 all-reduce): the folds' refits move, nemo_longseq 3.1% -> 1.2%,
    # the long-context family 5.0% -> 3.6%, torchtitan_bench 5.4% -> 6.5%.
    assert held["median_abs_error"] <= 0.038 and held["p90_abs_error"] <= 0.102
    # Every source of three rows or more (one-row sources: BLOOM 176B) within 12% median.
    assert max(f["held_out"]["median_abs_error"] for f in cv["per_source"].values() if f["held_out"]["rows"] >= 3) <= 0.12
    # The intervals' data (search/data/uncertainty.json) is this cross-validation: regenerate it
    # with `planner validate --cross-validate --write-uncertainty search/data/uncertainty.json --force`
    # when a change moves the held-out errors.
    from search.uncertainty import load

    stored = load()
    errors = np.array([r["held_out_error"] for r in cv["rows"]])
    assert set(stored.folds) == set(cv["per_source"]) and len(stored.residuals) == len(errors)
    for q in (10, 50, 90):
        assert np.percentile(stored.residuals, q) == pytest.approx(np.percentile(errors, q), abs=0.01), q
