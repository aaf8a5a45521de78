"""One job pipeline (planner.job) and one request per search (search.request)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import planner
from planner.job import Job, Outputs, Pricing, ProblemRequest, price
from search.request import Ranking, SearchOptions, SearchRequest

ROOT = Path(__file__).absolute().parents[1]


def test_price_states_a_profiles_share_of_layers_in_layers_per_stage():
    # torchtitan's per-op SAC is priced as full recompute of half of each stage (recompute_share
    # 2 quarters). llama3-70b has 80 layers; pp 1 -> one 80-layer stage; half = 40 layers.
    job = Job(ProblemRequest("70b", 64, "h100", gbs=64, seq_len=8192),
              Pricing(framework="torchtitan-0.2", typed=frozenset({"tp", "zero", "mbs", "recompute"})))
    rec = price(job, dict(tp=8, zero=3, mbs=8, recompute="selective")).record
    assert rec["layout"]["recompute"] == "full" and rec["layout"]["recompute_layers"] == 40
    assert rec["framework"]["settings"]["recompute_layers"] == 40
    assert "recompute_share" not in rec["layout"] and "recompute_share" not in rec["framework"]["settings"]
    # The same layout stated in layers per stage prices the same.
    again = price(Job(job.problem), dict(tp=8, zero=3, mbs=8, recompute="full", recompute_layers=40, loss="eager",
                                         fsdp="fsdp2"))
    assert again.record["step_time_s"] == rec["step_time_s"]


def test_the_python_api_and_a_command_stamp_differently_and_price_the_same():
    layout = dict(tp=2, pp=2)
    api = planner.evaluate("8b", 16, "h100", gbs=32, **layout)
    cli = price(Job(ProblemRequest("8b", 16, "h100", gbs=32), outputs=Outputs(command="planner evaluate ...")), layout)
    assert "command" not in api and cli.record["command"] == "planner evaluate ..."
    assert {k: v for k, v in cli.record.items() if k not in ("command", "planner_version")} == api


def test_a_search_request_takes_each_keyword_in_its_concern():
    req = SearchRequest.of("8b", 64, "h100", gbs=128, pins={"tp": 2}, top=3, rank_by="p10")
    assert req.problem.gbs == 128 and req.options.pins == {"tp": 2} and req.ranking == Ranking(top=3, rank_by="p10")
    assert req.options == SearchOptions(pins={"tp": 2})
    with pytest.raises(TypeError, match="tops"):
        SearchRequest.of("8b", 64, "h100", tops=3)


def test_planner_launch_holds_readers_only():
    # The command flows (typer, pricing, searching) live in planner/cli/from_launch.
    for path in (ROOT / "planner" / "launch").glob("*.py"):
        tree = ast.parse(path.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
        modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert "typer" not in names and not modules & {"planner.job", "search.api", "costmodel", "planner.cli.main"}, path.name


def test_evaluate_without_layout_flags_takes_the_search_best_when_the_default_breaks_a_rule():
    # 2048 sequences cannot be split over 16,384 data-parallel replicas (gbs_divisible_by_dp_mbs):
    # with no layout flag typed, evaluate explains the layout the search ranks first and says so;
    # a typed flag is the user's choice, and a broken one stays an error.
    import json

    from typer.testing import CliRunner

    from planner.cli.main import app

    runner = CliRunner()
    res = runner.invoke(app, ["evaluate", "--model", "405b", "--gpus", "16384", "--gpu", "h100", "--json"])
    assert res.exit_code == 0, res.output
    record = json.loads(res.stdout)
    best = planner.search("405b", 16384, "h100", top=1).best
    assert {k: record["layout"][k] for k in ("tp", "pp", "cp", "vpp", "dp", "mbs")} == \
        {k: best["layout"][k] for k in ("tp", "pp", "cp", "vpp", "dp", "mbs")}
    assert "no layout flags given" in res.stderr
    typed = runner.invoke(app, ["evaluate", "--model", "405b", "--gpus", "16384", "--gpu", "h100", "--tp", "1"])
    assert typed.exit_code == 2 and "gbs" in typed.output


def test_the_root_holds_what_the_readme_names_and_planner_groups_its_files_by_concern():
    # Issue 23: no committed command output at the root; planner/'s top level keeps only the
    # package's own entry points and the modules every command shares.
    import subprocess

    root = Path(__file__).resolve().parents[1]
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    top = {p.split("/")[0] for p in tracked.stdout.split()}
    assert top <= {".ci", ".gitignore", "ARCHITECTURE.md", "README.md", "pyproject.toml", "benchmarks", "costmodel",
                   "docs", "hardware_catalog", "planner", "search", "tests"}, top
    modules = {p.name for p in (root / "planner").glob("*.py")}
    assert not {m for m in modules if m.startswith(("cli", "report", "search_", "sweep_", "plots", "timeline"))}
    for package in ("cli", "reports", "frameworks", "launch", "export", "validate"):
        assert (root / "planner" / package / "__init__.py").exists(), package
