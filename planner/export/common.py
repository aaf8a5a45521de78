"""What every exporter shares: the checked plan, refusals, headers, shell quoting, atomic writes.

An exporter (``planner.export.registry.Exporter``) turns a ``Plan`` (an evaluated layout that
``build_plan`` checked against its record and judged with the rules of ``search.rules``, the one
rule set evaluate, search and validate use) into file contents, or raises ``CannotExpress``
naming the rule the target framework would break. Nothing here writes outside
``write_atomically``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping, Optional

from costmodel.options import FLAG, IMPLEMENTATION_OPTIONS, INT, OPTIONS, OPTIONS_BY_NAME, UNRECORDED, Layout
from hardware_catalog.errors import DoesNotFit, PlannerInputError
from hardware_catalog.schema import ClusterSpec, ModelSpec
from planner.frameworks import window_text  # noqa: F401 (exporters import it from here)
from planner.frameworks.table import CannotExpress, NotThisRelease  # noqa: F401 (exporters import them from here)
from planner.reports import counted

_REQUIRED = tuple(o.name for o in OPTIONS if o.kind == INT)
"""Options every record states: the integers of a layout (degrees, ZeRO stage, batch)."""


@dataclass(frozen=True)
class Plan:
    """One evaluated layout that obeys the rules (``search.rules``), with derived launch numbers.

    Every layout option reads as an attribute (``plan.tp``, ``plan.attention``, ...): the
    ``Layout`` value, so options that mean "default" are None (``recompute_layers``: every layer;
    ``recompute_modules``: core_attn; ``sequence_parallel``: automatic, see ``sp``). Read them
    through ``partial_recompute_per_chunk(plan)`` and ``selective_modules(plan)``, which give
    what runs (0 / empty where the recompute mode does not use them).
    """

    result: dict
    model: ModelSpec
    cluster: ClusterSpec
    layout: Layout
    """The evaluated layout (``Layout.from_values`` of the record's ``layout``), rules checked."""
    grad_accum: int
    """Micro-batches per pipeline per step, gbs / (dp * mbs)."""
    gpus: int
    stage_layers: tuple[int, ...]
    """Transformer layers on each pipeline stage, first to last (length pp)."""
    nnodes: int
    nproc_per_node: int
    gpu_name: str
    header: tuple[str, ...] = field(default=())
    options: Mapping[str, object] = field(default_factory=dict, compare=False)
    """Per-format export options (``export_layout(options=...)``), e.g. ``torchtitan_version``."""

    def __getattr__(self, name: str):
        # Only reached for names that are not fields or properties: the layout options.
        layout = self.__dict__.get("layout")
        if layout is not None and name in OPTIONS_BY_NAME:
            return getattr(layout, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def sp(self) -> bool:
        """Sequence parallelism as it runs (requested or automatic, with tp > 1)."""
        return self.layout.sp

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
    def shard_replicas(self) -> int:
        """Replicas of each ZeRO shard under hybrid sharding (dp / dp_shard); 1 without it."""
        if self.zero >= 1 and self.dp_shard and self.dp_shard < self.dp:
            return self.dp // self.dp_shard
        return 1

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
            chunks = f": the first {per_chunk} of each of its {self.vpp} model chunks" if self.vpp > 1 else ""
            recompute += f" ({self.recompute_layers} layer(s) per stage{chunks}, block method)"
        modules = selective_modules(self)
        if modules:
            recompute += f" ({', '.join(modules)})"
        return (
            f"TP{self.tp} PP{self.pp}{split} DP{self.dp} CP{self.cp} EP{self.ep} ETP{self.etp} VPP{self.vpp} "
            f"ZeRO-{self.zero} SP {sp}; mbs {self.mbs}, gbs {self.gbs} ({counted(self.grad_accum, 'micro-batch', 'micro-batches')}/step), "
            f"seq {self.seq_len}, recompute {recompute}, {self.precision}; "
            + ", ".join(implementation_summary(self))
        )


def implementation_summary(plan: Plan) -> list[str]:
    """How the header names the implementation settings the plan was priced with: every
    implementation option with a header phrase (``Option.phrase``, declaration order), where
    its ``phrase_when`` says; a flag reads "on" / "off"."""
    out = []
    for name in IMPLEMENTATION_OPTIONS:
        opt = OPTIONS_BY_NAME[name]
        value = getattr(plan.layout, name)
        shown = {"always": True, "set": value != opt.default, "moe": plan.is_moe}[opt.phrase_when]
        if opt.phrase and shown and opt.applies(plan.layout):
            out.append(opt.phrase.format(value=("on" if value else "off") if opt.kind == FLAG else value))
    return out


def _stage_text(stages: tuple[int, ...]) -> str:
    if len(stages) <= 2:
        return "/".join(str(s) for s in stages)
    middle = stages[1:-1]
    if len(set(middle)) == 1:
        return f"{stages[0]}/{middle[0]}x{len(middle)}/{stages[-1]}"
    return "/".join(str(s) for s in stages)


# ----------------------------------------------------------------------------------- input


def _num(result: dict, key: str) -> Optional[float]:
    value = result.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _record_layout(result) -> dict:
    """The record's ``layout`` object, with every required option present."""
    if not isinstance(result, dict):
        raise PlannerInputError(f"result={type(result).__name__}: expected the dict of 'planner evaluate --json'")
    values = result.get("layout")
    if not isinstance(values, dict):
        raise PlannerInputError("result has no 'layout' object: expected the dict of 'planner evaluate --json'")
    missing = [k for k in _REQUIRED if k not in values]
    if missing:
        raise PlannerInputError(f"result.layout lacks {', '.join(missing)}: expected the layout of 'planner evaluate --json'")
    return values


def parse_layout(values: dict) -> Layout:
    """A record's layout values -> ``Layout`` (``Layout.from_values``, errors naming
    ``layout.<option>``; ``recompute_layers`` in layers per stage, as records state it)."""
    return Layout.from_values({k: v for k, v in values.items() if k not in UNRECORDED}, where="layout.")


def _check_names(result: dict, model: ModelSpec, cluster: ClusterSpec) -> None:
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


def _check_fits(result: dict, allow_unfit: bool) -> None:
    mem = result.get("memory_gib") or {}
    if result.get("fits") is False and not allow_unfit:
        peak, cap = mem.get("peak"), mem.get("capacity")
        detail = f"predicted peak {peak:.1f} GiB > {cap:.1f} GiB" if isinstance(peak, (int, float)) and isinstance(cap, (int, float)) else "fits=false"
        raise DoesNotFit(
            f"layout does not fit in GPU memory ({detail}): refusing to write launch files that would run out of memory"
        )


def build_plan(result: dict, model: ModelSpec, cluster: ClusterSpec, *, command: str = "",
               allow_unfit: bool = False, allow_cross_node_tp: bool = True) -> Plan:
    """Check an evaluation record (``planner evaluate --json``) against itself, the model and the
    cluster, judge its layout with the rules (``search.rules.check_layout``), and derive launcher
    numbers. Raises ``PlannerInputError`` (one line) on bad input.

    ``allow_cross_node_tp`` (default True): a TP group wider than the scale-up domain is a
    planning choice the evaluation already accepted (``--allow-cross-node-tp``, which the record
    does not carry), not something a launcher refuses; pass False to hold the record to the
    search's default."""
    from hardware_catalog import get_gpu
    from search.rules import check_layout

    values = _record_layout(result)
    layout = parse_layout(values)
    _check_names(result, model, cluster)
    gpus = layout.gpus
    for where, value in (("result.gpus", result.get("gpus")), ("layout.gpus", values.get("gpus"))):
        if value is not None and value != gpus:
            raise PlannerInputError(f"{where}={value} but tp*cp*pp*dp = {gpus}: the record is inconsistent")
    check_layout(model, cluster, get_gpu(cluster.gpu), layout, gpus=gpus, allow_cross_node_tp=allow_cross_node_tp)
    m = layout.grad_accum
    if values.get("grad_accum") is not None and values["grad_accum"] != m:
        raise PlannerInputError(f"layout.grad_accum={values['grad_accum']} but gbs/(dp*mbs) = {m}: the record is inconsistent")
    stages = _stage_layers(model.num_layers, layout)
    recorded = values.get("stage_layers")
    if recorded is not None and layout.pp > 1 and tuple(recorded) != stages:
        raise PlannerInputError(
            f"layout.stage_layers={list(recorded)} but pp_first/last_layers give {list(stages)}: the record is inconsistent"
        )
    _check_fits(result, allow_unfit)

    gpn = cluster.gpus_per_node
    nnodes, nproc = (1, gpus) if gpus <= gpn else (gpus // gpn, gpn)
    plan = Plan(result=result, model=model, cluster=cluster, layout=layout, grad_accum=m, gpus=gpus,
                stage_layers=stages, nnodes=nnodes, nproc_per_node=nproc,
                gpu_name=str(result.get("gpu") or cluster.gpu))
    return _with_header(plan, command)


def _stage_layers(num_layers: int, layout: Layout) -> tuple[int, ...]:
    """Layers on each stage (the rule pp_stage_split has passed)."""
    from costmodel.pipeline import stage_layer_split

    pp = layout.pp
    if pp == 1:
        return (num_layers,)
    fo, mo, lo, _ = stage_layer_split(num_layers, pp, layout.pp_first_layers or 0, layout.pp_last_layers or 0)
    fo, mo, lo = int(fo), int(mo), int(lo)
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
    from planner.common import planner_version

    r = plan.result
    # A search record carries no version (the search layer does not know planner's): this one's.
    lines = [
        f"Generated by planner {sanitize(r.get('planner_version') or planner_version())} (planner export).",
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
        from planner.calibration_use import header_words

        calibrated = header_words(r)  # numbers from a calibration profile say so, and which constants
        lines.append("Predicted: " + ", ".join(pred) + (f"; {calibrated}" if calibrated else "") + ".")
    unwritten = _unwritten_settings(plan.layout)
    if r.get("calibration"):  # a profile's constants priced it: a reader prices with the shipped ones
        unwritten.append(f"--calibration {sanitize(r['calibration'])}")
    if unwritten:  # priced, but no launch file states them: a reader cannot know them
        lines.append("Priced with what no launch file carries (give it to planner evaluate --from-launch "
                     "to re-price this file): " + " ".join(unwritten) + ".")
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
    return replace(plan, header=tuple(lines))


def _unwritten_settings(layout) -> list[str]:
    """The flags of ``layout``'s non-default settings that a reader takes from planner's command
    line, not from the file: the workload's and the container's (``WORKLOAD``, ``CONTAINER``) and
    what every framework table states nowhere (``Table.elsewhere``: "planner's command line")."""
    from costmodel.options import OPTIONS_BY_NAME
    from planner.export import EXPORTERS
    from planner.frameworks.table import CONTAINER, WORKLOAD

    tables = [e.table for e in EXPORTERS.values() if getattr(e, "table", None) is not None]

    def from_command_line(table, option) -> bool:
        return any(o == option and "planner's command line" in why for o, why in table.elsewhere)

    def off_file_in(table, option) -> bool:  # stated nowhere in this format's files, or refused by it
        return from_command_line(table, option) or table.refusal(option, getattr(layout, option, None)) is not None

    said = {o for t in tables for o, why in t.elsewhere if "planner's command line" in why}
    off_file = set(WORKLOAD) | set(CONTAINER) | {o for o in said if all(off_file_in(t, o) for t in tables)}
    out = []
    for name in sorted(off_file):
        opt, value = OPTIONS_BY_NAME.get(name), getattr(layout, name, None)
        if opt is None or value is None or value == opt.default:
            continue
        out.append(opt.flag if value is True else f"{opt.flag} {value}")
    return out


def comment_block(lines, prefix: str = "# ") -> str:
    return "".join(f"{prefix}{sanitize(line)}".rstrip() + "\n" for line in lines)


# ----------------------------------------------------------------------------------- shell


def q(value) -> str:
    """Shell-quote one word (numbers and plain words stay bare)."""
    return shlex.quote(str(value))


def shell_join(words) -> str:
    """Words as one line of shell that gives them back exactly: ``shlex.quote`` each, or, for a
    word holding control characters (a newline would end a comment line), bash's ``$'...'``
    with the characters escaped."""
    return " ".join(_ansi_c_quote(w) if _CONTROL.search(w) else shlex.quote(w) for w in map(str, words))


def _ansi_c_quote(word: str) -> str:
    out = []
    for ch in word:
        if ch in "\\'":
            out.append("\\" + ch)
        elif _CONTROL.match(ch):
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x80 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


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
    remove the temporaries and leave existing files untouched (``planner.outputs``, the one
    writer: a special file at a path is refused, never replaced)."""
    from planner.outputs import write_files_atomically

    return write_files_atomically(files, "--out")


def selective_modules(plan: "Plan") -> tuple:
    """With selective recompute, the submodules the record names (empty: Megatron's default,
    core_attn); empty with any other recompute mode."""
    if plan.recompute != "selective":
        return ()
    return tuple(plan.recompute_modules or ())


def partial_recompute_per_chunk(plan: "Plan") -> int:
    """Layers per virtual chunk that partial full recompute covers (0 = all layers); the
    same rounding the cost model priced (costmodel.pipeline.partial_recompute_per_chunk)."""
    from costmodel.pipeline import partial_recompute_per_chunk as per_chunk

    if plan.recompute != "full" or not plan.recompute_layers:
        return 0
    first, last = plan.stage_layers[0], plan.stage_layers[-1]
    k, distinct = per_chunk(plan.model.num_layers, plan.pp, plan.vpp, first if plan.pp > 1 else 0,
                            last if plan.pp > 1 else 0, plan.recompute_layers)
    return int(k) if bool(distinct) else 0
