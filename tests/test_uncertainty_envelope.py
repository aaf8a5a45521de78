"""What the search knows about its own error: the 80% interval (search.uncertainty) and the
validated envelope (search.envelope), their data files, their provenance and how they are made."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from costmodel.layout import LayoutBatch
from costmodel.options import Layout
from hardware_catalog import get_gpu, get_model
from search import envelope, uncertainty
from search.envelope import Job, columns_of


# ------------------------------------------------------------------------------------ interval


def test_combine_by_hand():
    # Two folds price a layout at 100 and 110; held-out errors 0, +25%, -50%.
    # Samples 100/1, 100/1.25, 100/0.5, 110/1, 110/1.25, 110/0.5 = 100, 80, 200, 110, 88, 220;
    # sorted 80 88 100 110 200 220: p10 at rank 0.5 -> 84, p50 -> 105, p90 at rank 4.5 -> 210.
    q = uncertainty.combine(np.array([[100.0], [110.0]]), np.array([0.0, 0.25, -0.5]))
    assert q[:, 0] == pytest.approx([84.0, 105.0, 210.0])


def test_interval_fields_turn_throughput_into_step_time():
    # 200 tokens/s/GPU in 4 s: 160 tokens/s/GPU takes 5 s (p90 of step time), 250 takes 3.2 s.
    f = uncertainty.interval_fields({"tokens_per_s_per_gpu": 200.0, "step_time_s": 4.0}, [160.0, 200.0, 250.0])
    assert f["tokens_per_s_per_gpu_interval"] == {"p10": 160.0, "p50": 200.0, "p90": 250.0}
    assert f["step_time_s_interval"] == pytest.approx({"p10": 3.2, "p50": 4.0, "p90": 5.0})


def test_uncertainty_file_provenance_and_consistency():
    data = json.loads(uncertainty.default_path().read_text())
    for key in ("generated", "command", "runs_file", "runs_sha256", "confidence", "rows", "held_out",
                "residual_quantiles", "fold_constants", "held_out_errors"):
        assert key in data, key
    assert data["command"].startswith("planner validate --cross-validate --write-uncertainty")
    errors = np.array([r["error"] for r in data["held_out_errors"]])
    assert data["rows"] == len(errors) >= 80
    assert data["residual_quantiles"]["p10"] == pytest.approx(np.percentile(errors, 10), abs=1e-4)
    assert data["residual_quantiles"]["p90"] == pytest.approx(np.percentile(errors, 90), abs=1e-4)
    # One fold per source of the reference set's high-confidence rows.
    from planner.validate.runs import load_runs

    sources = {r["source"]["key"] for r in load_runs(None) if r.get("confidence") == "high"}
    assert set(data["fold_constants"]) == sources == {r["source"] for r in data["held_out_errors"]}


def test_write_uncertainty_regenerates_the_file(tmp_path):
    # The same command on a three-row runs file (two sources): the file it writes.
    from planner.validate.runs import load_runs

    keep = ("korthikanti2022_22b_sp_selective", "korthikanti2022_22b_full_recompute", "nemo2407_h100_fp8_llama2_7b_8gpu")
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps([r for r in load_runs(None) if r["id"] in keep]))
    out = tmp_path / "uncertainty.json"
    proc = subprocess.run([sys.executable, "-m", "planner", "validate", "--cross-validate", "--runs", str(runs),
                           "--write-uncertainty", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert set(data["fold_constants"]) == {"korthikanti2022", "nemo_perf_2407"} and data["rows"] == 3
    assert data["runs_file"] == str(runs) and "--write-uncertainty" in data["command"]
    loaded = uncertainty.load(str(out))
    assert len(loaded.residuals) == 3 and set(loaded.folds) == set(data["fold_constants"])


def test_write_uncertainty_needs_cross_validate():
    proc = subprocess.run([sys.executable, "-m", "planner", "validate", "--write-uncertainty", "x.json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == "error: --write-uncertainty goes with --cross-validate"


def test_interval_brackets_the_prediction_on_a_reference_layout():
    from costmodel import evaluate
    from hardware_catalog import get_cluster

    model, cluster = get_model("llama3-70b"), get_cluster("dgx-h100")
    lay = Layout(tp=4, pp=8, cp=1, dp=2, vpp=5, mbs=1, gbs=128, seq_len=8192, recompute="none")
    point = float(evaluate(model, cluster, lay).tokens_per_s_per_gpu[0])
    lo, mid, hi = uncertainty.tokens_interval(model, cluster, get_gpu(cluster.gpu), LayoutBatch.from_layouts([lay]))[:, 0]
    assert lo < mid < hi and lo < point < hi
    # The structural part: the residuals' spread, about -8% .. +11% (p10, p90), carries over.
    res = uncertainty.load().residuals
    assert hi / lo == pytest.approx((1 + np.percentile(res, 90)) / (1 + np.percentile(res, 10)), rel=0.05)


def test_interval_moves_with_a_calibrated_prediction():
    """A profile that prices a layout 20% slower moves its interval 20% down, spread kept."""
    from costmodel import evaluate
    from hardware_catalog import get_cluster

    model, cluster = get_model("llama3-8b"), get_cluster("dgx-h100")
    lay = Layout(tp=1, pp=1, cp=1, dp=8, mbs=1, gbs=64, seq_len=8192, recompute="none")
    batch, gpu = LayoutBatch.from_layouts([lay]), get_gpu(cluster.gpu)
    shipped = float(evaluate(model, cluster, lay).tokens_per_s_per_gpu[0])
    plain = uncertainty.tokens_interval(model, cluster, gpu, batch)[:, 0]
    moved = uncertainty.tokens_interval(model, cluster, gpu, batch, predicted=np.array([0.8 * shipped]))[:, 0]
    assert moved == pytest.approx(0.8 * plain)
    same = uncertainty.tokens_interval(model, cluster, gpu, batch, predicted=np.array([shipped]))[:, 0]
    assert same == pytest.approx(plain)


# ------------------------------------------------------------------------------------ envelope

ENVELOPE = {"mechanisms": {
    "cp_tokens_per_rank": {"min": 4096, "max": 32768, "rows": 12},
    "tp": {"min": 1, "max": 8, "rows": 83},
    "gpus": {"min": 4, "max": 6144, "rows": 83},
    "gpu_architecture": {"values": ["ampere", "hopper"], "rows": 83},
    "experts_per_rank": {"min": 4, "max": 16, "rows": 3},
    "fp8_recipe": {"values": ["current", "delayed"], "rows": 61},
    "moe_tokens": {"values": ["dropless", "padded"], "rows": 15},
}}
"""A hand-made envelope: the checks below do not depend on the shipped file."""


def _cols(**kw):
    return columns_of(LayoutBatch.from_layouts([Layout(**kw)]))


def test_flags_by_hand():
    job = Job(get_model("llama3-405b"), get_gpu("h100"), 16384, 8192)
    # CP 16 on 8,192 tokens: 512 tokens per rank, below the 4,096 the reference runs cover.
    out = envelope.flags(job, _cols(tp=2, pp=32, cp=16, dp=16, seq_len=8192), data=ENVELOPE)
    assert [f["reason"] for f in out] == [
        "CP 16 at 512 tokens per rank: reference runs cover 4,096-32,768 (12 rows)",
        "16,384 GPUs: reference runs cover 4-6,144 (83 rows)",
    ]
    assert out[0]["scope"] == "layout" and out[0]["value"] == 512 and out[0]["supported"] == {"min": 4096, "max": 32768}
    assert out[1]["scope"] == "job"
    # CP 2 at 8K: 4,096 per rank, inside; TP 16 is outside.
    out = envelope.flags(job, _cols(tp=16, pp=16, cp=2, dp=32, seq_len=8192), scope="layout", data=ENVELOPE)
    assert [f["mechanism"] for f in out] == ["tp"] and out[0]["reason"].startswith("TP 16: reference runs cover 1-8")


def test_job_and_moe_mechanisms():
    # DeepSeek-V3 (256 experts) with EP 8: 32 experts per rank, above 16; on B200: blackwell.
    job = Job(get_model("deepseek-v3"), get_gpu("b200"), 256, 4096)
    reasons = [f["reason"] for f in envelope.flags(job, _cols(tp=1, pp=16, dp=16, ep=8), data=ENVELOPE)]
    assert "32 experts per rank: reference runs cover 4-16 (3 rows)" in reasons
    assert "blackwell GPUs: reference runs cover ampere, hopper (83 rows)" in reasons


def test_recipe_and_token_policy_mechanisms():
    # NVFP4 on B200 (Mixtral at EP 2: 4 experts per rank, covered): no reference run trains with that
    # recipe; under BF16 the recipe is moot. An MoE
    # layout dropping tokens without padding is outside (runs cover dropless and padded); a dense model
    # has no token policy.
    job = Job(get_model("mixtral-8x7b"), get_gpu("b200"), 64, 4096)
    reasons = [f["reason"] for f in envelope.flags(job, _cols(tp=1, dp=64, ep=2, precision="fp8", fp8_recipe="nvfp4",
                                                                moe_capacity_factor=1.25), scope="layout", data=ENVELOPE)]
    assert reasons == ["FP8 recipe nvfp4: reference runs cover current, delayed (61 rows)",
                       "dropped MoE tokens: reference runs cover dropless, padded (15 rows)"]
    assert not envelope.flags(job, _cols(tp=1, dp=64, ep=2, fp8_recipe="nvfp4", moe_capacity_factor=1.0,
                                         moe_pad_to_capacity=True), scope="layout", data=ENVELOPE)
    dense = Job(get_model("llama3-8b"), get_gpu("b200"), 8, 4096)
    assert not envelope.flags(dense, _cols(tp=1, dp=8), scope="layout", data=ENVELOPE)


def test_inside_is_vectorized_and_ignores_the_job():
    job = Job(get_model("llama3-405b"), get_gpu("h100"), 16384, 8192)  # 16,384 GPUs: outside, but job scope
    batch = LayoutBatch.from_layouts([Layout(tp=8, pp=16, cp=1, dp=128, seq_len=8192),
                                      Layout(tp=2, pp=32, cp=16, dp=16, seq_len=8192),
                                      Layout(tp=8, pp=8, cp=2, dp=128, seq_len=8192)])
    assert envelope.inside(job, batch.columns(), data=ENVELOPE).tolist() == [True, False, True]


def test_envelope_file_is_current():
    # Re-derived from the shipped reference set, as `planner validate --write-envelope` does.
    from planner.validate.envelope import derive_envelope

    stored = json.loads(envelope.default_path().read_text())
    assert stored["mechanisms"] == derive_envelope(None)["mechanisms"]
    for key in ("generated", "command", "runs_file", "runs_sha256", "confidence", "rows"):
        assert key in stored["provenance"], key
    assert stored["provenance"]["command"].startswith("planner validate --write-envelope")
    # What the reference runs say today: CP down to 4,096 tokens per rank, TP up to 8.
    assert stored["mechanisms"]["cp_tokens_per_rank"]["min"] == 4096
    assert stored["mechanisms"]["tp"]["max"] == 8


def test_write_envelope_cli(tmp_path):
    out = tmp_path / "env.json"
    proc = subprocess.run([sys.executable, "-m", "planner", "validate", "--write-envelope", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["mechanisms"] == json.loads(envelope.default_path().read_text())["mechanisms"]
