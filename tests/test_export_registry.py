"""planner.export's exporter registry, and the plan built from the option declaration.

* the registry lists the five formats in order with their files, and ``FORMATS`` / ``FILES``
  follow it;
* a launcher is one ``Exporter``: registered here (and removed again), ``export_layout(...,
  "all")`` writes it with no other change;
* ``build_plan`` parses the record's layout with ``Layout.from_values`` and judges it with the
  rules of ``search.rules``: records the old hand-written checks accepted are refused with the
  rule's name.
"""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

import planner.export as export_pkg
from costmodel.options import Layout
from hardware_catalog.errors import PlannerInputError
from hardware_catalog.schema import ModelSpec
from planner.export import EXPORTERS, Exporter, export_layout, register, unregister
from planner.export.common import CannotExpress, build_plan
from planner.export.registry import EXECUTABLE, PLAIN, each_file, one_file

from test_export import DGX_H100, LLAMA3_8B, MIXTRAL  # the same fixtures as the export tests

BUILTIN = {
    "torchrun": {"launch_torchrun.sh": 0o755},
    "megatron": {"megatron_args.sh": 0o755},
    "deepspeed": {"deepspeed_config.json": 0o644},
    "torchtitan": {"torchtitan_overrides.sh": 0o755, "torchtitan.toml": 0o644},
    "slurm": {"launch.sbatch": 0o755},
    "megatron-bridge": {"megatron_bridge_overrides.yaml": 0o644},
}


def record(model: ModelSpec, **layout) -> dict:
    """A ``planner evaluate --json`` shaped record."""
    lay = dict(tp=1, pp=1, dp=1, cp=1, ep=1, etp=1, vpp=1, zero=1, mbs=1, gbs=8, seq_len=4096,
               recompute="selective", precision="bf16")
    lay.update(layout)
    return {"model": model.name, "gpu": "h100-sxm", "cluster": "dgx-h100", "layout": lay,
            "step_time_s": 1.0, "fits": True, "planner_version": "0.1.0"}


# ----------------------------------------------------------------------------------- registry


def test_registry_lists_the_formats_in_order_with_their_files():
    assert tuple(EXPORTERS) == tuple(BUILTIN)
    assert export_pkg.FORMATS == tuple(BUILTIN)
    assert export_pkg.FILES == {fmt: tuple(files) for fmt, files in BUILTIN.items()}
    for fmt, files in BUILTIN.items():
        exporter = EXPORTERS[fmt]
        assert isinstance(exporter, Exporter) and exporter.name == fmt
        assert dict(exporter.files) == files and exporter.description


def test_register_refuses_clashes():
    def render(plan, entrypoint):
        return "x"

    with pytest.raises(ValueError, match="already registered"):
        register(Exporter("megatron", {"other.sh": EXECUTABLE}, one_file("other.sh", render)))
    with pytest.raises(ValueError, match="megatron_args.sh"):
        register(Exporter("mine", {"megatron_args.sh": EXECUTABLE}, one_file("megatron_args.sh", render)))
    with pytest.raises(ValueError, match="'all'"):
        register(Exporter("all", {"all.sh": EXECUTABLE}, one_file("all.sh", render)))
    assert tuple(EXPORTERS) == tuple(BUILTIN)


@pytest.fixture
def extra_exporter():
    """A minimal launcher (a NeMo-2-style recipe stand-in), registered for one test."""

    def render(plan, entrypoint):
        if plan.cp > 1:
            raise CannotExpress("recipe_no_cp", f"cp={plan.cp}: the recipe has no context parallelism", "test")
        return (f"# {plan.header[2]}\n"
                f"recipe(tp={plan.tp}, pp={plan.pp}, dp={plan.dp}, mbs={plan.mbs}, gbs={plan.gbs}, entry={entrypoint!r})\n")

    exporter = register(Exporter("recipe", {"recipe.py": PLAIN}, one_file("recipe.py", render), "test recipe"))
    try:
        yield exporter
    finally:
        unregister("recipe")
    assert "recipe" not in EXPORTERS


def test_one_registered_exporter_is_written_by_all(tmp_path, extra_exporter):
    assert export_pkg.FORMATS[-1] == "recipe" and export_pkg.FILES["recipe"] == ("recipe.py",)
    rec = record(LLAMA3_8B, tp=2, dp=4, gbs=64)
    report = export_layout(rec, LLAMA3_8B, DGX_H100, "all", tmp_path)
    written = {p.name: p for p in report.written}
    assert set(written) == {"launch_torchrun.sh", "megatron_args.sh", "megatron_bridge_overrides.yaml", "launch.sbatch",
                            "recipe.py"}
    # ZeRO-1: torchtitan has FSDP2 or replication; DeepSpeed adds each micro-batch's gradients in a pass of its own
    assert set(report.skipped) == {"torchtitan", "deepspeed"}
    text = written["recipe.py"].read_text()
    assert "recipe(tp=2, pp=1, dp=4, mbs=1, gbs=64, entry='pretrain_gpt.py')" in text
    assert "Layout: TP2 PP1 DP4" in text
    assert stat.S_IMODE(written["recipe.py"].stat().st_mode) == PLAIN
    # Named on its own, like any format.
    report = export_layout(rec, LLAMA3_8B, DGX_H100, "recipe", tmp_path / "one")
    assert [p.name for p in report.written] == ["recipe.py"]


def test_registered_exporter_that_cannot_express_is_skipped(tmp_path, extra_exporter):
    rec = record(LLAMA3_8B, tp=2, cp=2, dp=2, gbs=16, seq_len=8192)
    report = export_layout(rec, LLAMA3_8B, DGX_H100, "all", tmp_path)
    assert "recipe_no_cp" in report.skipped["recipe"]
    assert "megatron_args.sh" in {p.name for p in report.written}
    with pytest.raises(PlannerInputError, match="format recipe cannot express this layout: .*recipe_no_cp"):
        export_layout(rec, LLAMA3_8B, DGX_H100, "megatron,recipe", tmp_path / "named")
    assert not (tmp_path / "named").exists()


def test_each_file_refuses_independently():
    def ok(plan, entrypoint):
        return "fine\n"

    def no(plan, entrypoint):
        raise CannotExpress("rule_b", "not b")

    texts, refused = each_file({"a.sh": ok, "b.toml": no})(None, "x")
    assert texts == {"a.sh": "fine\n"} and refused == {"b.toml": "not b (rule rule_b)"}
    with pytest.raises(CannotExpress) as err:
        each_file({"a.sh": no, "b.toml": no})(None, "x")
    assert err.value.rule == "rule_b" and str(err.value) == "not b (rule rule_b)"


# ----------------------------------------------------------------------------------- plan


def test_plan_holds_the_parsed_layout():
    rec = record(MIXTRAL, tp=2, pp=4, vpp=2, dp=8, ep=8, gbs=64, tp_comm_overlap=True, ep_comm_overlap=True,
                 moe_dispatcher="deepep")
    plan = build_plan(rec, MIXTRAL, DGX_H100)
    assert isinstance(plan.layout, Layout)
    assert plan.layout == Layout.from_values(rec["layout"])
    assert (plan.tp, plan.vpp, plan.moe_dispatcher, plan.zero3_gather) == (2, 2, "deepep", "prefetch")
    assert plan.sp is True and plan.sequence_parallel is None
    assert plan.recompute_layers is None and plan.recompute_modules is None
    assert (plan.grad_accum, plan.gpus, plan.nnodes, plan.nproc_per_node) == (8, 64, 8, 8)
    with pytest.raises(AttributeError):
        plan.not_an_option
    assert plan.layout_summary().endswith(
        "recompute selective, bf16; attention flash, fused kernels, cross-entropy unfused, TP overlap on, "
        "EP all-to-all overlap on, deepep dispatcher")
    dense = build_plan(record(LLAMA3_8B, dp=8, gbs=8), LLAMA3_8B, DGX_H100)
    assert dense.layout_summary().endswith("attention flash, fused kernels, cross-entropy unfused, TP overlap off")


def test_partial_recompute_in_layers_per_stage_is_split_over_the_chunks():
    # Records state partial full recompute in layers per stage. 32 layers on pp 4 -> 8 a stage,
    # vpp 2 -> chunks of 4; 4 layers per stage = the first 2 of each chunk, --recompute-num-layers 2.
    rec = record(LLAMA3_8B, tp=2, pp=4, dp=1, vpp=2, gbs=8, recompute="full", recompute_layers=4)
    plan = build_plan(rec, LLAMA3_8B, DGX_H100)
    assert plan.recompute_layers == 4 and "4 layer(s) per stage: the first 2 of each of its 2 model chunks, block method" in plan.layout_summary()


@pytest.mark.parametrize("model,layout,rule", [
    # Accepted before (the setting silently dropped or ignored), refused now by the rules.
    (LLAMA3_8B, dict(tp=1, dp=8, tp_comm_overlap=True), "tp_comm_overlap_needs_sequence_parallel"),
    (LLAMA3_8B, dict(tp=2, dp=4, recompute_modules=["mla_up_proj"]), "recompute_modules_exist"),
    (LLAMA3_8B, dict(tp=2, dp=4, recompute="full", recompute_modules=["mlp"]), "recompute_modules_need_selective"),
    (LLAMA3_8B, dict(tp=2, dp=4, recompute_layers=4), "partial_recompute_needs_full"),
    (LLAMA3_8B, dict(tp=2, dp=4, ep_comm_overlap=True), "ep_comm_overlap_needs_moe"),
    (LLAMA3_8B, dict(tp=2, dp=4, moe_dispatcher="deepep"), "moe_dispatcher_needs_moe"),
    (LLAMA3_8B, dict(tp=2, dp=4, zero3_gather="blocking"), "zero3_gather_needs_zero3"),
    (LLAMA3_8B, dict(tp=2, cp=2, dp=2, seq_len=4097), "cp_divides_seq"),
    # Refused before only by the Megatron-based formats; no format can run them.
    (MIXTRAL, dict(tp=2, pp=4, dp=8, ep=8, etp=2, vpp=2, gbs=8 * 6), "interleaved_microbatches_divisible_by_pp"),
    (MIXTRAL, dict(tp=2, dp=4, ep=8, etp=2, gbs=64), "ep_divides_dp_cp"),
])
def test_build_plan_refuses_a_layout_that_breaks_a_rule(tmp_path, model, layout, rule):
    rec = record(model, **layout)
    with pytest.raises(PlannerInputError) as err:
        build_plan(rec, model, DGX_H100)
    msg = str(err.value)
    assert f"rule {rule}" in msg and "\n" not in msg
    with pytest.raises(PlannerInputError, match=re.escape(rule)):
        export_layout(rec, model, DGX_H100, "all", tmp_path)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_cross_node_tp_is_judged_as_evaluated():
    # A TP group wider than the scale-up domain needs --allow-cross-node-tp at evaluate; the
    # record does not say so, so export accepts it unless told otherwise.
    rec = record(LLAMA3_8B, tp=16, dp=1, gbs=8)
    assert build_plan(rec, LLAMA3_8B, DGX_H100).tp == 16
    with pytest.raises(PlannerInputError, match="tp_within_scaleup_domain"):
        build_plan(rec, LLAMA3_8B, DGX_H100, allow_cross_node_tp=False)


def test_option_names_stay_in_the_exporters():
    """The summary and the plan come from the declarations: common.py and __init__.py name no
    implementation option the exporters map to framework flags."""
    here = Path(export_pkg.__file__).parent
    for name in ("common.py", "__init__.py", "registry.py"):
        text = (here / name).read_text()
        for option in ("tp_comm_overlap", "zero3_gather", "moe_dispatcher"):
            assert option not in text, (name, option)
