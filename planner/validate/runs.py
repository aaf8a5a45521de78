"""Runs files: load one, and map each row to a model, a cluster, pins and searched grids.

A row (the runs format, ``planner.validate.schema``) states some of a layout (degrees, batch,
recompute, ZeRO, precision) and names its framework in free text. What the row states is pinned,
what it leaves out is searched, and the framework's profile (``profiles.py``) adds how that
framework runs a layout. Settings the row states by the planner's own option names
(``settings.attention``, ``layout.recompute_modules``, ...) win over the profile.

A file that is not a list of rows, or a row that breaks the format, is refused as a whole
(``load_runs``: one line naming the row and the field). A row that is well formed but cannot be
mapped (a GPU or model the catalog lacks, no layout the rules allow) is listed with the reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Optional, Union

from costmodel.options import OPTIONS_BY_NAME, RECOMPUTE
from hardware_catalog.errors import PlannerInputError
from hardware_catalog.files import read_input_bytes, show
from planner.validate.models import map_model, model_notes
from planner.frameworks.profiles import (LAYOUT_HEAD_SLOTS, LAYOUT_SLOTS, LOOPED_TWO_CHUNKS, PP_STAGES_MICROBATCHES, RowFacts, apply_profiles,
                                         model_parts)
from planner.validate.schema import STATED_SETTINGS, RowError, RunRow, _label as _row_label, parse_row, says_unknown

MBS_CHOICES = [1, 2, 4, 8]
"""Micro-batch sizes tried where a row does not state one."""
CLUSTER_FIELDS = ("gpus_per_node", "scaleup_domain_size", "nic", "nics_per_node")
"""Cluster facts a row may state; they override its cluster's."""

__all__ = ["MBS_CHOICES", "STATED_SETTINGS", "MappedRun", "load_runs", "map_model", "map_run", "parse_row"]


@dataclass
class MappedRun:
    """One runs-file row mapped onto planner objects."""

    row: RunRow
    model: object
    cluster: object
    gpu: object
    gpus: int
    pins: dict
    """Layout knobs the source states."""
    searched: dict
    """Knob -> candidate values for what the source leaves unstated."""
    assumptions: list[str] = field(default_factory=list)
    reported: float = 0.0
    """Measured tokens/s/GPU (converted: see the assumptions)."""
    reported_memory_gib: Optional[float] = None

    @property
    def id(self) -> str:
        return self.row.id or "?"

    @property
    def source(self) -> str:
        return self.row.source_key()

    @property
    def confidence(self) -> str:
        return self.row.confidence


# ------------------------------------------------------------------------------------ loading


def _read(path: Optional[Path]) -> tuple[str, str]:
    if path is None:
        return resources.files("planner").joinpath("data/published_runs.json").read_text(), "the shipped reference set"
    where = f"runs file {show(path)}"
    try:
        data = read_input_bytes(path, where)
    except OSError as err:
        raise PlannerInputError(f"{where}: cannot read ({err.strerror or type(err).__name__})") from None
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark (Windows editors, PowerShell) is no error: RFC 8259 Sec. 8.1
    except UnicodeDecodeError:
        raise PlannerInputError(f"{where}: not UTF-8 text (a runs file is JSON: a list of runs)") from None
    if not text.strip():
        raise PlannerInputError(f"{where}: empty (a runs file is JSON: a list of runs)")
    return text, where


def load_runs(path: Optional[Path]) -> list[dict]:
    """The rows of a runs file (None: the shipped reference set), each checked against the runs
    format; a bad file, or any bad rows, is one ``PlannerInputError`` naming every bad row,
    grouped by field (``read_runs``). Its callers (cross-validation, the envelope) take no
    --skip-invalid, so the error does not offer it."""
    return read_runs(path, offer_skip=False)[0]


def read_runs(path: Optional[Path], skip_invalid: bool = False, offer_skip: bool = True) -> tuple[list[dict], list[str]]:
    """(the valid rows, one line per invalid row skipped). Without ``skip_invalid`` any invalid
    row (or a duplicate id) is a ``PlannerInputError`` naming them all, grouped by field; with
    it they are left out and listed (a file with no valid row is still an error). ``offer_skip``:
    the error says --skip-invalid would go on with the other rows (validate's table and calibrate take it)."""
    text, where = _read(path)
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as err:
        rows = _json_lines(text, where) if err.msg == "Extra data" else None
        if rows is None:
            raise PlannerInputError(f"{where}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    if isinstance(rows, dict) and isinstance(rows.get("runs"), list):
        rows = rows["runs"]
    if not isinstance(rows, list):
        raise PlannerInputError(f"{where}: expected a JSON list of runs (or {{\"runs\": [...]}}), got {type(rows).__name__}")
    if not rows:
        raise PlannerInputError(f"{where}: holds no runs (an empty list)")
    errors: list[RowError] = []
    valid: list[dict] = []
    first_of: dict = {}
    for i, raw in enumerate(rows, 1):
        try:
            parse_row(raw, i)
        except RowError as err:
            errors.append(err)
            continue
        ident = raw.get("id")
        if isinstance(ident, str) and ident in first_of:  # one run counted twice skews every summary
            errors.append(RowError(_row_label(raw, i), "id", f"duplicate id {ident!r} (row {first_of[ident]} has it)"))
            continue
        if isinstance(ident, str):
            first_of[ident] = i
        valid.append(raw)
    if errors and (not skip_invalid or not valid):
        hint = "; --skip-invalid leaves them out and goes on with the others" if valid and not skip_invalid and offer_skip else ""
        raise PlannerInputError(f"{where}: {len(errors)} of {len(rows)} rows invalid: {grouped(errors)}{hint}")
    return valid, [str(err) for err in errors]


def grouped(errors: list, shown: int = 8) -> str:
    """Row errors grouped by field, on one line: 'field F (rows 3, 9, 12): reason of the first; ...'.
    Errors of no one field (a missing model, a missing measurement, a row that is no object) are
    grouped by their reason, so each row is listed with its own."""
    by_field: dict = {}
    for err in errors:  # of no field: by what the reason says, not the value it quotes
        key = "" if err.field else "expected an object" if err.reason.startswith("expected an object") else err.reason
        by_field.setdefault((err.field, key), []).append(err)
    parts = []
    for (name, key), errs in by_field.items():
        labels = ", ".join([e.label for e in errs[:shown]] + ([f"{len(errs) - shown} more"] if len(errs) > shown else []))
        what = f"field {name} ({labels})" if name else f"not a run ({labels})" if key.startswith("expected an object") \
            else labels
        parts.append(f"{what}: {errs[0].reason}")
    return "; ".join(parts)


def _json_lines(text: str, where: str) -> list:
    """A JSON Lines file (one run per line), as a list."""
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise PlannerInputError(f"{where}: not valid JSON or JSON Lines ({err.msg} at line {n} column {err.colno})") from None
    return rows


# ------------------------------------------------------------------------------------ mapping


def _resolve_path(text: str, base_dir: Optional[Path]) -> str:
    """A file named in a row, relative to the runs file's folder."""
    path = Path(text).expanduser()
    if base_dir is not None and not path.is_absolute() and (base_dir / path).exists():
        return str(base_dir / path)
    return text


def _hardware(row: RunRow, base_dir: Optional[Path]):
    """(gpu, cluster, notes): the row's cluster (named, a file, or the GPU's preset) with the
    cluster facts the row states over it."""
    from hardware_catalog import default_cluster_for_gpu, get_cluster, get_gpu
    from hardware_catalog.hardware import cluster_with_defaults

    hw = row.hardware
    try:
        gpu = get_gpu(hw.gpu) if hw.gpu else None
    except PlannerInputError as err:
        raise PlannerInputError(f"hardware.gpu: {err}") from None
    try:
        cluster = get_cluster(_resolve_path(hw.cluster, base_dir)) if hw.cluster else default_cluster_for_gpu(gpu.name)
    except PlannerInputError as err:
        raise PlannerInputError(f"hardware.cluster: {err}") from None
    if gpu is not None and get_gpu(cluster.gpu).name != gpu.name:
        raise PlannerInputError(f"hardware.gpu '{hw.gpu}' ({gpu.name}) disagrees with cluster '{cluster.name}' ({cluster.gpu})")
    gpu = get_gpu(cluster.gpu)
    stated = {k: getattr(hw, k) for k in CLUSTER_FIELDS if getattr(hw, k) is not None}
    if stated.get("nic") is not None:
        from hardware_catalog import get_interconnect

        try:
            stated["nic"] = get_interconnect(stated["nic"]).name
        except PlannerInputError as err:
            raise PlannerInputError(f"hardware.nic: {err}") from None
    changed = {k: v for k, v in stated.items() if getattr(cluster, k) != v}
    if not changed:
        return gpu, cluster, []
    fields = {k: v for k, v in cluster.model_dump().items() if k not in ("aliases", "sources")}
    if "gpus_per_node" in changed:  # the node changed: re-derive what follows from it
        for k in ("scaleup_domain_size", "nics_per_node"):
            fields.pop(k)
    fields.update(stated, name=f"{cluster.name}+row", sources={"*": f"preset {cluster.name} with the runs-file row's facts"})
    cluster = cluster_with_defaults(fields, "hardware")
    said = ", ".join(f"{k} {v}" for k, v in changed.items())
    return gpu, cluster, [f"cluster {cluster.name.removesuffix('+row')} with the row's {said}"]


def _gpus(row: RunRow) -> tuple[int, list[str]]:
    hw = row.hardware
    if hw.num_gpus:
        return hw.num_gpus, []
    if hw.num_nodes and hw.gpus_per_node:
        return hw.num_nodes * hw.gpus_per_node, [f"num_gpus {hw.num_nodes * hw.gpus_per_node} = {hw.num_nodes} nodes x {hw.gpus_per_node}"]
    lay = row.layout
    degrees = [getattr(lay, k) for k in ("tp", "pp", "cp", "dp")]
    if all(isinstance(d, int) for d in degrees[:2] + degrees[3:]):
        n = lay.tp * lay.pp * (lay.cp if isinstance(lay.cp, int) else 1) * lay.dp
        return n, [f"num_gpus {n} = tp x pp x cp x dp (not stated)"]
    raise PlannerInputError("hardware.num_gpus: not stated (give it, num_nodes and gpus_per_node, or tp, pp and dp)")


def _seq(row: RunRow, model, from_preset: bool) -> tuple[int, list[str]]:
    seq = row.seq_len()
    if seq:
        return seq, []
    if "torchtitan" in row.framework_text().lower():
        return 8192, ["seq_len 8192 (torchtitan default; unstated)"]
    if from_preset:
        return model.default_seq_len, [f"seq_len {model.default_seq_len} (the {model.name} preset's default; unstated)"]
    raise PlannerInputError("sequence length not stated (give layout.seq_len or model.seq_length)")


def _gbs(row: RunRow, seq: int) -> tuple[int, list[str]]:
    lay = row.layout
    if isinstance(lay.global_batch_size, int):
        tokens = lay.global_batch_tokens
        if tokens and tokens != lay.global_batch_size * seq:
            raise PlannerInputError(f"global_batch_size {lay.global_batch_size} and global_batch_tokens {tokens:,} disagree "
                                    f"at seq {seq} ({tokens:,} / {seq} = {tokens / seq:g} sequences): give one")
        return lay.global_batch_size, []
    if lay.global_batch_tokens:
        gbs = max(lay.global_batch_tokens // seq, 1)
        return gbs, [f"gbs {gbs} = {lay.global_batch_tokens} tokens per batch / seq {seq}"]
    accum = (lay.model_extra or {}).get("grad_accum_steps")
    if isinstance(lay.micro_batch_size, int) and isinstance(lay.dp, int) and isinstance(accum, int) and accum > 0:
        gbs = lay.micro_batch_size * lay.dp * accum
        return gbs, [f"gbs {gbs} = mbs {lay.micro_batch_size} x dp {lay.dp} x {accum} accumulation steps"]
    hint = "" if row.reference is not None else " (give layout.global_batch_size, or global_batch_tokens)"
    raise PlannerInputError(f"global batch size not published{hint}")


def _zero_from_row(lay) -> Optional[list[int]]:
    z = lay.zero_stage
    text = " ".join(str(v or "") for v in (lay.zero_stage, lay.fsdp, lay.distributed_optimizer))
    if isinstance(z, int):
        return [z]
    if "_HYBRID_SHARD_ZERO2" in text.upper():  # SHARD_GRAD_OP inside a node (see _hybrid_shard)
        return [2]
    if "HYBRID_SHARD" in text.upper():  # FULL_SHARD inside a node
        return [3]
    if "SHARD_GRAD_OP" in text:
        return [2]
    if "FULL_SHARD" in text or "FSDP2" in text or "Megatron-FSDP" in text:
        return [3]
    if "distributed optimizer" in text or lay.distributed_optimizer is True or "per model chunk" in text:
        # Megatron's distributed optimizer (and MegaScale's "ZeRO-2-style" DP, which reduce-scatters
        # gradients and all-gathers weights per model chunk, Jiang et al. 2024 Sec. 3.2) keeps the
        # whole gradient buffer through the step and reduce-scatters it once: ZeRO-1 here.
        return [1]
    low = text.lower()
    stage = re.search(r"zero[\s_-]*(?:stage[\s_-]*)?([0-3])\b|\bstage[\s_-]*([0-3])\b", low)
    if stage:  # "ZeRO-1", "zero stage 2", "stage 3" (DeepSpeed's names)
        return [int(stage.group(1) or stage.group(2))]
    if re.search(r"fsdp(?!\s*=\s*0)", low):
        return [3]  # PyTorch FSDP's default sharding is FULL_SHARD
    if re.search(r"\bddp\b", low):
        return [0]
    return None  # unstated: Megatron with or without the distributed optimizer


def _hybrid_shard(row: RunRow, cluster, pins: dict, notes: list[str]) -> None:
    """PyTorch FSDP's HYBRID_SHARD (and _HYBRID_SHARD_ZERO2) shard within a node and replicate
    across nodes (torch.distributed.fsdp.ShardingStrategy docs): the sharding group is the node's
    GPUs (``dp_shard``), unless the row states its own."""
    lay = row.layout
    text = " ".join(str(v or "") for v in (lay.zero_stage, lay.fsdp, lay.distributed_optimizer)).upper()
    if "HYBRID_SHARD" not in text or isinstance(lay.zero_stage, int) or row.stated_settings().get("dp_shard") is not None:
        return
    pins["dp_shard"] = cluster.gpus_per_node
    notes.append(f"FSDP HYBRID_SHARD: ZeRO-{pins['zero']} within each node, replicated across nodes "
                 f"(dp_shard {cluster.gpus_per_node})")


def _recompute_from_row(lay) -> Optional[list[str]]:
    r = str(lay.activation_recompute or "").lower().strip()
    for mode in RECOMPUTE:
        if r.startswith(mode):
            return [mode]
    if re.match(r"(off|no|disabled|false)\b", r):  # checkpointing said off in words: none
        return ["none"]
    return None


def _unknown(lay, knob: str, notes: list[str]) -> bool:
    """True when the row does not give ``knob`` as a number (text is said in the notes)."""
    value = getattr(lay, knob)
    if isinstance(value, str):
        notes.append(f"layout.{knob} {value!r}: not a number, searched")
    return not isinstance(value, int)


def _degrees(lay, model, gpus: int, pins: dict, notes: list[str]) -> dict:
    """Pins the stated degrees (dp derived where tp, pp and cp are stated); returns the
    searched expert degrees of a MoE model whose EP the row does not state."""
    for knob in ("tp", "pp", "cp", "dp"):
        if not _unknown(lay, knob, notes):
            pins[knob] = getattr(lay, knob)
    if "dp" not in pins and "tp" in pins and "pp" in pins:
        split = pins["tp"] * pins["pp"] * pins.get("cp", 1)
        if gpus % split:
            raise PlannerInputError(f"tp {pins['tp']} x pp {pins['pp']} x cp {pins.get('cp', 1)} does not divide {gpus} GPUs")
        pins["dp"] = gpus // split
        notes.append(f"dp {pins['dp']} = {gpus} GPUs / (tp x pp x cp) (not stated)")
    searched = {}
    if model.moe is not None and _unknown(lay, "ep", notes) and lay.ep is not None:
        searched["ep"] = [e for e in (1, 2, 4, 8, 16, 32, 64, 128, 256) if model.moe.num_experts % e == 0 and gpus % e == 0]
    else:
        pins["ep"] = (lay.ep if isinstance(lay.ep, int) else 1) if model.moe is not None else 1
    stated = [f"layout.{k} {getattr(lay, k)}" for k in ("ep", "expert_tp") if isinstance(getattr(lay, k), int) and getattr(lay, k) > 1]
    if model.moe is None and stated:
        notes.append(f"{' and '.join(stated)}: {model.name} has no experts; priced without expert parallelism "
                     "(is the model right?)")
    pins["etp"] = lay.expert_tp if isinstance(lay.expert_tp, int) else 1
    return searched


def _layout_from_row(lay, model, gpus: int, pins: dict, notes: list[str]) -> dict:
    """Pins the row's degrees, batch split, ZeRO and recompute into ``pins``; returns what it
    leaves unstated as searched grids."""
    searched = _degrees(lay, model, gpus, pins, notes)
    if _unknown(lay, "micro_batch_size", notes):
        searched["mbs"] = list(MBS_CHOICES)
    else:
        pins["mbs"] = lay.micro_batch_size
    schedule = str(getattr(lay, "pipeline_schedule", None) or "").lower()
    if not _unknown(lay, "vp", notes):
        pins["vpp"] = lay.vp
    elif "1f1b" in schedule and "interleav" not in schedule and "interleav" not in str(lay.vp or "").lower():
        # The source names plain 1F1B (PipeDream-Flush, Narayanan et al. 2021 Sec. 2.2): one model
        # chunk per stage, not interleaved.
        pins["vpp"] = 1
        notes.append(f"pipeline_schedule {lay.pipeline_schedule!r}: one chunk per stage (vpp 1)")
    else:
        # Every chunk count a stage's layers allow (the rules keep the ones that split stages);
        # text saying "interleaved" (and not "1F1B / interleaved", either of them) rules out one chunk.
        interleaved = "interleav" in str(lay.vp or "").lower() or ("interleav" in schedule and "/" not in schedule)
        first = 2 if interleaved else 1
        searched["vpp"] = list(range(first, model.num_layers + 1))
    zero = _zero_from_row(lay)
    if zero is None:
        searched["zero"] = [0, 1]
        said = [f"{k} {getattr(lay, k)!r}" for k in ("zero_stage", "fsdp", "distributed_optimizer")
                if isinstance(getattr(lay, k), str) and not says_unknown(getattr(lay, k))]
        if said:  # text that names no stage: say it was not read, not that nothing was stated
            notes.append(f"layout.{' and '.join(said)}: no ZeRO stage read from it (0-3, 'ZeRO-2', 'FULL_SHARD', "
                         "'SHARD_GRAD_OP', 'DDP', 'distributed optimizer'); zero searched")
    else:
        pins["zero"] = zero[0]
    rc = _recompute_from_row(lay)
    if rc is None:
        searched["recompute"] = list(RECOMPUTE)
        text = lay.activation_recompute
        if isinstance(text, str) and not says_unknown(text):
            notes.append(f"layout.activation_recompute {text!r}: not {', '.join(RECOMPUTE)}; recompute searched")
    else:
        pins["recompute"] = rc[0]
    return searched


def _row_facts(row: RunRow, model, gpu) -> RowFacts:
    lay = row.layout
    rc = _recompute_from_row(lay)
    key = (row.source.key or "") if not isinstance(row.source, (str, type(None))) else (row.source or "")
    stated = set(row.stated_settings()) | ({"sequence_parallel"} if lay.sequence_parallel is not None else set())
    return RowFacts(framework=row.framework_text().lower(), year=row.source_year(), source=key,
                    precision=str(lay.precision or "").lower(), recompute=rc[0] if rc else None, gpu=gpu.name,
                    model_parts=model_parts(model), model_name=model.name, stated=frozenset(stated))


def _apply_stated(stated: dict, pins: dict, searched: dict, assumptions: list[str]) -> None:
    """Settings the row states by option name (``STATED_SETTINGS``), checked, over the profile."""
    for name in STATED_SETTINGS:
        value = stated.get(name)
        if value is None or (name == "recompute_modules" and not value):
            continue
        value = pins[name] = OPTIONS_BY_NAME[name].parse(value)
        searched.pop(name, None)
        if name == "recompute_modules":  # Megatron-Core fine-grained selective recompute
            pins["recompute"] = "selective"
            searched.pop("recompute", None)
            value = ",".join(value)
        assumptions.append(f"{name}={value} (stated)")


def _span(values: list) -> str:
    if len(values) > 4 and all(isinstance(v, int) and not isinstance(v, bool) for v in values) \
            and values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}-{values[-1]}"
    return ", ".join(str(v) for v in values)


def map_run(row: Union[dict, RunRow], base_dir: Optional[Path] = None) -> MappedRun:
    """A runs-file row -> model, cluster, pinned knobs, searched grids and the assumptions.
    ``base_dir``: the runs file's folder (files a row names are relative to it)."""
    row = row if isinstance(row, RunRow) else parse_row(row)
    gpu, cluster, hw_notes = _hardware(row, base_dir)
    model, from_preset = map_model(row, base_dir, with_origin=True)
    gpus, notes = _gpus(row)
    seq, assumptions = _seq(row, model, from_preset)
    gbs, batch_notes = _gbs(row, seq)
    notes = hw_notes + model_notes(row, model, from_preset) + notes + batch_notes
    pins: dict = {"seq_len": seq, "gbs": gbs}
    searched = _layout_from_row(row.layout, model, gpus, pins, notes)
    _hybrid_shard(row, cluster, pins, notes)
    for name in ("seq_len", "gbs", "mbs", "tp", "pp", "cp", "dp", "vpp", "ep", "etp"):
        if name in pins:  # within what evaluate's flags allow (costmodel.options), e.g. seq_len <= 16M
            OPTIONS_BY_NAME[name].parse(pins[name], f"layout.{name}")
    facts = _row_facts(row, model, gpu)
    settings, profile_notes = apply_profiles(facts, policies=True)
    assumptions += profile_notes
    for name, value in settings.items():
        if value == PP_STAGES_MICROBATCHES:
            value = _one_microbatch_per_stage(pins, gbs)
            if value is None:  # no pipeline, a stated micro-batch, or degrees left to search
                continue
        if value in (LAYOUT_SLOTS, LAYOUT_HEAD_SLOTS):
            value = _layout_slots(pins, model, name, head_only=value == LAYOUT_HEAD_SLOTS)
            if value is None:  # no pipeline stated, or the slots do not split over it
                continue
        if value == LOOPED_TWO_CHUNKS:
            # only where the row says interleaved and not how many chunks (searched from 2)
            if "vpp" not in searched or searched["vpp"][0] < 2:
                continue
            value = 2
            assumptions.append("two model chunks per pipeline rank (torchtitan's default for a looped schedule)")
        if isinstance(value, list):
            searched[name] = list(value)
            pins.pop(name, None)
        else:
            pins[name] = value
            searched.pop(name, None)
    _apply_stated(row.stated_settings(), pins, searched, assumptions)
    precision = str(row.layout.precision or "").lower()
    pins["precision"] = "fp8" if ("fp8" in precision or "float8" in precision) else "bf16"
    if row.reference is None:  # the reference set's rows state how they were read in their own notes
        notes += _read_as(row, gpu) + [_framework_read_as(row, facts, settings)]
    if "fp4" in precision:  # NVFP4 (TE's NVFP4BlockScaling, the fp8_recipe nvfp4); MXFP4 as MXFP8
        _price_fp4(row.layout.precision, gpu, pins, searched, assumptions)
    if row.layout.sequence_parallel is False:
        pins["sequence_parallel"] = False
    elif row.layout.sequence_parallel is True and "tp" in pins:
        # As stated, over any framework profile's pin (e.g. a codebase's default); under TP 1
        # there is nothing to split, so a stated "on" prices as off.
        pins["sequence_parallel"] = pins["tp"] > 1
    elif row.layout.sequence_parallel is True:  # TP searched: SP wherever the search puts TP > 1
        pins.pop("sequence_parallel", None)
    try:
        measured = _measured(row, model, gpu, gpus, gbs, seq)
    except ValueError as err:
        raise PlannerInputError(str(err)) from None
    if row.reference is None:  # the reference set's rows state this in their own notes
        degrees = [k for k in ("tp", "pp", "dp") if k not in pins]
        # Virtual stages only where a pipeline can have them (a row pinned to pp 1 searches none).
        said = ([f"{', '.join(degrees)} (every split of the GPUs the rules allow)"] if degrees else []) \
            + [f"{k} ({_span(v)})" for k, v in searched.items() if not (k == "vpp" and pins.get("pp") == 1)]
        cp = [] if "cp" in pins else ["cp 1 (not stated)"]
        if said or cp:  # (a row that states every knob searches nothing)
            notes.append("; ".join((["not stated, searched: " + "; ".join(said)] if said else []) + cp))
    notes += [f"ignored field {f} (not part of the runs format{hint})" for f, hint in row.ignored_fields()]
    return MappedRun(row, model, cluster, gpu, gpus, pins, searched, assumptions + measured.notes + notes,
                     measured.tokens_per_s_per_gpu, measured.memory_gib)


def _framework_read_as(row: RunRow, facts: RowFacts, settings: dict) -> str:
    """The assumption line for a user's row on its framework text: which framework profile
    (``planner.frameworks.profiles.PROFILES``) prices it, or that none matched and the generic
    defaults did (as ``_read_as`` says how a precision text was read). ``settings``: what the
    profiles set for the row (``apply_profiles``), compared with what the defaults alone set."""
    import dataclasses

    from planner.frameworks.profiles import PROFILES, profiles_for

    text = row.framework_text()
    named = profiles_for(text)[:-1]  # the last one is GENERIC, which every row gets
    if named:
        if settings == apply_profiles(dataclasses.replace(facts, framework=""), policies=True)[0]:
            return (f"framework {text!r}: profile {named[0].name!r} matched; none of its settings apply to this row "
                    "(priced as planner's defaults)")
        return f"framework {text!r}: profile {named[0].name!r} applied"
    said = f"framework {text!r}" if text.strip() else "framework not stated"
    known = ", ".join(dict.fromkeys(p.name.split(" (")[0] for p in PROFILES))
    return (f"{said}: no framework profile matches; priced with planner's defaults (profiles: {known}; "
            "'planner catalog frameworks' lists their settings)")


_WORDS_16BIT = ("fp16", "float16", "16-bit", "16 bit", "half")
_WORDS_32BIT = ("fp32", "float32", "tf32", "32-bit", "32 bit")


def _read_as(row: RunRow, gpu) -> list[str]:
    """Notes for a user's row on what its GPU and precision text were read as (a name such as
    'A100' stands for one catalog part; an unstated or unknown precision prices as BF16); a
    32-bit precision planner cannot price is refused."""
    notes = []
    text = row.hardware.gpu
    if text and text.strip().lower() != gpu.name:
        notes.append(f"gpu {gpu.name} (from {text!r}; {gpu.memory_gib:g} GiB)")
    said = row.layout.precision
    low = str(said or "").lower()
    if not low.strip():
        notes.append("precision not stated: bf16")
    elif any(w in low for w in ("bf16", "bfloat16", "fp8", "float8", "fp4")):
        pass
    elif any(w in low for w in _WORDS_32BIT):
        raise PlannerInputError(f"layout.precision {said!r}: planner prices 16-bit (bf16, fp16), fp8 and fp4 "
                                "(nvfp4, mxfp4) training, not 32-bit")
    elif any(w in low for w in _WORDS_16BIT):
        # FP16 and BF16 share one dense tensor-core peak on V100 (FP16 only), A100, H100 and
        # Blackwell (NVIDIA A100 / H100 / B200 datasheets): priced as BF16.
        notes.append(f"precision {said!r}: priced as bf16 (one tensor-core peak for FP16 and BF16)")
    else:
        notes.append(f"precision {said!r}: not bf16, fp16, fp8 or fp4; priced as bf16")
    return notes


def _layout_slots(pins: dict, model, name: str, head_only: bool = False) -> Optional[int]:
    """Decoder layers on the first (``name`` pp_first_layers) or last stage when the pipeline
    layout gives the embedding, the loss and each MTP layer a layer's slot (``LAYOUT_SLOTS``):
    (L + 2 + mtp) / pp slots a stage, one taken by the embedding on the first stage and 1 + mtp
    by the loss and the MTP layers on the last; ``head_only`` (``LAYOUT_HEAD_SLOTS``): L + 3
    slots, none for the embedding, three for the MTP layers and the loss. None where the row
    states no pipeline or the slots do not divide over it."""
    pp = pins.get("pp")
    if head_only:
        slots, first, last = model.num_layers + 3, 0, 3
    else:
        slots, first, last = model.num_layers + 2 + model.mtp_layers, 1, 1 + model.mtp_layers
    if not pp or pp <= 1 or slots % pp:
        return None
    taken = first if name == "pp_first_layers" else last
    return slots // pp - taken if slots // pp > taken else None


def _price_fp4(text, gpu, pins: dict, searched: dict, assumptions: list[str]) -> None:
    """A row trained in 4-bit. NVFP4 (E2M1 values in 16-element blocks with E4M3 scales:
    TransformerEngine NVFP4BlockScaling, Megatron --fp4-format e2m1 --fp4-recipe nvfp4, the
    only FP4 training recipe TE and Megatron ship) is the fp8_recipe nvfp4. MXFP4 (32-element
    blocks, E8M0 scales) has no training recipe there: it is priced as MXFP8, a floor on its
    speed, said as such. FP4 GEMMs need Blackwell's tensor cores (the GPU's ``fp4_tflops``);
    on another GPU the row is refused."""
    if getattr(gpu, "fp4_tflops", None) is None:
        raise PlannerInputError(f"precision {text!r}: 4-bit training needs FP4 tensor cores (Blackwell); "
                                f"{gpu.name} has none")
    mx = "mxfp4" in str(text).lower()
    pins["precision"], pins["fp8_recipe"] = "fp8", "mxfp8" if mx else "nvfp4"
    searched.pop("fp8_recipe", None)
    if mx:
        assumptions.append(f"precision {text!r}: MXFP4 training is not modelled; priced as MXFP8 (FP8 GEMMs "
                           "with 32-element block scales), a floor on its speed")
    else:
        assumptions.append(f"precision {text!r}: NVFP4 GEMMs (TransformerEngine NVFP4BlockScaling)")


def _one_microbatch_per_stage(pins: dict, gbs) -> Optional[int]:
    """The micro-batch size of a framework that splits each data-parallel rank's batch into as
    many micro-batches as pipeline stages (``PP_STAGES_MICROBATCHES``): gbs / (dp x pp), where
    the row states pp > 1 and dp and no micro-batch, and that divides."""
    pp, dp = pins.get("pp"), pins.get("dp")
    if "mbs" in pins or not isinstance(gbs, int) or not pp or pp <= 1 or not dp or gbs % (dp * pp):
        return None
    return gbs // (dp * pp)


def _measured(row, model, gpu, gpus, gbs, seq):
    from planner.validate.measure import reported

    return reported(row, model, gpu, gpus, gbs, seq)
