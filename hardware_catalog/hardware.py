"""GPU, interconnect and cluster catalog: lookup by name/alias, or load a user cluster file.

The built-in data lives in ``data/{gpus,interconnects,clusters}.toml`` (one table per entry,
the table key is the canonical name). It is parsed and validated once, on first use.
Every user mistake surfaces as a one-line :class:`PlannerInputError`.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Optional, TypeVar

from pydantic import BaseModel, ValidationError

from hardware_catalog.errors import PlannerInputError, unknown_name_error
from hardware_catalog.files import decode_text, read_input_bytes, show
from hardware_catalog.match import match_gpu, match_interconnect
from hardware_catalog.schema import ClusterSpec, GPUSpec, InterconnectSpec

__all__ = [
    "cluster_with_defaults",
    "default_cluster_for_gpu",
    "get_cluster",
    "get_gpu",
    "get_interconnect",
    "list_clusters",
    "list_gpus",
    "list_interconnects",
]

DATA_DIR = Path(__file__).parent / "data"
_USER_FILE_SUFFIXES = (".toml", ".yaml", ".yml", ".json")

S = TypeVar("S", bound=BaseModel)


@dataclass(frozen=True)
class _Table(Generic[S]):
    """Specs in file order plus a lower-case name/alias index."""

    kind: str
    specs: tuple[S, ...]
    index: dict[str, S]

    def get(self, name: str) -> S:
        if not isinstance(name, str):
            raise PlannerInputError(f"{self.kind} name must be a string, got {name!r}")
        spec = self.index.get(_norm(name))
        if spec is None:
            spec = self._match(name)
        if spec is None:
            raise unknown_name_error(self.kind, name.strip(), sorted(self.index))
        return spec

    def _match(self, name: str) -> S | None:
        """Names the alias index does not hold, read by what they say (``match``): "H100 80GB
        SXM5", "400G NDR InfiniBand", "DGX H100"."""
        if self.kind == "gpu":
            return match_gpu(name, self.specs, self.index)
        if self.kind == "interconnect":
            return match_interconnect(name, self.index)
        words = "-".join(w for w in re.split(r"[^a-z0-9.]+", _norm(name)) if w)
        return self.index.get(words) or self.index.get(words.removeprefix("nvidia-"))


def _norm(name: str) -> str:
    return name.strip().lower()


# ---------------------------------------------------------------------------------------
# Error condensing: a pydantic ValidationError becomes one line naming field and value.


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _condense(err: ValidationError, where: str, model: type[BaseModel]) -> PlannerInputError:
    """One line per ValidationError: '<where>: field X: <msg> (got <value>)'; several joined by '; '."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e.get("loc", ()))
        msg = e.get("msg", "invalid value")
        if msg.startswith("Value error, "):  # raised by our own model validators
            msg = msg[len("Value error, ") :]
        etype = e.get("type", "")
        if etype == "extra_forbidden":
            allowed = sorted(model.model_fields)
            close = difflib.get_close_matches(loc, allowed, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            parts.append(f"unknown field '{loc}'{hint} (allowed: {', '.join(allowed)})")
        elif etype == "missing":
            parts.append(f"missing required field '{loc}'")
        elif loc:
            parts.append(f"field {loc}: {msg} (got {_short(e.get('input'))})")
        else:
            parts.append(msg)
    return PlannerInputError(_one_line(f"{where}: {'; '.join(parts)}"))


def _one_line(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------
# Built-in data, loaded once.


def _load_builtin(filename: str, model: type[S], kind: str) -> _Table[S]:
    path = DATA_DIR / filename
    with path.open("rb") as fh:
        raw = tomllib.load(fh)
    specs: list[S] = []
    index: dict[str, S] = {}
    for key, fields in raw.items():
        try:
            spec = model.model_validate({"name": key, **fields})
        except ValidationError as err:
            # A broken built-in file is our bug, but still keep the message to one line.
            raise RuntimeError(str(_condense(err, f"{filename} [{key}]", model))) from None
        for alias in (spec.name, *spec.aliases):
            k = _norm(alias)
            if k in index:
                raise RuntimeError(f"{filename}: {kind} name '{alias}' is used twice")
            index[k] = spec
        specs.append(spec)
    return _Table(kind, tuple(specs), index)


@functools.cache
def _gpus() -> _Table[GPUSpec]:
    return _load_builtin("gpus.toml", GPUSpec, "gpu")


@functools.cache
def _interconnects() -> _Table[InterconnectSpec]:
    return _load_builtin("interconnects.toml", InterconnectSpec, "interconnect")


@functools.cache
def _clusters() -> _Table[ClusterSpec]:
    table = _load_builtin("clusters.toml", ClusterSpec, "cluster")
    for spec in table.specs:  # presets must reference catalog entries
        for lookup, ref in ((_gpus().get, spec.gpu), (_interconnects().get, spec.nic)):
            try:
                lookup(ref)
            except PlannerInputError as err:
                raise RuntimeError(f"clusters.toml [{spec.name}]: {err}") from None
    return table


# ---------------------------------------------------------------------------------------
# Public API.


def get_gpu(name: str) -> GPUSpec:
    """GPU by canonical name or alias, case-insensitive (``h100`` -> ``h100-sxm``)."""
    return _gpus().get(name)


def get_interconnect(name: str) -> InterconnectSpec:
    """Scale-out NIC type by canonical name or alias (``ndr`` -> ``ib-ndr``)."""
    return _interconnects().get(name)


def list_gpus() -> list[GPUSpec]:
    return list(_gpus().specs)


def list_interconnects() -> list[InterconnectSpec]:
    return list(_interconnects().specs)


def list_clusters() -> list[ClusterSpec]:
    return list(_clusters().specs)


def default_cluster_for_gpu(gpu_name: str) -> ClusterSpec:
    """The preset built around this GPU: the first one listed for it in clusters.toml."""
    gpu = get_gpu(gpu_name)
    for spec in _clusters().specs:
        if get_gpu(spec.gpu).name == gpu.name:
            return spec
    # Every catalog GPU has a preset (tested), so this only guards future data edits.
    raise PlannerInputError(f"no cluster preset for gpu '{gpu.name}'; give a cluster file")


def is_whole_nodes(gpus: int, gpus_per_node: int) -> bool:
    """Whether a job of ``gpus`` GPUs takes whole nodes of ``gpus_per_node`` (or part of one)."""
    return gpus <= gpus_per_node or gpus % gpus_per_node == 0


def nearest_multiples(value: int, step: int) -> tuple[Optional[int], int]:
    """(the multiple of ``step`` below ``value``, or None when there is none above 0; the one above)."""
    step = max(int(step), 1)
    below = (int(value) // step) * step
    return (below or None), below + step


def check_whole_nodes(cluster: ClusterSpec, gpus: int) -> None:
    """A job of ``gpus`` GPUs on ``cluster`` takes whole nodes (or part of one node): 64 GPUs on
    nodes of 3 would leave one node a third used, which no launcher (torchrun --nproc-per-node,
    SLURM --ntasks-per-node) lays out and the network model cannot place."""
    g = cluster.gpus_per_node
    if not is_whole_nodes(gpus, g):
        below, above = nearest_multiples(gpus, g)
        raise PlannerInputError(
            f"--gpus={gpus} is not a whole number of nodes: cluster {show(cluster.name)} has {g} GPUs per node; "
            f"give a multiple of {g} (or at most {g}; nearest: {below} or {above})")


def get_cluster(name_or_path: str | Path) -> ClusterSpec:
    """A cluster preset (name or alias), or a user TOML/YAML/JSON file with ClusterSpec fields."""
    if isinstance(name_or_path, Path):
        return _load_user_cluster(name_or_path)
    if not isinstance(name_or_path, str):
        raise PlannerInputError(f"cluster must be a preset name or a file path, got {name_or_path!r}")
    text = name_or_path.strip()
    # An explicit path (extension or separator) wins; else a known preset; else an existing file.
    if text.lower().endswith(_USER_FILE_SUFFIXES) or "/" in text or "\\" in text:
        return _load_user_cluster(Path(text))
    table = _clusters()
    if _norm(text) in table.index or not _is_file(text):
        return table.get(text)
    return _load_user_cluster(Path(text))


def _is_file(text: str) -> bool:
    try:
        return Path(text).is_file()
    except (OSError, ValueError):  # e.g. embedded NUL, name too long
        return False


# ---------------------------------------------------------------------------------------
# User cluster files.


def _parse_user_file(path: Path) -> Any:
    where = f"cluster file {show(path)}"
    try:
        data = read_input_bytes(path, where)
    except FileNotFoundError:
        raise PlannerInputError(f"{where}: file not found") from None
    except OSError as err:
        raise PlannerInputError(_one_line(f"{where}: cannot read ({err.strerror or err})")) from None
    suffix = path.suffix.lower()
    try:
        text = decode_text(data)
    except UnicodeDecodeError:
        raise PlannerInputError(f"{where}: not UTF-8 text") from None
    if suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise PlannerInputError(_one_line(f"{where}: invalid JSON: {err}")) from None
    if suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise PlannerInputError(_one_line(f"{where}: invalid TOML: {err}")) from None
    if suffix in (".yaml", ".yml"):
        try:
            import yaml  # only needed for YAML files
        except ImportError:
            raise PlannerInputError(f"{where}: reading YAML needs PyYAML (pip install pyyaml)") from None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as err:  # str(err) spans several lines; keep problem + position
            mark = getattr(err, "problem_mark", None)
            problem = getattr(err, "problem", None) or type(err).__name__
            at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            raise PlannerInputError(_one_line(f"{where}: invalid YAML: {problem}{at}")) from None
    raise PlannerInputError(
        f"{where}: unsupported extension '{path.suffix}' (use {', '.join(_USER_FILE_SUFFIXES)})"
    )


def preset_for(gpu_name: str, nic_name: str) -> ClusterSpec:
    """The preset a user cluster of this GPU and NIC takes its unstated fields from: the first one
    with this GPU and this kind of network (an H100 on EFA: aws-p5, whose efficiency is measured
    on EFA), else the GPU's default preset. The network efficiency belongs to the fabric: an EFA
    or RoCE cluster given InfiniBand's 0.92 would be priced up to 1.5x too fast between nodes."""
    gpu = get_gpu(gpu_name).name
    kind = get_interconnect(nic_name).kind
    for spec in _clusters().specs:
        if get_gpu(spec.gpu).name == gpu and get_interconnect(spec.nic).kind == kind:
            return spec
    return default_cluster_for_gpu(gpu)


USER_CLUSTER_DEFAULTS = (
    "gpus_per_node", "scaleup_domain_size", "scaleup_topology", "scaleup_latency_us", "scaleup_efficiency",
    "nics_per_node", "network_topology", "network_oversubscription", "network_efficiency",
)
"""Cluster fields a user file (or a runs-file row) may leave out: each comes from the preset
``preset_for`` picks (the GPU's, on the same kind of network where the catalog has one), so a
file needs only ``gpu`` and ``nic``."""


def _unknown_fields(fields: dict, missing: list[str]) -> list[str]:
    """'unknown field X; did you mean Y?' for each key of ``fields`` ClusterSpec lacks, the
    missing required fields suggested first ('gpu_type' -> gpu), case and '-' forgiven ('GPU');
    a table other than the one [cluster] said as such."""
    allowed = sorted(ClusterSpec.model_fields)
    out = []
    for key in fields:
        if key in allowed:
            continue
        folded = str(key).lower().replace("-", "_")
        if isinstance(fields[key], dict):
            if key == "cluster":
                out.append("table [cluster] is read only as the file's one top-level key (other keys beside it)")
            else:
                out.append(f"unknown table [{show(key)}]" + ("; did you mean [cluster]?" if folded == "cluster" else
                           " (a cluster file has its fields at the top level or under one [cluster] table)"))
            continue
        close = ([folded] if folded in allowed else
                 difflib.get_close_matches(folded, missing, n=1, cutoff=0.5)
                 or difflib.get_close_matches(folded, allowed, n=1, cutoff=0.6))
        out.append(f"unknown field '{show(key)}'" + (f"; did you mean {close[0]}?" if close else ""))
    if out:
        out[-1] += f" (allowed: {', '.join(allowed)})"
    return out


def cluster_with_defaults(fields: dict, where: str) -> ClusterSpec:
    """A ClusterSpec from user fields, the ones left out taken from ``preset_for`` (the GPU's
    preset on the same kind of network, else the GPU's default preset):
    latencies and efficiencies as measured for that preset (its ``sources``), the NICs per node
    in the preset's NIC-per-GPU ratio, and the scale-up domain = ``gpus_per_node`` unless the
    preset's domain spans nodes (NVL72). ``gpu`` and ``nic`` are resolved as ``--gpu`` is."""
    fields = dict(fields)
    problems = []  # the unknown names and the missing fields together, in one line
    missing = [key for key in ("gpu", "nic") if key not in fields]
    for key, getter in (("gpu", get_gpu), ("nic", get_interconnect)):
        if key in missing:
            problems.append(f"missing required field '{key}'")
        elif not isinstance(fields.get(key), str):  # else the preset's defaults go unread: a list of "missing" fields
            what, listing = ("GPU", "gpus") if key == "gpu" else ("NIC", "interconnects")
            problems.append(f"field {key}: give a catalog {what} name as text (planner catalog {listing}), "
                            f"got {_short(fields[key])}")
        else:
            try:
                fields[key] = getter(fields[key]).name
            except PlannerInputError as err:
                problems.append(f"field {key}: {err}")
    if problems:  # a misspelt gpu or nic shows up as "missing": name the unknown fields too
        raise PlannerInputError(f"{where}: {'; '.join(_unknown_fields(fields, missing) + problems)}")
    if isinstance(fields.get("gpu"), str):
        preset = preset_for(fields["gpu"], fields["nic"])
        per_node = fields.get("gpus_per_node", preset.gpus_per_node)
        derived = {"gpus_per_node": preset.gpus_per_node}
        if isinstance(per_node, int) and not isinstance(per_node, bool) and per_node > 0:
            spans = preset.scaleup_domain_size > preset.gpus_per_node
            derived["scaleup_domain_size"] = preset.scaleup_domain_size if spans else per_node
            derived["nics_per_node"] = max(1, per_node * preset.nics_per_node // preset.gpus_per_node)
        for key in USER_CLUSTER_DEFAULTS:
            fields.setdefault(key, derived.get(key, getattr(preset, key)))
    try:
        cluster = ClusterSpec.model_validate(fields)
    except ValidationError as err:
        raise _condense(err, where, ClusterSpec) from None
    _check_node_power(cluster, where)
    return cluster


def _check_node_power(cluster: ClusterSpec, where: str) -> None:
    """A node draws at least its GPUs' board power: a node_power_watts below that is a number in
    the wrong unit (10.2 for a DGX H100's 10.2 kW) and would price the job's energy 1000x low."""
    gpu = get_gpu(cluster.gpu)
    gpu_watts = cluster.power_limit_watts or gpu.tdp_watts
    if cluster.node_power_watts is None or gpu_watts is None:
        return
    floor = cluster.gpus_per_node * gpu_watts
    if cluster.node_power_watts < floor:
        raise PlannerInputError(
            f"{where}: field node_power_watts: {cluster.node_power_watts:g} W is below the node's "
            f"{cluster.gpus_per_node} GPUs alone ({cluster.gpus_per_node} x {gpu_watts:g} W = {floor:,.0f} W); "
            f"give the whole node's power in watts, not kW (a DGX H100 is 10,200 W)")


def _load_user_cluster(path: Path) -> ClusterSpec:
    where = f"cluster file {path}"
    raw = _parse_user_file(path)
    # Accept the fields at top level, or under a single [cluster] table.
    if isinstance(raw, dict) and set(raw) == {"cluster"} and isinstance(raw["cluster"], dict):
        raw = raw["cluster"]
    if not isinstance(raw, dict):
        raise PlannerInputError(
            f"{where}: expected a mapping of ClusterSpec fields, got {type(raw).__name__}"
        )
    fields = dict(raw)
    fields.setdefault("name", path.stem)
    # User files are exempt from the citation rule.
    sources = fields.get("sources")
    if sources is None:
        sources = {}
    if isinstance(sources, dict):
        fields["sources"] = {**sources, "*": sources.get("*", f"user file {path}")}
    return cluster_with_defaults(fields, where)
