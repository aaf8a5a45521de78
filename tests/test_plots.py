"""`--plot FILE` on evaluate, search and validate: the pictures, their text, the schedule behind
the timeline, and the one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from planner.reports.timeline import simulate, stage_order

pytest.importorskip("matplotlib")

PNG = b"\x89PNG\r\n\x1a\n"


def run(*args):
    proc = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def svg_text(path) -> str:
    """All text of an SVG (matplotlib writes it as <text> with svg.fonttype none); parses as XML."""
    root = ET.parse(path).getroot()
    return " ".join(t.strip() for el in root.iter() for t in (el.text or "",) if t.strip())


def tiny_record(pp=2, vpp=1, gbs=4):
    from planner.job import Job, ProblemRequest, price

    priced = price(Job(ProblemRequest("8b", pp, "h100", gbs=gbs)), dict(pp=pp, vpp=vpp))
    return priced.setup, priced.record


EVALUATE = ("evaluate", "--model", "8b", "--gpus", "16", "--gpu", "h100", "--tp", "2", "--pp", "4", "--vpp", "2", "--gbs", "32")


# ------------------------------------------------------------------------------ the schedule itself


@pytest.mark.parametrize("pp,vpp,m", [(1, 1, 3), (2, 1, 4), (4, 1, 8), (3, 1, 2), (2, 2, 4), (4, 2, 8), (4, 4, 16), (8, 2, 8)])
def test_uniform_schedule_ends_where_the_cost_model_says(pp, vpp, m):
    # Equal stages, backward = 2 x forward: m x stage time + (p - 1) / v stage times of bubble
    # (Narayanan et al. 2021, Sec. 2.2), exactly what costmodel.schedule.bubble adds.
    tl = simulate(pp, vpp, m, [1.0] * pp, [2.0] * pp)
    assert len(tl.blocks) == 2 * m * pp * vpp
    assert tl.end == pytest.approx(m * 3.0 + (pp - 1) * 3.0 / vpp)


def test_schedule_respects_dependencies_and_never_overlaps_on_a_stage():
    pp, vpp, m = 4, 2, 8
    tl = simulate(pp, vpp, m, [1.0, 1.2, 1.2, 1.4], [2.0, 2.4, 2.4, 2.9])
    end = {(b.kind, b.stage, b.micro_batch, b.chunk): b.end for b in tl.blocks}
    for b in tl.blocks:
        if b.kind == "F" and b.stage > 0:
            assert b.start >= end[("F", b.stage - 1, b.micro_batch, b.chunk)] - 1e-12
        if b.kind == "B":
            assert b.start >= end[("F", b.stage, b.micro_batch, b.chunk)] - 1e-12
    for s in range(pp):
        mine = sorted((b for b in tl.blocks if b.stage == s), key=lambda b: b.start)
        assert all(a.end <= b.start + 1e-12 for a, b in zip(mine, mine[1:]))


def test_1f1b_order_is_warmup_then_alternating_then_flush():
    # Stage 0 of 4: 3 warm-up forwards, then F/B pairs, then 3 backwards (PipeDream-flush).
    order = [k + str(mb) for k, mb, _ in stage_order(0, 4, 1, 6)]
    assert order == ["F0", "F1", "F2", "F3", "B0", "F4", "B1", "F5", "B2", "B3", "B4", "B5"]
    assert [k for k, _, _ in stage_order(3, 4, 1, 6)][:4] == ["F", "B", "F", "B"]


# ---------------------------------------------------------------------------------------- evaluate


@pytest.mark.parametrize("vpp,expected", [(1, 2 * 4 * 2), (2, 2 * 4 * 2 * 2)])
def test_timeline_draws_the_blocks_1f1b_implies(vpp, expected):
    from planner.reports.plots import evaluation_figure
    from planner.reports.timeline import layout_timeline

    setup, rec = tiny_record(pp=2, vpp=vpp, gbs=4)
    assert rec["layout"]["grad_accum"] == 4
    from costmodel.options import Layout

    tl = layout_timeline(setup.model, setup.cluster, setup.gpu, Layout.from_values(rec["layout"]))
    fig = evaluation_figure(rec, tl)
    ax = fig.axes[0]
    drawn = {c.get_gid(): len(c.get_paths()) for c in ax.collections if c.get_gid() in ("forward", "backward")}
    assert drawn == {"forward": expected // 2, "backward": expected // 2}
    assert fig.timeline_counts["forward"] + fig.timeline_counts["backward"] == expected
    # The simulated pipeline agrees with the cost model's m x slowest stage + bubble.
    model_pipe = sum(rec["breakdown"][k] for k in ("compute", "recompute", "bubble", "tp_comm", "cp_comm", "ep_comm"))
    assert tl.end == pytest.approx(model_pipe, rel=0.03)


def test_long_schedules_are_cut_in_the_steady_state():
    from planner.reports.plots import _window, evaluation_figure

    setup, rec = tiny_record(pp=2, vpp=1, gbs=128)
    from costmodel.options import Layout
    from planner.reports.timeline import layout_timeline

    tl = layout_timeline(setup.model, setup.cluster, setup.gpu, Layout.from_values(rec["layout"]))
    assert tl.micro_batches == 128 and _window(tl) is not None
    fig = evaluation_figure(rec, tl)
    shown = fig.timeline_counts["forward"] + fig.timeline_counts["backward"]
    assert 0 < shown < 2 * 128 * 2
    assert "cut" in fig.axes[0].get_title(loc="left")


@pytest.mark.slow
def test_evaluate_plot_png_and_svg_leave_the_output_unchanged(tmp_path):
    code, plain, _ = run(*EVALUATE)
    assert code == 0
    png = tmp_path / "eval.png"
    code, out, err = run(*EVALUATE, "--plot", str(png))
    assert code == 0, err
    assert out == plain and f"wrote {png}" in err
    assert png.read_bytes().startswith(PNG)
    svg = tmp_path / "eval.svg"
    code, out, err = run(*EVALUATE, "--json", "--plot", str(svg))
    assert code == 0, err
    json.loads(out)  # stdout stays one JSON object
    text = svg_text(svg)
    for label in ("pipeline stage", "forward", "backward", "idle: pipeline bubble", "time per step",
                  "memory per GPU", "GiB per GPU", "interleaved 1F1B"):
        assert label in text, label
    assert sorted(tmp_path.iterdir()) == sorted([png, svg])  # no temporary files left


def test_html_embeds_the_svg(tmp_path):
    from planner.reports.plots import plot_evaluation

    setup, rec = tiny_record()
    path = plot_evaluation(rec, setup, tmp_path / "eval.html")
    html = path.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html and "pipeline stage" in html


# ------------------------------------------------------------------------------------------ search


@pytest.mark.slow
def test_search_plot_scatter_and_scaling(tmp_path):
    svg = tmp_path / "search.svg"
    args = ("search", "--model", "8b", "--gpus", "16..64", "--gpu", "h100", "--top", "3")
    code, plain, _ = run(*args)
    code, out, err = run(*args, "--plot", str(svg))
    assert code == 0, err
    assert out.split("\n")[:5] == plain.split("\n")[:5]  # the table does not change
    text = svg_text(svg)
    for label in ("step time (s)", "peak memory per GPU (GiB)", "Pareto front", "memory limit", "#1 ", "#3 ",
                  "tokens/s per GPU", "GPUs", "16 \u00d7 h100"):
        assert label in text, label


@pytest.mark.slow
def test_search_plot_png_with_price_is_step_time_vs_cost(tmp_path):
    png = tmp_path / "search.png"
    code, _, err = run("search", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--top", "3",
                       "--price-per-gpu-hour", "2", "--plot", str(png))
    assert code == 0, err
    assert png.read_bytes().startswith(PNG)


def test_search_plot_without_asking_again_uses_the_results():
    from planner.reports.plots import search_figure, search_plot_data
    from planner import search

    result = search("8b", 64, "h100", top=4)
    data = search_plot_data(result)  # no recorded call: the points are the results
    assert not data["researched"] and len(data["cloud"]) == 4 and data["front"]
    fig = search_figure(result, data)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any(t.startswith("#1 ") for t in texts)


# ---------------------------------------------------------------------------------------- validate


@pytest.mark.slow
def test_validate_plot(tmp_path):
    from planner.validate import load_runs

    rows = load_runs(None)
    keep = {"megatron2021_t1_1p7b", "megatron2021_t2_zero3_174p6b_1536gpu", "nemo2407_h100_fp8_llama3_8b_8gpu",
            "torchtitan_h100_8b_fsdp_8gpu"}
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps([r for r in rows if r["id"] in keep]))
    svg = tmp_path / "validate.svg"
    code, out, err = run("validate", "--runs", str(runs), "--confidence", "all", "--plot", str(svg))
    assert code == 0, err
    text = svg_text(svg)
    for label in ("measured tokens/s per GPU", "predicted tokens/s per GPU", "predicted = measured", "\u00b110%",
                  "narayanan2021", "torchtitan_bench", "megatron2021_t2_zero3_174p6b_"):
        assert label in text, label
    assert "megatron2021_t1_1p7b" not in text  # inside the band: not labelled
    assert "4 your runs" in text and "published runs" not in text  # a --runs file is the user's, not the reference set
    from planner.reports.plots import plot_validation
    from planner.validate import summarize, validate_rows

    results = validate_rows([r for r in rows if r["id"] in keep])
    png = plot_validation(results, summarize(results, "all"), tmp_path / "validate.png")
    assert png.read_bytes().startswith(PNG)


# ------------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize("command,target,needle", [
    (EVALUATE, "out.pdf", ".png, .svg, .html"),
    (("search", "--model", "8b", "--gpus", "64", "--gpu", "h100"), "out.txt", ".png, .svg, .html"),
    (("validate",), "out", ".png, .svg, .html"),
    (EVALUATE, "no/such/dir/out.png", "does not exist"),
])
def test_bad_plot_path_is_one_line_exit_two(tmp_path, command, target, needle):
    path = tmp_path / target
    code, out, err = run(*command, "--plot", str(path))
    assert code == 2 and out == ""
    assert "Traceback" not in err and err.strip().count("\n") == 0
    assert str(path) in err and needle in err


def test_a_failed_write_leaves_no_file(tmp_path, monkeypatch):
    from hardware_catalog.errors import PlannerInputError
    from planner.reports import plots

    path = tmp_path / "eval.png"
    path.write_bytes(b"old picture")
    fig = plots.pyplot().figure()

    def broken(fh, **kw):
        fh.write(b"half a pic")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fig, "savefig", broken)
    with pytest.raises(PlannerInputError, match="cannot write"):
        plots.save_figure(fig, path)
    assert path.read_bytes() == b"old picture"
    assert [p.name for p in tmp_path.iterdir()] == ["eval.png"]


def test_search_plot_prices_each_gpu_series_at_its_own_price(monkeypatch):
    """`search --gpu h100,b200 --price-per-gpu-hour h100=2.5,b200=4 --plot`: the plot's per-type
    searches each price one GPU type, so each gets that type's price (the whole map made the
    h100 search refuse b200's price as not a GPU type of that search)."""
    from types import SimpleNamespace

    import search.api
    from planner.reports.search import more_points
    from search.request import ProblemRequest, Ranking, SearchRequest

    asked = []

    def fake_search(request):
        asked.append((request.problem.gpu, request.ranking.pareto, request.ranking.price_per_gpu_hour))
        return SimpleNamespace(results=[])

    monkeypatch.setattr(search.api, "search", fake_search)
    request = SearchRequest(ProblemRequest("llama3-8b", 64, "h100,b200"),
                            ranking=Ranking(top=3, price_per_gpu_hour="h100=2.5,b200=4"))
    result = SimpleNamespace(results=[object()], stats={"method": "exhaustive", "gpu_types": ["h100-sxm", "b200"],
                                                        "gpu_counts": [64]})
    more_points(request, result)
    per_type = {gpu: price for gpu, pareto, price in asked if not pareto}
    assert per_type == {"h100-sxm": 2.5, "b200": 4.0}
    # The front spans both types: it keeps the whole map.
    assert [price for _, pareto, price in asked if pareto] == ["h100=2.5,b200=4"]
