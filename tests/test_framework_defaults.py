"""--framework releases priced with their own defaults: what a release pins for ZeRO-3 is not
forced onto a layout that does not shard with ZeRO-3, and torchtitan's default sharding is FSDP2
(ZeRO-3), so its plans export without extra flags."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from planner.cli.main import app

runner = CliRunner()


def _evaluate(*args):
    res = runner.invoke(app, ["evaluate", "--model", "8b", "--gpus", "8", *args, "--json"])
    return res.exit_code, res


def test_deepspeed_zero3_gather_mode_is_not_forced_onto_zero1():
    """deepspeed-0.5 pins the blocking ZeRO-3 gathers (DeepSpeed 2021); a ZeRO-1 job used to break
    rule zero3_gather_needs_zero3 on that pin, a setting the user never typed."""
    for extra in ((), ("--zero", "1")):
        code, res = _evaluate("--gpu", "a100", "--framework", "deepspeed-0.5", *extra)
        assert code in (0, 3), res.output  # priced (3: it does not fit 80 GB with unfused attention), no rule broken
        lay = json.loads(res.stdout)["layout"]
        assert lay["zero"] == 1 and lay.get("zero3_gather", "prefetch") == "prefetch"
    code, res = _evaluate("--gpu", "a100", "--framework", "deepspeed-0.5", "--zero", "3")
    assert code in (0, 3), res.output
    assert json.loads(res.stdout)["layout"]["zero3_gather"] == "blocking"


def test_torchtitan_plans_shard_with_fsdp2_by_default(tmp_path):
    """torchtitan has no ZeRO-1 (its table refuses it); its default is FSDP2 over every data-parallel
    rank. A typed --zero still wins."""
    code, res = _evaluate("--gpu", "h100", "--framework", "torchtitan-0.2")
    assert code == 0, res.output
    assert json.loads(res.stdout)["layout"]["zero"] == 3
    code, res = _evaluate("--gpu", "h100", "--framework", "torchtitan-0.2", "--zero", "0")
    assert json.loads(res.stdout)["layout"]["zero"] == 0
    res = runner.invoke(app, ["export", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--framework", "torchtitan-0.2",
                              "--format", "torchtitan", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "torchtitan.toml").exists()
