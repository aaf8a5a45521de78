"""The Megatron-LM files for a plan priced with --framework R are written for R's arguments.py
(planner/frameworks/megatron_arguments_<tag>.txt), not main's: every flag parses with R's argument
list, R's spellings where they differ, and a megatron_release_* refusal naming what R lacks."""

from __future__ import annotations

import argparse
import subprocess

import pytest

from costmodel import evaluate
from costmodel.options import Layout
from costmodel.record import result_record
from hardware_catalog import default_cluster_for_gpu, get_gpu, get_model
from hardware_catalog.errors import PlannerInputError
from planner.export import export_layout
from planner.export.domain import launch_domain
from planner.frameworks.megatron import RELEASE_ARGUMENTS, release_flags
from planner.frameworks.releases import RELEASES, get_release

GPU = get_gpu("h100")
CLUSTER = default_cluster_for_gpu(GPU.name)

# Hand-checked in NVIDIA/Megatron-LM megatron/training/arguments.py at each tag: (flags it has,
# flags it lacks, {flag: its argparse choices}).
SOURCE = {
    "core_r0.8.0": (  # tag core_r0.8.0 (baf94af3c6)
        {"--moe-grouped-gemm", "--num-layers-per-virtual-pipeline-stage", "--fp8-format", "--fp8-amax-history-len",
         "--use-distributed-optimizer", "--overlap-grad-reduce", "--cross-entropy-loss-fusion", "--moe-extended-tp",
         "--use-flash-attn", "--mock-data"},
        {"--attention-backend", "--fp8-recipe", "--expert-tensor-parallel-size", "--use-custom-fsdp",
         "--use-megatron-fsdp", "--moe-enable-deepep", "--moe-ffn-hidden-size", "--multi-latent-attention",
         "--recompute-modules", "--grad-reduce-in-bf16", "--decoder-first-pipeline-num-layers",
         "--num-virtual-stages-per-pipeline-rank"},
        {"--moe-token-dispatcher-type": ("allgather", "alltoall"), "--fp8-format": ("e4m3", "hybrid")}),
    "core_v0.12.0": (  # tag core_v0.12.0 (d580efc68a), NeMo 25.04's Megatron-LM 3cdfd613e6
        {"--use-custom-fsdp", "--moe-enable-deepep", "--attention-backend", "--fp8-recipe", "--enable-cuda-graph",
         "--num-virtual-stages-per-pipeline-rank", "--moe-use-legacy-grouped-gemm"},
        {"--use-megatron-fsdp", "--moe-flex-dispatcher-backend", "--cuda-graph-impl", "--use-nccl-ub",
         "--delay-wgrad-compute", "--overlap-moe-expert-parallel-comm"},
        {"--fp8-recipe": ("tensorwise", "delayed", "mxfp8"),
         "--moe-token-dispatcher-type": ("allgather", "alltoall", "flex", "alltoall_seq")}),
    "core_v0.13.0": (  # tag core_v0.13.0 (c550cf6c41)
        {"--use-custom-fsdp", "--moe-enable-deepep", "--attention-backend", "--fp8-recipe", "--enable-cuda-graph",
         "--use-nccl-ub", "--delay-wgrad-compute", "--data-parallel-sharding-strategy"},
        {"--use-megatron-fsdp", "--moe-flex-dispatcher-backend", "--cuda-graph-impl", "--overlap-moe-expert-parallel-comm"},
        {"--ckpt-format": ("torch", "torch_dist", "zarr", "torch_dcp"),
         "--fp8-recipe": ("tensorwise", "delayed", "mxfp8", "blockwise"),
         "--moe-token-dispatcher-type": ("allgather", "alltoall", "flex")}),
}


@pytest.mark.parametrize("tag", sorted(SOURCE))
def test_recorded_argument_lists_match_the_source(tag):
    has, lacks, choices = SOURCE[tag]
    known, recorded_choices = release_flags(tag)
    assert has <= known and not (lacks & known)
    for name, values in choices.items():
        assert recorded_choices[name] == values


def test_every_megatron_release_names_a_recorded_list():
    """megatron-core-0.8 and NeMo 24.07 (Megatron-Core 338af51452, core_r0.8.0's arguments less one
    flag) target r0.8; NeMo 25.04 r0.12; megatron-core-0.13 r0.13."""
    tags = {r.name: r.megatron_release for r in RELEASES if r.megatron_release}
    assert tags == {"megatron-core-0.8": "core_r0.8.0", "nemo-24.07": "core_r0.8.0",
                    "nemo-25.04": "core_v0.12.0", "megatron-core-0.13": "core_v0.13.0"}
    assert set(tags.values()) <= set(RELEASE_ARGUMENTS)


def _record(model_name: str, layout: Layout, release: str | None, precision: str = "bf16") -> dict:
    model = get_model(model_name)
    layout = Layout(**{**layout.__dict__, "precision": precision})
    rec = result_record(model, CLUSTER, GPU, evaluate(model, CLUSTER, layout, gpu=GPU), 0)
    rec["planner_version"] = "test"
    if release:
        rec["framework"] = {"name": release}
    return rec, model


def _export(tmp_path, model_name, layout, release, precision="bf16", fmt="megatron"):
    rec, model = _record(model_name, layout, release, precision)
    export_layout(rec, model, CLUSTER, fmt, tmp_path, allow_unfit=True)
    return (tmp_path / "megatron_args.sh").read_text()


def _words(path) -> list[str]:
    out = subprocess.run(["bash", str(path)], capture_output=True, text=True, check=True).stdout.split("\n")
    return [w.replace("${TRAIN_ITERS}", "100") for w in out if w != ""]


def _parser(tag: str) -> argparse.ArgumentParser:
    """An argparse parser of exactly the flags (kinds, choices) recorded for ``tag``."""
    parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    _known, choices = release_flags(tag)
    for line in (__import__("pathlib").Path(__import__("planner.frameworks.megatron", fromlist=["x"]).__file__)
                 .with_name(f"megatron_arguments_{tag}.txt").read_text().splitlines()):
        if not line.startswith("--"):
            continue
        name, kind = line.split()[:2]
        if kind == "switch":
            parser.add_argument(name, action="store_true")
        elif kind == "list":
            parser.add_argument(name, nargs="+")
        else:
            parser.add_argument(name, choices=choices.get(name))
    return parser


CASES = [  # (release, model, layout, precision): dense, MoE, FP8, interleaved, Megatron-FSDP
    ("megatron-core-0.8", "llama3-70b", Layout(tp=4, pp=4, vpp=5, dp=4, gbs=256, attention="flash3"), "bf16"),
    ("megatron-core-0.8", "llama3-70b", Layout(tp=8, pp=2, dp=4, gbs=256, attention="unfused"), "fp8"),
    ("nemo-24.07", "mixtral-8x7b", Layout(tp=2, pp=4, vpp=2, ep=8, etp=2, dp=8, gbs=256, zero=1,
                                          moe_grouped_gemm="fused", moe_dispatcher="alltoall"), "bf16"),
    ("nemo-25.04", "qwen3-235b-a22b", Layout(tp=1, pp=4, ep=8, dp=64, gbs=1024, zero=1, recompute="full",
                                             moe_grouped_gemm="loop", moe_dispatcher="deepep"), "fp8"),
    # r0.13's Megatron-FSDP (--use-custom-fsdp) runs without the fusion (validate_args): main_grad_copy
    ("megatron-core-0.13", "qwen3-235b-a22b", Layout(tp=1, pp=1, ep=8, dp=256, gbs=1024, zero=3, fsdp="megatron",
                                                     recompute="full", moe_dispatcher="deepep",
                                                     grad_accum_pass="main_grad_copy"), "fp8"),
    # CUDA graphs without recompute: r0.13's TransformerConfig refuses them with any recompute.
    ("megatron-core-0.13", "llama3-70b", Layout(tp=8, pp=1, dp=8, gbs=256, zero=2, cuda_graphs=True,
                                                recompute="none", grad_accum_pass="main_grad_copy"), "bf16"),
]


@pytest.mark.parametrize("release,model,layout,precision", CASES)
def test_every_flag_parses_with_the_releases_arguments(tmp_path, release, model, layout, precision):
    tag = get_release(release).megatron_release
    text = _export(tmp_path, model, layout, release, precision)
    assert f"arguments.py@{tag}" in text
    _parser(tag).parse_args(_words(tmp_path / "megatron_args.sh"))  # argparse.ArgumentError on any unknown flag/value


def _flags(text: str) -> set[str]:
    return {w.strip() .split()[0] for w in text.splitlines() if w.strip().startswith("--")}


def test_r013_megatron_fsdp_and_deepep_spellings(tmp_path):
    """r0.13: Megatron-FSDP is --use-custom-fsdp (no fsdp_dtensor checkpoint format), DeepEP is
    --moe-token-dispatcher-type flex --moe-enable-deepep; main keeps its spellings."""
    layout = Layout(tp=1, pp=1, ep=8, dp=256, gbs=1024, zero=3, fsdp="megatron", recompute="full", moe_dispatcher="deepep",
                    grad_accum_pass="main_grad_copy")
    r013 = _flags(_export(tmp_path / "r013", "qwen3-235b-a22b", layout, "megatron-core-0.13", "fp8"))
    assert {"--use-custom-fsdp", "--moe-enable-deepep"} <= r013
    assert not {"--use-megatron-fsdp", "--ckpt-format", "--moe-flex-dispatcher-backend"} & r013
    main = _flags(_export(tmp_path / "main", "qwen3-235b-a22b", layout, None, "fp8"))
    assert {"--use-megatron-fsdp", "--ckpt-format", "--moe-flex-dispatcher-backend"} <= main
    assert not {"--use-custom-fsdp", "--moe-enable-deepep"} & main


def test_r08_attention_fp8_and_grouped_gemm_spellings(tmp_path):
    """r0.8 has no --attention-backend (TransformerEngine's NVTE_FLASH_ATTN / NVTE_FUSED_ATTN pick the
    kernel), no --fp8-recipe (delayed scaling is its only recipe: left out), and --moe-grouped-gemm alone
    is GroupedMLP (fused) with NeMo 24.07's TransformerEngine 1.8."""
    text = _export(tmp_path / "a", "llama3-70b", Layout(tp=8, pp=2, dp=4, gbs=256, attention="flash3"),
                   "megatron-core-0.8", "fp8")
    assert "export NVTE_FLASH_ATTN=0\n" in text and "--attention-backend" not in _flags(text)
    assert "--fp8-recipe" not in text and "--fp8-amax-history-len" in _flags(text)
    text = _export(tmp_path / "b", "llama3-70b", Layout(tp=8, pp=2, dp=4, gbs=256, attention="unfused"),
                   "megatron-core-0.8")
    assert "export NVTE_FLASH_ATTN=0 NVTE_FUSED_ATTN=0\n" in text
    text = _export(tmp_path / "c", "mixtral-8x7b", Layout(tp=2, pp=4, vpp=2, ep=8, etp=2, dp=8, gbs=256,
                                                          zero=1, moe_grouped_gemm="fused"), "megatron-core-0.8")
    flags = _flags(text)
    assert "--moe-grouped-gemm" in flags and "--moe-use-legacy-grouped-gemm" not in flags
    assert "--expert-tensor-parallel-size" not in flags  # etp = tp, the release's only split
    assert "  --num-layers-per-virtual-pipeline-stage 4\n" in text  # 32 layers / (pp 4 * vpp 2)


@pytest.mark.parametrize("release,model,layout,precision,rule", [
    ("megatron-core-0.8", "mixtral-8x7b", Layout(tp=2, ep=8, etp=1, dp=32, gbs=256), "bf16", "megatron_release_etp"),
    ("megatron-core-0.8", "llama3-70b", Layout(tp=8, pp=2, dp=4, gbs=256), "fp8:current", "megatron_release_fp8_recipe"),
    ("megatron-core-0.8", "qwen3-235b-a22b", Layout(tp=1, pp=4, ep=8, dp=64, gbs=1024, recompute="full"), "bf16",
     "megatron_release_moe_ffn_hidden_size"),  # experts 1536 wide, dense FFN 12288: r0.8 has one width
    ("megatron-core-0.8", "deepseek-v3", Layout(tp=1, pp=16, ep=64, dp=64, gbs=4096), "bf16",
     "megatron_release_multi_latent_attention"),
    ("megatron-core-0.13", "llama3-70b", Layout(tp=8, dp=8, gbs=256, zero=1, cuda_graphs=False, nccl_ub=False,
                                                  moe_dispatcher="alltoall", cpu_offload_layers=2, recompute="none"),
     "bf16", "megatron_release_cpu_offload_layers"),
])
def test_a_flag_the_release_lacks_is_refused_by_name(tmp_path, release, model, layout, precision, rule):
    precision, _, recipe = precision.partition(":")
    if recipe:
        layout = Layout(**{**layout.__dict__, "fp8_recipe": recipe})
    with pytest.raises(PlannerInputError) as err:
        _export(tmp_path, model, layout, release, precision)
    assert rule in str(err.value) and "does not have" in str(err.value)
    assert not list(tmp_path.iterdir())


def test_release_domain_leaves_out_what_its_files_cannot_write():
    """The search domain of r0.8 reads r0.8's table: ZeRO-2 (Megatron-FSDP, which r0.8 lacks) is out."""
    from costmodel.layout import LayoutBatch

    model = get_model("llama3-8b")
    batch = LayoutBatch.from_layouts([Layout(tp=1, dp=64, gbs=256, zero=2, grad_accum_pass="main_grad_copy"),
                                      Layout(tp=1, dp=64, gbs=256, zero=1)])
    out = launch_domain(get_release("megatron-core-0.8")).outside(batch, model, CLUSTER)
    assert list(out.mask) == [True, False] and "megatron_release_zero" in out.rules
    out13 = launch_domain(get_release("megatron-core-0.13")).outside(batch, model, CLUSTER)
    assert not out13.mask.any()


def test_a_file_written_for_r013_reads_back_as_the_same_layout(tmp_path):
    """The reader knows the releases' own spellings (READ_TABLE): --use-custom-fsdp with
    --data-parallel-sharding-strategy optim_grads_params is Megatron-FSDP's ZeRO-3, --moe-token-dispatcher-type
    flex with --moe-enable-deepep is DeepEP; read back, the same step time and memory (nothing unknown)."""
    from planner.launch import read_launch
    from planner.cli.from_launch.resolve import resolve

    layout = Layout(tp=1, pp=1, ep=8, dp=16, gbs=128, zero=3, fsdp="megatron", recompute="full", moe_dispatcher="deepep",
                    grad_accum_pass="main_grad_copy")
    rec, model = _record("qwen3-30b-a3b", layout, "megatron-core-0.13", "fp8")
    export_layout(rec, model, CLUSTER, "megatron", tmp_path, allow_unfit=True)
    launch = read_launch(tmp_path / "megatron_args.sh")
    assert not launch.unknown and not launch.unsupported
    assert (launch.values["zero"], launch.values["fsdp"], launch.values["moe_dispatcher"]) == (3, "megatron", "deepep")
    back = resolve(launch, gpu=GPU.name, gpus=16, allow_cross_node_tp=True)
    assert back.record["step_time_s"] == pytest.approx(rec["step_time_s"], rel=1e-9)
    assert back.record["memory_gib"]["peak"] == pytest.approx(rec["memory_gib"]["peak"], rel=1e-9)
