"""The framework tables (planner/frameworks/): Megatron-Bridge names checked against Megatron-Bridge's
own files (vendored: tests/data/megatron_bridge/<release>), refusals with reasons, and the drifts
issue 23 measured (each read back as written)."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from costmodel import evaluate
from costmodel.options import Layout
from costmodel.record import result_record
from hardware_catalog import default_cluster_for_gpu, get_cluster, get_gpu, get_model
from hardware_catalog.errors import PlannerInputError
from planner.export import EXPORTERS, export_layout
from planner.export.bridge import overrides
from planner.export.common import CannotExpress, build_plan
from planner.frameworks import bridge
from planner.frameworks.megatron import known_flags
from planner.launch import READERS, read_launch
from planner.cli.from_launch.resolve import resolve

GPU = get_gpu("h100")
CLUSTER = default_cluster_for_gpu(GPU.name)
VENDORED = Path(__file__).parent / "data" / "megatron_bridge" / bridge.RELEASE


def _record(model, layout):
    rec = result_record(model, CLUSTER, GPU, evaluate(model, CLUSTER, layout, gpu=GPU), 0)
    rec["planner_version"] = "test"
    return rec


def _class_fields(path: Path) -> set[str]:
    """Annotated field names of every class in a vendored Megatron-Bridge file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.target.id for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for n in c.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


def _guide_pairs() -> set[tuple[str, str]]:
    """(Megatron-LM flag, Megatron-Bridge key[=value]) pairs of the Megatron-LM -> Megatron-Bridge guide's tables."""
    lines = (VENDORED / "migration_guide_pairs.tsv").read_text(encoding="utf-8").splitlines()
    return {tuple(line.split("\t")) for line in lines if line and not line.startswith("#")}


def _guide_paths() -> set[str]:
    """The ``section.field`` paths the guide names."""
    return {key.split("=")[0] for _, key in _guide_pairs()}


def _presets() -> set[str]:
    text = (VENDORED / "mixed_precision.py").read_text(encoding="utf-8")
    return set(re.findall(r"@register\ndef (\w+)\(", text))


CASES = [
    # selective recompute: overlap_moe_expert_parallel_comm asserts against full recompute (TransformerConfig)
    ("mixtral-8x7b", Layout(tp=4, ep=8, etp=1, dp=16, zero=1, dp_shard=4, moe_dispatcher="deepep", gbs=256,
                            recompute="selective", seq_len=4096, ep_comm_overlap=True)),
    ("llama3-70b", Layout(tp=8, pp=4, vpp=5, dp=2, gbs=64, seq_len=4096, precision="fp8", fp8_param_gather=True,
                          grad_dtype="bf16", tp_comm_overlap=True, loss="fused", attention="flash3", recompute="selective")),
    # Megatron-FSDP ZeRO-3 runs without the fusion (Bridge v0.2.0 ConfigContainer.validate turns it off):
    # each micro-batch's gradient copied into the reduce-scatter bucket (megatron_fsdp.py _grad_acc)
    ("llama3-8b", Layout(tp=2, cp=2, dp=4, zero=3, fsdp="megatron", gbs=32, seq_len=8192, pp=1, recompute="none",
                         grad_accum_pass="main_grad_copy")),
]


@pytest.mark.parametrize("name,layout", CASES)
def test_bridge_overrides_are_megatron_bridge_fields(name, layout):
    model = get_model(name)
    plan = build_plan(_record(model, layout), model, CLUSTER, allow_unfit=True)
    fields = set().union(*(_class_fields(VENDORED / f) for f in ("config.py", "comm_overlap.py", "gpt_provider.py")))
    guide = _guide_paths()
    sections = {"model", "train", "ddp", "optimizer", "dataset", "comm_overlap", "checkpoint", "dist"}
    for key, value in overrides(plan):
        if key == "mixed_precision":
            assert value in _presets(), value
            continue
        section, field = key.split(".", 1)
        assert section in sections, key
        if section == "dataset":  # a pretraining recipe's GPTDatasetConfig (Megatron-Core's field, which
            # ConfigContainer.validate compares with model.seq_length); seq_length is the fine-tuning config's
            assert field == "sequence_length" and "else self.dataset.sequence_length" in (VENDORED / "config.py").read_text()
            continue
        # A key is one the guide names, or a field Megatron-Bridge declares (its own config classes), or,
        # in model / ddp (Megatron-Core's TransformerConfig / DistributedDataParallelConfig, not vendored
        # here), a Megatron-LM dest, which Megatron-Core uses as its field name.
        dests = [d for d in (*bridge.NEGATED, *bridge.RENAMES) if bridge.key(d) == key] or [field]
        core = section in ("model", "ddp") and all("--" + d.replace("_", "-") in known_flags() for d in dests)
        assert key in guide or field in fields or f"model.{field}" in guide or core, key


def test_bridge_megatron_fsdp_runs_without_the_fusion_and_says_so(tmp_path):
    # Megatron-Bridge v0.2.0 ConfigContainer.validate (vendored config.py) turns gradient accumulation
    # fusion off under Megatron-FSDP, so the Bridge file states it off and the plan is priced with the
    # copy Megatron-FSDP then runs (main_grad_copy); a fused plan is refused, not written.
    text = (VENDORED / "config.py").read_text(encoding="utf-8")
    block = text[text.index("# Megatron FSDP Config checks"):text.index("# ModelOpt/Quantization checks")]
    assert "self.model.gradient_accumulation_fusion = False" in block
    model = get_model("llama3-8b")
    layout = Layout(tp=2, dp=4, gbs=8, zero=2, grad_accum_pass="main_grad_copy")
    record, _ = _export(tmp_path / "copy", model, layout, "megatron-bridge")
    tree = yaml.safe_load((tmp_path / "copy" / "megatron_bridge_overrides.yaml").read_text())
    assert tree["model"]["gradient_accumulation_fusion"] is False
    assert (tree["ddp"]["use_megatron_fsdp"], tree["ddp"]["data_parallel_sharding_strategy"]) == (True, "optim_grads")
    launch, back = _read_back(tmp_path / "copy" / "megatron_bridge_overrides.yaml", 8)
    _same_run(launch, back, record, zero=2, grad_accum_pass="main_grad_copy")
    with pytest.raises(Exception, match="megatron_grad_accum_pass"):
        _export(tmp_path / "fused", model, Layout(tp=2, dp=4, gbs=8, zero=2), "megatron-bridge")
    assert not (tmp_path / "fused").exists() or not list((tmp_path / "fused").iterdir())


def test_bridge_renames_are_the_guides():
    pairs = _guide_pairs()
    for dest, field in bridge.RENAMES.items():
        if dest == "swiglu":
            assert ("--swiglu", "model.gated_linear_unit=true") in pairs
        elif dest in ("num_experts",):
            assert f"model.{field}" in _guide_paths()
    flags = {flag for flag, _ in pairs}
    for dest, field in bridge.NEGATED.items():
        flag = "--" + dest.replace("_", "-")
        if flag in flags:
            assert (flag, f"{bridge.key(dest)}=false") in pairs, flag


def test_every_exporter_has_a_reader():
    assert set(EXPORTERS) == {"torchrun", "megatron", "deepspeed", "torchtitan", "slurm", "megatron-bridge"}
    assert "megatron-bridge" in READERS


@pytest.mark.parametrize("layout,rule", [
    (Layout(tp=8, dp=8, zero=1, gbs=64, loss="eager", recompute="full"), "torchtitan_no_zero1"),
    (Layout(tp=8, dp=8, zero=3, gbs=64, loss="fused", recompute="full"), "torchtitan_loss"),
    (Layout(tp=8, dp=8, zero=3, gbs=64, loss="eager", grad_dtype="bf16", recompute="full"), "torchtitan_grad_dtype"),
    (Layout(tp=8, dp=8, zero=3, gbs=64, loss="eager"), "torchtitan_selective"),
])
def test_torchtitan_refuses_what_it_cannot_run(tmp_path, layout, rule):
    model = get_model("llama3-70b")
    with pytest.raises(Exception) as err:
        export_layout(_record(model, layout), model, CLUSTER, "torchtitan", tmp_path, allow_unfit=True)
    assert rule in str(err.value)
    assert not list(tmp_path.iterdir())


def test_megatron_refuses_asynctp_and_eager_loss():
    model = get_model("llama3-8b")
    for layout, rule in ((Layout(tp=2, dp=4, gbs=8, tp_comm_overlap=True, tp_overlap_kind="asynctp"),
                          "megatron_tp_overlap_kind"), (Layout(tp=2, dp=4, gbs=8, loss="eager"), "megatron_loss")):
        plan = build_plan(_record(model, layout), model, CLUSTER, allow_unfit=True)
        from planner.export.megatron import check_megatron

        with pytest.raises(CannotExpress, match=rule):
            check_megatron(plan)


def _read_back(path, gpus, model=None):
    launch = read_launch(path, model=model)
    return launch, resolve(launch, gpu=GPU.name, gpus=gpus, allow_cross_node_tp=True)


def test_megatron_distributed_optimizer_instances_read_back_as_dp_shard(tmp_path):
    # 64 GPUs / tp 2 = dp 32; --dp-shard 4 is 32 / 4 = 8 distributed-optimizer instances.
    model = get_model("llama3-8b")
    record = _record(model, Layout(tp=2, dp=32, zero=1, dp_shard=4, gbs=64))
    export_layout(record, model, CLUSTER, "megatron", tmp_path, allow_unfit=True)
    text = (tmp_path / "megatron_args.sh").read_text()
    assert "--num-distributed-optimizer-instances 8" in text
    launch, back = _read_back(tmp_path / "megatron_args.sh", 64)
    assert not launch.unsupported
    assert back.layout.dp_shard == 4
    assert back.record["step_time_s"] == pytest.approx(record["step_time_s"], rel=1e-9)


def test_deepspeed_mics_and_partitioned_checkpoints_read_back(tmp_path):
    model = get_model("llama3-8b")
    record = _record(model, Layout(dp=64, zero=3, dp_shard=8, gbs=64, grad_accum_pass="autograd"))
    export_layout(record, model, CLUSTER, "deepspeed", tmp_path, allow_unfit=True)
    launch, back = _read_back(tmp_path / "deepspeed_config.json", 64, model)
    assert not launch.unknown and back.layout.dp_shard == 8
    record = _record(model, Layout(tp=2, dp=32, gbs=64, recompute="full", grad_accum_pass="cast_add", grad_reduce="all_reduce"))
    export_layout(record, model, CLUSTER, "deepspeed", tmp_path, allow_unfit=True, force=True)
    launch = read_launch(tmp_path / "deepspeed_config.json", model=model)
    assert not launch.unsupported and not launch.unknown


def test_torchtitan_per_op_sac_is_priced_one_way(tmp_path):
    """The TOML's selective_ac_option "op" and --framework torchtitan-0.2 --recompute selective price
    the same job the same: full recompute of half of each stage's layers (40 of 80 at pp 1)."""
    from planner.frameworks import apply_framework, framework_settings

    model = get_model("llama3-70b")
    values = dict(tp=8, dp=8, zero=3, fsdp="fsdp2", mbs=1, gbs=64, seq_len=8192, recompute="selective")
    fw = framework_settings("torchtitan-0.2", model, "h100-sxm", recompute="selective")
    apply_framework(fw, values, given=set(values))
    assert values["recompute"] == "full" and values["recompute_share"] == 2  # two quarters of each stage
    record = _record(model, Layout(**values))
    assert record["layout"]["recompute_layers"] == 40  # resolved to layers per stage: half of 80
    export_layout(record, model, CLUSTER, "torchtitan", tmp_path, allow_unfit=True)
    toml = (tmp_path / "torchtitan.toml").read_text()
    assert 'mode = "selective"' in toml and 'selective_ac_option = "op"' in toml
    launch, back = _read_back(tmp_path / "torchtitan.toml", 64)
    assert back.record["step_time_s"] == pytest.approx(record["step_time_s"], rel=1e-9)
    assert back.record["memory_gib"]["peak"] == pytest.approx(record["memory_gib"]["peak"], rel=1e-9)


def test_one_release_name_picks_the_profile_and_the_files(tmp_path):
    """--framework torchtitan-0.2 prices with the torchtitan profile and writes torchtitan 0.2's file;
    --torchtitan-version takes the same name."""
    from planner.frameworks import get_release
    from planner.frameworks.torchtitan import release_for

    assert release_for("torchtitan-0.2").version == release_for("0.2").version == "0.2.2"
    assert get_release("torchtitan-0.2.1").name == "torchtitan-0.2"
    model = get_model("llama3-8b")
    record = _record(model, Layout(tp=2, dp=8, zero=3, fsdp="fsdp2", gbs=64, recompute="full", loss="eager",
                                    grad_accum_pass="autograd"))
    record["framework"] = {"name": "torchtitan-0.2"}
    report = export_layout(record, model, CLUSTER, "torchtitan", tmp_path, allow_unfit=True)
    assert [p.name for p in report.written] == ["torchtitan.toml"]
    assert "torchtitan 0.2.2 job config" in (tmp_path / "torchtitan.toml").read_text()


def test_megatron_header_names_the_dispatcher_it_writes(tmp_path):
    model = get_model("mixtral-8x7b")
    record = _record(model, Layout(tp=2, ep=8, dp=32, moe_dispatcher="deepep", gbs=256, recompute="full"))
    export_layout(record, model, CLUSTER, "megatron", tmp_path, allow_unfit=True)
    text = (tmp_path / "megatron_args.sh").read_text()
    # Megatron-LM arguments.py at the pin: --moe-flex-dispatcher-backend {deepep, hybridep, ncclep};
    # --moe-enable-deepep is its deprecated spelling (TransformerConfig.__post_init__ warns).
    assert "--moe-token-dispatcher-type flex" in text and "--moe-flex-dispatcher-backend deepep" in text
    assert "--moe-enable-deepep" not in text
    assert "all-to-all" not in text and "flex dispatcher with DeepEP" in text


def _megatron_file(tmp_path, layout, fmt="megatron"):
    model = get_model("mixtral-8x7b")
    record = _record(model, layout)
    report = export_layout(record, model, CLUSTER, fmt, tmp_path, allow_unfit=True, force=True)
    return model, record, report


@pytest.mark.parametrize("dispatcher,gemm,words", [
    # Megatron-LM arguments.py: --moe-token-dispatcher-type {allgather, alltoall, flex}, the flex backend
    # --moe-flex-dispatcher-backend {deepep, hybridep, ncclep}; --moe-grouped-gemm builds TEGroupedMLP.
    ("allgather", "loop", ["--moe-token-dispatcher-type allgather", "--moe-grouped-gemm"]),
    ("alltoall", "loop", ["--moe-token-dispatcher-type alltoall", "--moe-grouped-gemm"]),
    ("deepep", "loop", ["--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend deepep"]),
    ("hybridep", "loop", ["--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend hybridep"]),
])
def test_megatron_writes_and_reads_the_moe_rows(tmp_path, dispatcher, gemm, words):
    layout = Layout(tp=2, ep=8, dp=32, gbs=256, recompute="full", moe_dispatcher=dispatcher, moe_grouped_gemm=gemm)
    model, record, _ = _megatron_file(tmp_path, layout)
    text = (tmp_path / "megatron_args.sh").read_text()
    for word in words:
        assert f"  {word}\n" in text, word
    launch, back = _read_back(tmp_path / "megatron_args.sh", 64)
    assert not launch.unsupported and not launch.unknown
    assert (back.layout.moe_dispatcher, back.layout.moe_grouped_gemm) == (dispatcher, gemm)
    assert back.record["step_time_s"] == pytest.approx(record["step_time_s"], rel=1e-9)


def test_legacy_grouped_gemm_is_refused_at_the_pin_and_read_from_older_scripts(tmp_path):
    """GroupedMLP (--moe-use-legacy-grouped-gemm) left Megatron-LM in 2caa681a1d (2026-03-04): the export
    refuses it, naming the flag; Megatron-Bridge 0.2.0 still has it; an older script still reads back."""
    layout = Layout(tp=2, ep=8, dp=32, gbs=256, recompute="full", moe_grouped_gemm="fused")
    with pytest.raises(PlannerInputError) as err:
        _megatron_file(tmp_path, layout)
    assert "megatron_release_moe_grouped_gemm" in str(err.value) and "--moe-use-legacy-grouped-gemm" in str(err.value)
    assert "no longer has" in str(err.value) and not list(tmp_path.iterdir())
    _megatron_file(tmp_path / "bridge", layout, "megatron-bridge")
    _megatron_file(tmp_path / "plain", dataclasses.replace(layout, moe_grouped_gemm="loop"))
    path = tmp_path / "plain" / "megatron_args.sh"
    path.write_text(path.read_text().replace("  --moe-grouped-gemm\n", "  --moe-grouped-gemm\n  --moe-use-legacy-grouped-gemm\n"))
    launch, back = _read_back(path, 64)
    assert not launch.unsupported and not launch.unknown and back.layout.moe_grouped_gemm == "fused"


@pytest.mark.parametrize("words,dispatcher", [
    # Before 3df200905e DeepEP was --moe-enable-deepep; since, the flex backend defaults to deepep.
    (["--moe-token-dispatcher-type", "flex", "--moe-enable-deepep"], "deepep"),
    (["--moe-token-dispatcher-type", "flex"], "deepep"),
])
def test_megatron_reads_older_and_default_deepep_spellings(tmp_path, words, dispatcher):
    _megatron_file(tmp_path, Layout(tp=2, ep=8, dp=32, gbs=256, recompute="full", moe_dispatcher="alltoall"))
    path = tmp_path / "megatron_args.sh"
    path.write_text(path.read_text().replace("  --moe-token-dispatcher-type alltoall\n", "  " + " ".join(words) + "\n"))
    launch, back = _read_back(path, 64)
    assert not launch.unsupported and not launch.unknown and back.layout.moe_dispatcher == dispatcher


def test_ncclep_backend_is_read_as_not_expressible(tmp_path):
    _megatron_file(tmp_path, Layout(tp=2, ep=8, dp=32, gbs=256, recompute="full", moe_dispatcher="deepep"))
    path = tmp_path / "megatron_args.sh"
    path.write_text(path.read_text().replace("--moe-flex-dispatcher-backend deepep", "--moe-flex-dispatcher-backend ncclep"))
    launch = read_launch(path)
    assert any("ncclep" in str(u) for u in launch.unsupported)


def test_megatron_default_dispatcher_is_allgather(tmp_path):
    """A Megatron file that names no dispatcher runs Megatron's default, allgather (arguments.py)."""
    _megatron_file(tmp_path, Layout(tp=2, ep=8, dp=32, gbs=256, recompute="full", moe_dispatcher="allgather"))
    path = tmp_path / "megatron_args.sh"
    path.write_text(path.read_text().replace("--moe-token-dispatcher-type' 'allgather'", "")
                    .replace("--moe-token-dispatcher-type allgather", ""))
    launch, back = _read_back(path, 64)
    assert "moe_token_dispatcher_type" not in path.read_text().replace("-", "_")
    assert back.layout.moe_dispatcher == "allgather" and not launch.unsupported


@pytest.mark.parametrize("fmt", ["megatron", "megatron-bridge"])
def test_hybridep_on_an_nvl72_rack_round_trips(tmp_path, fmt):
    """HybridEP (Megatron-LM 3df200905e on: --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend
    hybridep; Megatron-Bridge 0.2.0 model.moe_flex_dispatcher_backend) on GB200 NVL72: EP 8 inside the
    72-GPU NVLink domain. Written, and read back to the same layout and step time."""
    cluster = get_cluster("gb200-nvl72")
    gpu = get_gpu(cluster.gpu)
    model = get_model("mixtral-8x7b")
    layout = Layout(tp=2, ep=8, dp=32, gbs=256, recompute="full", moe_dispatcher="hybridep")
    record = result_record(model, cluster, gpu, evaluate(model, cluster, layout, gpu=gpu), 0)
    record["planner_version"] = "test"
    report = export_layout(record, model, cluster, fmt, tmp_path, allow_unfit=True)
    text = report.written[0].read_text()
    if fmt == "megatron":
        assert "  --moe-token-dispatcher-type flex\n" in text and "  --moe-flex-dispatcher-backend hybridep\n" in text
    else:
        assert ("model.moe_flex_dispatcher_backend", "hybridep") in overrides(build_plan(record, model, cluster,
                                                                                          allow_unfit=True))
    launch = read_launch(report.written[0])
    back = resolve(launch, gpu=gpu.name, cluster=cluster.name, gpus=64, allow_cross_node_tp=True)
    assert not launch.unsupported and not launch.unknown
    assert back.layout == build_plan(record, model, cluster, allow_unfit=True).layout
    assert back.layout.moe_dispatcher == "hybridep"
    assert back.record["step_time_s"] == pytest.approx(record["step_time_s"], rel=1e-9)


def test_split_pipeline_sends_are_refused_where_the_framework_runs_otherwise():
    """tp 2, pp 2, no SP: Megatron-Core and torch pipelining send whole tensors (split sends refused);
    DeepSpeed's pipeline engine splits them whenever TP is on (whole sends refused). Moot at pp 1."""
    from planner.frameworks import deepspeed, megatron, torchtitan

    model = get_model("llama3-8b")
    for p2p, table, refused in ((True, megatron.TABLE, True), (True, torchtitan.TABLE, True),
                                (False, deepspeed.TABLE, True), (False, megatron.TABLE, False)):
        for pp, applies in ((2, True), (1, False)):
            layout = Layout(tp=2, pp=pp, dp=2, gbs=8, sequence_parallel=False, p2p_scatter_gather=p2p)
            plan = build_plan(_record(model, layout), model, CLUSTER, allow_unfit=True)
            if refused and applies:
                with pytest.raises(CannotExpress, match="p2p_scatter_gather"):
                    table.write("p2p_scatter_gather", p2p, plan)
            else:
                assert table.write("p2p_scatter_gather", p2p, plan) == []


def test_moe_imbalance_is_priced_not_written(tmp_path):
    """A workload property: no file states it and the reader gives the default, 1.0."""
    layout = Layout(tp=2, ep=8, dp=32, gbs=256, recompute="full", moe_imbalance=1.5)
    model, record, report = _megatron_file(tmp_path, layout, "all")
    assert report.written
    for path in report.written:
        assert "imbalance" not in path.read_text().lower().replace("imbalance 1.5", ""), path.name
    launch, back = _read_back(tmp_path / "megatron_args.sh", 64)
    assert back.layout.moe_imbalance == 1.0
    assert back.record["step_time_s"] < record["step_time_s"]  # the busiest rank sets the pace at 1.5


# ------------------------------------------------------------- CP type, FP8 recipe, CUDA graphs, offload, FSDP


def _export(tmp_path, model, layout, fmt):
    record = _record(model, layout)
    report = export_layout(record, model, CLUSTER, fmt, tmp_path, allow_unfit=True, force=True)
    return record, report


def _same_run(launch, back, record, **options):
    assert not launch.unsupported and not launch.unknown, (launch.unsupported, launch.unknown)
    for name, value in options.items():
        assert getattr(back.layout, name) == value, name
    assert back.record["step_time_s"] == pytest.approx(record["step_time_s"], rel=1e-9)
    assert back.record["memory_gib"]["peak"] == pytest.approx(record["memory_gib"]["peak"], rel=1e-9)


@pytest.mark.parametrize("kind,cp,words", [
    # Megatron-LM --cp-comm-type takes TransformerEngine's names (p2p, all_gather, a2a, a2a+p2p); p2p is the default.
    # a2a+p2p at tp 2, cp 8 on 8-GPU H100 nodes: 8 / 2 = 4 CP ranks share a node, so the all-to-all spans 4 ranks
    # and the ring 8 / 4 = 2: --hierarchical-context-parallel-sizes 4 2 (llama3-8b: 4 KV heads per TP rank, / 4).
    ("p2p", 4, []),
    ("a2a", 4, ["--cp-comm-type a2a"]),
    ("allgather", 4, ["--cp-comm-type all_gather"]),
    ("a2a+p2p", 8, ["--cp-comm-type a2a+p2p", "--hierarchical-context-parallel-sizes 4 2"]),
])
def test_megatron_writes_and_reads_the_cp_comm_type(tmp_path, kind, cp, words):
    model = get_model("llama3-8b")
    layout = Layout(tp=2, cp=cp, dp=1, gbs=4, seq_len=32768, cp_comm_type=kind)
    record, _ = _export(tmp_path, model, layout, "megatron")
    text = (tmp_path / "megatron_args.sh").read_text()
    for word in words:
        assert f"  {word}\n" in text, word
    assert ("--cp-comm-type" in text) == bool(words)
    launch, back = _read_back(tmp_path / "megatron_args.sh", 2 * cp)
    _same_run(launch, back, record, cp_comm_type=kind)


def test_hierarchical_cp_sizes_must_multiply_to_cp(tmp_path):
    model = get_model("llama3-8b")
    _export(tmp_path, model, Layout(tp=2, cp=8, dp=1, gbs=4, seq_len=32768, cp_comm_type="a2a+p2p"), "megatron")
    path = tmp_path / "megatron_args.sh"
    path.write_text(path.read_text().replace("--hierarchical-context-parallel-sizes 4 2", "--hierarchical-context-parallel-sizes 4 1"))
    assert any("hierarchical" in u.name for u in read_launch(path).unsupported)


def test_torchtitan_cp_rotation_per_release(tmp_path):
    """torchtitan 0.1-0.2 parallelism.context_parallel_rotate_method: "alltoall" rotates K/V shards round the ring
    (p2p), "allgather" is the default; 0.3.0 has no such field (ring refused there); Ulysses is refused."""
    model = get_model("llama3-8b")
    base = dict(tp=2, cp=4, dp=2, gbs=16, seq_len=16384, zero=3, fsdp="fsdp2", recompute="none", loss="eager",
                grad_accum_pass="autograd")
    record, report = _export(tmp_path / "p2p", model, Layout(**base, cp_comm_type="p2p"), "torchtitan")
    toml = (tmp_path / "p2p" / "torchtitan.toml").read_text()
    assert 'context_parallel_rotate_method = "alltoall"' in toml
    assert "torchtitan_release_field" in report.skipped["torchtitan:torchtitan_overrides.sh"]
    launch, back = _read_back(tmp_path / "p2p" / "torchtitan.toml", 16)
    _same_run(launch, back, record, cp_comm_type="p2p")
    record, report = _export(tmp_path / "ag", model, Layout(**base, cp_comm_type="allgather"), "torchtitan")
    assert {p.name for p in report.written} == {"torchtitan.toml", "torchtitan_overrides.sh"}
    assert "rotate_method" not in (tmp_path / "ag" / "torchtitan_overrides.sh").read_text()
    launch, back = _read_back(tmp_path / "ag" / "torchtitan_overrides.sh", 16)
    _same_run(launch, back, record, cp_comm_type="allgather")
    with pytest.raises(Exception, match="torchtitan_cp_comm_type"):
        _export(tmp_path / "a2a", model, Layout(**base, cp_comm_type="a2a"), "torchtitan")


@pytest.mark.parametrize("recipe,word,preset,params", [
    # Megatron-LM --fp8-recipe {delayed, tensorwise, blockwise, mxfp8}; Megatron-Bridge presets of mixed_precision.py,
    # with the fp8_param_gather each sets (FP8 parameters: on for delayed and current scaling, off for subchannel).
    ("delayed", "--fp8-recipe delayed", "bf16_with_fp8_delayed_scaling_mixed", True),
    ("current", "--fp8-recipe tensorwise", "bf16_with_fp8_current_scaling_mixed", True),
    ("blockwise", "--fp8-recipe blockwise", "bf16_with_fp8_subchannel_scaling_mixed", False),
])
def test_fp8_recipe_in_megatron_and_bridge(tmp_path, recipe, word, preset, params):
    model = get_model("llama3-8b")
    layout = Layout(tp=2, dp=4, gbs=8, precision="fp8", fp8_recipe=recipe, fp8_param_gather=params)
    record, _ = _export(tmp_path, model, layout, "megatron")
    text = (tmp_path / "megatron_args.sh").read_text()
    assert f"  {word}\n" in text and text.count("--fp8-recipe") == 1
    assert ("--fp8-amax-history-len" in text) == (recipe == "delayed")  # amax history: delayed scaling only
    assert ("--fp8-param-gather" in text) == params
    launch, back = _read_back(tmp_path / "megatron_args.sh", 8)
    _same_run(launch, back, record, fp8_recipe=recipe, fp8_param_gather=params)
    _export(tmp_path, model, layout, "megatron-bridge")
    assert dict(overrides(build_plan(record, model, CLUSTER, allow_unfit=True)))["mixed_precision"] == preset
    assert preset in _presets()
    launch, back = _read_back(tmp_path / "megatron_bridge_overrides.yaml", 8, model)
    _same_run(launch, back, record, fp8_recipe=recipe, fp8_param_gather=params)


def test_fp8_recipe_is_moot_without_fp8_and_torchtitan_scales_tensorwise(tmp_path):
    model = get_model("llama3-8b")
    _export(tmp_path / "bf16", model, Layout(tp=2, dp=4, gbs=8, fp8_recipe="blockwise"), "megatron")
    assert "--fp8" not in (tmp_path / "bf16" / "megatron_args.sh").read_text()
    titan = dict(tp=2, dp=4, gbs=8, zero=3, fsdp="fsdp2", recompute="full", loss="eager", precision="fp8",
                 grad_accum_pass="autograd")
    with pytest.raises(Exception, match="torchtitan_fp8_recipe"):
        _export(tmp_path / "d", model, Layout(**titan, fp8_recipe="delayed"), "torchtitan")
    record, report = _export(tmp_path / "c", model, Layout(**titan, fp8_recipe="current"), "torchtitan")
    launch, back = _read_back(tmp_path / "c" / "torchtitan.toml", 8)
    _same_run(launch, back, record, fp8_recipe="current", precision="fp8")


def test_cuda_graphs_rows(tmp_path):
    model = get_model("llama3-8b")
    record, _ = _export(tmp_path / "m", model, Layout(tp=2, dp=4, gbs=8, cuda_graphs=True), "megatron")
    text = (tmp_path / "m" / "megatron_args.sh").read_text()
    assert "  --cuda-graph-impl local\n" in text
    launch, back = _read_back(tmp_path / "m" / "megatron_args.sh", 8)
    _same_run(launch, back, record, cuda_graphs=True)
    # --enable-cuda-graph: the deprecated spelling of --cuda-graph-impl local (validate_args)
    path = tmp_path / "m" / "megatron_args.sh"
    path.write_text(text.replace("--cuda-graph-impl local", "--enable-cuda-graph"))
    assert read_launch(path).values["cuda_graphs"] is True
    for fmt, layout, rule in (
            ("megatron", Layout(tp=2, dp=4, gbs=8, cuda_graphs=True, recompute="full"), "megatron_cuda_graphs_full_recompute"),
            ("deepspeed", Layout(dp=8, gbs=8, cuda_graphs=True), "deepspeed_cuda_graphs")):
        with pytest.raises(Exception, match=rule):
            _export(tmp_path / rule, model, layout, fmt)
    # torchtitan 0.3.0 captures the step unless --training.disable_cuda_graphs; 0.1 and 0.2 cannot capture.
    titan = dict(tp=2, dp=4, gbs=8, zero=3, fsdp="fsdp2", recompute="full", loss="eager", grad_accum_pass="autograd")
    record, report = _export(tmp_path / "t", model, Layout(**titan, cuda_graphs=True), "torchtitan")
    assert "torchtitan_cuda_graphs_release" in report.skipped["torchtitan:torchtitan.toml"]
    assert "disable_cuda_graphs" not in (tmp_path / "t" / "torchtitan_overrides.sh").read_text()
    launch, back = _read_back(tmp_path / "t" / "torchtitan_overrides.sh", 8)
    _same_run(launch, back, record, cuda_graphs=True)
    _export(tmp_path / "f", model, Layout(**titan), "torchtitan")
    assert "--training.disable_cuda_graphs" in (tmp_path / "f" / "torchtitan_overrides.sh").read_text()


def test_cpu_offload_rows(tmp_path):
    """--cpu-offloading-num-layers N (validate_args turns cpu_offloading on for N > 0); Megatron-Core refuses it
    with recompute; torchtitan and DeepSpeed offload no layer activations."""
    model = get_model("llama3-8b")
    layout = Layout(tp=2, dp=4, gbs=8, cpu_offload_layers=3, recompute="none")
    record, _ = _export(tmp_path / "m", model, layout, "megatron")
    assert "  --cpu-offloading-num-layers 3\n" in (tmp_path / "m" / "megatron_args.sh").read_text()
    launch, back = _read_back(tmp_path / "m" / "megatron_args.sh", 8)
    _same_run(launch, back, record, cpu_offload_layers=3)
    _export(tmp_path / "b", model, layout, "megatron-bridge")
    pairs = dict(overrides(build_plan(record, model, CLUSTER, allow_unfit=True)))
    assert pairs["model.cpu_offloading_num_layers"] == 3 and pairs["model.cpu_offloading"] is True
    launch, back = _read_back(tmp_path / "b" / "megatron_bridge_overrides.yaml", 8, model)
    _same_run(launch, back, record, cpu_offload_layers=3)
    for fmt, lay, rule in (
            ("megatron", Layout(tp=2, dp=4, gbs=8, cpu_offload_layers=3, recompute="selective"), "megatron_cpu_offload_recompute"),
            ("torchtitan", Layout(tp=2, dp=4, gbs=8, zero=3, fsdp="fsdp2", loss="eager", recompute="none",
                                  cpu_offload_layers=3), "torchtitan_cpu_offload"),
            ("deepspeed", Layout(dp=8, gbs=8, cpu_offload_layers=3, recompute="none"), "deepspeed_cpu_offload")):
        with pytest.raises(Exception, match=rule):
            _export(tmp_path / rule, model, lay, fmt)


@pytest.mark.parametrize("fsdp,grad_pass,present,absent", [
    # gbs 8 over dp 4: two micro-batches. Megatron-FSDP copies each one's gradient into its bucket
    # (megatron_fsdp.py _grad_acc); FSDP2 adds the reduce-scattered shards (autograd).
    ("megatron", "main_grad_copy", ["--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads_params",
                                    "--no-gradient-accumulation-fusion"], ["--use-torch-fsdp2"]),
    ("fsdp2", "autograd", ["--use-torch-fsdp2", "--no-gradient-accumulation-fusion"],
     ["--use-megatron-fsdp", "--use-distributed-optimizer", "--overlap-param-gather"]),
])
def test_megatron_zero3_by_fsdp_flavour(tmp_path, fsdp, grad_pass, present, absent):
    model = get_model("llama3-8b")
    layout = Layout(tp=2, dp=4, gbs=8, zero=3, fsdp=fsdp, grad_accum_pass=grad_pass)
    record, _ = _export(tmp_path, model, layout, "megatron")
    text = (tmp_path / "megatron_args.sh").read_text()
    for word in present:
        assert f"  {word}\n" in text, word
    for word in absent:
        assert word not in text, word
    launch, back = _read_back(tmp_path / "megatron_args.sh", 8)
    _same_run(launch, back, record, fsdp=fsdp, zero=3)
    _export(tmp_path, model, layout, "megatron-bridge")
    launch, back = _read_back(tmp_path / "megatron_bridge_overrides.yaml", 8, model)  # dist.use_torch_fsdp2
    _same_run(launch, back, record, fsdp=fsdp, zero=3)


@pytest.mark.parametrize("fmt,fsdp,rule", [
    ("megatron", "flat", "megatron_fsdp_flat"), ("torchtitan", "flat", "torchtitan_fsdp"),
    ("torchtitan", "megatron", "torchtitan_fsdp"), ("deepspeed", "fsdp2", "deepspeed_fsdp"),
])
def test_zero3_flavour_refusals(tmp_path, fmt, fsdp, rule):
    model = get_model("llama3-8b")
    layout = Layout(tp=1 if fmt == "deepspeed" else 2, dp=4, gbs=8, zero=3, fsdp=fsdp, loss="eager" if fmt == "torchtitan"
                    else "unfused", recompute="full" if fmt == "torchtitan" else "none")
    with pytest.raises(Exception, match=rule):
        _export(tmp_path, model, layout, fmt)
    assert not list(tmp_path.iterdir())


# ----------------------------------------------------------------------------------- DeepSpeed Ulysses


def test_deepspeed_writes_ulysses_as_a2a_cp_and_reads_it_back(tmp_path):
    """cp 4 with the head all-to-all (cp_comm_type a2a) is DeepSpeed-Ulysses: the config's
    sequence_parallel_size 4, Megatron-DeepSpeed's --ds-sequence-parallel-size 4 named beside it;
    64 GPUs = dp 16 x cp 4 (megatron/arguments.py: data_parallel_size = world / (tp * pp * sp)), so
    train_batch_size 64 = micro-batch 1 x 4 accumulation steps x dp 16 (runtime/config.py _batch_assertion)."""
    import json

    model = get_model("llama3-8b")  # 32 heads, 8 KV heads: 4 ranks take 8 and 2 each
    layout = Layout(tp=1, cp=4, dp=16, gbs=64, seq_len=32768, recompute="full", cp_comm_type="a2a",
                    grad_accum_pass="cast_add", grad_reduce="all_reduce")
    record = _record(model, layout)
    report = export_layout(record, model, CLUSTER, "deepspeed", tmp_path, allow_unfit=True)
    cfg = json.loads(report.written[0].read_text())
    assert cfg["sequence_parallel_size"] == 4
    assert (cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]) == (64, 1, 4)
    assert any("--ds-sequence-parallel-size 4" in line for line in cfg["_comment"])
    launch = read_launch(report.written[0], model=model)
    assert not launch.unknown and not launch.unsupported
    assert (launch.values["cp"], launch.values["cp_comm_type"]) == (4, "a2a")
    back = resolve(launch, gpu=GPU.name, given={"seq_len": 32768}, allow_cross_node_tp=True)  # not a config key
    assert back.gpus == 64 and back.layout == build_plan(record, model, CLUSTER, allow_unfit=True).layout
    assert back.record["step_time_s"] == pytest.approx(record["step_time_s"], rel=1e-9)
    # without CP nothing is written for it, and the reader takes cp 1
    plain = export_layout(_record(model, Layout(tp=1, dp=64, gbs=64, grad_accum_pass="cast_add", grad_reduce="all_reduce")), model, CLUSTER,
                          "deepspeed", tmp_path / "p",
                          allow_unfit=True)
    assert "sequence_parallel_size" not in json.loads(plain.written[0].read_text())
    assert read_launch(plain.written[0], model=model).values["cp"] == 1


@pytest.mark.parametrize("cp_comm_type", ["p2p", "allgather", "a2a+p2p"])
def test_deepspeed_refuses_cp_other_than_ulysses(tmp_path, cp_comm_type):
    model = get_model("llama3-8b")
    layout = Layout(tp=1, cp=4, dp=16, gbs=64, seq_len=32768, recompute="full", cp_comm_type=cp_comm_type)
    with pytest.raises(PlannerInputError) as err:
        export_layout(_record(model, layout), model, CLUSTER, "deepspeed", tmp_path, allow_unfit=True)
    assert "deepspeed_cp_comm_type" in str(err.value) and "deepspeed/sequence/layer.py" in str(err.value)
    assert not list(tmp_path.iterdir())


def test_deepspeed_ulysses_heads_must_divide():
    """Megatron-DeepSpeed megatron/model/transformer.py asserts num_attention_heads % sp == 0: 32 heads run
    on 4 or 8 Ulysses ranks, not on 3 or 6 (search.rules refuses those layouts before any export; the
    DeepSpeed table says why on its own)."""
    from types import SimpleNamespace

    from planner.frameworks.deepspeed import TABLE

    def plan(cp):
        return SimpleNamespace(cp=cp, tp=1, pp=1, model=SimpleNamespace(num_attention_heads=32))

    for cp in (4, 8):
        assert TABLE.write("cp", cp, plan(cp)) == [("sequence_parallel_size", cp)]
    for cp in (3, 6):
        with pytest.raises(CannotExpress, match="deepspeed_ulysses_heads"):
            TABLE.write("cp", cp, plan(cp))


def test_nvfp4_in_megatron_and_bridge(tmp_path):
    # Megatron-LM --fp4-format e2m1 --fp4-recipe nvfp4, never beside --fp8-format (validate_args refuses
    # both); Megatron-Bridge's bf16_with_nvfp4_mixed preset (training/mixed_precision.py). Both read back
    # as the fp8_recipe nvfp4, priced the same. On B200 (FP4 tensor cores).
    b200 = get_gpu("b200")
    cluster = default_cluster_for_gpu(b200.name)
    model = get_model("llama3-8b")
    layout = Layout(tp=2, dp=4, gbs=8, precision="fp8", fp8_recipe="nvfp4")
    record = result_record(model, cluster, b200, evaluate(model, cluster, layout, gpu=b200), 0)
    record["planner_version"] = "test"
    for fmt, name in (("megatron", "megatron_args.sh"), ("megatron-bridge", "megatron_bridge_overrides.yaml")):
        export_layout(record, model, cluster, fmt, tmp_path, allow_unfit=True, force=True)
        text = (tmp_path / name).read_text()
        if fmt == "megatron":
            assert "--fp4-format e2m1" in text and "--fp4-recipe nvfp4" in text and "--fp8" not in text
        else:
            body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
            assert "bf16_with_nvfp4_mixed" in body and "fp4" not in body.replace("bf16_with_nvfp4_mixed", "")
        launch = read_launch(tmp_path / name, model=model)
        back = resolve(launch, gpu=b200.name, gpus=8, allow_cross_node_tp=True)
        _same_run(launch, back, record, precision="fp8", fp8_recipe="nvfp4")
    assert "bf16_with_nvfp4_mixed" in _presets()
