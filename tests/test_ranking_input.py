"""``planner validate --ranking FILE`` on bad input: one error line naming the value and what is
allowed, exit 2, no traceback (as ``planner validate --runs`` answers the same values), checked
before anything is predicted. Each file is the first group of the shipped
planner/data/ablations.json (Narayanan et al. 2021 Table 2, two layouts), edited."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli.main import app
from planner.validate.ranking import group_rows, job_key, load_groups
from planner.validate.runs import map_run

SHIPPED = Path(__file__).parents[1] / "planner" / "data" / "ablations.json"
runner = CliRunner()


@pytest.fixture(scope="module")
def group() -> dict:
    return json.loads(SHIPPED.read_text())[0]


GID = "narayanan2021_t2_174p6b_384gpu"


def _file(tmp_path: Path, groups) -> Path:
    path = tmp_path / "groups.json"
    path.write_text(json.dumps(groups))
    return path


def _edited(group: dict, edit) -> list:
    g = copy.deepcopy(group)
    edit(g)
    return [g]


def one_error_line(tmp_path: Path, groups, *needles) -> str:
    """The CLI's answer to ``groups``: exit 2, one line on stderr holding every needle, no traceback."""
    res = runner.invoke(app, ["validate", "--ranking", str(_file(tmp_path, groups))])
    assert res.exit_code == 2, (res.exit_code, res.output)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --ranking"), res.stderr
    assert "Traceback" not in res.output and "internal error" not in res.output, res.output
    assert not res.stdout.strip(), res.stdout  # nothing predicted, nothing printed
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _set(path: str, value):
    """An edit setting ``path`` ('hardware.num_gpus', 'layouts.1.layout.tp') to ``value``."""
    def edit(g):
        *parents, last = path.split(".")
        node = g
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value
    return edit


def _drop(key: str):
    return lambda g: g.pop(key)


# ------------------------------------------------------------------- the shape of a group


def test_hardware_as_text_names_the_group_the_field_and_what_is_expected(tmp_path, group):
    line = one_error_line(tmp_path, _edited(group, _set("hardware", "A100")), GID, "field hardware", '"A100"')
    assert "expected an object {gpu, num_gpus, gpus_per_node}" in line


def test_a_layout_that_is_a_number_names_the_group_and_the_layout(tmp_path, group):
    line = one_error_line(tmp_path, _edited(group, _set("layouts.1", 5)), GID, "layout 2", "got 5")
    assert "expected an object {layout, measured}" in line


@pytest.mark.parametrize("path, value, needles", [
    ("model", 175, ("field model", "expected a preset name or an object", "got 175")),
    ("layouts.0.layout", "tp8", ("layout 1", "field layout", '"tp8"')),
    ("layouts.0.measured", 1500, ("layout 1", "field measured", "expected an object {tokens_per_s_per_gpu}", "1500")),
    ("id", 7, ("group 1", "field id", "expected text, got 7")),
])
def test_other_shapes_are_refused(tmp_path, group, path, value, needles):
    one_error_line(tmp_path, _edited(group, _set(path, value)), *needles)


def test_an_empty_file_has_no_groups(tmp_path):
    one_error_line(tmp_path, [], "no groups")


def test_a_group_with_no_layouts(tmp_path, group):
    one_error_line(tmp_path, _edited(group, _set("layouts", [])), GID, "field layouts", "no layouts (an empty list)")
    one_error_line(tmp_path, _edited(group, _drop("layouts")), GID, "field layouts", "missing")


def test_duplicate_group_ids_are_refused_as_duplicate_runs_rows_are(tmp_path, group):
    one_error_line(tmp_path, [group, group], "group 2", f"duplicate id {GID!r} (group 1 has it)")


def test_an_element_that_is_no_group(tmp_path, group):
    one_error_line(tmp_path, [group, 5], "group 2", "expected an object", "got 5")


# --------------------------------------------- values: refused as planner validate --runs refuses them


@pytest.mark.parametrize("path, value, needles", [
    ("hardware.num_gpus", -8, ("field hardware.num_gpus", "expected an integer >= 1, got -8")),
    ("layouts.1.layout.tp", "x", ("layout 2", "field layout.tp", "expected an integer", "got 'x'")),
    ("layouts.1.measured.tokens_per_s_per_gpu", "fast",
     ("layout 2", "field measured.tokens_per_s_per_gpu", "expected a number > 0, got 'fast'")),
    ("layouts.1.measured.tokens_per_s_per_gpu", 0, ("layout 2", "field measured.tokens_per_s_per_gpu", "got 0")),
    ("layouts.0.measured.tokens_per_s_per_gpu", -3, ("layout 1", "field measured.tokens_per_s_per_gpu", "got -3")),
    ("global_batch_size", "lots", ("field global_batch_size", "got 'lots'")),
    ("seq_length", 0, ("field seq_length", "expected an integer >= 1, got 0")),
    ("confidence", "sure", ("field confidence", "expected one of high, medium, low, got 'sure'")),
])
def test_bad_values_are_refused_as_runs_rows_refuse_them(tmp_path, group, path, value, needles):
    one_error_line(tmp_path, _edited(group, _set(path, value)), GID, *needles)


def test_the_same_bad_value_in_a_runs_file_gets_the_same_reason(tmp_path, group):
    rows = [{"id": "r", "model": "gpt3-175b", "hardware": {"gpu": "A100", "num_gpus": -8},
             "measured": {"tokens_per_s_per_gpu": 100}}]
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps(rows))
    res = runner.invoke(app, ["validate", "--runs", str(runs)])
    assert res.exit_code == 2 and "field hardware.num_gpus (row 1 (id 'r')): expected an integer >= 1, got -8 (int)" in res.stderr
    one_error_line(tmp_path, _edited(group, _set("hardware.num_gpus", -8)),
                   f"group 1 (id {GID!r}): field hardware.num_gpus: expected an integer >= 1, got -8 (int)")


def test_a_group_without_a_model_is_refused_as_a_runs_row_without_one(tmp_path, group):
    one_error_line(tmp_path, _edited(group, _drop("model")), GID, "missing model")


def test_every_problem_is_named_on_the_one_line(tmp_path, group):
    a = _edited(group, _set("layouts.0.measured.tokens_per_s_per_gpu", "x"))[0]
    b = _edited(group, _set("hardware.num_gpus", 0))[0]
    b["id"] = "second"
    line = one_error_line(tmp_path, [a, b], "2 problems", f"group 1 (id {GID!r}) layout 1", "group 2 (id 'second')")
    assert "got 'x'" in line and "got 0" in line


# ----------------------------------------------------------------------------- accepted


def test_model_as_a_preset_name_is_read_as_a_runs_row_reads_it(tmp_path, group):
    groups = _edited(group, _set("model", "gpt3-175b"))
    path = _file(tmp_path, groups)
    loaded = load_groups(path)
    rows = group_rows(loaded[0])
    assert rows[0]["model"] == "gpt3-175b" and rows[0]["layout"]["seq_len"] == 2048  # as a flat runs row states it
    run = map_run(rows[0])
    assert run.model.name == "gpt3-175b" and run.model.num_layers == 96
    assert json.loads(job_key(loaded[0]))[0] == "gpt3-175b"
    res = runner.invoke(app, ["validate", "--ranking", str(path)])
    assert res.exit_code == 0, res.output
    assert "not predicted" not in res.output and f"{GID}#2" not in res.output


def test_a_group_without_id_or_confidence_is_named_by_its_place_and_is_high(tmp_path, group):
    g = copy.deepcopy(group)
    del g["id"], g["confidence"]
    loaded = load_groups(_file(tmp_path, [g]))
    assert loaded[0]["id"] == "group 1" and loaded[0]["confidence"] == "high"  # a runs row's default
    assert [r["id"] for r in group_rows(loaded[0])] == ["group 1#1", "group 1#2"]
    assert all(map_run(r).confidence == "high" for r in group_rows(loaded[0]))  # was '?': refused, not predicted


def test_a_layout_without_a_measurement_is_no_error(tmp_path, group):
    g = copy.deepcopy(group)
    del g["layouts"][1]["measured"]
    loaded = load_groups(_file(tmp_path, [g]))
    assert group_rows(loaded[0])[1]["reference"]["tokens_per_s_per_gpu"] is None


def test_shipped_ablations_load_and_every_layout_maps_to_a_runs_row():
    groups = load_groups(SHIPPED)
    raw = json.loads(SHIPPED.read_text())
    assert groups == raw  # every shipped group has an id and a lower-case confidence: nothing filled in
    rows = [row for g in groups for row in group_rows(g)]
    assert len(rows) == sum(len(g["layouts"]) for g in raw)
    assert all(row["reference"]["tokens_per_s_per_gpu"] > 0 for row in rows)


def test_a_layouts_own_framework_beside_its_layout_is_the_one_priced():
    # The shipped Narayanan 2021 groups measure DeepSpeed ZeRO-3 (the group's framework) against
    # Megatron PTD-P, stated on the layout entry beside "layout"; it used to be priced as the group's.
    group = {"id": "g", "model": "gpt3-175b", "hardware": {"gpu": "a100", "num_gpus": 64},
             "framework": "DeepSpeed ZeRO-3", "precision": "bf16",
             "layouts": [{"layout": {"tp": 1}, "measured": {"tokens_per_s_per_gpu": 1.0}},
                         {"framework": "Megatron-LM (PTD-P)", "layout": {"tp": 8},
                          "measured": {"tokens_per_s_per_gpu": 1.0}},
                         {"framework": "Megatron-LM (PTD-P)", "layout": {"tp": 8, "framework": "NeMo"},
                          "measured": {"tokens_per_s_per_gpu": 1.0}}]}
    first, second, third = group_rows(group)
    assert first["layout"]["framework"] == "DeepSpeed ZeRO-3"
    assert second["layout"]["framework"] == "Megatron-LM (PTD-P)"
    assert third["layout"]["framework"] == "NeMo"  # inside "layout" wins, as before


def test_a_file_where_no_layout_can_be_predicted_exits_3_as_runs_does(tmp_path, group):
    # Well formed, but the GPU is unknown: every layout is listed as not predicted, and the
    # command ends as planner validate --runs does when no row maps (exit 3).
    res = runner.invoke(app, ["validate", "--ranking", str(_file(tmp_path, _edited(group, _set("hardware.gpu", "x9"))))])
    assert res.exit_code == 3, res.output
    assert "not predicted" in res.stdout and "no layout of" in res.stderr and "could be predicted" in res.stderr


def test_a_cluster_file_a_group_names_is_read_beside_the_ranking_file(tmp_path, group):
    # It was looked up in the working directory: every layout 'not predicted: file not found'.
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "thin.toml").write_text(
        'gpu = "a100-80gb"\ngpus_per_node = 8\nscaleup_domain_size = 8\nscaleup_latency_us = 2.0\n'
        'scaleup_efficiency = 0.8\nnic = "ib-hdr"\nnics_per_node = 1\nnetwork_efficiency = 0.9\n')

    def thin(g):
        g["hardware"]["cluster"] = "thin.toml"

    path = folder / "groups.json"
    path.write_text(json.dumps(_edited(group, thin)))
    res = runner.invoke(app, ["validate", "--ranking", str(path), "--json"])
    assert res.exit_code == 0, res.output
    thin_layouts = json.loads(res.stdout)["groups"][0]["layouts"]
    assert len(thin_layouts) == len(group["layouts"])
    # One HDR NIC per node instead of the preset's eight: no layout is predicted faster.
    shipped = _file(tmp_path, [group])
    base = json.loads(runner.invoke(app, ["validate", "--ranking", str(shipped), "--json"]).stdout)["groups"][0]
    by_id = {lay["id"]: lay["predicted"] for lay in base["layouts"]}
    assert all(lay["predicted"] <= by_id[lay["id"]] * (1 + 1e-9) for lay in thin_layouts)
    assert any(lay["predicted"] < by_id[lay["id"]] * 0.99 for lay in thin_layouts)


def test_two_wrong_fields_of_one_row_are_not_called_a_union_refusal():
    # layout.tp "x" and layout.pp -3 at once: the row check said 'layout.tp: expected text or an
    # object', the words for a field whose every union branch refused it; tp alone said what tp takes.
    from planner.validate.schema import RowError, parse_row

    row = json.loads((SHIPPED.parent / "published_runs.json").read_text())[0]
    both = copy.deepcopy(row)
    both["layout"].update(tp="x", pp=-3)
    alone = copy.deepcopy(row)
    alone["layout"]["tp"] = "x"
    said = []
    for bad in (both, alone):
        with pytest.raises(RowError) as err:
            parse_row(bad, 1)
        said.append(str(err.value))
    assert said[0] == said[1] and "field layout.tp: expected an integer" in said[0]
    model = copy.deepcopy(row)
    model["model"] = 5  # a real union refusal (a preset name or a model object) keeps its words
    with pytest.raises(RowError, match="field model: expected text or an object, got 5"):
        parse_row(model, 1)
