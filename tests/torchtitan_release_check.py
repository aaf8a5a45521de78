"""Load a planner torchtitan export with an installed torchtitan release's own ConfigManager.

Run by tests/test_export_torchtitan_releases.py in a subprocess whose PYTHONPATH holds one release
(``pip install --no-deps --target DIR torchtitan==X`` beside torch and tyro), so several releases can
be checked from one test run:

    python torchtitan_release_check.py JOBS.json

JOBS.json is a list of {"mode": "toml", "file": PATH, "layers": N} (0.1.x, 0.2.x:
``ConfigManager().parse_args(["--job.config_file", PATH])``) or {"mode": "cli", "args": [...],
"layers": N} (0.3.x: ``ConfigManager().parse_args(args)``). The last stdout line is ``RESULT`` and a
JSON object: the release's version and, per job, the parsed config, the model converters the release
registers, and the transformer layers of each pipeline rank's stages under the release's own split
code (N: the model's layers), or the error the release raised.

Job-config releases (0.1, 0.2) are imported without running ``torchtitan/__init__.py``: that file
imports every model, and with them tokenizers and triton kernels (``torchtitan.models.moe.kernels``),
none of which the config code uses, so the package is entered through an empty package object;
ConfigManager, JobConfig and their imports (torch, tyro, torchtitan.tools.logging) run unchanged.

0.3.0's ConfigManager imports the model's config_registry (``--module llama3``), whose import chain
reaches triton kernels (``torchtitan.distributed.minimal_async_ep.kernels``). Where triton is not
installed (CPU hosts), each torchtitan module that imports triton at its top level loads as an inert
stand-in (``KernelStandIn``); nothing calls its kernels while parsing a config. A stand-in for the
``triton`` package itself would make torch believe triton is installed, and torch._dynamo /
torch._inductor then take their triton paths and fail on CPU. 0.3.0's llama3_405b config builds its
Float8LinearConverter while parsing, which needs torchao and asks the GPU for SM89 or later: without
a GPU, that check (``has_cuda_capability`` in torchtitan/components/quantization/float8.py) answers
as an H100 (SM90) does, the GPU the exported plans are for.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.metadata
import importlib.abc
import importlib.machinery
import importlib.util
import json
import math
import sys
import types
from pathlib import Path


def package_dir() -> Path:
    module = sys.modules.get("torchtitan")
    if module is not None:
        return Path(list(module.__path__)[0])
    spec = importlib.util.find_spec("torchtitan")
    if spec is None:
        raise SystemExit("torchtitan is not importable")
    return Path(list(spec.submodule_search_locations)[0])


def enter_without_init() -> Path:
    """Make ``torchtitan`` an empty package whose submodules import from the installed folder."""
    root = package_dir()
    pkg = types.ModuleType("torchtitan")
    pkg.__path__ = [str(root)]
    pkg.__spec__ = importlib.util.spec_from_loader("torchtitan", None, is_package=True)
    pkg.__spec__.submodule_search_locations = [str(root)]
    sys.modules["torchtitan"] = pkg
    return root


def _imports_triton(path: str) -> bool:
    """Whether a module imports triton at its top level (inside a top-level try included)."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    nodes = [n for top in tree.body for n in ([top] + (top.body if isinstance(top, ast.Try) else []))]
    for node in nodes:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
        if any(n == "triton" or n.startswith("triton.") for n in names):
            return True
    return False


class _Inert(types.ModuleType):
    """A kernel module that is never run: every name is a harmless class."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {"__init__": lambda self, *a, **k: None, "__call__": lambda self, *a, **k: self})


class KernelStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Loads torchtitan modules that import triton as inert modules (installed only without triton)."""

    def find_spec(self, name, path, target=None):
        if not name.startswith("torchtitan."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not str(spec.origin).endswith(".py") or not _imports_triton(spec.origin):
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        return _Inert(spec.name)

    def exec_module(self, module):
        return None


def stand_in_for_triton_kernels() -> None:
    if importlib.util.find_spec("triton") is None:
        sys.meta_path.insert(0, KernelStandIn())


def release_function(path: Path, name: str):
    """A module-level function of the release, compiled on its own (it must need only builtins)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            scope: dict = {"math": math}
            exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), scope)
            return scope[name]
    raise LookupError(f"{name} not in {path}")


def converters(root: Path) -> list[str]:
    """Names the release passes to register_model_converter (torchtitan/components/quantization)."""
    names = []
    for path in sorted((root / "components" / "quantization").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "register_model_converter"
                    and len(node.args) == 2 and isinstance(node.args[1], ast.Constant)):
                names.append(node.args[1].value)
    return names


def _schedule_is_single(name: str) -> bool:
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class

    return issubclass(get_schedule_class(name), PipelineScheduleSingle)


def split_by_weights(root: Path, par, layers: int) -> list[list[int]]:
    """0.2 / 0.3: stage count as pipeline_llm derives it, then the release's
    generate_llm_fqn_per_model_part; stage s on rank s % pp."""
    path = root / "distributed" / "pipeline_parallel.py"
    try:
        fqn = release_function(path, "generate_llm_fqn_per_model_part")
    except LookupError:
        fqn = release_function(path, "_generate_llm_fqn_per_model_part")
    first, last = par.pipeline_parallel_first_stage_less_layers, par.pipeline_parallel_last_stage_less_layers
    pp, lps = par.pipeline_parallel_degree, par.pipeline_parallel_layers_per_stage
    if lps is not None:
        stages = math.ceil((layers + first + last) / lps)
    else:
        stages = pp * (1 if _schedule_is_single(par.pipeline_parallel_schedule) else 2)
    parts = fqn(stages, layers, first, last)
    counts = [sum(1 for m in part if m.startswith("layers.")) for part in parts]
    return [counts[r::pp] for r in range(pp)]


def split_by_points(root: Path, par, layers: int) -> list[list[int]]:
    """0.1: pipeline_llama_manual_split keeps the layers from a stage's split point (inclusive) to the
    next (exclusive); the release's stage_ids_this_rank places the stages."""
    ids = release_function(root / "distributed" / "pipeline.py", "stage_ids_this_rank")
    splits, pp = par.pipeline_parallel_split_points, par.pipeline_parallel_degree
    if not splits:
        raise ValueError("no pipeline_parallel_split_points: 0.1.0 would split evenly (generate_split_points)")
    stages = len(splits) + 1
    counts = []
    for s in range(stages):
        start = splits[s - 1] if s > 0 else None
        stop = splits[s] if s < stages - 1 else None
        keep, drop = 0, start is not None
        for name in range(layers):
            if f"layers.{name}" == start:
                drop = False
            if f"layers.{name}" == stop:
                drop = True
            keep += 0 if drop else 1
        counts.append(keep)
    return [[counts[s] for s in ids(r, pp, stages, style="loop")] for r in range(pp)]


def load_toml(path: str, layers: int) -> dict:
    root = enter_without_init()
    name = "torchtitan.config_manager" if (root / "config_manager.py").exists() else "torchtitan.config.manager"
    manager = importlib.import_module(name)
    cfg = manager.ConfigManager().parse_args(["--job.config_file", path])
    par = cfg.parallelism
    split = None
    if par.pipeline_parallel_degree > 1:
        use_points = hasattr(par, "pipeline_parallel_split_points")
        split = (split_by_points if use_points else split_by_weights)(root, par, layers)
    return {"config": dataclasses.asdict(cfg), "converters": converters(root), "rank_layers": split}


def answer_as_h100() -> None:
    """Without a GPU, the float8 converter's hardware check answers as on an H100 (SM90)."""
    import torch

    if not torch.cuda.is_available():
        float8 = importlib.import_module("torchtitan.components.quantization.float8")
        float8.has_cuda_capability = lambda major, minor: (9, 0) >= (major, minor)


def load_cli(args: list[str], layers: int) -> dict:
    stand_in_for_triton_kernels()
    answer_as_h100()
    manager = importlib.import_module("torchtitan.config.manager")
    cfg = manager.ConfigManager().parse_args(args)
    par = cfg.parallelism
    split = split_by_weights(package_dir(), par, layers) if par.pipeline_parallel_degree > 1 else None
    config = {key: dataclasses.asdict(getattr(cfg, key)) for key in ("training", "parallelism", "compile")}
    config["hf_assets_path"] = cfg.hf_assets_path
    ac = cfg.activation_checkpoint
    config["activation_checkpoint"] = None if ac is None else type(ac).__qualname__
    return {"config": config, "converters": converters(package_dir()), "rank_layers": split}


def run_job(job: dict) -> dict:
    try:
        if job["mode"] == "toml":
            return load_toml(job["file"], job["layers"])
        return load_cli(job["args"], job["layers"])
    except BaseException as err:  # the release refused the file: report it, go on with the next
        return {"error": f"{type(err).__name__}: {err}"}


def main(argv: list[str]) -> None:
    jobs = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    results = [run_job(job) for job in jobs]
    out = {"version": importlib.metadata.version("torchtitan"), "results": results}
    sys.stdout.write("\nRESULT " + json.dumps(out, default=str) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
