"""torchtitan exports that named torchtitan releases accept.

Two layers of checks:

* Always (CI, no torch): the field lists ``planner/export/torchtitan_fields_<family>.txt`` and every
  exported ``torchtitan.toml`` / ``torchtitan_overrides.sh`` are checked against the releases' own
  config dataclasses, read with ``ast`` from the copies in ``tests/data/torchtitan/<release>/``. A
  TOML is walked as ConfigManager._dict_to_dataclass walks it (an unknown key fails, as 0.2.x raises
  "Invalid field names" and 0.1.0 silently drops it), with each value checked against the field's
  annotation (Literal values included).
* With the releases installed (skipped otherwise, see ``RELEASE_DIRS``): each export is loaded by the
  release's real ConfigManager in a subprocess (``tests/torchtitan_release_check.py``), every written
  key must come back with its value, and the release's own pipeline split code must put the plan's
  layers on each rank. Install e.g. ``pip install --no-deps --target /tmp/tt/0.2.2 torchtitan==0.2.2``
  beside ``torch`` (CPU) and ``tyro``, and set ``TORCHTITAN_RELEASE_DIRS=/tmp/tt/0.1.0:/tmp/tt/0.2.2:...``.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from hardware_catalog.errors import PlannerInputError
from planner.export import torchtitan
from planner.export.common import build_plan
from planner.export.torchtitan import RELEASES
from test_export import DGX_H100, LLAMA3_405B, LLAMA3_8B, dense_405b, export, make_shims, needs_bash, record, run_bash

HERE = Path(__file__).parent
DATA = HERE / "data" / "torchtitan"
FIELD_FILES = HERE.parent / "planner" / "frameworks"
CONFIG_FILES = {"0.1": ["config_manager.py"], "0.2": ["job_config.py"], "0.3": ["configs.py", "trainer.py"]}
ROOT_CLASS = {"0.1": "JobConfig", "0.2": "JobConfig", "0.3": "Trainer.Config"}
TOML_RELEASES = [v for v, r in RELEASES.items() if r.reads_toml]

# The exports of issue 18 (8B TP2 with compile, 405B FP8, uneven pipelines) and the other layouts.
def titan(model, **layout) -> dict:
    """A record torchtitan runs as priced (what it fixes, planner.frameworks.torchtitan.TABLE: eager loss,
    FSDP2 rather than ZeRO-1, full or no recompute, tensorwise FP8 scaling, autograd's gradient accumulation)."""
    return record(model, **{"zero": 3, "recompute": "full", "loss": "eager", "fsdp": "fsdp2", "fp8_recipe": "current",
                            "grad_accum_pass": "autograd", **layout})


CASES = {
    "8b_tp2_compile": (titan(LLAMA3_8B, tp=2, dp=8, zero=2, mbs=1, gbs=64, seq_len=8192), LLAMA3_8B),
    "405b_fp8": (titan(LLAMA3_405B, tp=8, pp=16, dp=128, gbs=2048, seq_len=8192, precision="fp8", zero=2,
                       pp_first_layers=7, pp_last_layers=7), LLAMA3_405B),
    "8b_uneven_pp": (titan(LLAMA3_8B, tp=2, pp=4, dp=2, gbs=32, pp_first_layers=7, pp_last_layers=7), LLAMA3_8B),
    "405b_bf16_uneven": (titan(LLAMA3_405B, tp=8, pp=16, dp=128, gbs=2048, seq_len=8192, zero=2, pp_first_layers=7,
                               pp_last_layers=7), LLAMA3_405B),
    "8b_interleaved": (titan(LLAMA3_8B, tp=2, pp=4, dp=2, vpp=2, gbs=32), LLAMA3_8B),
    "8b_fsdp_zero3": (titan(LLAMA3_8B, tp=1, dp=16, zero=3, gbs=64), LLAMA3_8B),
    "8b_cp": (titan(LLAMA3_8B, tp=2, cp=4, dp=2, gbs=16, seq_len=32768, recompute="none", cp_comm_type="allgather"),
              LLAMA3_8B),
}


# ----------------------------------------------------------------------------------- release dataclasses (ast)


def _classes(node, prefix: str = "") -> dict[str, dict[str, ast.expr]]:
    """Class name (nested ones dotted) -> annotated fields (name -> annotation)."""
    out = {}
    for child in node.body:
        if isinstance(child, ast.ClassDef):
            name = prefix + child.name
            out[name] = {s.target.id: s.annotation for s in child.body
                         if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
            out.update(_classes(child, name + "."))
    return out


def schema(version: str) -> dict[str, dict[str, ast.expr]]:
    out = {}
    for name in CONFIG_FILES[RELEASES[version].family]:
        out.update(_classes(ast.parse((DATA / version / name).read_text(encoding="utf-8"))))
    return out


def _nested(ann, classes) -> str | None:
    return ann.id if isinstance(ann, ast.Name) and ann.id in classes else None


def resolve(classes, root: str, key: str) -> tuple[str, ast.expr]:
    """(class that declares the last part of ``key``, its annotation); AssertionError if absent."""
    owner, *parts = [root] + key.split(".")
    for i, part in enumerate(parts):
        assert part in classes[owner], f"{key}: {owner} has no field {part!r}"
        ann = classes[owner][part]
        if i == len(parts) - 1:
            return owner, ann
        owner = _nested(ann, classes)
        assert owner, f"{key}: {part} is not a section"
    raise AssertionError(key)


def _literal(ann) -> list | None:
    if isinstance(ann, ast.Subscript) and getattr(ann.value, "id", "") == "Literal":
        elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        return [e.value for e in elts]
    return None


def accepts(ann, value) -> bool:
    """Whether a TOML value fits a field annotation (int | None, Literal[...], list[str], ...)."""
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
        return accepts(ann.left, value) or accepts(ann.right, value)
    if isinstance(ann, ast.Constant):
        return ann.value is None and value is None
    if _literal(ann) is not None:
        return value in _literal(ann)
    if isinstance(ann, ast.Subscript) and getattr(ann.value, "id", "") == "list":
        return isinstance(value, list) and all(accepts(ann.slice, v) for v in value)
    plain = {"bool": lambda v: isinstance(v, bool), "str": lambda v: isinstance(v, str),
             "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
             "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert isinstance(ann, ast.Name) and ann.id in plain, f"annotation {ast.unparse(ann)} not handled"
    return plain[ann.id](value)


def check_toml_fields(classes, owner: str, data: dict, where: str = "") -> None:
    """ConfigManager._dict_to_dataclass's walk, strict about names and values."""
    unknown = set(data) - set(classes[owner])
    assert not unknown, f"Invalid field names in {owner} ([{where.rstrip('.') or 'top level'}]): {sorted(unknown)}"
    for key, value in data.items():
        ann = classes[owner][key]
        inner = _nested(ann, classes)
        if inner:
            assert isinstance(value, dict), f"{where}{key} is a section"
            check_toml_fields(classes, inner, value, f"{where}{key}.")
        else:
            assert accepts(ann, value), f"{where}{key} = {value!r} does not fit {ast.unparse(ann)}"


def accepts_text(ann, text: str) -> bool:
    """Whether one command-line value parses as the field's type."""
    for kind, parse in (("int", int), ("float", float)):
        if isinstance(ann, ast.Name) and ann.id == kind:
            try:
                parse(text)
                return True
            except ValueError:
                return False
    if isinstance(ann, ast.BinOp):
        return accepts_text(ann.left, text) or accepts_text(ann.right, text)
    if _literal(ann) is not None:
        return text in _literal(ann)
    return isinstance(ann, ast.Name) and ann.id == "str"


def field_entries(family: str, section: str) -> list[tuple[str, str]]:
    """(field, declaring class) lines of ``[section]`` in torchtitan_fields_<family>.txt."""
    out, current = [], None
    for line in (FIELD_FILES / f"torchtitan_fields_{family}.txt").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
        elif line and not line.startswith("#") and current == section:
            out.append((line.split()[0], line.split()[1]))
    return out


def export_case(name: str, out: Path, version: str | None = None, formats: str = "torchtitan"):
    rec, model = CASES[name]
    options = {"torchtitan_version": version} if version else None
    return export(rec, model, out, formats=formats, options=options)


# ----------------------------------------------------------------------------------- always (no torch)


@pytest.mark.parametrize("version", list(RELEASES))
def test_field_lists_match_the_release_dataclasses(version):
    """Every field planner may write is declared, by the class the list names, in the release's copy."""
    release = RELEASES[version]
    text = (FIELD_FILES / f"torchtitan_fields_{release.family}.txt").read_text(encoding="utf-8")
    assert f"torchtitan {version}" in text and release.origin.split(", ")[-1].split()[-1] in text
    classes = schema(version)
    section = "toml" if release.reads_toml else "cli"
    entries = field_entries(release.family, section)
    assert len(entries) > 15
    for key, declared in entries:
        if key in ("module", "config"):  # ConfigManager's own arguments, not dataclass fields
            assert f'"--{key}"' in (DATA / version / "manager.py").read_text(encoding="utf-8")
            continue
        owner, _ = resolve(classes, ROOT_CLASS[release.family], key)
        assert owner.split(".")[-1] == declared.split(".")[-1] or owner == declared, (key, owner, declared)


def test_config_functions_exist_in_0_3():
    tree = ast.parse((DATA / "0.3.0" / "config_registry.py").read_text(encoding="utf-8"))
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert set(torchtitan.CONFIG_FUNCTIONS) <= functions


@pytest.mark.parametrize("version", TOML_RELEASES)
@pytest.mark.parametrize("case", list(CASES))
def test_toml_fits_the_release_dataclasses(tmp_path, case, version):
    report = export_case(case, tmp_path, version)
    assert [p.name for p in report.written] == ["torchtitan.toml"], report.skipped
    assert "torchtitan_cli_release" in report.skipped["torchtitan:torchtitan_overrides.sh"]
    text = (tmp_path / "torchtitan.toml").read_text()
    assert f"torchtitan {version} job config" in text
    check_toml_fields(schema(version), "JobConfig", tomllib.loads(text))


@needs_bash
@pytest.mark.parametrize("case", list(CASES))
def test_overrides_fit_the_0_3_dataclasses(tmp_path, case):
    if case == "405b_bf16_uneven":  # 0.3.0's llama3_405b config trains in float8 only; 0.3 reads no TOML
        with pytest.raises(PlannerInputError, match="torchtitan_config_precision.*torchtitan_toml_release"):
            export_case(case, tmp_path, "0.3")
        return
    report = export_case(case, tmp_path, "0.3")
    assert [p.name for p in report.written] == ["torchtitan_overrides.sh"]
    assert "torchtitan_toml_release" in report.skipped["torchtitan:torchtitan.toml"]
    classes = schema("0.3.0")
    words = _overrides_argv(tmp_path)
    for i, word in enumerate(words):
        field = torchtitan.cli_field(word)
        if field is None or field in ("module", "config", "activation_checkpoint"):
            continue
        _, ann = resolve(classes, "Trainer.Config", field)
        if i + 1 < len(words) and not words[i + 1].startswith("-") and ":" not in words[i + 1]:
            assert accepts_text(ann, words[i + 1]), (word, words[i + 1], ast.unparse(ann))
        else:
            assert ast.unparse(ann) == "bool", word


def _overrides_argv(out: Path) -> list[str]:
    """The words after ``-m torchtitan.train`` that the overrides script passes torchrun."""
    argv_file = out / "argv.json"
    proc = run_bash(out / "torchtitan_overrides.sh", make_shims(out / "bin", argv_file))
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(argv_file.read_text())["argv"]
    return argv[argv.index("torchtitan.train") + 1:]


def test_issue_18_toml_names(tmp_path):
    """0.2.2 (the default) writes [compile] enable and [quantize.linear.float8]; 0.1.0 its own names."""
    export_case("8b_tp2_compile", tmp_path / "a")
    toml = tomllib.loads((tmp_path / "a" / "torchtitan.toml").read_text())
    assert "compile" not in toml["training"] and toml["compile"] == {"enable": True}
    export_case("405b_fp8", tmp_path / "b")
    toml = tomllib.loads((tmp_path / "b" / "torchtitan.toml").read_text())
    assert "float8" not in toml and toml["model"]["converters"] == ["quantize.linear.float8"]
    assert toml["quantize"]["linear"]["float8"] == {"enable_fsdp_float8_all_gather": True,
                                                    "precompute_float8_dynamic_scale_for_fsdp": True}
    par = toml["parallelism"]
    assert (par["pipeline_parallel_first_stage_less_layers"], par["pipeline_parallel_last_stage_less_layers"]) == (1, 1)
    export_case("405b_fp8", tmp_path / "c", "0.1")
    toml = tomllib.loads((tmp_path / "c" / "torchtitan.toml").read_text())
    assert toml["model"]["converters"] == ["float8"] and toml["training"]["compile"] is True
    assert set(toml["float8"]) == {"enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp"}
    assert "pipeline_parallel_first_stage_less_layers" not in toml["parallelism"]


@pytest.mark.parametrize("case", ["8b_uneven_pp", "405b_bf16_uneven", "8b_interleaved"])
def test_0_1_split_points_place_the_plan_layers(tmp_path, case):
    export_case(case, tmp_path, "0.1.0")
    par = tomllib.loads((tmp_path / "torchtitan.toml").read_text())["parallelism"]
    rec, model = CASES[case]
    plan = build_plan(rec, model, DGX_H100)
    bounds = [0] + [int(p.split(".")[1]) for p in par["pipeline_parallel_split_points"]] + [model.num_layers]
    counts = [b - a for a, b in zip(bounds, bounds[1:])]
    assert len(counts) == plan.pp * plan.vpp and min(counts) >= 1
    assert [sum(counts[r::plan.pp]) for r in range(plan.pp)] == list(plan.stage_layers)
    assert par["pipeline_parallel_schedule"] == ("Interleaved1F1B" if plan.vpp > 1 else "1F1B")


def test_default_targets_and_headers(tmp_path):
    report = export_case("405b_fp8", tmp_path)
    assert sorted(p.name for p in report.written) == ["torchtitan.toml", "torchtitan_overrides.sh"]
    assert "torchtitan 0.2.2 job config (tag v0.2.2" in (tmp_path / "torchtitan.toml").read_text()
    assert "torchtitan 0.3.0 command line" in (tmp_path / "torchtitan_overrides.sh").read_text()
    assert torchtitan.release_for("0.2").version == "0.2.2" and torchtitan.release_for("v0.2.1").version == "0.2.1"
    assert torchtitan.release_for("0.3.x").version == "0.3.0" and torchtitan.release_for("0.1").version == "0.1.0"


def test_unknown_release_is_an_input_error(tmp_path):
    with pytest.raises(PlannerInputError, match="torchtitan version '0.4'"):
        export_case("8b_tp2_compile", tmp_path, "0.4")


@pytest.mark.parametrize("version", TOML_RELEASES)
def test_field_a_release_lacks_is_refused(tmp_path, version):
    """TP without sequence parallelism: 0.1/0.2 have no switch (0.3 has one)."""
    rec = titan(LLAMA3_8B, tp=4, dp=4, gbs=64, sequence_parallel=False)
    with pytest.raises(PlannerInputError) as err:
        export(rec, LLAMA3_8B, tmp_path, formats="torchtitan", options={"torchtitan_version": version})
    msg = str(err.value)
    assert "torchtitan_release_field" in msg and "parallelism.enable_sequence_parallel" in msg
    assert f"torchtitan {version} {RELEASES[version].config_files}" in msg and "0.3.0" in msg
    report = export(rec, LLAMA3_8B, tmp_path / "c", formats="torchtitan", options={"torchtitan_version": "0.3"})
    assert "--parallelism.no_enable_sequence_parallel" in (tmp_path / "c" / "torchtitan_overrides.sh").read_text()
    assert "torchtitan_toml_release" in report.skipped["torchtitan:torchtitan.toml"]


def test_cli_torchtitan_version(tmp_path):
    """The user's command from issue 18, with and without --torchtitan-version."""
    base = [sys.executable, "-m", "planner", "export", "--format", "torchtitan", "--model", "llama3-8b", "--gpus", "16",
            "--gpu", "h100", "--tp", "2", "--pp", "1", "--cp", "1", "--zero", "3", "--mbs", "1", "--gbs", "64",
            "--seq-len", "8192", "--recompute", "full", "--fsdp", "fsdp2", "--framework", "torchtitan-0.2"]
    runs = {}
    for name, extra in (("default", []), ("v01", ["--torchtitan-version", "0.1"]), ("v03", ["--torchtitan-version", "0.3"]),
                        ("bad", ["--torchtitan-version", "1.0"])):
        runs[name] = subprocess.run(base + ["--out", str(tmp_path / name)] + extra, capture_output=True, text=True,
                                    timeout=120)
    assert runs["default"].returncode == 0, runs["default"].stderr
    toml = tomllib.loads((tmp_path / "default" / "torchtitan.toml").read_text())
    check_toml_fields(schema("0.2.2"), "JobConfig", toml)
    assert runs["v01"].returncode == 0 and "skipped torchtitan:torchtitan_overrides.sh" in runs["v01"].stdout
    check_toml_fields(schema("0.1.0"), "JobConfig", tomllib.loads((tmp_path / "v01" / "torchtitan.toml").read_text()))
    assert runs["v03"].returncode == 0 and "torchtitan_toml_release" in runs["v03"].stdout
    assert not (tmp_path / "v03" / "torchtitan.toml").exists()
    assert runs["bad"].returncode != 0 and "torchtitan version '1.0'" in runs["bad"].stderr
    assert "Traceback" not in runs["bad"].stderr


# ----------------------------------------------------------------------------------- installed releases (optional)

LOADER = HERE / "torchtitan_release_check.py"
PYTHON = os.environ.get("TORCHTITAN_PYTHON") or sys.executable
"""Interpreter that runs the loader: one with torch (CPU) and tyro; this one by default."""


def _installed_releases() -> dict[str, str]:
    """Release -> PYTHONPATH entry holding it: the folders in TORCHTITAN_RELEASE_DIRS
    (os.pathsep-separated ``pip install --no-deps --target`` folders), and "" for a torchtitan
    installed in this environment."""
    if PYTHON == sys.executable and (importlib.util.find_spec("torch") is None or importlib.util.find_spec("tyro") is None):
        return {}
    found: dict[str, str] = {}
    for folder in filter(None, os.environ.get("TORCHTITAN_RELEASE_DIRS", "").split(os.pathsep)):
        for info in Path(folder).glob("torchtitan-*.dist-info"):
            found.setdefault(info.name.removesuffix(".dist-info").split("-")[1], folder)
    if PYTHON == sys.executable:
        try:
            found.setdefault(importlib.metadata.version("torchtitan"), "")
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


INSTALLED = _installed_releases()


def skip_unless_installed(version: str) -> None:
    if version not in INSTALLED:
        pytest.skip(f"torchtitan {version} not installed beside torch and tyro: set TORCHTITAN_RELEASE_DIRS to "
                    "`pip install --no-deps --target DIR torchtitan==X` folders (and TORCHTITAN_PYTHON to an "
                    "interpreter with torch and tyro) to load the exports with the real releases")


def release_folder(version: str) -> Path:
    if INSTALLED[version]:
        return Path(INSTALLED[version])
    return Path(importlib.util.find_spec("torchtitan").origin).parent.parent


def load_with_release(version: str, jobs: list[dict], cwd: Path) -> list[dict]:
    """Run tests/torchtitan_release_check.py under the installed ``version``."""
    env = dict(os.environ)
    if INSTALLED[version]:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [INSTALLED[version], env.get("PYTHONPATH", "")]))
    jobs_file = cwd / "jobs.json"
    jobs_file.write_text(json.dumps(jobs))
    proc = subprocess.run([PYTHON, str(LOADER), str(jobs_file)], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.splitlines()[-1].removeprefix("RESULT "))
    assert out["version"] == version
    return out["results"]


def _leaves(data: dict, prefix: str = ""):
    for key, value in data.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _get(config: dict, key: str):
    for part in key.split("."):
        assert part in config, f"{key}: the release did not keep {part!r}"
        config = config[part]
    return config


def check_loaded(name: str, result: dict, toml: dict | None) -> None:
    """What the release parsed is the plan: every written key came back, and the layout holds."""
    assert "error" not in result, f"{name}: {result.get('error')}"
    config = result["config"]
    rec, model = CASES[name]
    plan = build_plan(rec, model, DGX_H100)
    for key, value in _leaves(toml or {}):
        assert _get(config, key) == value, (name, key)
    par, train = config["parallelism"], config["training"]
    assert (par["tensor_parallel_degree"], par["pipeline_parallel_degree"], par["context_parallel_degree"]) == (
        plan.tp, plan.pp, plan.cp), name
    assert par["data_parallel_shard_degree"] * par["data_parallel_replicate_degree"] == plan.dp
    assert (train["global_batch_size"], train["seq_len"], train["steps"]) == (plan.gbs, plan.seq_len, 100)
    if plan.pp > 1:
        assert train["local_batch_size"] // par["pipeline_parallel_microbatch_size"] == plan.grad_accum
        stages = result["rank_layers"]
        assert [sum(s) for s in stages] == list(plan.stage_layers) and {len(s) for s in stages} == {plan.vpp}, name
    for converter in (toml or {}).get("model", {}).get("converters", []):
        assert converter in result["converters"], (name, converter)


@pytest.mark.parametrize("version", TOML_RELEASES)
def test_toml_loads_with_the_release(tmp_path, version):
    """torchtitan 0.1.x / 0.2.x's own ConfigManager loads every export (--job.config_file)."""
    skip_unless_installed(version)
    jobs, tomls = [], {}
    for name, (_, model) in CASES.items():
        export_case(name, tmp_path / name, version)
        path = tmp_path / name / "torchtitan.toml"
        tomls[name] = tomllib.loads(path.read_text())
        jobs.append({"mode": "toml", "file": str(path), "layers": model.num_layers})
    for name, result in zip(CASES, load_with_release(version, jobs, tmp_path)):
        check_loaded(name, result, tomls[name])
        ac = result["config"]["activation_checkpoint"]
        assert ac["mode"] == CASES[name][0]["layout"]["recompute"], name


@needs_bash
def test_overrides_load_with_the_release(tmp_path):
    """torchtitan 0.3.0's own ConfigManager parses every exported command line."""
    skip_unless_installed("0.3.0")
    names = [n for n in CASES if n != "405b_bf16_uneven"]  # 0.3.0 has no bf16 405B config
    jobs = []
    for name in names:
        export_case(name, tmp_path / name, "0.3")
        jobs.append({"mode": "cli", "args": _overrides_argv(tmp_path / name), "layers": CASES[name][1].num_layers})
    ac_class = {"none": None, "full": "FullAC.Config", "selective": "SelectiveAC.Config"}
    for name, result in zip(names, load_with_release("0.3.0", jobs, tmp_path)):
        check_loaded(name, result, None)
        config, layout = result["config"], CASES[name][0]["layout"]
        assert config["activation_checkpoint"] == ac_class[layout["recompute"]], name
        assert config["compile"]["enable_async_tensor_parallel"] is False
        assert config["parallelism"]["enable_sequence_parallel"] == (layout["sequence_parallel"] or layout["tp"] == 1)
        # The overrides turn CUDA graphs off wherever the plan has none (0.3.0 defaults them on, and
        # its trainer refuses them with a pipeline); no case here runs them.
        assert config["training"]["disable_cuda_graphs"] is not bool(layout.get("cuda_graphs")), name


@pytest.mark.parametrize("version", [v for v, r in RELEASES.items() if r.family != "0.1"])
def test_stage_split_matches_the_release(version):
    """planner's stage_split against the release's own generate_llm_fqn_per_model_part (pure Python,
    compiled from the installed file, so only the file is needed)."""
    skip_unless_installed(version)
    from torchtitan_release_check import release_function

    path = release_folder(version) / "torchtitan" / "distributed" / "pipeline_parallel.py"
    try:
        fqn = release_function(path, "generate_llm_fqn_per_model_part")
    except LookupError:
        fqn = release_function(path, "_generate_llm_fqn_per_model_part")
    for layers in (12, 32, 61, 80, 126):
        for stages in (1, 2, 4, 8, 16, 32):
            for first in range(4):
                for last in range(4):
                    try:
                        real = [sum(1 for m in part if m.startswith("layers.")) for part in fqn(stages, layers, first, last)]
                    except ValueError:
                        real = None
                    assert torchtitan.stage_split(layers, stages, first, last) == real, (layers, stages, first, last)


def test_cli_refuses_a_local_sequence_the_chunked_loss_cannot_split(tmp_path):
    # torchtitan 0.3.0's llama3 configs wrap the loss in ChunkedLossWrapper (num_chunks 8), whose
    # _chunk_local checks that the local sequence divides by 8: 4,100 tokens fail at the first step,
    # 4,096 (512 a chunk) run; with cp 4, 16,400 tokens are 4,100 a rank.
    def cli(seq, cp=1):
        out = tmp_path / f"s{seq}_cp{cp}"
        args = [sys.executable, "-m", "planner", "export", "--model", "8b", "--gpus", "8", "--gpu", "h100",
                "--framework", "torchtitan-0.2", "--seq-len", str(seq), "--cp", str(cp), "--gbs", "256",
                "--format", "torchtitan", "--torchtitan-version", "0.3", "--out", str(out)]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
        return proc.returncode, proc.stderr, out

    code, err, out = cli(4100)
    assert code == 2 and "torchtitan_chunked_loss" in err and "4100 tokens per" in err and not out.exists()
    code, err, out = cli(16400, cp=4)
    assert code == 2 and "torchtitan_chunked_loss" in err
    code, err, out = cli(4096)
    assert code == 0 and (out / "torchtitan_overrides.sh").exists()
