"""torchtitan's MoE flavors and MXFP8: the flavor shapes against torchtitan's own files, an export ->
read-back round trip, and what the export refuses (planner.frameworks.torchtitan.MOE_FLAVORS,
planner.export.torchtitan)."""

from __future__ import annotations

import tomllib

import pytest

from costmodel import evaluate
from costmodel.options import Layout
from costmodel.record import result_record
from hardware_catalog import default_cluster_for_gpu, get_gpu, get_model
from hardware_catalog.errors import PlannerInputError
from planner.export import export_layout
from planner.frameworks.torchtitan import MOE_FLAVORS, flavor_for, moe_flavor_for, moe_shape
from planner.launch import read_launch
from test_export_torchtitan_releases import check_toml_fields, schema
from test_launch_roundtrip import CLUSTER, _check_file, view

# Numbers typed from torchtitan's files (tag v0.2.2; qwen3 and deepseek_v3 identical at v0.2.0, v0.2.1):
# torchtitan/models/qwen3/__init__.py qwen3_args["30B-A3B"]: dim=2048, n_layers=48, n_heads=32, n_kv_heads=4,
#   head_dim=128, vocab_size=151936, moe_inter_dim=768, MoEArgs(num_experts=128, num_shared_experts=0, top_k=8);
# qwen3_args["235B-A22B"]: dim=4096, n_layers=94, n_heads=64, n_kv_heads=4, head_dim=128, moe_inter_dim=1536,
#   MoEArgs(num_experts=128, num_shared_experts=0, top_k=8); moe_enabled on every layer (no dense layers).
# torchtitan/models/deepseek_v3/__init__.py deepseekv3_args["671B"]: vocab_size=129280, dim=7168, inter_dim=18432,
#   moe_inter_dim=2048, n_layers=61, n_dense_layers=3, n_heads=128, MoEArgs(num_experts=256, num_shared_experts=1,
#   top_k=8, num_expert_groups=8, num_limited_groups=4), q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
#   qk_rope_head_dim=64, v_head_dim=128.
# torchtitan/models/gpt_oss/__init__.py gptoss_configs["20b"]: n_layers=24, num_experts=32, top_k=4; ["120b"]:
#   n_layers=36, num_experts=128, top_k=4; model/args.py GptOssModelArgs defaults: dim=2880, moe_inter_dim=2880,
#   head_dim=64, n_heads=64, n_kv_heads=8, vocab_size=201088, sliding_window_size=128 (every other layer),
#   swiglu_limit=7.0; biases on the attention and expert projections.
SOURCE_SHAPES = {
    # (layers, dim, heads, kv heads, head dim, vocab, dense ffn, dense layers, experts, top-k, expert ffn, shared,
    #  groups, limited groups, MLA, biases, window, SwiGLU limit)
    ("qwen3", "30B-A3B"): (48, 2048, 32, 4, 128, 151936, None, 0, 128, 8, 768, 0, None, None, None, False, None, None),
    ("qwen3", "235B-A22B"): (94, 4096, 64, 4, 128, 151936, None, 0, 128, 8, 1536, 0, None, None, None, False, None,
                             None),
    ("deepseek_v3", "671B"): (61, 7168, 128, None, None, 129280, 18432, 3, 256, 8, 2048, 1, 8, 4,
                              (1536, 512, 128, 64, 128), False, None, None),
    ("gpt_oss", "20b"): (24, 2880, 64, 8, 64, 201088, None, 0, 32, 4, 2880, 0, None, None, None, True, (128, 2), 7.0),
    ("gpt_oss", "120b"): (36, 2880, 64, 8, 64, 201088, None, 0, 128, 4, 2880, 0, None, None, None, True, (128, 2),
                          7.0),
}
B200 = default_cluster_for_gpu("b200")


def titan_layout(**kw) -> Layout:
    """A layout priced as torchtitan runs it (planner.frameworks.torchtitan.TABLE)."""
    base = dict(zero=3, fsdp="fsdp2", recompute="full", loss="eager", grad_accum_pass="autograd",
                moe_grouped_gemm="fused", kernels="fused", seq_len=4096, mbs=1)
    return Layout(**{**base, **kw})


def export(model, layout, out, cluster=CLUSTER, version="0.2.2"):
    """Price ``layout`` on ``cluster`` and export its torchtitan files for ``version``."""
    gpu = get_gpu(cluster.gpu)
    record = result_record(model, cluster, gpu, evaluate(model, cluster, layout, gpu=gpu), 0)
    record["planner_version"] = "test"
    report = export_layout(record, model, cluster, "torchtitan", out, allow_unfit=True,
                           options={"torchtitan_version": version})
    return record, report


def refusal(model, layout, tmp_path, version="0.2.2", cluster=CLUSTER) -> str:
    with pytest.raises(PlannerInputError) as err:
        export(model, layout, tmp_path, cluster, version)
    return str(err.value)


# ----------------------------------------------------------------------------------- flavors


def test_flavor_shapes_are_torchtitans():
    assert {k: f.shape for k, f in MOE_FLAVORS.items()} == SOURCE_SHAPES


@pytest.mark.parametrize("key", list(SOURCE_SHAPES))
def test_each_flavor_is_its_catalog_preset(key):
    preset = get_model(MOE_FLAVORS[key].preset)
    assert moe_shape(preset) == SOURCE_SHAPES[key]
    if preset.mtp_layers:  # DeepSeek-V3 trains one MTP layer; torchtitan's deepseek_v3 has none
        assert key == ("deepseek_v3", "671B") and flavor_for(preset) is None
        assert moe_flavor_for(preset, ignore_mtp=True).flavor == "671B"
    else:
        assert flavor_for(preset) == key


def test_other_moe_models_match_no_flavor():
    for name in ("mixtral-8x7b", "llama4-scout", "kimi-k2"):
        assert flavor_for(get_model(name)) is None, name


# ----------------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("version", ["0.2.0", "0.2.1", "0.2.2"])
def test_qwen3_moe_round_trip(tmp_path, version):
    """qwen3 30B-A3B on 32 H100s, TP2 with EP4 folded over TP (etp 1): written with the expert degrees,
    valid for the release's JobConfig, and read back as the same layout, step time and memory."""
    model = get_model("qwen3-30b-a3b")
    layout = titan_layout(tp=2, dp=16, ep=4, etp=1, gbs=64)
    record, report = export(model, layout, tmp_path, version=version)
    assert [p.name for p in report.written] == ["torchtitan.toml"]
    toml = tomllib.loads((tmp_path / "torchtitan.toml").read_text())
    check_toml_fields(schema(version), "JobConfig", toml)
    assert toml["model"] == {"name": "qwen3", "flavor": "30B-A3B"}
    par = toml["parallelism"]
    assert (par["expert_parallel_degree"], par["expert_tensor_parallel_degree"]) == (4, 1)
    assert (par["tensor_parallel_degree"], par["data_parallel_shard_degree"]) == (2, 16)
    _check_file(tmp_path / "torchtitan.toml", "torchtitan.toml", model, view(record, model), record)
    launch = read_launch(tmp_path / "torchtitan.toml")
    assert (launch.values["ep"], launch.values["etp"]) == (4, 1) and launch.model.name == "qwen3-30b-a3b"


def test_mxfp8_moe_round_trip_on_blackwell(tmp_path):
    """MXFP8 on B200: MXLinear (recipe mxfp8_cublas) plus MXGroupedMM on the experts, read back as mxfp8."""
    model = get_model("qwen3-30b-a3b")
    layout = titan_layout(dp=8, ep=8, gbs=64, precision="fp8", fp8_recipe="mxfp8")
    export(model, layout, tmp_path, cluster=B200)
    toml = tomllib.loads((tmp_path / "torchtitan.toml").read_text())
    check_toml_fields(schema("0.2.2"), "JobConfig", toml)
    assert toml["model"]["converters"] == ["quantize.linear.mx", "quantize.grouped_mm.mx"]
    assert toml["quantize"] == {"linear": {"mx": {"recipe_name": "mxfp8_cublas"}}, "grouped_mm": {"mx": {"fqns": ["experts"]}}}
    launch = read_launch(tmp_path / "torchtitan.toml")
    assert launch.values["precision"] == "fp8" and launch.values["fp8_recipe"] == "mxfp8"
    assert not launch.unsupported


def test_deepseek_v3_without_mtp_exports_with_a_pipeline(tmp_path):
    """deepseek_v3 671B has a pipelining_fn; the reader gives back the preset without its MTP layer."""
    model = get_model("deepseek-v3").model_copy(update={"mtp_layers": 0})
    layout = titan_layout(pp=16, dp=64, ep=64, gbs=1024, pp_first_layers=2, pp_last_layers=3)
    export(model, layout, tmp_path)
    toml = tomllib.loads((tmp_path / "torchtitan.toml").read_text())
    check_toml_fields(schema("0.2.2"), "JobConfig", toml)
    assert toml["model"] == {"name": "deepseek_v3", "flavor": "671B"}
    assert toml["parallelism"]["expert_parallel_degree"] == 64
    launch = read_launch(tmp_path / "torchtitan.toml")
    assert launch.model.mtp_layers == 0 and "MTP" in launch.model_note
    assert (launch.values["pp_first_layers"], launch.values["pp_last_layers"]) == (2, 3)


# ----------------------------------------------------------------------------------- refusals


def test_refusals(tmp_path):
    qwen = get_model("qwen3-30b-a3b")
    cases = [
        # DeepSeek-V3's MTP layer: torchtitan trains none
        (get_model("deepseek-v3"), titan_layout(pp=16, dp=64, ep=64, gbs=1024, pp_first_layers=2, pp_last_layers=3), "0.2.2",
         "torchtitan_mtp"),
        # gpt_oss is under torchtitan/models from 0.2.2 only
        (get_model("gpt-oss-20b"), titan_layout(dp=16, ep=8, gbs=64), "0.2.1", "torchtitan_flavor_release"),
        # qwen3's TrainSpec has no pipelining_fn
        (qwen, titan_layout(pp=2, dp=8, ep=8, gbs=64), "0.2.2", "torchtitan_moe_pipeline"),
        # tensorwise float8 leaves the expert grouped GEMMs in BF16
        (qwen, titan_layout(dp=16, ep=8, gbs=64, precision="fp8", fp8_recipe="current"), "0.2.2", "torchtitan_moe_float8"),
        # ETP other than 1 or tp
        (qwen, titan_layout(tp=4, dp=4, ep=2, etp=2, gbs=64), "0.2.2", "torchtitan_etp"),
        # 0.2.0 needs ep % (cp * tp) == 0 at etp 1
        (qwen, titan_layout(tp=2, cp=2, dp=4, ep=2, etp=1, gbs=64, seq_len=8192), "0.2.0", "torchtitan_ep_mesh"),
        # no MoE flavor under 0.1.0's torchtitan/models
        (qwen, titan_layout(dp=16, ep=8, gbs=64), "0.1.0", "torchtitan_flavor_release"),
    ]
    for i, (model, layout, version, rule) in enumerate(cases):
        msg = refusal(model, layout, tmp_path / str(i), version)
        assert rule in msg, (rule, msg)
        assert "\n" not in msg and not (tmp_path / str(i) / "torchtitan.toml").exists()


def test_0_2_1_folds_what_0_2_0_refuses(tmp_path):
    """The same EP2 over TP2 x CP2 that 0.2.0 asserts against: 0.2.1's efsdp mesh takes it."""
    layout = titan_layout(tp=2, cp=2, dp=4, ep=2, etp=1, gbs=64, seq_len=8192)
    _, report = export(get_model("qwen3-30b-a3b"), layout, tmp_path, version="0.2.1")
    assert report.written


def test_mxfp8_refusals(tmp_path):
    llama = get_model("llama3-8b")
    mx = dict(precision="fp8", fp8_recipe="mxfp8")
    msg = refusal(llama, titan_layout(tp=2, dp=4, gbs=64, **mx), tmp_path / "tp", cluster=B200)
    assert "torchtitan_mxfp8_tp" in msg
    msg = refusal(llama, titan_layout(dp=8, gbs=64, **mx), tmp_path / "v01", version="0.1.0", cluster=B200)
    assert "quantize.linear.mx" in msg and "0.1.0" in msg
    _, report = export(llama, titan_layout(dp=8, gbs=64, **mx), tmp_path / "ok", cluster=B200)
    toml = tomllib.loads((tmp_path / "ok" / "torchtitan.toml").read_text())
    assert toml["model"]["converters"] == ["quantize.linear.mx"] and "float8" not in toml["quantize"]["linear"]


def test_the_0_3_command_line_refuses_moe(tmp_path):
    msg = refusal(get_model("qwen3-30b-a3b"), titan_layout(dp=16, ep=8, gbs=64), tmp_path, version="0.3.0")
    assert "torchtitan_cli_moe" in msg


def test_per_op_sac_on_moe_is_refused_and_said_when_read(tmp_path):
    """qwen3's _op_sac_save_list (0.2.x parallelize.py) holds aten.mm and attention, not torch._grouped_mm or
    all_to_all_single: per-op SAC recomputes every expert GEMM, so half a layer under-prices it."""
    qwen = get_model("qwen3-30b-a3b")
    msg = refusal(qwen, titan_layout(dp=16, ep=8, gbs=64, recompute_share=2), tmp_path / "x")
    assert "torchtitan_moe_sac" in msg
    (tmp_path / "sac.toml").write_text('[model]\nname = "qwen3"\nflavor = "30B-A3B"\n[parallelism]\n'
                                       'expert_parallel_degree = 8\n[activation_checkpoint]\nmode = "selective"\n'
                                       'selective_ac_option = "op"\n')
    launch = read_launch(tmp_path / "sac.toml")
    assert any("MoE" in u.name for u in launch.unsupported), launch.unsupported


def test_search_ranks_only_moe_layouts_torchtitan_writes(tmp_path):
    """Before the MoE flavors, every qwen3 layout was left out (exit 3). The table's refusals leave out
    what torchtitan cannot run (a qwen3 pipeline, ETP other than 1 / tp); every ranked row exports."""
    import json
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "planner", "search", "--model", "qwen3-30b-a3b", "--gpus", "16", "--gpu",
                          "h100", "--gbs", "256", "--seq-len", "4096", "--framework", "torchtitan-0.2", "--top", "3",
                          "--json"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)["results"]
    assert len(rows) == 3
    model = get_model("qwen3-30b-a3b")
    for i, row in enumerate(rows):
        lay = row["layout"]
        assert lay["pp"] == 1 and lay["etp"] in ((lay["tp"],) if lay["ep"] == 1 else (1, lay["tp"]))
        report = export_layout(row, model, CLUSTER, "torchtitan", tmp_path / str(i), allow_unfit=True)
        toml = tomllib.loads((tmp_path / str(i) / "torchtitan.toml").read_text())
        assert toml["parallelism"]["expert_parallel_degree"] == lay["ep"], report.skipped
