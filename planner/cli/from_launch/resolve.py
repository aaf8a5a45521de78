"""A read launch file (``planner.launch``) -> a job (``planner.job``): overrides from the command
line, GPU count and type, batch defaults; priced by ``planner.job.price``; and the text that
says what was read and assumed.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field, replace

from costmodel.options import OPTIONS_BY_NAME
from hardware_catalog.errors import PlannerInputError
from planner.job import Job, Outputs, Pricing, ProblemRequest, price
from planner.launch.spec import Launch

SHOWN = 12
"""How many not-priced settings the text names (``--json`` lists all)."""
NAMES = {"megatron": "Megatron-LM", "torchtitan": "torchtitan", "deepspeed": "DeepSpeed", "nemo": "NeMo / Megatron-Bridge"}


@dataclass
class Resolved:
    """A launch file made into one priced layout."""

    launch: Launch
    setup: object
    """``planner.common.Setup``."""
    layout: object
    """``costmodel.options.Layout``."""
    gpus: int
    record: dict
    overrides: list = field(default_factory=list)
    """"--flag value (the file: old)" for every command-line value that replaced the file's."""
    derived: list = field(default_factory=list)
    """How GPU count, batch and sequence were filled in where the file is silent."""


def show(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _flag(name: str) -> str:
    return OPTIONS_BY_NAME[name].flag if name in OPTIONS_BY_NAME else "--" + name.replace("_", "-")


def apply_overrides(launch: Launch, given: dict) -> tuple[dict, list[str]]:
    """The file's values with the command line's on top, and a note for each replacement."""
    values, notes = dict(launch.values), []
    for name, value in given.items():
        old = values.get(name)
        if old != value:
            where = "the file" if name in launch.stated else "default"
            notes.append(f"{_flag(name)} {show(value)} ({where}: {show(old) if old is not None else 'unset'})")
        values[name] = value
    return values, notes


def _model(launch: Launch, model):
    from hardware_catalog import get_model

    if model is not None:
        return get_model(model) if isinstance(model, str) else model
    if launch.model is None:
        raise PlannerInputError(f"{launch.path}: a {NAMES[launch.format]} config names no model: give --model NAME "
                                "(a preset, a model file or a Hugging Face config.json)")
    return launch.model


def _gpus(launch: Launch, gpus, values: dict, derived: list) -> int:
    if gpus is not None:
        if launch.dp is not None:
            split = values["tp"] * values["pp"] * values["cp"]
            if gpus != launch.dp * split and launch.format == "torchtitan":
                # torchtitan's ParallelDims: dp_replicate x dp_shard x cp x tp x pp is the world size.
                raise PlannerInputError(
                    f"{launch.path}: {launch.dp_note} gives dp {launch.dp}, which with tp {values['tp']} x pp "
                    f"{values['pp']} x cp {values['cp']} runs on {launch.dp * split} GPUs, not --gpus {gpus} (torchtitan "
                    f"requires the degrees' product to be the GPU count, ParallelDims): give --gpus {launch.dp * split}, "
                    "or data_parallel_shard_degree = -1 (the leftover ranks)")
            if gpus != launch.dp * split:
                # DeepSpeed's batch keys fix the data-parallel width (runtime/config.py _batch_assertion);
                # the rest of --gpus is model parallelism the config cannot state.
                need = f"tp x pp x cp = {gpus // launch.dp}" if gpus % launch.dp == 0 else "a --gpus that dp divides"
                raise PlannerInputError(
                    f"{launch.path}: its batch keys give dp {launch.dp} ({launch.dp_note}), and --gpus {gpus} over tp "
                    f"{values['tp']} x pp {values['pp']} x cp {values['cp']} gives dp {gpus // split}: give --tp / "
                    f"--pp / --cp with {need} (a DeepSpeed config does not state them)")
        return gpus
    if launch.gpus is not None:
        derived.append(f"GPUs {launch.gpus} from the file ({launch.gpus_note})")
        return launch.gpus
    if launch.dp is not None:
        n = launch.dp * values["tp"] * values["pp"] * values["cp"]
        derived.append(f"GPUs {n} = dp {launch.dp} (from the file) x tp {values['tp']} x pp {values['pp']} x cp {values['cp']}")
        return n
    raise PlannerInputError(f"{launch.path} does not state how many GPUs it runs on: give --gpus N")


def _batch(launch: Launch, model, values: dict, gpus: int, tokens_per_batch, derived: list) -> tuple[int, int]:
    seq = values.get("seq_len")
    if seq is None:
        seq = model.default_seq_len
        derived.append(f"seq_len {seq}: the file states none; the model preset's default")
    if tokens_per_batch is not None:
        return max(tokens_per_batch // seq, 1), seq
    gbs = values.get("gbs")
    if gbs is None:
        dp = max(gpus // (values["tp"] * values["pp"] * values["cp"]), 1)
        if launch.gbs_rule:
            per_dp = values["mbs"] if launch.gbs_rule == "mbs*dp" else launch.gbs_per_dp
            gbs = per_dp * dp
            derived.append(f"gbs {gbs} = {per_dp} per data-parallel rank x dp {dp} ({NAMES[launch.format]}'s rule "
                           "without a global batch)")
        else:
            gbs = max(model.default_tokens_per_batch // seq, 1)
            derived.append(f"gbs {gbs}: the file states none; the model preset's {model.default_tokens_per_batch:,} tokens")
    return gbs, seq


def _hardware(launch: Launch, gpu, cluster) -> tuple:
    """(--gpu, --cluster) as the job names them: the command line's, else the file's GPU type
    (checked here, so a missing or unknown GPU is said before anything else)."""
    from planner.common import resolve_hardware

    if gpu is None and cluster is None:
        if launch.gpu is None:
            raise PlannerInputError(f"{launch.path} does not say which GPU it runs on: give --gpu NAME (e.g. h100) "
                                    "or --cluster NAME|FILE")
        gpu = launch.gpu
    resolve_hardware(gpu, cluster)
    return gpu, cluster


def launch_job(launch: Launch, *, model=None, gpus=None, gpu=None, cluster=None, tokens_per_batch=None,
               given: dict | None = None, allow_cross_node_tp: bool = False):
    """(problem, layout values, overrides, derived): the file's job and layout with the command
    line on top, and notes on what the command line replaced and what was filled in."""
    values, overrides = apply_overrides(launch, given or {})
    _check_file_values(_file_words(launch, values, given or {}), values)
    derived: list[str] = []
    model_spec = _model(launch, model)
    if model is not None and launch.model is not None and model_spec.name != launch.model.name:
        overrides.append(f"--model {model_spec.name} (the file: {launch.model.name})")
    gpu, cluster = _hardware(launch, gpu, cluster)
    n = _gpus(launch, gpus, values, derived)
    if gpus is not None and launch.gpus is not None and gpus != launch.gpus:
        overrides.append(f"--gpus {gpus} (the file: {launch.gpus}, {launch.gpus_note})")
    gbs, seq = _batch(launch, model_spec, values, n, tokens_per_batch, derived)
    if launch.mbs_from_gbs_ga and values.get("mbs") is None:
        ga, dp = launch.mbs_from_gbs_ga, max(n // (values["tp"] * values["pp"] * values["cp"]), 1)
        if gbs % (ga * dp):
            raise PlannerInputError(f"{launch.path}: train_batch_size={gbs} is not gradient_accumulation_steps {ga} x "
                                    f"dp {dp} x a whole micro-batch (deepspeed runtime/config.py _batch_assertion)")
        values["mbs"] = gbs // (ga * dp)
        derived.append(f"mbs {values['mbs']} = train_batch_size {gbs} / (gradient_accumulation_steps {ga} x dp {dp}) "
                       "(DeepSpeed's rule without train_micro_batch_size_per_gpu)")
    if launch.shard_replicas > 1 and values.get("dp_shard") is None:
        dp = max(n // (values["tp"] * values["pp"] * values["cp"]), 1)
        said = launch.shard_replicas_said or f"{launch.shard_replicas} shard replicas"
        if dp % launch.shard_replicas:  # both assert it: Megatron-Core parallel_state.py (dp % instances), torchtitan parallel_dims.py _validate (product = world)
            raise PlannerInputError(f"{launch.path}: {said}: does not divide the {dp} data-parallel ranks "
                                    f"({n} GPUs / (tp x pp x cp))")
        values["dp_shard"] = dp // launch.shard_replicas
        derived.append(f"dp_shard {values['dp_shard']} = dp {dp} / {launch.shard_replicas} replicas ({said})")
    if values.get("sequence_parallel") and values.get("tp", 1) == 1:
        # Megatron's validate_args (and every framework) turns sequence parallelism off without TP.
        values["sequence_parallel"] = False
        derived.append("sequence parallelism off: it splits along TP, and tp is 1")
    elif values.get("sequence_parallel") is None and values.get("tp", 1) == 1:
        values["sequence_parallel"] = False  # unstated (a DeepSpeed config): moot at tp 1, as planner records it
    problem = ProblemRequest(model_spec, n, gpu, cluster, gbs=gbs, seq_len=seq, allow_cross_node_tp=allow_cross_node_tp)
    return problem, {k: v for k, v in values.items() if k in OPTIONS_BY_NAME}, overrides, derived


def _file_words(launch: Launch, values: dict, given: dict) -> dict:
    """Option -> the file's own words (``Launch.said``) for the options the file states and the
    command line leaves alone."""
    return {name: said for name, said in launch.said.items()
            if name not in given and name in values and values[name] == launch.values.get(name)}


def _check_file_values(words: dict, values: dict) -> None:
    """A number the file states that planner's option refuses (e.g. a degree over ``MAX_GPUS``):
    one line naming the file's setting, not the planner flag it became (``--tp=...``)."""
    from costmodel.options import INT, OPTIONAL_INT, range_text

    for name, said in words.items():
        opt = OPTIONS_BY_NAME[name]
        if opt.kind in (INT, OPTIONAL_INT):
            try:
                opt.parse(values[name])
            except PlannerInputError:
                raise PlannerInputError(f"{said}: must be {range_text(True, opt.minimum, opt.maximum)}") from None


def _in_file_words(message: str, words: dict, values: dict) -> str:
    """A rule's message (``layout breaks rule ...: tp*cp*pp = ...``, ``vpp=5 ...``) with the file's
    own words for the options it names, where they are not the option's default."""
    import re

    named = [said for name, said in words.items() if values[name] != OPTIONS_BY_NAME[name].default
             and re.search(rf"(?<![\w.-]){name}(?=\s?=|\*)|(?<=\*){name}(?![\w])", message)]
    return f"{message} (in the file: {'; '.join(named)})" if named else message


def resolve(launch: Launch, pricing: Pricing = Pricing(), outputs: Outputs = Outputs(), **kw) -> Resolved:
    """The file's job (``launch_job``; ``kw``: its keywords) priced by ``planner.job.price``: a
    ``planner evaluate --json`` record with ``launch`` added."""
    problem, values, overrides, derived = launch_job(launch, **kw)
    words = _file_words(launch, values, kw.get("given") or {})
    launch_entry = {**launch.to_dict(), "overrides": overrides, "derived": derived}
    if "cp_comm_type" in launch.stated or (launch.format == "megatron"
                                           and any(d.option == "cp_comm_type" for d in launch.defaults)):
        # The file's CP comm type is what it runs, stated or Megatron-LM's p2p default (arguments.py):
        # judged as typed (a window's p2p breaks rule sliding_window_cp_comm_type, as TransformerEngine
        # refuses it), not switched to a2a as an unset one is (planner.common.build_layout).
        pricing = replace(pricing, typed=pricing.typed | {"cp_comm_type"})
    try:
        priced = price(Job(problem, pricing, outputs), values, {"launch": launch_entry})
    except PlannerInputError as err:
        n = problem.gpus
        if str(err).startswith("layout breaks rule"):
            err = type(err)(_in_file_words(str(err), words, values))
        if kw.get("gpus") is not None or f"--gpus={n}" not in str(err):
            raise err from None
        # The count came from the file, not the command line: say so, and how to change it.
        origin = derived[0] if derived and derived[0].startswith("GPUs ") else f"GPUs {n} from the file"
        raise type(err)(str(err).replace(f"--gpus={n}", f"{origin}; pass --gpus N to price it on N GPUs")) from None
    return Resolved(launch, priced.setup, priced.layout, problem.gpus, priced.record, overrides, derived)


# ----------------------------------------------------------------------------------- text


def _wrap(label: str, text: str, width: int = 110) -> list[str]:
    return textwrap.wrap(text, width=width, initial_indent=f"  {label:<12}", subsequent_indent=" " * 14,
                         break_on_hyphens=False) or [f"  {label}"]


def describe(r: Resolved) -> str:
    """What was read from the file, what took a default, what the command line replaced, and what
    planner could not express, unknown names and settings that are not priced."""
    L = r.launch
    lines = [f"From {L.path} ({NAMES[L.format]}; {L.launcher or 'config'}):"]
    lines += _wrap("model", f"{r.setup.model.name}: {L.model_note}" if L.model_note else r.setup.model.name)
    where = "the file" if L.gpu and r.setup.gpu.name else "--gpu / --cluster"
    lines += _wrap("GPUs", f"{r.gpus} x {r.setup.gpu.name} (cluster {r.setup.cluster.name}; GPU type from {where})")
    stated = [f"{k} {show(r.launch.values[k])}" for k in OPTIONS_BY_NAME if k in L.stated]
    lines += _wrap("read", ", ".join(stated) or "(no layout setting)")
    if L.defaults:
        lines += _wrap("defaults", f"not in the file, {L.defaults_from or NAMES[L.format]} default: "
                       + "; ".join(f"{d.option} {show(d.value)} ({d.source})" for d in L.defaults))
    for label, items in (("derived", r.derived), ("overrides", r.overrides)):
        if items:
            lines += _wrap(label, "; ".join(items))
    if L.unsupported:
        lines += _wrap("unsupported", "; ".join(f"{u.name}: priced {u.priced}" for u in L.unsupported))
    if L.unknown:
        known = L.defaults_from if L.format == "megatron" else f"the {NAMES[L.format]} reader"
        lines += _wrap("unknown", ", ".join(L.unknown) + f" (not in {known}: not priced)")
    if L.ignored:
        shown = ", ".join(L.ignored[:SHOWN]) + (f", and {len(L.ignored) - SHOWN} more (--json lists all)"
                                                 if len(L.ignored) > SHOWN else "")
        lines += _wrap("not priced", f"{len(L.ignored)} setting(s) that leave step time and memory alone "
                                     f"(data, optimizer, logging, checkpoints): {shown}")
    if L.notes:
        lines += _wrap("notes", "; ".join(L.notes))
    return "\n".join(lines)
