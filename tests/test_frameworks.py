"""--framework RELEASE on evaluate / search / export: a framework release's profile (the one
validate prices that framework's runs with) sets how the layout runs; flags typed win."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hardware_catalog import get_model
from planner.frameworks import RELEASES, apply_framework, framework_settings
from planner.frameworks.profiles import RowFacts, apply_profiles, model_parts


def run(*args):
    proc = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


JOB = ("--model", "llama3-70b", "--gpus", "64", "--gpu", "h100", "--tp", "8", "--pp", "4", "--json")


def _evaluate(*extra):
    code, out, err = run("evaluate", *JOB, *extra)
    assert code == 0, err
    return json.loads(out)


def test_nemo_release_sets_what_nemo_recipes_run_with():
    # NeMo 2 model configs: TransformerEngine (cuDNN) attention, cross_entropy_loss_fusion=True;
    # FP8 recipes reduce gradients in BF16 (scripts/performance/helpers.py set_precision_configs).
    rec = _evaluate("--framework", "nemo-24.07", "--precision", "fp8")
    lay = rec["layout"]
    assert (lay["attention"], lay["loss"], lay["grad_dtype"]) == ("flash3", "fused", "bf16")
    # A 2024 container: its cuDNN's attention (costmodel.compute.CUDNN_2024_ATTENTION_FRACTION).
    assert lay["cudnn"] == "2024"
    assert rec["framework"]["name"] == "nemo-24.07" and "tp_comm_overlap" in rec["framework"]["available"]
    # The profile is the flags, nothing more: the same layout typed by hand costs the same.
    by_hand = _evaluate("--precision", "fp8", "--attention", "flash3", "--loss", "fused", "--grad-dtype", "bf16",
                        "--cudnn", "2024")
    assert rec["step_time_s"] == pytest.approx(by_hand["step_time_s"], rel=1e-12)
    # At BF16 NeMo keeps FP32 gradient reduction: the FP8 entry does not apply.
    assert _evaluate("--framework", "nemo-24.07")["layout"]["grad_dtype"] == "fp32"


def test_a_typed_flag_wins_over_the_profile():
    rec = _evaluate("--framework", "nemo-24.07", "--loss", "unfused")
    assert rec["layout"]["loss"] == "unfused" and rec["layout"]["attention"] == "flash3"
    assert rec["framework"]["overridden_by_flags"] == ["loss"]


def test_torchtitan_selective_is_per_op_sac_priced_as_half_the_layers():
    # torchtitan's "selective" keeps matmul/SDPA outputs and recomputes the rest: priced as full
    # recompute of half of each stage's layers. Llama 3 8B, 32 layers, one stage -> 16 layers.
    code, out, err = run("evaluate", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--framework",
                         "torchtitan-0.2", "--json")
    assert code in (0, 3), err  # priced whether or not it fits
    lay = json.loads(out)["layout"]
    assert (lay["recompute"], lay["recompute_layers"], lay["loss"]) == ("full", 16, "eager")
    # Asked for no recompute, it prices none.
    code, out, err = run("evaluate", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--framework",
                         "torchtitan-0.2", "--recompute", "none", "--json")
    assert code in (0, 3), err
    assert json.loads(out)["layout"]["recompute"] == "none"


def test_search_applies_the_profile_to_every_candidate_and_keeps_what_it_cannot_apply_out():
    code, out, err = run("search", "--model", "llama3-8b", "--gpus", "16", "--gpu", "h100", "--framework",
                         "deepspeed-0.5", "--top", "3", "--json")
    assert code == 0, err
    data = json.loads(out)
    # 2021: no FlashAttention, per-tensor ZeRO-3 gathers, no Ulysses (DeepSpeed 0.10.2, 2023), no sequence
    # parallelism (Korthikanti et al., May 2022), selective recompute = core attention only; its
    # pipeline engine runs one stage per rank (no interleaving) and splits each send over the TP ranks
    # (is_pipe_partitioned); gradients stay in the training dtype, each micro-batch's added by autograd.
    assert data["stats"]["framework"]["settings"] == {"attention": "unfused", "vpp": 1, "zero3_gather": "blocking",
                                                      "cp": 1, "sequence_parallel": False,
                                                      "recompute_modules": ["core_attn"],
                                                      "p2p_scatter_gather": True, "grad_dtype": "bf16",
                                                      "grad_accum_pass": "autograd"}
    assert all(r["layout"]["attention"] == "unfused" and r["layout"]["cp"] == 1 and r["layout"]["vpp"] == 1
               for r in data["results"])
    # torchtitan's selective needs layers per stage, which search does not take: not applied, said so.
    fw = framework_settings("torchtitan-0.2", get_model("llama3-8b"), "h100-sxm", "bf16", "selective",
                            takes={"recompute", "loss", "attention", "tp_overlap_kind"})
    assert fw.pinned == {"loss": "eager", "tp_overlap_kind": "asynctp"}
    # autograd's gradient accumulation, FSDP2 and its ZeRO-3 (the torchtitan profile's grad_accum_pass, fsdp and
    # zero) are no options this caller takes either.
    assert fw.not_applied == ["recompute", "recompute_layers", "grad_accum_pass", "fsdp", "zero"]


@pytest.mark.parametrize("args, needle", [
    (("evaluate", "--model", "8b", "--gpus", "8", "--framework", "nemo-9"), "--framework 'nemo-9'"),
    (("evaluate", "--from", "nowhere.json", "--framework", "nemo-24.07"), "--framework goes with --model"),
    (("search", "--model", "8b", "--gpus", "8", "--framework", "x"), "allowed: megatron-lm-2021"),
])
def test_bad_framework_is_one_line_exit_2(args, needle):
    code, out, err = run(*args)
    assert code == 2 and out == ""
    assert needle in err and len(err.strip().splitlines()) == 1


def test_every_release_matches_the_profile_validate_gives_its_framework_text():
    model = get_model("llama3-70b")
    for release in RELEASES:
        fw = framework_settings(release.name, model, "h100-sxm", "fp8", None)
        # The same job facts a validate row of this model gets (its name selects per-model preset entries).
        facts = RowFacts(framework=release.text.lower(), year=release.year, precision="fp8", gpu="h100-sxm",
                         model_parts=model_parts(model), model_name=model.name)
        values, notes = apply_profiles(facts)
        assert {**fw.pinned, **fw.available} == values and fw.assumptions == notes
    named = {fw.profile for fw in (framework_settings(r.name, model) for r in RELEASES)}
    assert "generic" not in named  # every release reaches a named profile, not the fallback alone


def test_apply_framework_fills_untyped_options_only():
    fw = framework_settings("deepspeed-0.5", get_model("llama3-8b"))
    layout = {"attention": "flash", "zero3_gather": "prefetch", "recompute": "full"}
    info = apply_framework(fw, layout, given={"attention"})
    # Typed attention kept; under full recompute no module set is applied; the untyped cp pinned to 1,
    # one pipeline stage per rank with sends split over the TP ranks, sequence parallelism off (2021), 16-bit
    # gradients added by autograd.
    assert layout == {"attention": "flash", "vpp": 1, "zero3_gather": "blocking", "recompute": "full", "cp": 1,
                      "sequence_parallel": False, "p2p_scatter_gather": True, "grad_dtype": "bf16",
                      "grad_accum_pass": "autograd"}
    assert info["settings"] == {"vpp": 1, "zero3_gather": "blocking", "cp": 1, "sequence_parallel": False,
                                "p2p_scatter_gather": True, "grad_dtype": "bf16", "grad_accum_pass": "autograd"}
    assert info["overridden_by_flags"] == ["attention"]


def test_catalog_lists_every_release():
    code, out, err = run("catalog", "frameworks", "--json")
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)}
    assert set(rows) == {r.name for r in RELEASES}
    assert rows["nemo-24.07"]["when"]["fp8"] == {"grad_dtype": "bf16"}
    # Before FlashAttention, before the pipeline-send overlap (Megatron-LM, May 2023), before context
    # parallelism (October 2023), before sequence parallelism (May 2022) and before --recompute-modules
    # (Megatron-LM, April 2025).
    assert rows["megatron-lm-2021"]["always"] == {"attention": "unfused", "p2p_comm_overlap": False, "cp": 1,
                                                  "sequence_parallel": False, "recompute_modules": "core_attn"}
    assert "recompute_modules" not in rows["megatron-core-0.13"]["always"]
    # r0.8's --moe-grouped-gemm is the one-launch GroupedMLP for any MoE model (not only MLA on H100,
    # as the catalog's one MoE case read); from r0.9 TE's per-expert loop is the default.
    assert rows["megatron-core-0.8"]["when"]["moe"] == {"moe_grouped_gemm": "fused"}
    assert "moe" not in rows["megatron-core-0.13"]["when"]
    assert rows["megatron-core-0.13"]["when"]["moe+mla on h100"] == {"moe_dispatcher": "deepep"}


def test_export_under_a_release_of_a_layout_that_does_not_fit_exits_3(tmp_path):
    # As without --framework (planner/cli/errors.py: export refuses a layout predicted not to fit, exit 3):
    # Llama 3 70B on 8 H100 at TP 8 without recompute: its 141 GB of BF16 weights and optimizer alone overflow.
    code, out, err = run("export", "--model", "llama3-70b", "--gpus", "8", "--gpu", "h100", "--tp", "8", "--recompute",
                         "none", "--framework", "megatron-core-0.8", "--out", str(tmp_path / "x"))
    assert code == 3 and "does not fit in GPU memory" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("release", ["deepspeed-0.5", "megatron-lm-2021"])
def test_a_release_whose_files_planner_does_not_write_is_not_exported(tmp_path, release):
    # The DeepSpeed exporter writes 0.19.8's keys ("bf16" is DeepSpeed >= 0.6.0: 0.5 ignores it and runs
    # FP32), the Megatron ones main's flags (v2.6 lacks --use-distributed-optimizer, --swiglu, ...).
    code, out, err = run("export", "--model", "llama3-8b", "--gpus", "16", "--gpu", "h100", "--framework", release,
                         "--out", str(tmp_path / "x"))
    assert code == 2 and "planner has no exporter for it" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()
