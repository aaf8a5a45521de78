"""Framework profiles (planner.frameworks.profiles) and the candidate grid (search.grid)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from costmodel.options import OPTIONS_BY_NAME, RECOMPUTE
from hardware_catalog import get_cluster, get_gpu, get_model
from hardware_catalog.errors import PlannerInputError
from planner.validate import GENERIC, PROFILES, RowFacts, apply_profiles, load_runs, map_run, profiles_for
from planner.frameworks.profiles import (LAYOUT_HEAD_SLOTS, LAYOUT_SLOTS, LOOPED_TWO_CHUNKS, PP_STAGES_MICROBATCHES,
                                         row_label_suffix)
from search.grid import candidate_grid, expand_recompute_modules, recompute_module_masks

ROWS = {r["id"]: r for r in load_runs(None)}

# Which profile each shipped row is meant for, by the start of its framework text.
EXPECTED = {
    "Megatron-LM": "Megatron-LM 2021-22 (PTD-P)",
    "Megatron-Core r0.8": "Megatron-Core r0.8+",
    "NeMo 24.": "NeMo 24.x / Megatron-Bridge 25.09",
    "Megatron-Bridge / NeMo 25.09": "NeMo 24.x / Megatron-Bridge 25.09",
    "torchtitan (Dec 2024)": "torchtitan (Dec 2024)",
    "Composer": "Composer/llm-foundry (2024)",
    "DeepSpeed ZeRO-3": "DeepSpeed ZeRO-3 (2021)",
    # The runs released on 2026-11-27:
    "Megatron-LM commit 285068c8": "Megatron-LM January 2023 (before DP overlap)",
    "MegaScale": "Megatron-LM 2021-22 (PTD-P)",
    "Megatron-Bridge / NeMo 2": "NeMo 24.x / Megatron-Bridge 25.09",
    "NeMo 25.": "NeMo 24.x / Megatron-Bridge 25.09",
    "Megatron-Core v0.8": "Megatron-Core r0.8+",
    "Megatron-DeepSpeed": "Megatron-DeepSpeed (DeepSpeed pipeline engine)",
    # GPT-NeoX trains through DeepSpeed's pipeline engine (PipelineModule; its configs set pipe_parallel_size).
    "GPT-NeoX": "Megatron-DeepSpeed (DeepSpeed pipeline engine)",
}


def _expected(framework: str) -> str:
    # the longest prefix that matches ("Megatron-LM commit ..." before "Megatron-LM")
    return max(((k, v) for k, v in EXPECTED.items() if framework.startswith(k)), key=lambda kv: len(kv[0]))[1]


def test_each_profile_matches_the_shipped_rows_it_is_for():
    used = set()
    for row in ROWS.values():
        text = row["layout"]["framework"]
        got = profiles_for(text)
        assert [p.name for p in got] == [_expected(text), GENERIC.name], text
        used.add(got[0].name)
    # The ablation groups (planner/data/ablations.json) carry the Megatron-DeepSpeed rows (BLOOM).
    ablations = json.loads((Path(__file__).parents[1] / "planner" / "data" / "ablations.json").read_text())
    used |= {profiles_for(g["framework"])[0].name for g in ablations if len(profiles_for(g["framework"])) > 1}
    assert used == {p.name for p in PROFILES}  # no profile without a shipped row


def test_unknown_framework_gets_only_the_generic_profile():
    assert profiles_for("JAX/MaxText 2025") == [GENERIC]
    assert profiles_for("") == [GENERIC]
    settings, notes = apply_profiles(RowFacts(framework="maxtext", year=2025, precision="bf16"))
    assert settings == {} and notes == []


def test_an_early_run_of_an_unknown_framework_predates_flashattention_and_sp():
    # FlashAttention appeared in May 2022 and reached Megatron-LM in January 2023 and PyTorch's
    # SDPA in March 2023: a 2022 run of an unnamed framework is priced unfused, unless its text
    # names flash; a 2023 run is not.
    metaseq = "metaseq (fsdp + tensor parallel)"
    settings, notes = apply_profiles(RowFacts(framework=metaseq, year=2022))
    assert settings["attention"] == "unfused"
    assert notes == ["unfused attention (a 2022 run: before training frameworks took FlashAttention)",
                     "no sequence parallelism (the run predates it)"]
    assert "attention" not in apply_profiles(RowFacts(framework="mosaicml gpt, flash attention", year=2022))[0]
    assert "attention" not in apply_profiles(RowFacts(framework=metaseq, year=2023))[0]
    assert "attention" not in apply_profiles(RowFacts(framework=metaseq))[0]  # year unknown
    # Sequence parallelism came with Korthikanti et al. (May 2022), reached frameworks later: a run up
    # to 2022 has none, unless it states it (then no profile line says otherwise).
    assert apply_profiles(RowFacts(framework="fairseq", year=2021))[0]["sequence_parallel"] is False
    assert apply_profiles(RowFacts(framework=metaseq, year=2022))[0]["sequence_parallel"] is False
    assert "sequence_parallel" not in apply_profiles(RowFacts(framework=metaseq, year=2023))[0]
    stated, notes = apply_profiles(RowFacts(framework=metaseq, year=2022, stated=frozenset({"sequence_parallel"})))
    assert "sequence_parallel" not in stated and not any("sequence parallelism" in n for n in notes)


def test_profile_entries_name_real_options_and_valid_values_with_a_source():
    for profile in (*PROFILES, GENERIC):
        assert profile.entries, profile.name
        for entry in profile.entries:
            assert entry.source, (profile.name, entry.values)
            for name, value in entry.values.items():
                opt = OPTIONS_BY_NAME[name]
                for v in value if isinstance(value, list) else [value]:
                    if opt.kind == "choice":
                        assert v in opt.choices, (name, v)
                    elif opt.kind == "modules":  # a set of recompute modules, parsed as the flag parses it
                        assert opt.parse(",".join(v)) == v, (name, v)
                    elif v in (PP_STAGES_MICROBATCHES, LOOPED_TWO_CHUNKS, LAYOUT_SLOTS, LAYOUT_HEAD_SLOTS):  # policies
                        assert name in ("mbs", "vpp", "pp_first_layers", "pp_last_layers"), (name, v)
                    elif opt.kind == "float":  # a real number within its declared range
                        assert not isinstance(v, bool) and opt.minimum <= v <= opt.maximum, (name, v)
                    else:  # flags are bools; counts (recompute_layers: -q = q quarters) ints
                        assert isinstance(v, bool) == (opt.kind in ("flag", "auto_flag")) and isinstance(v, int), (name, v)


def test_shipped_rows_get_their_framework_assumptions_in_order():
    deepspeed = map_run(ROWS["megatron2021_t2_zero3_174p6b_768gpu"])
    assert deepspeed.assumptions == [
        "unfused attention (the run predates FlashAttention)",
        "pipeline sends partitioned over the TP ranks, all-gathered at the receiver",
        "blocking per-tensor ZeRO-3 gathers and reduce-scatters (DeepSpeed 2021)",
        "16-bit gradient reduction (DeepSpeed fp16)",
        "micro-batch gradients accumulated by autograd in the model dtype (DeepSpeed fp16 / ZeRO)",
    ]
    bridge = map_run(ROWS["mbridge2509_h100_deepseekv3_1024gpu"])
    assert bridge.assumptions == [
        "TransformerEngine cuDNN attention (flash3 on Hopper)",
        "fused cross entropy (framework default)",
        "BF16 gradient reduction (NeMo FP8 recipes)",
        "pipeline layout Et|(tt|)*30mL: embedding, loss and the MTP layer take layer slots",
        "selective recompute of mla_up_proj and mlp (Megatron-Bridge 25.09 DeepSeek-V3 on H100)",
        "FP8 current scaling (Megatron-Bridge 25.09 DeepSeek-V3 / Qwen3 MoE presets)",
        "FP8 parameters (the NeMo 2 / Megatron-Bridge FP8 presets: fp8_param_gather)",
        "DeepEP dispatcher (NeMo performance script for DeepSeek-V3 on H100)",
    ]
    assert bridge.searched["tp_comm_overlap"] == [False, True]
    # 61 decoder layers + embedding + loss + 1 MTP layer = 64 slots, 8 a stage at PP 8: the
    # first stage holds 8 - 1 decoder layers, the last 8 - 2.
    assert (bridge.pins["pp_first_layers"], bridge.pins["pp_last_layers"]) == (7, 6)
    assert bridge.pins["recompute_modules"] == ("mla_up_proj", "mlp")
    b200 = map_run(ROWS["mbridge2509_b200_deepseekv3_256gpu"])  # PP 16: 4 slots a stage
    assert (b200.pins["pp_first_layers"], b200.pins["pp_last_layers"]) == (3, 2)
    assert b200.pins["recompute"] == "selective" and b200.pins["recompute_modules"] == ("core_attn",)
    later = map_run(ROWS["mbridge2511_h100_qwen3_235b_a22b_256gpu"])  # not DeepSeek-V3, not 25.09
    assert "pp_first_layers" not in later.pins and "recompute" not in later.pins
    titan = map_run(ROWS["torchtitan_h100_8b_fsdp_8gpu"])
    assert titan.pins["recompute"] == "full" and titan.pins["recompute_share"] == 2
    assert titan.assumptions[-2:] == ["eager PyTorch kernels (no torch.compile: unfused norms, rotary, SwiGLU)",
                                      "eager F.cross_entropy on FP32 logits"]


def test_conditions_deepspeed_blocking_gathers_only_in_2021():
    row = copy.deepcopy(ROWS["megatron2021_t2_zero3_174p6b_768gpu"])
    assert map_run(row).pins["zero3_gather"] == "blocking"
    row["source"]["year"] = 2024
    later = map_run(row)
    assert "zero3_gather" not in later.pins and "attention" not in later.pins
    assert later.pins["grad_dtype"] == "bf16"  # the 16-bit reduction does not depend on the year


def test_bloom_trains_on_jean_zay_and_reduces_fp32_gradients():
    """BLOOM 176B (BigScience tr11): the Omni-Path cluster its README names, and the BF16_Optimizer's
    FP32 gradient all-reduce (DeepSpeed v0.6.5 pipe/engine.py _bf16_reduce_grads), not the 16-bit
    reduction of DeepSpeed's fp16 engine that the same profile gives the fp16 rows."""
    bloom = map_run(ROWS["bloom_176b_384gpu"])
    assert bloom.cluster.name == "jean-zay-a100"
    # 4 x 100 Gb/s Omni-Path per node at the measured 135 of 400 Gb/s (clusters.toml), over 8 GPUs.
    per_gpu = bloom.cluster.nics_per_node * 12.5 * bloom.cluster.network_efficiency / bloom.cluster.gpus_per_node
    assert per_gpu == pytest.approx(135 / 8 / 8, rel=0.02)
    assert bloom.pins["grad_dtype"] == "fp32"
    assert "FP32 gradient reduction (DeepSpeed BF16_Optimizer)" in bloom.assumptions
    # ... all-reduced whole (buffered_allreduce_fallback), not reduce-scattered into shards.
    assert bloom.pins["grad_reduce"] == "all_reduce"
    row = copy.deepcopy(ROWS["bloom_176b_384gpu"])
    row["layout"]["precision"] = "fp16"
    fp16 = map_run(row)
    assert fp16.pins["grad_dtype"] == "bf16" and "grad_reduce" not in fp16.pins  # the ZeRO optimizer's reduce


def test_conditions_on_text_precision_gpu_and_model():
    mcore = RowFacts(framework="megatron-core r0.8.0", year=2024)
    assert apply_profiles(mcore)[0]["tp_comm_overlap"] == [False, True]
    stated = RowFacts(framework="megatron-core r0.8.0 (--tp-comm-overlap)", year=2024)
    assert apply_profiles(stated)[0]["tp_comm_overlap"] is True
    dsv3 = dict(framework="nemo 25.09 (megatron-core)", year=2025, gpu="h100-sxm",
                model_parts=frozenset({"moe", "mla"}))
    assert apply_profiles(RowFacts(**dsv3))[0]["moe_dispatcher"] == "deepep"
    for change in (dict(year=2024), dict(gpu="b200"), dict(model_parts=frozenset({"moe"}))):
        assert "moe_dispatcher" not in apply_profiles(RowFacts(**{**dsv3, **change}))[0], change
    assert "grad_dtype" not in apply_profiles(RowFacts(**dsv3))[0]  # bf16 reduction only with fp8
    assert apply_profiles(RowFacts(**dsv3, precision="fp8"))[0]["grad_dtype"] == "bf16"
    assert apply_profiles(RowFacts(framework="composer + pytorch fsdp"))[0]["kernels"] == "eager"
    assert "kernels" not in apply_profiles(RowFacts(framework="composer + torch.compile"))[0]
    assert "recompute" not in apply_profiles(RowFacts(framework="torchtitan", recompute="full"))[0]
    assert apply_profiles(RowFacts(framework="megatron-lm", year=0))[0] == {}  # unknown year: not "old"
    # (sequence parallelism off too, unless the row states it: an opt-in flag new in 2022)
    assert apply_profiles(RowFacts(framework="megatron-lm", year=2022, source="korthikanti2022"))[0] == {
        "attention": "unfused", "p2p_comm_overlap": False, "cp": 1, "sequence_parallel": False,
        "recompute_modules": ("core_attn",)}
    # Blocking pipeline sends: Megatron-LM until 2023 (source year <= 2022), and the zero-bubble
    # paper's 2023 fork whatever its year; not a 2024 Megatron-LM row (Nemotron-4).
    assert apply_profiles(RowFacts(framework="megatron-lm (ptd-p)", year=2021))[0]["p2p_comm_overlap"] is False
    assert "p2p_comm_overlap" not in apply_profiles(RowFacts(framework="megatron-lm / nemo", year=2024))[0]
    zb = "megatron-lm fork (sail-sg/zero-bubble-pipeline-parallelism, 2023)"
    assert apply_profiles(RowFacts(framework=zb, year=2024))[0]["p2p_comm_overlap"] is False


def test_a_stated_setting_overrides_the_profile():
    row = copy.deepcopy(ROWS["mbridge2509_h100_llama3_70b_64gpu"])
    row["layout"].update(attention="flash", tp_comm_overlap=False)
    run = map_run(row)
    assert run.pins["attention"] == "flash" and run.pins["tp_comm_overlap"] is False
    assert "tp_comm_overlap" not in run.searched
    # A profile line for an option the row states is not shown (it would contradict the row); the
    # stated settings are listed, in option order.
    assert "TransformerEngine cuDNN attention (flash3 on Hopper)" not in run.assumptions
    assert run.assumptions[0] == "fused cross entropy (framework default)"
    assert run.assumptions[-2:] == ["attention=flash (stated)", "tp_comm_overlap=False (stated)"]


def test_row_label_marks_tp_overlap_and_eager_kernels():
    class Lay:
        tp_comm_overlap, kernels = True, "eager"

    assert row_label_suffix(Lay()) == " tpo eager"
    Lay.tp_comm_overlap, Lay.kernels = False, "fused"
    assert row_label_suffix(Lay()) == ""


# ------------------------------------------------------------------------------------ candidate grid

LLAMA_8B = get_model("llama3-8b")  # 32 layers, 32 heads, 8 KV heads
H100 = get_cluster("dgx-h100")  # scale-up domain 8
H100_GPU = get_gpu(H100.gpu)


def _grid(choices, **fixed):
    fixed = {"gbs": 8, "seq_len": 4096, **fixed}
    return candidate_grid(LLAMA_8B, H100, H100_GPU, 8, choices, fixed)


def test_candidate_grid_count_matches_a_hand_count():
    batch = _grid({"tp": [1, 2, 4, 8, 16], "pp": [1, 2, 4, 8], "mbs": [1, 2], "vpp": [1, 2]}, recompute="full")
    # tp*pp <= 8 leaves 10 (tp, pp) pairs (tp 16 exceeds both the 8 GPUs and the NVLink domain).
    # vpp 1: gbs 8 divisible by dp*mbs everywhere except dp 8 with mbs 2 -> 10*2 - 1 = 19.
    # vpp 2 (pp > 1 only): micro-batches 8/(dp*mbs) divisible by pp -> (tp,pp) = (1,2), (1,4),
    # (1,8) with mbs 1 only, (2,2), (2,4), (4,2) with mbs 1 and 2 -> 3 + 6 = 9.
    assert len(batch) == 19 + 9
    assert np.all(batch.tp * batch.pp * batch.dp == 8)
    rows = set(zip(batch.tp.tolist(), batch.pp.tolist(), batch.mbs.tolist(), batch.vpp.tolist()))
    assert (16, 1, 1, 1) not in rows  # tp beyond the scale-up domain
    assert (1, 1, 2, 1) not in rows  # gbs 8 not divisible by dp*mbs = 16
    assert (1, 1, 1, 2) not in rows  # interleaving without a pipeline
    assert (1, 8, 2, 2) not in rows  # 4 micro-batches for 8 stages, interleaved
    # meshgrid 'ij' order: the last option varies fastest.
    assert list(zip(batch.tp[:3].tolist(), batch.pp[:3].tolist(), batch.mbs[:3].tolist(), batch.vpp[:3].tolist())) == [
        (1, 1, 1, 1), (1, 2, 1, 1), (1, 2, 1, 2)]


def test_candidate_grid_drops_invalid_settings_and_partial_shares_that_round_to_all_layers():
    batch = _grid({"tp": [1, 2], "pp": [1], "tp_comm_overlap": [False, True]}, recompute="full")
    assert sorted(zip(batch.tp.tolist(), batch.tp_comm_overlap.tolist())) == [(1, False), (2, False), (2, True)]
    # A fixed setting is switched off where its rules say it does not apply (zero3_gather: zero 3 only).
    fixed = _grid({"tp": [8], "pp": [1], "zero": [1, 3]}, recompute="full", zero3_gather="blocking")
    assert dict(zip(fixed.zero.tolist(), fixed.zero3_gather.tolist())) == {1: 0, 3: 1}
    shares = {"tp": [1], "pp": [8], "recompute": ["full"], "recompute_share": [0, 3, 2, 1]}
    assert len(_grid({**shares, "vpp": [1]})) == 4  # 4-layer stages: every quarter share is distinct
    assert _grid({**shares, "vpp": [4]}).recompute_share.tolist() == [0]  # one-layer chunks: all layers


def test_expand_recompute_modules_repeats_selective_rows_once_per_module_set():
    masks = recompute_module_masks(LLAMA_8B)  # core_attn, layernorm, mlp
    assert len(masks) == 7 and masks == sorted(masks)
    batch = _grid({"tp": [8], "pp": [1], "recompute": list(RECOMPUTE)})
    out = expand_recompute_modules(batch, LLAMA_8B)
    assert [RECOMPUTE[r] for r in out.recompute.tolist()] == ["none"] + ["selective"] * 7 + ["full"]
    assert out.recompute_modules[1:8].tolist() == masks


@pytest.mark.parametrize("row_id", ["megatron2024_h100_weak_1p7b", "nemo2407_h100_fp8_llama3_8b_8gpu"])
def test_validate_candidates_obey_every_rule(row_id):
    from planner.validate import candidates
    from search.rules import RuleContext, valid_mask

    run = map_run(ROWS[row_id])
    batch = candidates(run)
    assert len(batch) > 0
    assert valid_mask(RuleContext.build(run.model, run.gpus, run.cluster, run.gpu), batch).all()


def test_selective_recompute_before_2025_is_core_attention_only():
    # --recompute-modules arrived in Megatron-LM on 2025-04-05 (core_v0.12.0): a 2024 row's
    # selective recompute is core attention; a 2025 row searches the module sets.
    old = apply_profiles(RowFacts(framework="nemo 24.07", year=2024))[0]
    new = apply_profiles(RowFacts(framework="megatron-bridge 25.09", year=2025))[0]
    assert old["recompute_modules"] == ("core_attn",) and "recompute_modules" not in new


def test_transformer_engine_attention_of_2024_containers_runs_2024_cudnn():
    # A 2024 NeMo or Megatron-Core release runs the cuDNN 9 of its year; NeMo 24.03's long-sequence
    # table is dated 2025 but names its container; 2025 releases run today's cuDNN; a framework without
    # TransformerEngine attention is not given one.
    def settings(text, year):
        return apply_profiles(RowFacts(framework=text, year=year, precision="bf16"))[0]

    for text, year in (("nemo 24.07 (megatron-core)", 2024), ("megatron-core r0.8.0", 2024),
                       ("nemo 24.03.01 (megatron-core)", 2025)):
        got = settings(text, year)
        assert (got["attention"], got["cudnn"]) == ("flash3", "2024"), text
    for text, year in (("megatron-bridge / nemo 25.09 (megatron-core)", 2025), ("nemo 25.04.rc2 (megatron-core)", 2025)):
        got = settings(text, year)
        assert got["attention"] == "flash3" and "cudnn" not in got, text
    assert "cudnn" not in settings("torchtitan (dec 2024)", 2024)


def test_deepspeed_pipeline_engine_partitions_sends_and_reduces_after_the_last_micro_batch():
    # DeepSpeed runtime/pipe/engine.py: is_pipe_partitioned = is_model_parallel (sends split over
    # TP, all-gathered at the receiver); pipe/schedule.py TrainSchedule: ReduceGrads after the
    # last BackwardPass (no overlap).
    text = "Megatron-DeepSpeed (BigScience fork, Feb 2022), DeepSpeed ZeRO-1"
    assert profiles_for(text)[0].name == "Megatron-DeepSpeed (DeepSpeed pipeline engine)"
    settings, _ = apply_profiles(RowFacts(framework=text.lower(), year=2022, precision="bf16"))
    assert settings["p2p_scatter_gather"] is True and settings["dp_comm_overlap"] is False
    # Megatron-Core sends whole tensors and overlaps gradient reduction when told: neither is set.
    settings, _ = apply_profiles(RowFacts(framework="megatron-core r0.8.0", year=2024, precision="bf16"))
    assert "p2p_scatter_gather" not in settings and "dp_comm_overlap" not in settings


def test_megatron_deepspeed_before_mid_2023_has_no_sequence_parallelism():
    # microsoft/Megatron-DeepSpeed took --sequence-parallel with its 2023-07-04 merge of Megatron-LM
    # upstream (9e72d571): BLOOM (2022) and GPT-NeoX 20B (2022) ran without it; a 2024 run may use it.
    bloom = apply_profiles(RowFacts(framework="megatron-deepspeed + deepspeed", year=2022, source="bloom_tr11"))[0]
    neox = apply_profiles(RowFacts(framework="gpt-neox (megatron + deepspeed)", year=2022, source="neox"))[0]
    assert bloom["sequence_parallel"] is False and neox["sequence_parallel"] is False
    assert "sequence_parallel" not in apply_profiles(RowFacts(framework="megatron-deepspeed", year=2024))[0]


def test_bigscience_runs_launch_kernels_blocking():
    # bigscience tr11-176B-ml.slurm exports CUDA_LAUNCH_BLOCKING=1; the topology search (the
    # ablation groups, framework text naming the BigScience fork) and the production row
    # (source bloom_tr11) get it, another DeepSpeed pipeline run (GPT-NeoX) does not.
    ablation = "megatron-deepspeed (bigscience fork, feb 2022), deepspeed zero-1"
    assert apply_profiles(RowFacts(framework=ablation, year=2022))[0]["launch_blocking"] is True
    production = RowFacts(framework="megatron-deepspeed + deepspeed", year=2022, source="bloom_tr11")
    assert apply_profiles(production)[0]["launch_blocking"] is True
    neox = RowFacts(framework="gpt-neox (megatron + deepspeed)", year=2022, source="neox")
    assert "launch_blocking" not in apply_profiles(neox)[0]


def test_torchtitan_2024_pipelines_one_microbatch_per_stage_and_two_chunks_when_looped():
    # torchtitan (2024): n_microbatches = pipeline_parallel_microbatches or pp, and a looped schedule
    # without split points runs 2 stages per rank. A 256-sequence batch on DP 8 x PP 8: each DP
    # rank's 32 sequences in 8 micro-batches of 4. "1F1B" alone is one chunk per stage.
    from planner.validate.runs import map_run

    row = {"id": "tt", "gpu": "h100", "num_gpus": 512, "model": "llama3-405b", "tp": 8, "pp": 8, "dp": 8, "cp": 1,
           "gbs": 256, "seq_len": 8192, "tokens_per_s_per_gpu": 100, "framework": "torchtitan (Dec 2024)",
           "layout": {"pipeline_schedule": "1F1B"}}
    plain = map_run(row)
    assert plain.pins["mbs"] == 256 // (8 * 8) and plain.pins["vpp"] == 1
    looped = map_run({**row, "layout": {"pipeline_schedule": "Interleaved 1F1B"}})
    assert looped.pins["mbs"] == 4 and looped.pins["vpp"] == 2
    stated = map_run({**row, "mbs": 1})
    assert stated.pins["mbs"] == 1  # a stated micro-batch wins


def test_megatron_2023_baseline_runs_without_any_communication_overlap():
    # MegaScale's Megatron-LM baseline (commit 285068c8, Sept 2023 cluster): no DP overlap
    # (Megatron-LM issue #391), no TP overlap and no pipeline send overlap (opt-in since PR #331,
    # May 2023; MegaScale Sec. 3.2 lists all three among what it adds).
    pins, _ = apply_profiles(RowFacts(framework="megatron-lm commit 285068c8 (baseline)", year=2024, source="megascale"))
    assert pins["dp_comm_overlap"] is False and pins["tp_comm_overlap"] is False
    assert pins["p2p_comm_overlap"] is False
    # Later Megatron-Core runs keep Megatron-Core's default (overlapped interleaved sends).
    pins, _ = apply_profiles(RowFacts(framework="megatron-core r0.8", year=2024))
    assert "p2p_comm_overlap" not in pins


def test_bridge_h100_moe_presets_pin_what_the_release_configs_set():
    # Megatron-Bridge v0.2.0 (25.11) / 26.04 H100 presets: Qwen3-235B-A22B keeps the recipe's
    # alltoall dispatcher with moe_a2a_overlap=True; Qwen3-30B-A3B 26.x runs HybridEP without
    # the overlap; GPT-OSS-120B 26.x recomputes layernorm and moe_act, PP 4 without interleaving;
    # every H100 FP8 preset is current scaling (FP8_CS).
    big = map_run(ROWS["mbridge2511_h100_qwen3_235b_a22b_256gpu"])
    assert big.pins["moe_dispatcher"] == "alltoall" and big.pins["ep_comm_overlap"] is True
    assert "moe_dispatcher" not in big.searched
    small = map_run(ROWS["mbridge260401_h100_qwen3_30b_a3b_16gpu"])
    assert small.pins["moe_dispatcher"] == "hybridep" and small.pins["ep_comm_overlap"] is False
    assert small.pins["fp8_recipe"] == "current"
    oss = map_run(ROWS["mbridge260401_h100_gpt_oss_120b_64gpu"])
    assert oss.pins["recompute_modules"] == ("layernorm", "moe_act") and oss.pins["vpp"] == 1
    dense = map_run(ROWS["mbridge260401_h100_llama3_70b_64gpu"])
    assert dense.pins["fp8_recipe"] == "current" and "moe_dispatcher" not in dense.pins
    # The condition on the model's name: another model or GPU keeps the searched dispatcher.
    facts = dict(framework="megatron-bridge / nemo 26.04.01", year=2026, gpu="h100-sxm",
                 model_parts=frozenset({"moe"}), model_name="qwen3-30b-a3b")
    assert apply_profiles(RowFacts(**facts))[0]["moe_dispatcher"] == "hybridep"
    for change in (dict(gpu="b200"), dict(model_name="mixtral-8x7b")):
        assert apply_profiles(RowFacts(**{**facts, **change}))[0]["moe_dispatcher"] == ["alltoall", "hybridep"]


def test_deepspeed_pipeline_engine_rows_run_one_stage_per_rank():
    # DeepSpeed's pipeline engine has no interleaved schedule (runtime/pipe/schedule.py TrainSchedule),
    # and planner's DeepSpeed exporter refuses vpp > 1: a row on it is priced with vpp 1, not a searched
    # chunk count (GPT-NeoX 20B was priced with 11 chunks a stage before).
    pins, _ = apply_profiles(RowFacts(framework="gpt-neox (megatron + deepspeed)", year=2022))
    assert pins["vpp"] == 1
    run = map_run(ROWS["gpt_neox_20b_96gpu"])
    assert run.pins["vpp"] == 1 and "vpp" not in run.searched
    # The row's own hardware text: four ConnectX-6 HDR HCAs for eight GPUs.
    assert run.cluster.nics_per_node == 4


def test_torchtitan_fp8_rows_get_torchtitans_own_recipe():
    # torchtitan's Float8 (torchao Float8Linear) scales dynamically from each tensor's own amax:
    # config_manager.py (Dec 2024) --float8.scaling_type_* default 'dynamic'; planner's torchtitan
    # framework table prices the same (current), so a runs-file row must too. BF16 rows get none.
    fp8, _ = apply_profiles(RowFacts(framework="torchtitan (dec 2024): fsdp + tp + torch.compile + float8", year=2024,
                                     precision="fp8"))
    assert fp8["fp8_recipe"] == "current"
    bf16, _ = apply_profiles(RowFacts(framework="torchtitan (dec 2024): fsdp", year=2024, precision="bf16"))
    assert "fp8_recipe" not in bf16
    assert map_run(ROWS["torchtitan_h100_8b_cp1_32k"]).pins["fp8_recipe"] == "current"
    # FSDP2 (per-parameter DTensor shards, copy-out after each all-gather), as the table says.
    assert fp8["fsdp"] == "fsdp2" and bf16["fsdp"] == "fsdp2"


def test_bridge_2511_h100_llama3_8b_fp8_recomputes_five_layers():
    # Megatron-Bridge v0.2.0 (25.11) LLAMA3_8B_H100_FP8_CS_BASE_CONFIG: recompute_num_layers=5, which
    # set_recompute_overrides turns into full recompute of 5 layers (block method); 25.09's YAML
    # preset for the same row sets no recompute.
    later = map_run(ROWS["mbridge2511_h100_llama3_8b_8gpu"])
    assert later.pins["recompute"] == "full" and later.pins["recompute_layers"] == 5
    assert "recompute" not in later.searched
    earlier = map_run(ROWS["mbridge2509_h100_llama3_8b_8gpu"])
    assert "recompute_layers" not in earlier.pins


def test_bridge_h100_fp8_llama3_reduce_scatters_run_as_ring_exchange():
    # Megatron-Bridge comm_overlap.py (25.09, v0.2.0, 26.04): userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192
    # (Llama 3 70B) and userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192 (405B) set proj_fprop and
    # fc2_fprop to RingExchangeOverlapCfg(num_sm=1); the BF16 configs and NeMo 24.07's launcher config
    # pipeline them on 24 / 16 SMs, and the 8B presets run TP 1 (no userbuffers at all).
    for row in ("mbridge2509_h100_llama3_70b_64gpu", "mbridge2511_h100_llama3p1_405b_1024gpu",
                "mbridge260401_h100_llama3_70b_64gpu"):
        assert map_run(ROWS[row]).pins["tp_overlap_rs_ring"] is True, row
    for row in ("nemo2407_h100_fp8_llama3_70b_64gpu", "mbridge2509_h100_llama3_8b_8gpu"):
        assert "tp_overlap_rs_ring" not in map_run(ROWS[row]).pins, row
    bf16 = RowFacts(framework="megatron-bridge / nemo 25.11", year=2025, precision="bf16", gpu="h100-sxm",
                    model_name="llama3-70b")
    assert "tp_overlap_rs_ring" not in apply_profiles(bf16)[0]


def test_bridge_later_deepseek_v3_layouts_and_blackwell_presets():
    # 25.11 / 26.x on Blackwell: the recipe table's layout, e.g. PP 16 = [E + 4 t], 14 x [4 t],
    # [t, mtp, loss]: 61 + 3 = 64 slots, 4 a stage, the last holding 4 - 3 = 1 decoder layer. On
    # H100 "Et|(tt|)*30mL" as in 25.09 (8 slots a stage at PP 8: 7 and 6).
    import copy

    b200 = copy.deepcopy(ROWS["mbridge2509_b200_deepseekv3_256gpu"])
    b200["layout"]["framework"] = "Megatron-Bridge / NeMo 25.11"
    run = map_run(b200)
    assert (run.pins["pp_first_layers"], run.pins["pp_last_layers"]) == (4, 1)
    # v0.2.0's B200 preset: the recipe's alltoall dispatcher, selective recompute of mla_up_proj.
    assert run.pins["moe_dispatcher"] == "alltoall" and run.pins["recompute_modules"] == ("mla_up_proj",)
    gb200 = copy.deepcopy(ROWS["mbridge2509_gb200_deepseekv3_256gpu"])  # PP 4: 16 a stage, 13 last
    gb200["layout"]["framework"] = "Megatron-Bridge / NeMo 26.04.01"
    run = map_run(gb200)
    assert (run.pins["pp_first_layers"], run.pins["pp_last_layers"]) == (16, 13)
    assert "recompute_modules" not in run.pins  # 26.x presets vary by version and precision
    h100 = copy.deepcopy(ROWS["mbridge2509_h100_deepseekv3_1024gpu"])
    h100["layout"]["framework"] = "Megatron-Bridge / NeMo 25.11"
    run = map_run(h100)
    assert (run.pins["pp_first_layers"], run.pins["pp_last_layers"]) == (7, 6)


def test_bridge_gpt_oss_blackwell_recompute():
    # GPT-OSS-120B presets on B200 / GB200 (25.11 and 26.x) recompute layernorm and moe_act; on
    # GB300 they recompute nothing, so it stays searched there.
    facts = dict(framework="megatron-bridge / nemo 25.11", year=2025, gpu="gb200",
                 model_parts=frozenset({"moe"}), model_name="gpt-oss-120b")
    settings = apply_profiles(RowFacts(**facts))[0]
    assert settings["recompute"] == "selective" and settings["recompute_modules"] == ("layernorm", "moe_act")
    assert "recompute" not in apply_profiles(RowFacts(**{**facts, "gpu": "gb300"}))[0]


def test_bridge_gpt_oss_reduces_gradients_in_bf16():
    # set_gpt_oss_common_configs (v0.2.0 and 26.04): grad_reduce_in_fp32 = False on every GPU, in BF16
    # too (the NeMo FP8 entry covers only FP8 runs); not for other Bridge models in BF16.
    for text, gpu in (("megatron-bridge / nemo 25.11", "h100"), ("megatron-bridge / nemo 26.04.01", "gb200")):
        facts = RowFacts(framework=text, year=2026, gpu=gpu, precision="bf16", model_parts=frozenset({"moe"}),
                         model_name="gpt-oss-120b")
        assert apply_profiles(facts)[0]["grad_dtype"] == "bf16"
    other = RowFacts(framework="megatron-bridge / nemo 25.11", year=2025, gpu="h100", precision="bf16",
                     model_parts=frozenset({"moe"}), model_name="qwen3-30b-a3b")
    assert "grad_dtype" not in apply_profiles(other)[0]


def test_bridge_2511_qwen3_blackwell_dispatchers():
    # v0.2.0 presets: Qwen3-235B-A22B on B200 alltoall with moe_a2a_overlap, Qwen3-30B-A3B on B200
    # alltoall, both on GB200 / GB300 HybridEP; 26.x keeps the search.
    base = dict(framework="megatron-bridge / nemo 25.11", year=2025, model_parts=frozenset({"moe"}))
    big_b200 = apply_profiles(RowFacts(**base, gpu="b200", model_name="qwen3-235b-a22b"))[0]
    assert big_b200["moe_dispatcher"] == "alltoall" and big_b200["ep_comm_overlap"] is True
    small_b200 = apply_profiles(RowFacts(**base, gpu="b200", model_name="qwen3-30b-a3b"))[0]
    assert small_b200["moe_dispatcher"] == "alltoall" and "ep_comm_overlap" not in small_b200
    assert apply_profiles(RowFacts(**base, gpu="gb300", model_name="qwen3-30b-a3b"))[0]["moe_dispatcher"] == "hybridep"
    later = dict(base, framework="megatron-bridge / nemo 26.04.01")
    assert apply_profiles(RowFacts(**later, gpu="gb200", model_name="qwen3-30b-a3b"))[0]["moe_dispatcher"] == [
        "alltoall", "hybridep"]


def test_bridge_2511_to_2604_moe_experts_loop_and_no_whole_layer_graphs():
    # NeMo 25.11 / 26.02 / 26.04 ship TransformerEngine 2.9 / 2.12 / 2.14 (Megatron-Bridge
    # docs/releases/software-versions.md). Their GroupedLinear reaches nvte_multi_tensor_gemm,
    # which loops cuBLASLt over the experts unless NVTE_USE_CUTLASS_GROUPED_GEMM=1 on SM90 with
    # BF16 operands; the Bridge performance scripts set no such variable and switch the
    # Megatron-Core 0.17 op-fuser path off (overrides.py), so Hopper and Blackwell, BF16 and FP8,
    # all loop. Their MoE presets graph only attn / moe_router / moe_preprocess, which the
    # whole-layer cuda_graphs option does not describe, so it stays unpinned.
    for text, gpu, name in (("megatron-bridge / nemo 25.11", "gb200", "qwen3-30b-a3b"),
                            ("megatron-bridge / nemo 26.02", "b200", "deepseek-v3"),
                            ("megatron-bridge / nemo 26.04.01", "gb300", "gpt-oss-120b")):
        settings, assumptions = apply_profiles(RowFacts(framework=text, year=2026, gpu=gpu, precision="fp8",
                                                        model_parts=frozenset({"moe"}), model_name=name))
        assert settings["moe_grouped_gemm"] == "loop"
        assert "cuda_graphs" not in settings
        assert any("per-expert cuBLAS loop" in line for line in assumptions)
    for row_id in ("mbridge2511_h100_qwen3_30b_a3b_16gpu", "mbridge260401_h100_qwen3_235b_a22b_256gpu"):
        run = map_run(ROWS[row_id])
        assert run.pins["moe_grouped_gemm"] == "loop" and "moe_grouped_gemm" not in run.searched
        assert run.pins.get("cuda_graphs") is not True
    # Dense models get no MoE pin; Megatron-Core r0.8's legacy GroupedMLP stays one grouped launch.
    dense = apply_profiles(RowFacts(framework="megatron-bridge / nemo 26.04.01", gpu="b200", model_name="llama3-70b"))
    assert "moe_grouped_gemm" not in dense[0]
    legacy = apply_profiles(RowFacts(framework="megatron-core r0.8", model_parts=frozenset({"moe"})))
    assert legacy[0]["moe_grouped_gemm"] == "fused"


def test_a_4bit_row_is_priced_with_the_nvfp4_recipe_and_says_so():
    # TransformerEngine runs NVFP4 as one of its autocast recipes (NVFP4BlockScaling): a Blackwell
    # row trained in it is priced with the nvfp4 recipe, never silently as BF16, and the run's FP8
    # recipe text loses. MXFP4 has no training recipe in TE or Megatron: MXFP8, a floor, said so.
    row = copy.deepcopy(ROWS["mbridge2509_gb200_qwen3_235b_a22b_64gpu"])
    row["layout"]["precision"] = "NVFP4 (current scaling for the BF16 layers)"
    run = map_run(row)
    assert run.pins["precision"] == "fp8" and run.pins["fp8_recipe"] == "nvfp4"
    assert "fp8_recipe" not in run.searched
    assert sum("NVFP4 GEMMs" in a for a in run.assumptions) == 1
    row["layout"]["precision"] = "MXFP4"
    run = map_run(row)
    assert run.pins["fp8_recipe"] == "mxfp8"
    said = [a for a in run.assumptions if "MXFP4 training is not modelled" in a]
    assert len(said) == 1 and "floor" in said[0]
    # H100 has no FP4 tensor cores: one line naming the value and the GPU.
    h100 = copy.deepcopy(ROWS["mbridge2509_h100_qwen3_30b_a3b_16gpu"])
    h100["layout"]["precision"] = "nvfp4"
    with pytest.raises(PlannerInputError, match=r"precision 'nvfp4': .*Blackwell.*h100"):
        map_run(h100)


def test_bridge_2509_moe_token_drop_and_qwen3_blackwell_graphs():
    # Megatron-Bridge 25.09 run_script.py: apply_moe_token_drop (capacity factor 1.0, padded) for
    # every Qwen3 MoE run and for DeepSeek-V3 on B200 / GB200 (DeepEP only on H100); the Qwen3-30B
    # YAML sets cuda_graphs true on B200 and GB200 (whole layer: cuda_graph_scope 'full').
    for row_id, graphs in (("mbridge2509_b200_qwen3_30b_a3b_8gpu", True), ("mbridge2509_gb200_qwen3_30b_a3b_8gpu", True),
                           ("mbridge2509_h100_qwen3_30b_a3b_16gpu", False),
                           ("mbridge2509_b200_qwen3_235b_a22b_64gpu", False),
                           ("mbridge2509_gb200_deepseekv3_256gpu", False)):
        run = map_run(ROWS[row_id])
        assert (run.pins["moe_capacity_factor"], run.pins["moe_pad_to_capacity"]) == (1.0, True), row_id
        assert run.pins["moe_dispatcher"] == "alltoall", row_id
        assert bool(run.pins.get("cuda_graphs")) is graphs, row_id
    # DeepSeek-V3 on H100 runs dropless with DeepEP; 25.11 presets are dropless (token drop opt-in).
    for row_id in ("mbridge2509_h100_deepseekv3_1024gpu", "mbridge2511_h100_qwen3_30b_a3b_16gpu"):
        assert "moe_capacity_factor" not in map_run(ROWS[row_id]).pins, row_id


def test_2022_megatron_deepspeed_and_gpt_neox_attention_is_unfused():
    # BLOOM (ALiBi, before FlashAttention took additive biases) and GPT-NeoX 20B (fused upper-triangular
    # softmax in configs/20B.yml) stored their attention scores; later DeepSpeed pipeline-engine rows keep the search.
    for row_id in ("bloom_176b_384gpu", "gpt_neox_20b_96gpu"):
        assert map_run(ROWS[row_id]).pins["attention"] == "unfused", row_id
    later = apply_profiles(RowFacts(framework="megatron-deepspeed", year=2023))[0]
    assert "attention" not in later


def test_aleph_alpha_codebase_runs_without_sequence_parallelism_unless_stated():
    # Aleph-Alpha/scaling topology_config.py: TopologyConfig.sequence_parallel defaults to False;
    # Hagemann et al. 2023 switch it on only in the sheets that vary it.
    text = "aleph alpha 3d-parallel training codebase (megatron-style tp/pp/dp; 2023 sweep)"
    assert profiles_for(text)[0].name == "Aleph Alpha scaling codebase (2023)"
    assert apply_profiles(RowFacts(framework=text, year=2023))[0]["sequence_parallel"] is False
    # Megatron-Core leaves it to the search.
    assert "sequence_parallel" not in apply_profiles(RowFacts(framework="megatron-core r0.8.0", year=2024))[0]
    # A sheet that states it keeps what it states (the seqpara sweep: both values).
    from planner.validate.ranking import group_rows, load_groups

    sheet = next(g for g in load_groups(Path("planner/data/ablations.json"))
                 if g["id"] == "hagemann2023_llama13b_32gpu_seqpar")
    stated = {row["layout"]["sequence_parallel"]: map_run(row).pins.get("sequence_parallel") for row in group_rows(sheet)}
    assert stated == {True: True, False: False}
    # Stated on with TP left to the search: the search decides per layout (TP 1 has nothing to split).
    row = copy.deepcopy(next(r for r in group_rows(sheet) if r["layout"]["sequence_parallel"]))
    row["layout"]["tp"] = row["layout"]["dp"] = None
    assert "sequence_parallel" not in map_run(row).pins


def test_aleph_alpha_codebase_keeps_bf16_gradients_and_reduces_them_after_the_last_micro_batch():
    """Aleph-Alpha/scaling: gradients stay in the BF16 parameters' dtype (parameter_group.py) and are
    all-reduced in Optimizer.step, after every micro-batch's backward (optimizer.py). Hagemann et al.'s
    Llama 13B ran TP1 PP1 DP64 with full recompute on 80 GB A100s; with FP32 main grads (4 bytes per
    parameter, 51 GB) it could not have."""
    from planner.validate.predict import candidates
    from planner.validate.ranking import group_rows, load_groups
    from costmodel import evaluate_batch
    from costmodel.calibration import DEFAULT

    sheet = next(g for g in load_groups(Path("planner/data/ablations.json"))
                 if g["id"] == "hagemann2023_llama13b_64gpu_fa2")
    row = next(r for r in group_rows(sheet) if (r["layout"]["tp"], r["layout"]["pp"], r["layout"]["micro_batch_size"])
               == (1, 1, 1) and r["layout"]["activation_recompute"].startswith("full"))
    run = map_run(row)
    assert run.pins["grad_dtype"] == "bf16" and run.pins["dp_comm_overlap"] is False
    assert run.pins["grad_reduce"] == "all_reduce_fp32"  # allreduce.py allreduce_tensor_in_float32
    # Parameters by hand: untied 64000 x 5120 embedding and head, 40 layers of 4h^2 (q, k, v, o) +
    # 3 h x 13824 (SwiGLU) + 2 h (RMSNorm scales), and the final norm.
    h, f, layers, vocab = 5120, 13824, 40, 64000
    params = 2 * vocab * h + layers * (4 * h * h + 3 * h * f + 2 * h) + h
    out = evaluate_batch(run.model, run.cluster, candidates(run), gpu=run.gpu, calib=DEFAULT)
    assert np.allclose(out.memory_gib["gradients"], 2 * params / 2**30, rtol=1e-3)  # 24.4 GiB, not 48.7
    assert out.fits.any()
