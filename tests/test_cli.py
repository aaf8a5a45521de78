"""The `planner` command as a user runs it: output shape, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def run(*args):
    proc = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def test_evaluate_json_has_the_documented_fields():
    code, out, err = run("evaluate", "--model", "405b", "--gpus", "16384", "--gpu", "h100", "--tp", "8", "--pp", "16",
                         "--gbs", "2048", "--seq-len", "8192", "--json")
    assert code == 3, err  # selective recompute does not fit 405B here: the record is printed, exit 3
    rec = json.loads(out)
    assert rec["fits"] is False
    for key in ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "memory_gib", "fits", "layout", "breakdown"):
        assert key in rec
    assert rec["layout"]["dp"] == 128 and rec["layout"]["stage_layers"][:2] == [7, 8]
    assert rec["memory_gib"]["peak"] == pytest.approx(sum(
        rec["memory_gib"][k] for k in ("weights", "gradients", "optimizer", "activations", "logits", "workspace")))
    assert rec["step_time_s"] == pytest.approx(sum(rec["breakdown"].values()))


def test_evaluate_reports_by_how_much_a_layout_does_not_fit():
    code, out, _ = run("evaluate", "--model", "405b", "--gpus", "16384", "--gpu", "h100", "--tp", "8", "--pp", "16",
                       "--recompute", "selective")
    assert code == 3  # nothing fits: the same status as a search that finds nothing
    assert "DOES NOT FIT" in out and "GiB over" in out
    # ZeRO-3 under a pipeline says why its memory is ZeRO-1's.
    code, out, _ = run("evaluate", "--model", "8b", "--gpus", "16", "--gpu", "h100", "--pp", "2", "--zero", "3")
    assert code == 0 and "ZeRO-3 under PP" in out


@pytest.mark.parametrize("args,needle", [
    (("--model", "nosuch", "--gpus", "8", "--gpu", "h100"), "nosuch"),
    (("--model", "8b", "--gpus", "8", "--gpu", "h1000"), "h1000"),
    (("--model", "8b", "--gpus", "12", "--gpu", "h100", "--tp", "8"), "--gpus=12"),
    (("--model", "8b", "--gpus", "8", "--gpu", "h100", "--tp", "3"), "tp"),
    (("--model", "8b", "--gpus", "8", "--gpu", "h100", "--mbs", "0"), "--mbs=0"),
    (("--model", "8b", "--gpus", "8", "--gpu", "h100", "--recompute", "some"), "--recompute=some"),
    (("--model", "8b", "--gpus", "8", "--gpu", "h100", "--recompute-layers", "2"), "--recompute full"),
])
def test_bad_input_is_one_line_exit_two(args, needle):
    code, out, err = run("evaluate", *args)
    assert code == 2
    assert "Traceback" not in err and err.strip().count("\n") == 0
    assert needle in err


def test_catalog_models_json_lists_params():
    code, out, _ = run("catalog", "models", "--json")
    assert code == 0
    models = {m["name"]: m for m in json.loads(out)}
    assert models["llama3-405b"]["params"] == pytest.approx(405.85e9, rel=1e-3)
    assert models["mixtral-8x7b"]["active_params"] < models["mixtral-8x7b"]["params"]


def test_export_from_evaluate_json_and_no_overwrite(tmp_path):
    code, out, err = run("evaluate", "--model", "8b", "--gpus", "16", "--gpu", "h100", "--tp", "2", "--json")
    assert code == 0, err
    rec = tmp_path / "rec.json"
    rec.write_text(out)
    dest = tmp_path / "launch"
    code, out, err = run("export", "--from", str(rec), "--format", "megatron", "--out", str(dest))
    assert code == 0, err
    assert (dest / "megatron_args.sh").exists()
    code, out, err = run("export", "--from", str(rec), "--format", "megatron", "--out", str(dest))
    assert code == 2 and "force" in err


def test_evaluate_says_when_a_fitting_layout_is_inside_search_headroom():
    """evaluate judges a layout against the whole HBM, search keeps DEFAULT_MEMORY_HEADROOM (5%)
    free: a layout between the two is said to fit, and why search would not offer it."""
    from planner.reports.evaluate import format_evaluation

    code, out, err = run("evaluate", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--zero", "3", "--json")
    assert code in (0, 3), err
    rec = json.loads(out)
    rec["fits"] = True
    cap = rec["memory_gib"]["capacity"]
    for peak, said in ((0.97 * cap, True), (0.90 * cap, False)):  # 3% and 10% free
        rec["memory_gib"]["peak"] = peak
        text = format_evaluation(rec)
        assert ("search would not offer it" in text) is said
        assert "fits," in text


def test_evaluate_states_the_parameters_it_counted():
    """The header and --json give the model's size as planner counts it, so a model given as a file
    or config.json is checked at a glance: Mixtral 8x7B is published as 46.7B parameters, 12.9B
    active per token (Mistral AI, 'Mixtral of experts', 2024); Llama 3 8B as 8.03B."""
    code, out, err = run("evaluate", "--model", "mixtral-8x7b", "--gpus", "64", "--gpu", "h100", "--ep", "8", "--json")
    assert code in (0, 3), err
    params = json.loads(out)["model_params"]
    assert params["total"] == pytest.approx(46.7e9, rel=0.01) and params["active"] == pytest.approx(12.9e9, rel=0.01)
    code, out, _ = run("evaluate", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--zero", "3")
    assert out.splitlines()[0].startswith("llama3-8b (8.03B params) on 8 x h100-sxm")
