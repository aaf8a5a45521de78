"""What every exporter shares: the checked plan, refusals, headers, shell quoting, atomic writes.

An exporter turns a ``Plan`` (an evaluated layout that passed the format-independent checks in
``build_plan``) into file contents, or raises ``CannotExpress`` naming the rule the target
framework would break. Nothing here writes outside ``write_atomically``.
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hardware_catalog.errors import PlannerInputError
from hardware_catalog.schema import ClusterSpec, ModelSpec

_LAYOUT_INT_KEYS = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "zero", "mbs", "gbs", "seq_len")


class CannotExpress(Exception):
    """The target framework cannot run this layout as planned. ``str()`` is one line."""

    def __init__(self, rule: str, detail: str, source: str = ""):
        self.rule = rule
        self.detail = detail
        self.source = source
        where = f"; {source}" if source else ""
        super().__init__(f"{detail} (rule {rule}{where})")


@dataclass(frozen=True)
class Plan:
    """One evaluated layout, checked for internal consistency, with derived launch numbers."""

    result: dict
    model: ModelSpec
    cluster: ClusterSpec
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    etp: int
    vpp: int
    zero: int
    mbs: int
    gbs: int
    seq_len: int
    recompute: str
    recompute_layers: int
    """With full recompute: layers per stage recomputed (0 = all; -q = q quarters of a stage)."""
    recompute_modules: tuple
    """With selective recompute: Megatron-Core submodules recomputed (empty = core_attn)."""
    sp: bool
    precision: str
    attention: str
    """flash | flash3 | unfused (costmodel.layout.ATTENTION)."""
    kernels: str
    """fused | eager elementwise kernels."""
    loss: str
    """unfused | fused | eager cross entropy."""
    tp_comm_overlap: bool
    ep_comm_overlap: bool
    moe_dispatcher: str
    grad_dtype: str
    """fp32 | bf16 gradient buffers and data-parallel reduction."""
    grad_accum: int
    """Micro-batches per pipeline per step, gbs / (dp * mbs)."""
    gpus: int
    stage_layers: tuple[int, ...]
    """Transformer layers on each pipeline stage, first to last (length pp)."""
    nnodes: int
    nproc_per_node: int
    gpu_name: str
    header: tuple[str, ...] = field(default=())

    @property
    def first_layers(self) -> int:
        return self.stage_layers[0]

    @property
    def last_layers(self) -> int:
        return self.stage_layers[-1]

    @property
    def uneven(self) -> bool:
        return len(set(self.stage_layers)) > 1

    @property
    def is_moe(self) -> bool:
        return self.model.moe is not None

    def layout_summary(self) -> str:
        split = ""
        if self.pp > 1:
            split = f" (layers/stage {_stage_text(self.stage_layers)})"
        sp = "on" if self.sp else "off"
        recompute = self.recompute
        per_chunk = partial_recompute_per_chunk(self)
        if per_chunk:
            recompute += f" ({per_chunk} layer(s) per model chunk, block method)"
        if self.recompute_modules:
            recompute += f" ({', '.join(self.recompute_modules)})"
        return (
            f"TP{self.tp} PP{self.pp}{split} DP{self.dp} CP{self.cp} EP{self.ep} ETP{self.etp} VPP{self.vpp} "
            f"ZeRO-{self.zero} SP {sp}; mbs {self.mbs}, gbs {self.gbs} ({self.grad_accum} micro-batches/step), "
            f"seq {self.seq_len}, recompute {recompute}, {self.precision}; attention {self.attention}, "
            f"{self.kernels} kernels, cross-entropy {self.loss}, "
            f"TP overlap {'on' if self.tp_comm_overlap else 'off'}"
            + (", EP all-to-all overlap on" if self.ep_comm_overlap else "")
            + (f", {self.moe_dispatcher} dispatcher" if self.model.moe is not None else "")
        )


def _stage_text(stages: tuple[int, ...]) -> str:
    if len(stages) <= 2:
        return "/".join(str(s) for s in stages)
    middle = stages[1:-1]
    if len(set(middle)) == 1:
        return f"{stages[0]}/{middle[0]}x{len(middle)}/{stages[-1]}"
    return "/".join(str(s) for s in stages)


# ----------------------------------------------------------------------------------- input


def _int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise PlannerInputError(f"layout.{name}={value!r}: must be an integer")
    return value


def _num(result: dict, key: str) -> Optional[float]:
    value = result.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def build_plan(result: dict, model: ModelSpec, cluster: ClusterSpec, *, command: str = "",
               allow_unfit: bool = False) -> Plan:
    """Check an evaluation record (``planner evaluate --json``) against itself, the model and the
    cluster, and derive launcher numbers. Raises ``PlannerInputError`` (one line) on bad input."""
    if not isinstance(result, dict):
        raise PlannerInputError(f"result={type(result).__name__}: expected the dict of 'planner evaluate --json'")
    layout = result.get("layout")
    if not isinstance(layout, dict):
        raise PlannerInputError("result has no 'layout' object: expected the dict of 'planner evaluate --json'")
    missing = [k for k in _LAYOUT_INT_KEYS if k not in layout]
    if missing:
        raise PlannerInputError(f"result.layout lacks {', '.join(missing)}: expected the layout of 'planner evaluate --json'")
    v = {k: _int(layout[k], k) for k in _LAYOUT_INT_KEYS}
    for k in ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "mbs", "gbs", "seq_len"):
        if v[k] < 1:
            raise PlannerInputError(f"layout.{k}={v[k]}: must be >= 1")
    if v["zero"] not in (0, 1, 2, 3):
        raise PlannerInputError(f"layout.zero={v['zero']}: ZeRO stage must be 0, 1, 2 or 3")
    recompute = layout.get("recompute", "selective")
    if recompute not in ("none", "selective", "full"):
        raise PlannerInputError(f"layout.recompute={recompute!r}: must be none, selective or full")
    precision = layout.get("precision", "bf16")
    if precision not in ("bf16", "fp8"):
        raise PlannerInputError(f"layout.precision={precision!r}: must be bf16 or fp8")

    from costmodel.layout import IMPLEMENTATION_DEFAULTS, check_implementation

    impl = check_implementation({k: layout.get(k) for k in IMPLEMENTATION_DEFAULTS})
    attention = impl.get("attention", "flash")
    kernels = impl.get("kernels", "fused")
    loss = impl.get("loss", "unfused")
    tp_comm_overlap = bool(impl.get("tp_comm_overlap", False))
    ep_comm_overlap = bool(impl.get("ep_comm_overlap", False)) and model.moe is not None
    moe_dispatcher = impl.get("moe_dispatcher", "alltoall")
    grad_dtype = impl.get("grad_dtype", "fp32")

    rec_model = result.get("model")
    if rec_model is not None and rec_model != model.name and rec_model not in model.aliases:
        raise PlannerInputError(
            f"result.model={rec_model!r} but the model given is {model.name!r}: export the layout with the model it was evaluated for"
        )
    rec_cluster = result.get("cluster")
    if rec_cluster is not None and rec_cluster != cluster.name and rec_cluster not in cluster.aliases:
        raise PlannerInputError(
            f"result.cluster={rec_cluster!r} but the cluster given is {cluster.name!r}: export the layout with the cluster it was evaluated for"
        )

    gpus = v["tp"] * v["cp"] * v["pp"] * v["dp"]
    for where, value in (("result.gpus", result.get("gpus")), ("layout.gpus", layout.get("gpus"))):
        if value is not None and value != gpus:
            raise PlannerInputError(f"{where}={value} but tp*cp*pp*dp = {gpus}: the record is inconsistent")
    if v["gbs"] % (v["dp"] * v["mbs"]):
        raise PlannerInputError(
            f"layout.gbs={v['gbs']} is not divisible by dp*mbs = {v['dp'] * v['mbs']} (rule gbs_divisible_by_dp_mbs)"
        )
    m = v["gbs"] // (v["dp"] * v["mbs"])
    if layout.get("grad_accum") is not None and _int(layout["grad_accum"], "grad_accum") != m:
        raise PlannerInputError(f"layout.grad_accum={layout['grad_accum']} but gbs/(dp*mbs) = {m}: the record is inconsistent")

    sp_raw = layout.get("sequence_parallel")
    if sp_raw is None:
        sp = v["tp"] > 1
    else:
        sp = bool(sp_raw)
        if sp and v["tp"] == 1:
            raise PlannerInputError("layout.sequence_parallel=true with tp=1: sequence parallelism needs tp > 1 (rule sequence_parallel_needs_tp)")

    if v["vpp"] > 1 and v["pp"] == 1:
        raise PlannerInputError(f"layout.vpp={v['vpp']} with pp=1: an interleaved schedule needs pp > 1 (rule vpp_needs_pipeline)")
    if model.moe is None and (v["ep"] > 1 or v["etp"] > 1):
        raise PlannerInputError(f"layout ep={v['ep']} etp={v['etp']} for dense model {model.name}: ep and etp must be 1")

    stages = _stage_layers(model.num_layers, v["pp"], layout.get("pp_first_layers"), layout.get("pp_last_layers"))
    recorded = layout.get("stage_layers")
    if recorded is not None and v["pp"] > 1 and tuple(recorded) != stages:
        raise PlannerInputError(
            f"layout.stage_layers={list(recorded)} but pp_first/last_layers give {list(stages)}: the record is inconsistent"
        )

    fits = result.get("fits")
    mem = result.get("memory_gib") or {}
    if fits is False and not allow_unfit:
        peak, cap = mem.get("peak"), mem.get("capacity")
        detail = f"predicted peak {peak:.1f} GiB > {cap:.1f} GiB" if isinstance(peak, (int, float)) and isinstance(cap, (int, float)) else "fits=false"
        raise PlannerInputError(
            f"layout does not fit in GPU memory ({detail}): refusing to write launch files that would run out of memory"
        )

    gpn = cluster.gpus_per_node
    if gpus <= gpn:
        nnodes, nproc = 1, gpus
    else:
        nnodes, nproc = gpus // gpn, gpn
    plan = Plan(
        result=result, model=model, cluster=cluster, recompute=recompute,
        recompute_layers=_int(layout.get("recompute_layers") or 0, "recompute_layers") if recompute == "full" else 0,
        recompute_modules=_recompute_modules(layout) if recompute == "selective" else (),
        sp=sp, precision=precision, attention=attention, kernels=kernels, loss=loss,
        tp_comm_overlap=tp_comm_overlap and sp, ep_comm_overlap=ep_comm_overlap, moe_dispatcher=moe_dispatcher,
        grad_dtype=grad_dtype, grad_accum=m, gpus=gpus, stage_layers=stages, nnodes=nnodes, nproc_per_node=nproc,
        gpu_name=str(result.get("gpu") or cluster.gpu), **v,
    )
    return _with_header(plan, command)


def _stage_layers(num_layers: int, pp: int, first, last) -> tuple[int, ...]:
    if pp == 1:
        return (num_layers,)
    if pp > num_layers:
        raise PlannerInputError(f"layout.pp={pp} > {num_layers} layers: every stage needs a layer (rule pp_stage_split)")
    f = _int(first, "pp_first_layers") if first is not None else 0
    l = _int(last, "pp_last_layers") if last is not None else 0
    from costmodel.pipeline import stage_layer_split

    fo, mo, lo, ok = stage_layer_split(num_layers, pp, f, l)
    fo, mo, lo, ok = int(fo), int(mo), int(lo), bool(ok)
    if not ok:
        raise PlannerInputError(
            f"layout pp_first_layers={first} pp_last_layers={last}: {num_layers} layers do not split over pp={pp} stages "
            f"with equal middle stages (rule pp_stage_split)"
        )
    if pp == 2:
        return (fo, lo)
    return (fo,) + (mo,) * (pp - 2) + (lo,)


# ----------------------------------------------------------------------------------- header

_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")


def sanitize(text: str) -> str:
    """One printable line: control characters (newlines included) become visible escapes, so a
    value can never end a comment line and start a command."""
    return _CONTROL.sub(lambda mt: mt.group(0).encode("unicode_escape").decode("ascii"), str(text))


def safe_name(text: str, fallback: str = "planner") -> str:
    """Letters, digits, ``.``, ``_`` and ``-`` only (job names, rendezvous ids)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", str(text)).strip("-.")
    return cleaned[:60] or fallback


def _with_header(plan: Plan, command: str) -> Plan:
    r = plan.result
    lines = [
        f"Generated by planner {sanitize(r.get('planner_version') or 'unknown version')} (planner export).",
        f"Model {sanitize(plan.model.name)} on {plan.gpus} x {sanitize(plan.gpu_name)} "
        f"(cluster {sanitize(plan.cluster.name)}: {plan.nnodes} node(s) x {plan.nproc_per_node} GPUs).",
        f"Layout: {plan.layout_summary()}.",
    ]
    step, tps, mfu = _num(r, "step_time_s"), _num(r, "tokens_per_s_per_gpu"), _num(r, "mfu")
    pred = []
    if step is not None:
        pred.append(f"step {step:.3f} s")
    if tps is not None:
        pred.append(f"{tps:,.0f} tokens/s/GPU")
    if mfu is not None:
        pred.append(f"MFU {100 * mfu:.1f}%")
    if pred:
        lines.append("Predicted: " + ", ".join(pred) + ".")
    mem = r.get("memory_gib") or {}
    peak, cap = mem.get("peak"), mem.get("capacity")
    if isinstance(peak, (int, float)) and isinstance(cap, (int, float)):
        verdict = {True: "fits", False: "DOES NOT FIT"}.get(r.get("fits"), "fit unknown")
        lines.append(f"Peak memory: {peak:.1f} GiB of {cap:.1f} GiB per GPU ({verdict}).")
    evaluated = r.get("command") or ""
    if command:
        lines.append(f"Command: {sanitize(command)}")
        if evaluated and evaluated != command:
            lines.append(f"Evaluated by: {sanitize(evaluated)}")
    elif evaluated:
        lines.append(f"Command: {sanitize(evaluated)}")
    return Plan(**{**plan.__dict__, "header": tuple(lines)})


def comment_block(lines, prefix: str = "# ") -> str:
    return "".join(f"{prefix}{sanitize(line)}".rstrip() + "\n" for line in lines)


# ----------------------------------------------------------------------------------- shell


def q(value) -> str:
    """Shell-quote one word (numbers and plain words stay bare)."""
    return shlex.quote(str(value))


def bash_array(name: str, items: list[tuple[str, list]]) -> str:
    """``NAME=( ... )`` with one flag and its (quoted) values per line."""
    out = [f"{name}=("]
    for flag, values in items:
        out.append("  " + " ".join([q(flag)] + [q(x) for x in values]))
    out.append(")")
    return "\n".join(out) + "\n"


def check_entrypoint(entrypoint: str) -> str:
    if not isinstance(entrypoint, str) or not entrypoint.strip():
        raise PlannerInputError(f"entrypoint={entrypoint!r}: give the training script path, e.g. pretrain_gpt.py")
    if "\x00" in entrypoint:
        raise PlannerInputError("entrypoint contains a NUL byte: a command-line argument cannot hold one")
    if entrypoint.startswith("-"):
        raise PlannerInputError(
            f"entrypoint={entrypoint!r} starts with '-': torchrun would read it as an option; use ./{entrypoint}"
        )
    return entrypoint


# ----------------------------------------------------------------------------------- files


def write_atomically(files: dict[Path, tuple[str, int]]) -> list[Path]:
    """Write every file to a temporary sibling, then rename them all into place; on any error
    remove the temporaries and leave existing files untouched."""
    temps: list[tuple[Path, Path]] = []
    try:
        for path, (text, mode) in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            tmp_path = Path(tmp)
            temps.append((tmp_path, path))
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp_path, mode)
        for tmp_path, path in temps:
            os.replace(tmp_path, path)
    except BaseException:
        for tmp_path, _ in temps:
            try:
                tmp_path.unlink()
            except FileNotFoundError:
                pass
        raise
    return [path for _, path in temps]


def _recompute_modules(layout: dict) -> tuple:
    """layout.recompute_modules as a tuple of known module names (None -> ())."""
    from costmodel.layout import recompute_modules_mask

    modules = layout.get("recompute_modules")
    if modules is None:
        return ()
    if isinstance(modules, str) or not isinstance(modules, (list, tuple)):
        raise PlannerInputError(f"layout.recompute_modules={modules!r}: must be a list of module names")
    recompute_modules_mask(modules)
    return tuple(modules)


def partial_recompute_per_chunk(plan: "Plan") -> int:
    """Layers per virtual chunk that partial full recompute covers (0 = all layers); the
    same rounding the cost model priced (costmodel.pipeline.partial_recompute_per_chunk)."""
    from costmodel.pipeline import partial_recompute_per_chunk as per_chunk

    if plan.recompute != "full" or plan.recompute_layers == 0:
        return 0
    first, last = plan.stage_layers[0], plan.stage_layers[-1]
    k, distinct = per_chunk(plan.model.num_layers, plan.pp, plan.vpp, first if plan.pp > 1 else 0,
                            last if plan.pp > 1 else 0, plan.recompute_layers)
    return int(k) if bool(distinct) else 0
