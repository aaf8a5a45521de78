"""Round trip: every file planner exports reads back (``--from-launch``) as the same layout, with
the same prediction.

Layouts are generated with hypothesis over a few catalog models and kept only where they obey the
rules of ``search.rules``. Each format is compared on what it can express (``EXPRESSES``): a
DeepSpeed config, for instance, holds no tensor-parallel size. The options a file cannot state
are given back as command-line overrides (as a user would), and the prediction must then be the
original's exactly, with nothing in planner's own file unknown to or unsupported by the reader.

The draw covers every option of ``costmodel.options``: the degrees, batch, pipeline and recompute
options (and the constrained ``dp_shard``, ``tp_comm_overlap``, ``tp_overlap_kind``, ``zero3_gather``)
by hand (``HAND_DRAWN``), every other implementation option from its declaration (its choices, a flag
both ways, a number at its default and above), so a new option is drawn without a test edit; a new
option of another group fails ``test_the_draw_covers_every_option`` until it is drawn, and an option a
framework table does not declare fails ``test_every_table_declares_every_option``. A third of the
layouts are priced as torchtitan runs (its table's fixed values), so that its files are written too.
A layout a format cannot run is refused by that format's table (the export reports it and writes
nothing for it): refusals are tested in tests/test_frameworks_tables.py.

``moe_imbalance`` is a workload property (``planner.frameworks.table.WORKLOAD``) and ``cudnn`` a
property of the container (``CONTAINER``): priced, never written, unknown to every reader; they are
drawn freely and given back on the command line like every option a file does not state.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from costmodel import evaluate
from costmodel.options import CHOICE, FLAG, FLOAT, IMPLEMENTATION, OPTIONS, Layout
from costmodel.record import result_record
from hardware_catalog import default_cluster_for_gpu, get_gpu, get_model
from planner.export import export_layout
from planner.export.common import CannotExpress, build_plan, partial_recompute_per_chunk, selective_modules
from planner.frameworks import deepspeed, megatron, torchtitan
from planner.frameworks.table import CONTAINER, WORKLOAD
from planner.launch import read_launch
from planner.cli.from_launch.resolve import resolve
from search.rules import RuleContext, violations

GPU = get_gpu("h100")
CLUSTER = default_cluster_for_gpu(GPU.name)
MODELS = ("llama3-8b", "llama3-70b", "mixtral-8x7b", "gpt3-175b")

MEGATRON = {"pp", "cp", "mbs", "gbs", "seq_len", "recompute", "per_chunk", "modules", "stage_layers"} | set(megatron.TABLE.options)
TITAN = {"pp", "cp", "dp", "vpp", "mbs", "gbs", "seq_len", "recompute", "per_chunk", "stage_layers", "dp_shard"} \
    | set(torchtitan.TABLE.options)
EXPRESSES = {
    "megatron_args.sh": MEGATRON,
    "launch_torchrun.sh": MEGATRON | {"dp"},
    "launch.sbatch": MEGATRON | {"dp"},
    "deepspeed_config.json": {"dp", "pp", "cp", "zero", "mbs", "gbs", "dp_comm_overlap", "grad_dtype", "recompute_full",
                              "dp_shard"},
    "torchtitan_overrides.sh": TITAN,
    "torchtitan.toml": TITAN,
    "megatron_bridge_overrides.yaml": MEGATRON,
}
"""What each exported file states (keys of ``view``); the rest comes from the command line."""
EXACT = {"zero_class": "zero", "recompute_full": "recompute", "loss_fused": "loss", "per_chunk": "recompute_layers",
         "modules": "recompute_modules", "stage_layers": "pp_first_layers"}
"""Keys of ``view`` that stand for an option without pinning it exactly (the option is then given back)."""


def view(record: dict, model) -> dict:
    """What runs, per comparable key: the plan's layout with derived forms (stage split, recompute
    per chunk, sequence parallelism as it runs)."""
    plan = build_plan(record, model, CLUSTER, allow_unfit=True)
    lay = plan.layout
    out = {o.name: getattr(lay, o.name) for o in OPTIONS}
    out.update(sequence_parallel=lay.sp, stage_layers=plan.stage_layers, per_chunk=partial_recompute_per_chunk(plan),
               modules=selective_modules(plan) or (("core_attn",) if lay.recompute == "selective" else ()),
               zero_class={0: 0, 1: 2, 2: 2, 3: 3}[lay.zero], recompute_full=lay.recompute == "full",
               loss_fused=lay.loss == "fused", dp=lay.dp)
    if lay.dp * lay.cp == 1:  # one data-parallel rank: nothing to shard, every ZeRO stage runs as 0
        out.update(zero=0, dp_shard=None, zero3_gather="prefetch")
    if model.moe is None:  # the MoE settings are moot for a dense model
        out.update(ep=1, etp=1, ep_comm_overlap=False, moe_dispatcher="alltoall", moe_grouped_gemm="loop",
                   moe_capacity_factor=0.0, moe_pad_to_capacity=False)
    if not (lay.tp > 1 and lay.pp > 1 and not lay.sp):  # split sends are moot (costmodel.schedule)
        out["p2p_scatter_gather"] = False
    if lay.vpp == 1 or lay.pp == 1:  # sends of the interleaved schedule only (costmodel.schedule)
        out["p2p_comm_overlap"] = True
    if lay.precision != "fp8":  # the FP8 recipe and FP8 parameters are moot without FP8 (costmodel.quantize,
        out.update(fp8_recipe="delayed", fp8_param_gather=False)  # memory.fp8_weight_copy_bytes, data_parallel)
    if out["zero"] != 3:  # the ZeRO-3 flavour is moot below ZeRO-3 (costmodel.data_parallel)
        out["fsdp"] = "flat"
    if plan.grad_accum == 1 and out["grad_accum_pass"] == "fused":  # one micro-batch: autograd adds nothing
        out["grad_accum_pass"] = "autograd"  # (costmodel.grad_accumulation)
    return out


HAND_DRAWN = {"tp", "pp", "dp", "cp", "ep", "etp", "vpp", "zero", "dp_shard", "mbs", "gbs", "seq_len", "recompute",
              "recompute_layers", "recompute_share", "recompute_modules", "sequence_parallel", "precision",
              "tp_comm_overlap", "tp_overlap_kind", "zero3_gather", "pp_first_layers", "pp_last_layers",
              "cpu_offload_layers"}
"""Options ``layouts`` draws by hand (degrees, batch, pipeline split, recompute, and the implementation
settings whose rules tie them to others); every other one is drawn from its declaration (``GENERIC``)."""
GENERIC = tuple(o for o in OPTIONS if o.group == IMPLEMENTATION and o.name not in HAND_DRAWN)


def _from_declaration(opt):
    """A strategy over ``opt``'s values from its declaration alone."""
    if opt.kind == CHOICE:
        return st.sampled_from(opt.choices)
    if opt.kind == FLAG:
        return st.booleans()
    if opt.kind == FLOAT:  # the default and a value above it, within the declared range
        return st.sampled_from(sorted({opt.default, min(opt.maximum, opt.default * 1.25 + 0.25)}))
    raise AssertionError(f"option {opt.name}: kind {opt.kind} has no generic draw; draw it by hand (HAND_DRAWN)")


def _reset_broken(values: dict, model) -> dict:
    """The generically drawn options whose rules the layout breaks, back at their defaults (e.g. an MoE
    dispatcher on a dense model), so that few draws are thrown away."""
    try:
        broken = {name for name, _ in violations(RuleContext.build(model, Layout(**values).gpus, CLUSTER, GPU),
                                                 Layout(**values))}
    except Exception:  # a layout Layout() itself rejects: left to assume()
        return values
    return {**values, **{o.name: o.default for o in GENERIC if broken & set(o.rules)}}


@st.composite
def layouts(draw):
    model = get_model(draw(st.sampled_from(MODELS + ("mixtral-8x7b",))))  # MoE twice: its options need it
    tp, pp, cp, dp = (draw(st.sampled_from(d)) for d in ((1, 2, 4, 8), (1, 2, 4), (1, 2), (1, 2, 4)))
    vpp = draw(st.sampled_from((1, 2))) if pp > 1 else 1
    mbs = draw(st.sampled_from((1, 2)))
    gbs = dp * mbs * pp * draw(st.sampled_from((1, 2, 4)))
    recompute = draw(st.sampled_from(("none", "selective", "full")))
    values = dict(tp=tp, pp=pp, cp=cp, dp=dp, vpp=vpp, mbs=mbs, gbs=gbs, seq_len=draw(st.sampled_from((2048, 4096))),
                  zero=draw(st.integers(0, 3)), recompute=recompute, precision=draw(st.sampled_from(("bf16", "fp8"))),
                  sequence_parallel=draw(st.sampled_from((None, False))) if tp > 1 else None,
                  **{opt.name: draw(_from_declaration(opt)) for opt in GENERIC})
    if recompute == "full":
        layers = draw(st.sampled_from((None, 1, 2, -1, -2)))  # -q: a share of q quarters
        values["recompute_share" if layers and layers < 0 else "recompute_layers"] = abs(layers) if layers else None
    if recompute == "selective":
        values["recompute_modules"] = draw(st.sampled_from((None, ("core_attn", "mlp"))))
    if pp > 1 and draw(st.booleans()):
        values["pp_first_layers"] = model.num_layers // pp - draw(st.sampled_from((1, 2))) * vpp
    if model.moe is not None:
        values["ep"] = draw(st.sampled_from((1, 2, 4)))
    values["tp_comm_overlap"] = tp > 1 and values["sequence_parallel"] is None and draw(st.booleans())
    if values["tp_comm_overlap"]:
        values["tp_overlap_kind"] = draw(st.sampled_from(("userbuffers", "asynctp")))
    if values["zero"] >= 1 and dp > 1 and draw(st.booleans()):
        values["dp_shard"] = draw(st.sampled_from([d for d in (1, 2) if dp % d == 0 and d < dp] or [1]))
    if values["zero"] == 3:
        values["zero3_gather"] = draw(st.sampled_from(("prefetch", "blocking")))
    if pp == 1 and recompute == "none":  # offload runs without a pipeline (rule cpu_offload_layers_valid) and,
        values["cpu_offload_layers"] = draw(st.sampled_from((None, 1, 2)))  # in Megatron-Core, without recompute
    target = draw(st.integers(0, 2))
    if target == 0:  # priced as torchtitan runs, so that its files are written and read too
        model, values = _as_torchtitan(draw, values)
    elif target == 1:  # priced as Megatron runs (most free draws hold a value its table refuses)
        values = _runnable(megatron.TABLE, values)
    layout = Layout(**_reset_broken(values, model))
    assume(not violations(RuleContext.build(model, layout.gpus, CLUSTER, GPU), layout))
    return model, layout


def _runnable(table, values: dict) -> dict:
    """``values`` with each value ``table`` refuses (anywhere: its ``when`` ignored) replaced by the
    option's first declared value it does not refuse. The gradient accumulation pass, which Megatron
    refuses by ZeRO stage both ways (every value somewhere), takes what the search derives for the
    layout's ZeRO stage and FSDP flavour (search.rules.sharded_grad_accum_pass)."""
    from search.rules import sharded_grad_accum_pass_name

    out = dict(values)
    for refusal in table.refusals:
        if refusal.option != "grad_accum_pass" and out.get(refusal.option) in refusal.values:
            opt = next(o for o in OPTIONS if o.name == refusal.option)
            refused = {v for f in table.refusals if f.option == opt.name for v in f.values}
            choices = opt.choices if opt.kind == CHOICE else (False, True) if opt.kind == FLAG else ()
            out[opt.name] = next(v for v in choices if v not in refused)
    out["grad_accum_pass"] = sharded_grad_accum_pass_name(out.get("zero", 0), out.get("fsdp") or "flat", "fused")
    return out


def _as_torchtitan(draw, values: dict):
    """The layout with what torchtitan fixes (planner.frameworks.torchtitan.TABLE) on a llama3 flavor,
    on whole 8-GPU nodes."""
    model = get_model(draw(st.sampled_from(("llama3-8b", "llama3-70b"))))
    values = {k: v for k, v in values.items() if k not in ("ep", "moe_dispatcher", "recompute_modules", "dp_shard",
                                                            "ep_comm_overlap", "moe_imbalance")}
    values.update(loss="eager", attention="flash", grad_dtype="fp32", dp_comm_overlap=True, zero3_gather="prefetch",
                  p2p_scatter_gather=False,
                  zero=draw(st.sampled_from((0, 2, 3))), dp=draw(st.sampled_from((2, 4, 8))),
                  recompute=draw(st.sampled_from(("none", "full"))), recompute_layers=None, recompute_share=None,
                  pp_first_layers=None, cpu_offload_layers=None, fsdp="fsdp2", fp8_recipe="current",
                  cp_comm_type=draw(st.sampled_from(("p2p", "allgather"))) if values["cp"] > 1 else "p2p")
    if values["recompute"] == "full":
        values["recompute_share"] = draw(st.sampled_from((None, 2)))  # 2 quarters: per-op SAC
    if values["tp_comm_overlap"]:
        values.update(tp_overlap_kind="asynctp", kernels="fused")
    if values["precision"] == "fp8":
        values["kernels"] = "fused"
    values["gbs"] = values["dp"] * values["mbs"] * values["pp"] * draw(st.sampled_from((1, 2, 4)))
    return model, values


def record_of(model, layout: Layout) -> dict:
    rec = result_record(model, CLUSTER, GPU, evaluate(model, CLUSTER, layout, gpu=GPU), 0)
    rec["planner_version"] = "test"
    return rec


def _given_back(original: dict, expressed: set) -> dict:
    """The options the file does not pin exactly, as command-line overrides with the original values."""
    exact = {k for k in expressed if k not in EXACT} | {"gpus"}
    out = {}
    for opt in OPTIONS:
        if opt.name in exact or opt.name == "dp":
            continue
        if opt.name in ("pp_first_layers", "pp_last_layers") and "stage_layers" in expressed:
            continue
        out[opt.name] = original[opt.name]
    return out


def _check_file(path: Path, name: str, model, original: dict, record: dict) -> None:
    launch = read_launch(path, model=model if name.endswith(".json") else None)
    # planner's own file: nothing in it is unknown to, or unsupported by, the same framework's reader
    expressed = EXPRESSES[name]
    assert not launch.unknown and not launch.unsupported, (name, launch.unknown, launch.unsupported)
    gpus = None if "dp" in expressed else record["gpus"]
    back = resolve(launch, gpu=GPU.name, gpus=gpus, given=_given_back(original, expressed), allow_cross_node_tp=True)
    assert back.setup.model.name == model.name
    seen = view(back.record, back.setup.model)
    for key in sorted(expressed):
        assert seen[key] == original[key], f"{name}: {key} read back {seen[key]!r}, exported {original[key]!r}"
    assert back.record["step_time_s"] == pytest.approx(record["step_time_s"], rel=1e-9), name
    assert back.record["memory_gib"]["peak"] == pytest.approx(record["memory_gib"]["peak"], rel=1e-9), name


def test_the_draw_covers_every_option():
    """Every option of costmodel.options is drawn: by hand or from its declaration."""
    missing = [o.name for o in OPTIONS if o.name not in HAND_DRAWN and o not in GENERIC]
    assert not missing, f"options the round trip does not draw (add them to layouts / HAND_DRAWN): {missing}"
    assert HAND_DRAWN <= {o.name for o in OPTIONS}, HAND_DRAWN - {o.name for o in OPTIONS}


@pytest.mark.parametrize("table", [megatron.TABLE, torchtitan.TABLE, deepspeed.TABLE], ids=lambda t: t.framework)
def test_every_table_declares_every_option(table):
    """Each framework's table has a row, a refusal or an ``elsewhere`` entry (where its files state it,
    or why they do not) for every option, or the option is a workload or container property (``WORKLOAD``,
    ``CONTAINER``). The
    Megatron-Bridge exporter and reader use the Megatron table under Bridge's names."""
    missing = [o.name for o in OPTIONS if not table.declares(o.name)]
    assert not missing, f"{table.framework} table (planner/frameworks/) has no row, refusal or elsewhere for {missing}"
    assert set(WORKLOAD) | set(CONTAINER) <= {o.name for o in OPTIONS}


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(layouts())
def test_every_export_reads_back_as_the_same_layout(case):
    model, layout = case
    record = record_of(model, layout)
    original = view(record, model)
    with tempfile.TemporaryDirectory() as out:
        try:
            report = export_layout(record, model, CLUSTER, "all", Path(out), allow_unfit=True)
        except CannotExpress:  # pragma: no cover - "all" reports refusals instead of raising
            return
        for path in report.written:
            _check_file(path, path.name, model, original, record)


@pytest.mark.parametrize("version", ["0.1", "0.2", "0.3"])
@pytest.mark.parametrize("first_last", [(None, None), (18, 18)])
def test_torchtitan_releases_read_back(tmp_path, version, first_last):
    model = get_model("llama3-70b")
    layout = Layout(tp=8, pp=4, vpp=2, dp=2, mbs=1, gbs=32, seq_len=4096, zero=3, fsdp="fsdp2", recompute="full", loss="eager",
                    grad_accum_pass="autograd", pp_first_layers=first_last[0], pp_last_layers=first_last[1])
    record = record_of(model, layout)
    report = export_layout(record, model, CLUSTER, "torchtitan", tmp_path, allow_unfit=True,
                           options={"torchtitan_version": version})
    assert report.written
    for path in report.written:
        _check_file(path, path.name, model, view(record, model), record)
