"""`planner validate`: accuracy on the shipped reference set is held here, so a regression fails CI."""

from __future__ import annotations

import copy
import json

import pytest
from typer.testing import CliRunner

from planner.cli.main import app
from planner.validate import llama3_405b_production_check, load_runs, summarize, validate_rows


@pytest.fixture(scope="module")
def results():
    return validate_rows(load_runs(None))


def test_accuracy_on_reference_set_high_confidence(results):
    s = summarize(results, "high")
    # 117 high-confidence rows since the 2026-11-27 release (83 before it): measured median 3.6%,
    # p90 10.4%, MAPE 5.7% with the shipped constants (11.0% p90 before NCCL user buffers, nccl_ub;
    # 13.6% before DeepSeek-V3's MTP module, the Megatron-Bridge MoE presets and the per-expert
    # quantise kernels, issue 24), held here so that it cannot get worse. 10.9% p90 since torchtitan's
    # FP8 rows are priced with its own default recipe (dynamic tensorwise = current scaling, as the
    # torchtitan framework table says), not delayed scaling; held out the p90 went 11.7% -> 11.3%.
    # 11.0% since torchtitan's rows are priced with FSDP2's copy-out (the table's fsdp2 too; held
    # out unchanged at 4.5% / 11.3%). 11.6% since gpt-oss's 128-key window on alternate layers is
    # priced (ModelSpec.sliding_window): its two H100 rows go -5.0% -> -1.5% (25.11, micro-batch 4)
    # and +8.9% -> +12.4% (26.04, micro-batch 1), the second then in the tail; median 3.7% -> 3.6%.
    # 11.0% since the experts' unfused fc2 bias and GLU clamp are priced (costmodel.moe.expert_epilogues)
    # and the 25.11 row runs micro-batch 1 as Megatron-Bridge v0.2.0's preset sets: both rows within 0.4%.
    # 3.2% / 11.14% since Megatron-LM 2021-22's interleaved pipeline sends block (profiles.py) and the
    # constants were refitted (clock 0.86 -> 0.90, FP8 GEMMs 0.70 -> 0.66, cuDNN attention 1.5x -> 1.4x):
    # held out 4.2% / 11.7% -> 3.1% / 11.2%; the in-sample p90 gives back 0.1 point (the MPT and BLOOM
    # rows +4.5% with the clock), the median gains 0.3.
    # 3.1% / 11.0% with Megatron-Bridge's H100 FP8 reduce-scatters run as ring exchange (tp_overlap_rs_ring).
    assert s["rows"] >= 117
    # 3.6% / 9.9% since 2024 containers' cuDNN attention runs at 0.86 of today's (Layout.cudnn) and the
    # native speed-up is refitted 1.5 -> 1.7: the 2024 and 2025-26 rows no longer share one speed-up,
    # so the median gives back 0.5 point in sample while leave-one-source-out falls 4.1% -> 3.7%.
    assert s["median_abs_error"] <= 0.036
    assert s["p90_abs_error"] <= 0.100
    assert s["mape"] <= 0.06
    # Early DeepSpeed ZeRO-3 is priced from its code (costmodel.zero3_blocking): the
    # Narayanan et al. rows, which include it, stay close.
    assert s["per_source"]["narayanan2021"]["mape"] <= 0.06
    # Sources the model covers by mechanism stay tight.
    for source in ("nemo_perf_2407", "nemo_longseq", "megatron_readme_2024", "korthikanti2022",
                   "llmfoundry_bench", "mbridge_2509", "nemotron4_340b"):
        assert s["per_source"][source]["median_abs_error"] <= 0.07, source
    # torchtitan: its 2024 8B/70B rows stay close, its 405B pipeline runs do not (median 9.2%).
    assert s["per_source"]["torchtitan_bench"]["median_abs_error"] <= 0.10
    # Peak memory where published (torchtitan rows): eager loss (on a vocab shard, PyTorch's
    # loss_parallel decomposition), FSDP buffers and the buffers torch.distributed.pipelining
    # keeps per micro-batch priced; issue 25's goal is a median <= 8%: measured 6.2% over 16 rows
    # (the 405B 1F1B and CP rows are still under-counted by 13-23%), held here so that it cannot
    # get worse. It was 4.7% until the FP8 attention output's copy was counted (costmodel.memory):
    # that lifted the 8B FP8 rows from +3% to +6%, the level of their BF16 twins (an over-count
    # both share), and the FP8 saving under the measured drop (the test below).
    assert s["memory"]["rows"] >= 16
    assert s["memory"]["median_abs_error"] <= 0.063


def test_fp8_memory_saving_stays_within_torchtitans_measured_drop(results):
    # torchtitan's Llama 3 8B FSDP runs (Dec 2024 performance doc) measured peak memory in BF16
    # eager and with torch.compile + Float8: 82.4 -> 76.8 GiB on 8 GPUs, 67.0 -> 61.8 on 128. The
    # drop holds FP8's saving and whatever compile's fusion saves on top, so the FP8 saving planner
    # prices (it keys no memory on compile) cannot be larger. Counting the FP8 linear input as
    # replacing the BF16 attention output, as planner did, priced 7.6 GiB on both.
    by_id = {r.id: r for r in results}
    for bf16, fp8 in (("torchtitan_h100_8b_fsdp_8gpu", "torchtitan_h100_8b_fsdp_compile_fp8_8gpu"),
                      ("torchtitan_h100_8b_fsdp_128gpu", "torchtitan_h100_8b_fsdp_compile_fp8_128gpu")):
        a, b = by_id[bf16], by_id[fp8]
        measured = a.reported_memory_gib - b.reported_memory_gib
        predicted = a.predicted_memory_gib - b.predicted_memory_gib
        assert 0.0 < predicted <= measured + 0.25, (bf16, measured, predicted)


def test_every_row_is_predicted_or_listed_with_reason(results):
    rows = load_runs(None)
    assert len(results) == len(rows)
    for r in results:
        assert r.error is not None or r.reason, r.id


def test_unmappable_row_is_listed_not_dropped():
    row = copy.deepcopy(load_runs(None)[0])
    row["id"] = "weird"
    row["hardware"]["gpu"] = "TPU-v9"
    (r,) = validate_rows([row])
    assert r.error is None and "TPU-v9" in r.reason


def test_llama3_405b_production_layout_fits_with_some_recompute():
    check = llama3_405b_production_check()
    assert any(v["fits"] for v in check.values())
    # More recompute never needs more memory.
    assert check["full"]["peak_gib"] <= check["selective"]["peak_gib"] <= check["none"]["peak_gib"] + 1e-9
    # As trained (Llama 3 paper Sec. 3.3.2): no recompute, 7/8/7 layers, optimizer states and
    # FP32 gradients sharded over dp 128. The middle stages hold 8 layers x 15 micro-batches x
    # 8192 tokens x 65,024 B (sequence-parallel 8h/t + Q, K, V, O 2(a + 2g)d/t + 2ad/t + SwiGLU
    # 6F/t, h 16384, a 128, g 8, d 128, F 53248, t 8) = 59.5 GiB, weights 2 B x 3.19 G = 5.9 GiB:
    # it fits an 80 GB H100, and without the gradient sharding (ZeRO-1, 11.9 GiB more) it does not.
    paper = check["none, ZeRO-2, 7/8/7 layers (the paper's)"]
    assert paper["fits"] and not check["none"]["fits"]
    assert paper["peak_gib"] == pytest.approx(59.5 + 5.9 + 1.5 + 0.1 * 59.5, abs=0.5)


def test_validate_cli_json_and_bad_file(tmp_path):
    runner = CliRunner()
    small = tmp_path / "runs.json"
    small.write_text(json.dumps(load_runs(None)[:3]))
    res = runner.invoke(app, ["validate", "--runs", str(small), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert {"median_abs_error", "p90_abs_error", "mape"} <= set(data["summary"])
    assert len(data["rows"]) == 3
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    res = runner.invoke(app, ["validate", "--runs", str(bad)])
    assert res.exit_code != 0


def test_runs_file_may_state_the_implementation():
    rows = {r["id"]: r for r in load_runs(None)}
    row = copy.deepcopy(rows["mbridge2509_h100_deepseekv3_1024gpu"])
    (plain,) = validate_rows([row])
    row["layout"].update(ep_comm_overlap=True, moe_dispatcher="deepep")
    (stated,) = validate_rows([row])
    assert stated.predicted > plain.predicted
    assert "moe_dispatcher=deepep (stated)" in stated.assumptions
    row["layout"]["kernels"] = "turbo"
    (bad,) = validate_rows([row])
    assert bad.error is None and "--kernels=turbo" in bad.reason


def test_unstated_vpp_covers_every_chunk_count_a_stage_allows():
    # Megatron 119B: 92 layers on PP4 = 23 a stage, so interleaving means 23 one-layer chunks.
    from planner.validate import map_run, predict_run

    rows = {r["id"]: r for r in load_runs(None)}
    run = map_run(rows["megatron2024_h100_weak_119b"])
    assert 23 in run.searched["vpp"]
    res = predict_run(run)
    assert res.chosen["vpp"] in (1, 23)
    assert abs(res.error) < 0.10


def test_unstated_recompute_covers_every_set_of_recompute_modules():
    # Megatron-Core --recompute-modules: every non-empty set of the modules a model has.
    from costmodel.layout import RECOMPUTE_MODULES, recompute_modules_names
    from hardware_catalog import get_model
    from search.grid import recompute_module_masks as _module_subset_masks

    dense = _module_subset_masks(get_model("llama3-8b"))  # core_attn, layernorm, mlp
    assert len(dense) == 2**3 - 1
    assert {m for mask in dense for m in recompute_modules_names(mask)} == {"core_attn", "layernorm", "mlp"}
    qwen = _module_subset_masks(get_model("qwen3-235b-a22b"))  # all MoE layers, no shared expert, no MLA
    assert {m for mask in qwen for m in recompute_modules_names(mask)} == {"core_attn", "layernorm", "moe_act", "moe"}
    assert len(_module_subset_masks(get_model("deepseek-v3"))) == 2 ** len(RECOMPUTE_MODULES) - 1


def test_deepseek_v3_on_h100_uses_deepep_as_nemo_performance_scripts_do():
    from planner.validate import map_run, predict_run

    rows = {r["id"]: r for r in load_runs(None)}
    run = map_run(rows["mbridge2509_h100_deepseekv3_1024gpu"])
    assert run.pins["moe_dispatcher"] == "deepep"
    # Qwen3 runs token drop there, which asserts the alltoall dispatcher (moe_token_drop.py).
    assert map_run(rows["mbridge2509_h100_qwen3_235b_a22b_256gpu"]).pins["moe_dispatcher"] == "alltoall"
    # Its recompute is the 25.09 run_script's for H100, pinned (not searched).
    assert run.pins["recompute"] == "selective" and run.pins["recompute_modules"] == ("mla_up_proj", "mlp")
    res = predict_run(run)
    assert "recompute" not in res.chosen
    assert abs(res.error) < 0.10
