"""One declaration per option: what is derived from ``costmodel.options`` and the one rule set."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from typer.testing import CliRunner

from costmodel.layout import COLUMNS, LayoutBatch
from costmodel.options import (
    IMPLEMENTATION,
    IMPLEMENTATION_OPTIONS,
    OPTIONS,
    OPTIONS_BY_NAME,
    Layout,
    options_for,
    setting_labels,
)
from hardware_catalog import get_model
from hardware_catalog.errors import PlannerInputError
from planner.cli.main import app
from search.rules import RULES_BY_NAME, RuleContext, check_settings, where_settings_apply

runner = CliRunner()


def test_batch_columns_are_the_layout_fields():
    assert COLUMNS == tuple(f.name for f in dataclasses.fields(Layout))
    assert set(IMPLEMENTATION_OPTIONS) == {o.name for o in OPTIONS if o.group == IMPLEMENTATION}


def test_every_rule_an_option_names_exists_and_reads_that_option():
    for opt in OPTIONS:
        for name in opt.rules:
            assert name in RULES_BY_NAME, (opt.name, name)
            assert opt.name in RULES_BY_NAME[name].fields or opt.name in ("dp", "mbs", "gbs", "seq_len", "tp", "pp",
                                                                         "vpp", "ep", "etp"), (opt.name, name)


def test_a_layout_with_every_option_off_default_round_trips_through_a_batch():
    lay = Layout(tp=2, pp=4, dp=2, cp=2, ep=1, etp=1, vpp=2, zero=3, mbs=2, gbs=64, seq_len=8192, recompute="full",
                 recompute_layers=2, sequence_parallel=False, precision="fp8", attention="flash3", kernels="eager",
                 loss="fused", tp_comm_overlap=False, moe_dispatcher="alltoall", grad_dtype="bf16",
                 zero3_gather="blocking", pp_first_layers=7, pp_last_layers=9)
    batch = LayoutBatch.from_layouts([lay, Layout()])
    assert batch.layout(0) == lay
    assert batch.layout(1) == Layout(sequence_parallel=False)  # tp = 1: SP resolved off
    sel = Layout(recompute="selective", recompute_modules=("layernorm", "mlp"))
    assert LayoutBatch.from_layouts([sel]).layout(0) == dataclasses.replace(sel, sequence_parallel=False)
    assert int(LayoutBatch.from_layouts([sel]).recompute_modules[0]) == 0b1010  # bits 1 and 3 (layernorm, mlp)


def test_the_search_share_is_a_column_records_state_in_layers_per_stage():
    # recompute_share q = q quarters of a middle stage's model chunk (Megatron's block method
    # counts per chunk). 8B (32 layers) on pp 4: 8 layers a stage; vpp 2: chunks of 4; 3
    # quarters = round(3) = 3 layers a chunk = 6 layers per stage.
    from costmodel.record import recompute_layers_per_stage

    lay = Layout(tp=1, pp=4, dp=2, vpp=2, gbs=64, recompute="full", recompute_share=3, sequence_parallel=False)
    assert LayoutBatch.from_layouts([lay]).layout(0) == lay
    assert "recompute_share" not in lay.to_dict()
    assert "--recompute-share" not in runner.invoke(app, ["evaluate", "--help"], env={"COLUMNS": "240"}).output
    assert recompute_layers_per_stage(get_model("llama3-8b"), lay) == 6
    # Without full recompute a share means nothing: the batch drops it, as it drops layers.
    assert LayoutBatch.from_layouts([dataclasses.replace(lay, recompute="none")]).layout(0).recompute_share is None


@pytest.mark.parametrize("command", ["evaluate", "export", "search"])
def test_every_declared_option_is_a_flag_of_its_commands(command):
    out = runner.invoke(app, [command, "--help"], env={"COLUMNS": "240"}).output
    for opt in options_for(command):
        assert opt.flag in out, (command, opt.flag)
    if command == "evaluate":
        assert "--dp " not in out  # evaluate derives dp = gpus / (tp*pp*cp)


def test_option_parse_names_the_flag_and_what_is_allowed():
    with pytest.raises(PlannerInputError, match=r"^--tp=0: must be an integer from 1 to 1,048,576$"):
        OPTIONS_BY_NAME["tp"].parse(0)
    with pytest.raises(PlannerInputError, match=r"^--zero=4: must be an integer from 0 to 3$"):
        OPTIONS_BY_NAME["zero"].parse(4)
    with pytest.raises(PlannerInputError, match=r"^layout.mbs=inf: must be an integer from 1 to "):
        OPTIONS_BY_NAME["mbs"].parse(float("inf"), "layout.mbs")
    with pytest.raises(PlannerInputError, match=r"--loss=slow: allowed unfused, fused, eager"):
        OPTIONS_BY_NAME["loss"].parse("slow")
    with pytest.raises(PlannerInputError, match=r"layout.tp='8': must be an integer"):
        Layout.from_values({"tp": "8"}, where="layout.")


def test_setting_labels_follow_the_declarations():
    assert setting_labels({"attention": "flash3", "tp_comm_overlap": True, "grad_dtype": "bf16"}) == \
        ["attn-flash3", "TP-overlap", "bf16-grads"]
    assert setting_labels({name: OPTIONS_BY_NAME[name].default for name in IMPLEMENTATION_OPTIONS}) == []
    # A setting the layout ignores is not shown: the FSDP flavour below ZeRO-3, the FP8 recipe in BF16.
    assert setting_labels({"fsdp": "fsdp2", "zero": 1, "fp8_recipe": "mxfp8", "precision": "bf16"}) == []
    assert setting_labels({"fsdp": "fsdp2", "zero": 3, "fp8_recipe": "mxfp8", "precision": "fp8"}) == \
        ["fp8-mxfp8", "fsdp2-FSDP"]


def _evaluate(*extra):
    return runner.invoke(app, ["evaluate", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", *extra])


def test_evaluate_rejects_recompute_modules_the_model_does_not_have():
    res = _evaluate("--recompute-modules", "mla_up_proj,moe_act")
    assert res.exit_code == 2
    assert "recompute_modules_exist" in res.stderr and "mla_up_proj, moe_act" in res.stderr
    assert _evaluate("--recompute-modules", "mlp,layernorm").exit_code == 0


@pytest.mark.parametrize("extra,rule", [
    (("--moe-dispatcher", "deepep"), "moe_dispatcher_needs_moe"),
    (("--ep-comm-overlap",), "ep_comm_overlap_needs_moe"),
    (("--zero3-gather", "blocking", "--zero", "1"), "zero3_gather_needs_zero3"),
    (("--tp", "1", "--tp-comm-overlap"), "tp_comm_overlap_needs_sequence_parallel"),
    (("--recompute", "full", "--recompute-modules", "mlp"), "recompute_modules_need_selective"),
])
def test_settings_that_do_not_apply_are_refused_with_the_rule(extra, rule):
    res = _evaluate(*extra)
    assert res.exit_code == 2 and rule in res.stderr and len(res.stderr.splitlines()) == 1


def test_search_refuses_settings_no_layout_of_the_model_can_use():
    with pytest.raises(PlannerInputError, match="moe_dispatcher_needs_moe"):
        check_settings(get_model("llama3-8b"), {"moe_dispatcher": "deepep"})
    check_settings(get_model("mixtral-8x7b"), {"moe_dispatcher": "deepep", "ep_comm_overlap": True})
    # A pin can leave a setting nowhere to apply: TP overlap with sequence parallelism pinned off.
    with pytest.raises(PlannerInputError, match="tp_comm_overlap_needs_sequence_parallel"):
        check_settings(get_model("llama3-8b"), {"tp_comm_overlap": True}, {"sequence_parallel": False, "tp": 8})
    check_settings(get_model("llama3-8b"), {"tp_comm_overlap": True}, {"tp": 8})  # SP searched: fine
    from planner import search

    with pytest.raises(PlannerInputError, match="recompute_modules_exist"):
        search("llama3-8b", 8, "h100", gbs=8, seq_len=4096, recompute_modules="moe_act")


def test_search_applies_a_setting_only_where_its_rules_allow():
    ctx = RuleContext(model=get_model("llama3-8b"), gpus=8)
    cols = {"tp": np.array([1, 2, 2]), "sequence_parallel": np.array([True, True, False]),
            "recompute": np.array([1, 2, 1]), "zero": np.array([3, 1, 3])}
    out = where_settings_apply(ctx, {"tp_comm_overlap": True, "recompute_modules": 0b1000, "zero3_gather": 1}, cols)
    assert out["tp_comm_overlap"].tolist() == [False, True, False]  # needs tp > 1 with SP
    assert out["recompute_modules"].tolist() == [0b1000, 1, 0b1000]  # selective rows only (else core_attn)
    assert out["zero3_gather"].tolist() == [1, 0, 1]  # ZeRO-3 rows only


def test_a_setting_whose_rule_reads_another_setting():
    # Padding to capacity needs a capacity factor (Megatron-Core TransformerConfig); both are
    # settings, not searched columns, so the pad's rule must see the factor the user gave (it
    # used to see the default 0 and switch the pad off in every searched layout).
    moe = RuleContext(model=get_model("mixtral-8x7b"), gpus=8)
    cols = {"tp": np.array([1, 2]), "ep": np.array([8, 4])}
    out = where_settings_apply(moe, {"moe_capacity_factor": 1.25, "moe_pad_to_capacity": True}, cols)
    assert out["moe_pad_to_capacity"].tolist() == [True, True]
    out = where_settings_apply(moe, {"moe_capacity_factor": 0.0, "moe_pad_to_capacity": True}, cols)
    assert out["moe_pad_to_capacity"].tolist() == [False, False]
    # The same for the TP overlap kind, whose rule reads TP overlap (itself a setting): AsyncTP where
    # the overlap applies (tp > 1 with SP), the default elsewhere.
    dense = RuleContext(model=get_model("llama3-8b"), gpus=8)
    tp_cols = {"tp": np.array([1, 2]), "sequence_parallel": np.array([False, True])}
    asynctp = OPTIONS_BY_NAME["tp_overlap_kind"].encode("asynctp")
    out = where_settings_apply(dense, {"tp_comm_overlap": True, "tp_overlap_kind": asynctp}, tp_cols)
    assert out["tp_comm_overlap"].tolist() == [False, True] and out["tp_overlap_kind"].tolist() == [0, asynctp]
    # A capacity factor on a dense model is refused before the search (one line, its rule).
    with pytest.raises(PlannerInputError, match="moe_capacity_needs_moe"):
        check_settings(get_model("llama3-8b"), {"moe_capacity_factor": 1.25})


def test_search_records_say_what_was_priced():
    from planner import search

    res = search("llama3-8b", 16, "h100", gbs=64, seq_len=4096, top=40, implementation={"tp_comm_overlap": True})
    seen = {(r["layout"]["tp"] > 1 and r["layout"]["sequence_parallel"], r["layout"]["tp_comm_overlap"])
            for r in res.results}
    assert seen <= {(True, True), (False, False)} and (False, False) in seen


def test_dp_comm_overlap_from_one_declaration(tmp_path):
    # The option added in three edits (declaration, data_parallel.overlap_windows, export
    # mapping): the flag exists on every command, labels the layout, and maps to Megatron's
    # --overlap-grad-reduce / DeepSpeed's overlap_comm.
    import json

    res = _evaluate("--no-dp-comm-overlap", "--tp", "2", "--json")
    assert res.exit_code == 0, res.output
    rec = json.loads(res.output)
    assert rec["layout"]["dp_comm_overlap"] is False
    on = json.loads(_evaluate("--tp", "2", "--json").output)
    assert rec["breakdown"]["dp_comm"] > on["breakdown"]["dp_comm"]
    out = runner.invoke(app, ["export", "--model", "llama3-8b", "--gpus", "16", "--gpu", "h100", "--tp", "2",
                              "--gbs", "64", "--no-dp-comm-overlap", "--format", "megatron", "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    out = runner.invoke(app, ["export", "--model", "llama3-8b", "--gpus", "16", "--gpu", "h100", "--tp", "2",
                              "--gbs", "64", "--no-dp-comm-overlap", "--grad-accum-pass", "cast_add", "--grad-reduce",
                              "all_reduce", "--format",
                              "deepspeed", "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "--overlap-grad-reduce" not in (tmp_path / "megatron_args.sh").read_text()
    assert json.loads((tmp_path / "deepspeed_config.json").read_text())["zero_optimization"]["overlap_comm"] is False
    assert "no-DP-overlap" in _evaluate("--no-dp-comm-overlap").output


def test_the_cost_model_compares_choices_by_name():
    batch = LayoutBatch.from_layouts([Layout(attention="flash3"), Layout(attention="unfused")])
    assert batch.is_("attention", "flash3").tolist() == [True, False]
    assert batch.is_("attention", "unfused").tolist() == [False, True]
    with pytest.raises(KeyError):
        batch.is_("attention", "flash4")  # a misspelt choice is an error, not a silent False
