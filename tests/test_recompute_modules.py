"""Megatron-Core fine-grained selective recompute (--recompute-modules): memory by hand, time
and memory properties, the CLI, export and validate."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from costmodel import Layout, evaluate
from costmodel.layout import RECOMPUTE_MODULES, recompute_modules_mask, recompute_modules_names
from costmodel.memory import recompute_module_savings_per_token
from hardware_catalog import get_cluster, get_model
from hardware_catalog.errors import PlannerInputError
from planner.cli.main import app

H100 = get_cluster("dgx-h100")
LLAMA_8B = get_model("llama3-8b")
DSV3 = get_model("deepseek-v3")
MIXTRAL = get_model("mixtral-8x7b")


def _mask(*names):
    return recompute_modules_mask(names)


def test_mask_round_trip_and_unknown_module():
    assert recompute_modules_mask(None) == 1  # Megatron's default: core_attn
    assert recompute_modules_names(_mask("mlp", "layernorm")) == ("layernorm", "mlp")  # RECOMPUTE_MODULES order
    assert recompute_modules_names((1 << len(RECOMPUTE_MODULES)) - 1) == RECOMPUTE_MODULES
    with pytest.raises(PlannerInputError, match="unknown module 'attn'"):
        recompute_modules_mask(["attn"])


def test_savings_by_hand_dense():
    h, F = 4096.0, 14336.0  # Llama 3 8B, gated MLP
    # tp 1: the two norm outputs (2h each) and the MLP intermediates (two 2F inputs of SwiGLU + 2F output).
    assert recompute_module_savings_per_token(LLAMA_8B, 1, False, False, False, _mask("layernorm")) == pytest.approx(4 * h)
    assert recompute_module_savings_per_token(LLAMA_8B, 1, False, False, False, _mask("mlp")) == pytest.approx(6 * F)
    # tp 4 with SP: both split by 4; FP8 keeps 1-byte copies of the GEMM inputs (norm outputs
    # 2h, MLP down input F), so recompute saves only the rest.
    both = _mask("layernorm", "mlp")
    assert recompute_module_savings_per_token(LLAMA_8B, 4, True, False, True, both) == pytest.approx((2 * h + 5 * F) / 4)
    # MoE-only modules save nothing in a dense layer; core_attn saves nothing under FlashAttention.
    assert recompute_module_savings_per_token(LLAMA_8B, 1, False, False, False, _mask("moe_act", "core_attn")) == 0.0


def test_savings_by_hand_mla_and_moe():
    # DeepSeek-V3 MLA: 128 heads, Q and K of 128 + 64 dims, V of 128: 2 B x 128 x (2 x 192 + 128).
    mla = 2.0 * 128 * (2 * 192 + 128)
    assert recompute_module_savings_per_token(DSV3, 2, True, True, False, _mask("mla_up_proj")) == pytest.approx(mla / 2)
    # MoE activation output: top-8 copies of the 2048-wide expert activation, 2 B (1 B kept under FP8).
    act = 8 * 2048.0
    assert recompute_module_savings_per_token(DSV3, 1, False, True, False, _mask("moe_act")) == pytest.approx(2 * act)
    assert recompute_module_savings_per_token(DSV3, 1, False, True, True, _mask("moe_act")) == pytest.approx(act)
    # The whole MoE layer covers its activation and the shared expert: no double count.
    whole = recompute_module_savings_per_token(DSV3, 1, False, True, False, _mask("moe"))
    assert whole == recompute_module_savings_per_token(DSV3, 1, False, True, False, _mask("moe", "moe_act", "shared_experts"))
    assert whole > recompute_module_savings_per_token(DSV3, 1, False, True, False, _mask("moe_act", "shared_experts"))


def _eval(model, modules, **kw):
    base = dict(tp=2, pp=1, dp=4, ep=8 if model.moe else 1, mbs=1, gbs=32, seq_len=4096, recompute="selective",
                recompute_modules=modules)
    base.update(kw)
    return evaluate(model, H100, Layout(**base))


@pytest.mark.parametrize("model", [LLAMA_8B, MIXTRAL, DSV3], ids=lambda m: m.name)
def test_more_modules_never_more_memory_nor_less_time(model):
    # Every module recomputed trades memory for time: adding one never raises the activation
    # memory and never shortens the step.
    kw = dict(pp=4, dp=2, vpp=1, ep=2) if model is DSV3 else {}
    chain = [("core_attn",), ("core_attn", "layernorm"), ("core_attn", "layernorm", "mla_up_proj", "mlp"),
             ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe_act", "shared_experts"),
             RECOMPUTE_MODULES]
    results = [_eval(model, mods, **kw) for mods in chain]
    acts = [r.memory_gib["activations"][0] for r in results]
    steps = [r.step_time_s[0] for r in results]
    assert all(b <= a + 1e-9 for a, b in zip(acts, acts[1:]))
    assert all(b >= a - 1e-12 for a, b in zip(steps, steps[1:]))
    assert acts[-1] < acts[0]
    # HFU counts the recomputed FLOPs, MFU does not.
    assert results[-1].hfu[0] / results[-1].mfu[0] >= results[0].hfu[0] / results[0].mfu[0]


def test_default_modules_are_the_old_selective_recompute():
    plain = evaluate(LLAMA_8B, H100, Layout(tp=2, dp=4, gbs=32, recompute="selective"))
    named = evaluate(LLAMA_8B, H100, Layout(tp=2, dp=4, gbs=32, recompute="selective", recompute_modules=("core_attn",)))
    assert named.step_time_s[0] == plain.step_time_s[0]
    assert named.memory_gib["peak"][0] == plain.memory_gib["peak"][0]
    # Modules only matter with selective recompute.
    full = evaluate(LLAMA_8B, H100, Layout(tp=2, dp=4, gbs=32, recompute="full", recompute_modules=("mlp",)))
    assert full.step_time_s[0] == evaluate(LLAMA_8B, H100, Layout(tp=2, dp=4, gbs=32, recompute="full")).step_time_s[0]


def test_recomputing_the_moe_layer_repeats_its_all_to_alls():
    kw = dict(pp=1, dp=8, ep=8)
    act = _eval(MIXTRAL, ("moe_act",), **kw)
    moe = _eval(MIXTRAL, ("moe",), **kw)
    a2a = _eval(MIXTRAL, ("core_attn",), **kw).time_terms["ep_comm"][0]
    assert act.time_terms["ep_comm"][0] == pytest.approx(a2a)
    assert moe.time_terms["ep_comm"][0] == pytest.approx(a2a * 3.0 / 2.0)  # forward, backward + recompute


runner = CliRunner()


def test_cli_recompute_modules(tmp_path):
    args = ["evaluate", "--model", "mixtral-8x7b", "--gpus", "64", "--gpu", "h100", "--tp", "2", "--pp", "4",
            "--vpp", "2", "--ep", "8"]
    res = runner.invoke(app, args + ["--recompute-modules", "moe_act,layernorm", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["layout"]["recompute_modules"] == ["layernorm", "moe_act"]
    res = runner.invoke(app, args + ["--recompute-modules", "moe_act,layernorm"])
    assert "selective(layernorm+moe_act)" in res.output
    # As a user runs it: one line, non-zero exit, no traceback.
    proc = subprocess.run([sys.executable, "-m", "planner", *args, "--recompute-modules", "attention"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "unknown module 'attention'" in proc.stderr and "Traceback" not in proc.stderr
    res = runner.invoke(app, args + ["--recompute", "full", "--recompute-modules", "mlp"])
    assert res.exit_code == 2 and "applies only with --recompute selective" in res.stderr
    out = tmp_path / "launch"
    res = runner.invoke(app, ["export"] + args[1:] + ["--recompute-modules", "moe_act,layernorm", "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = (out / "megatron_args.sh").read_text()
    assert "--recompute-granularity selective" in text and "--recompute-modules layernorm moe_act" in text
    assert "skipped deepspeed: recomputing the submodules" in res.output
    assert "skipped torchtitan: recomputing the submodules" in res.output


def test_validate_pins_stated_recompute_modules():
    from planner.validate import load_runs, map_run, predict_run

    row = next(r for r in load_runs(None) if r["id"] == "mbridge2509_h100_deepseekv3_1024gpu")
    row = json.loads(json.dumps(row))
    row["layout"]["recompute_modules"] = ["mla_up_proj", "mlp"]
    run = map_run(row)
    assert run.pins["recompute"] == "selective" and "recompute" not in run.searched
    assert run.pins["recompute_modules"] == ("mla_up_proj", "mlp")
    stated = predict_run(run)
    assert stated.chosen.get("recompute", "selective") == "selective"
    assert stated.fits


def test_search_prices_selective_candidates_with_the_stated_modules():
    from planner import search

    kw = dict(gbs=64, seq_len=4096, pins={"tp": 2, "pp": 1, "ep": 8, "recompute": "selective"}, top=1)
    plain = search("mixtral-8x7b", 32, "h100", **kw)
    lighter = search("mixtral-8x7b", 32, "h100", recompute_modules="moe_act,layernorm", **kw)
    assert list(lighter.results[0]["layout"]["recompute_modules"]) == ["layernorm", "moe_act"]
    assert lighter.stats["recompute_modules"] == ["moe_act", "layernorm"]
    assert plain.results[0]["layout"]["recompute_modules"] is None
    with pytest.raises(PlannerInputError, match="applies only to selective recompute"):
        search("mixtral-8x7b", 32, "h100", gbs=64, pins={"recompute": "full"}, recompute_modules=["mlp"])
