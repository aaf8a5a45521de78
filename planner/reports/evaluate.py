"""Plain-text reports a person can read at a glance."""

from __future__ import annotations

from costmodel.options import setting_labels
from costmodel.result import MEMORY_TERMS, TIME_TERMS
from planner.reports import counted
from planner.reports.search_notes import MFU_BASIS_EVALUATE, below_bf16

TERM_LABELS = {
    "compute": "compute (fwd+bwd GEMMs, attention, elementwise)",
    "recompute": "activation recompute",
    "bubble": "pipeline bubble",
    "tp_comm": "tensor-parallel comm (exposed)",
    "cp_comm": "context-parallel KV ring (exposed)",
    "ep_comm": "expert-parallel all-to-all",
    "pp_p2p": "pipeline send/recv (exposed)",
    "dp_comm": "data-parallel grad/param comm (exposed)",
    "zero3_comm": "ZeRO-3 param gather + grad RS (exposed)",
    "comm_contention": "compute slowed by overlapped comm (SMs)",
    "optimizer": "optimizer step",
}

CP_COMM_LABELS = {
    "p2p": "context-parallel KV ring (exposed)",
    "a2a": "context-parallel head all-to-all (exposed)",
    "allgather": "context-parallel KV all-gather (exposed)",
    "a2a+p2p": "context-parallel all-to-all + KV ring (exposed)",
}
"""The cp_comm line by ``cp_comm_type`` (costmodel.context_parallel)."""

MEMORY_LABELS = {
    "weights": "weights",
    "gradients": "gradients (fp32 main grads)",
    "optimizer": "optimizer states (fp32 master + Adam m, v)",
    "activations": "activations (in-flight micro-batches)",
    "logits": "logits (last stage, by loss kernel)",
    "workspace": "workspace + fragmentation allowance",
}
LABEL_WIDTH = 44
"""The label column of the time and memory tables; a longer label widens it (numbers stay aligned)."""
_OPTIMIZER_LABELS = {"remainders": "optimizer states (master remainders + m, v)",
                     "bf16": "optimizer states (bf16 Adam m, v)"}


def human_count(x: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def human_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} us"


def recompute_label(lay: dict) -> str:
    """none / selective / full, with the share of layers for partial full recompute and the
    submodules of selective recompute when they are not Megatron's default (core_attn)."""
    rl = lay.get("recompute_layers") or 0
    modules = lay.get("recompute_modules")
    if lay["recompute"] == "selective" and modules:
        return "selective(" + "+".join(modules) + ")"
    if lay["recompute"] != "full" or rl <= 0:
        return lay["recompute"]
    return f"full {rl}L/stage"  # recompute_layers: layers per pipeline stage (costmodel.options)


def layout_summary(lay: dict) -> str:
    """One line: TP8 CP1 PP16 VPP1 DP128 EP1 ZeRO-1 mbs1 GA16 selective bf16."""
    parts = [
        f"TP{lay['tp']}", f"CP{lay['cp']}", f"PP{lay['pp']}", f"VPP{lay['vpp']}", f"DP{lay['dp']}",
        f"EP{lay['ep']}" + (f" ETP{lay['etp']}" if (lay.get("etp") or 1) != 1 else ""), f"ZeRO-{lay['zero']}" + (f"/shard{lay['dp_shard']}" if lay.get("dp_shard") else ""), f"mbs{lay['mbs']}", f"GA{lay['grad_accum']}",
        recompute_label(lay), lay["precision"],
    ]
    if lay["tp"] > 1:
        parts.append("SP" if lay["sequence_parallel"] else "no-SP")
    # Implementation settings, where they differ from the defaults (labels declared with the options).
    parts += setting_labels(lay)
    return " ".join(parts)


def stage_summary(lay: dict) -> str:
    stages = lay.get("stage_layers")
    if not stages:
        return ""
    first, last = stages[0], stages[-1]
    middle = stages[1:-1]
    if len(set(stages)) == 1:
        return f"{counted(len(stages), 'stage')} x {counted(first, 'layer')}"
    if not middle:  # PP 2: no middle stage
        return f"stages {first} + {last} layers (first + last)"
    return f"stages {first} + {len(middle)}x{middle[0]} + {last} layers (first + middle + last)"


def bar(fraction: float, width: int = 24) -> str:
    filled = int(round(max(0.0, min(1.0, fraction)) * width))
    return "#" * filled + "." * (width - filled)


def uncertainty_lines(rec: dict) -> list[str]:
    """The 80% interval and the validated-envelope flags of an annotated record (none if absent)."""
    q, t = rec.get("tokens_per_s_per_gpu_interval"), rec.get("step_time_s_interval")
    if not q:
        return []
    lo, hi = human_seconds(t["p10"]).split(" "), human_seconds(t["p90"]).split(" ")
    span = f"{lo[0]}-{hi[0]} {hi[1]}" if lo[1] == hi[1] else f"{lo[0]} {lo[1]}-{hi[0]} {hi[1]}"
    lines = [f"80% interval  tokens/s/GPU {q['p10']:,.0f}-{q['p90']:,.0f} (median {q['p50']:,.0f}), step time "
             f"{span}: under each leave-one-source-out fold's",
             "              constants, with the held-out errors (search/data/uncertainty.json)"]
    flags = rec.get("envelope") or []
    if not flags:
        return lines + ["envelope      inside what the reference runs cover (search/data/envelope.json)"]
    lines.append("envelope      OUTSIDE what the reference runs cover (the interval is a floor there):")
    return lines + [f"              {f['reason']}" for f in flags]


def bf16_caveat_of(gpu_name) -> str:
    """``GPUSpec.bf16_caveat`` of a record's GPU ('' for an unknown name)."""
    if not gpu_name:
        return ""
    from hardware_catalog import get_gpu
    from hardware_catalog.errors import PlannerInputError

    try:
        return get_gpu(gpu_name).bf16_caveat
    except PlannerInputError:
        return ""


def format_evaluation(rec: dict, cluster_line: str = "") -> str:
    lay = rec["layout"]
    lines = []
    params = rec.get("model_params")
    size = ""
    if params:  # what planner counted: a model given as a file or config.json is checked at a glance
        active = params["active"]
        size = f" ({human_count(params['total'])} params" + (
            f", {human_count(active)} active" if active < params["total"] else "") + (
            f", {params['sliding_window']}-key window on {params['windowed_layers']} of {params['layers']} layers"
            if params.get("sliding_window") else "") + ")"
    lines.append(f"{rec['model']}{size} on {rec['gpus']} x {rec['gpu']} ({rec['cluster']}"
                 f"{', ' + cluster_line if cluster_line else ''})")
    lines.append(f"layout  {layout_summary(lay)}")
    caveat = bf16_caveat_of(rec.get("gpu"))
    if caveat and lay.get("precision", "bf16") == "bf16":
        lines.append(f"note    {caveat}")
    tokens = lay["gbs"] * lay["seq_len"]
    lines.append(
        f"batch   {counted(lay['gbs'], 'sequence')} x {counted(lay['seq_len'], 'token')} = {human_count(tokens)} "
        f"tokens/step; {counted(lay['grad_accum'], 'micro-batch', 'micro-batches')} of {lay['mbs']} per pipeline"
    )
    stages = stage_summary(lay)
    if stages:
        lines.append(f"stages  {stages}")
    if rec.get("calibration"):  # the profile and the constants it changed (planner.calibration_use)
        from planner.calibration_use import calibration_line

        lines.append(calibration_line(rec, rec.get("gpu")))
    if rec.get("framework"):
        lines += framework_lines(rec["framework"])
    lines.append("")
    step = rec["step_time_s"]
    lines.append(
        f"step time {human_seconds(step)}   tokens/s {human_count(rec['tokens_per_s'])}   "
        f"tokens/s/GPU {rec['tokens_per_s_per_gpu']:,.0f}   MFU {rec['mfu'] * 100:.1f}%   HFU {rec['hfu'] * 100:.1f}%"
    )
    if below_bf16([rec]):
        lines.append(f"{'MFU, HFU':<14}{MFU_BASIS_EVALUATE}")
    lines += uncertainty_lines(rec)
    lines.append("")
    # Rows (label, value, share) of both tables, then one label width for them all: a label
    # longer than the usual 44 characters widens the column instead of pushing its number right.
    time_rows = []
    for term in TIME_TERMS:
        value = rec["breakdown"][term]
        if value <= 0 and term not in ("compute",):
            continue
        label = TERM_LABELS[term]
        if term == "cp_comm":  # what the layout's --cp-comm-type exchanges
            label = CP_COMM_LABELS.get(rec.get("layout", {}).get("cp_comm_type"), label)
        time_rows.append((label, value, value / step if step else 0.0))
    hidden = {k: v for k, v in rec.get("overlapped", {}).items() if v > 1e-9}
    time_rows += [(f"(hidden behind compute: {k})", v, None) for k, v in hidden.items()]
    mem = rec["memory_gib"]
    mem_rows = []
    for term in MEMORY_TERMS:
        label = MEMORY_LABELS[term]
        if term == "gradients" and rec.get("layout", {}).get("grad_dtype") == "bf16":
            label = "gradients (bf16 grad buffers)"
        states = rec.get("layout", {}).get("optimizer_states")
        if term == "optimizer" and states in _OPTIMIZER_LABELS:
            label = _OPTIMIZER_LABELS[states]
        mem_rows.append((label, mem[term]))
    where = f" (fullest stage: {rec['fullest_stage']})" if rec.get("fullest_stage") else ""
    memory_title = "memory per GPU" + where
    width = max([LABEL_WIDTH, len(memory_title) - 2] + [len(row[0]) for row in time_rows + mem_rows])
    lines.append(f"{'time per step':<{width + 2}}{'seconds':>10}{'share':>8}")
    for label, value, share in time_rows:
        if share is None:
            lines.append(f"  {label:<{width}}{value:>10.3f}")
        else:
            lines.append(f"  {label:<{width}}{value:>10.3f}{share * 100:>7.1f}%  {bar(share)}")
    if rec.get("slowest_stage"):
        lines.append(f"  slowest pipeline stage: {rec['slowest_stage']}")
    if rec.get("dp_algorithm"):
        lines.append(f"  data-parallel collective algorithm: {rec['dp_algorithm']}")
    lines.append("")
    lines.append(f"{memory_title:<{width + 2}}{'GiB':>10}")
    for label, value in mem_rows:
        lines.append(f"  {label:<{width}}{value:>10.2f}")
    cap = mem["capacity"]
    peak = mem["peak"]
    verdict = (
        f"fits, {cap - peak:.1f} GiB ({(cap - peak) / cap * 100:.0f}%) free"
        if rec["fits"]
        else f"DOES NOT FIT: {peak - cap:.1f} GiB over ({peak / cap * 100:.0f}% of HBM)"
    )
    from search.exhaustive import DEFAULT_MEMORY_HEADROOM

    if rec["fits"] and cap - peak < DEFAULT_MEMORY_HEADROOM * cap:
        # evaluate judges against the whole HBM, search keeps a margin: say why search would not offer it
        verdict = (f"fits, {cap - peak:.1f} GiB ({(cap - peak) / cap * 100:.1f}%) free: less than the "
                   f"{DEFAULT_MEMORY_HEADROOM:.0%} planner search keeps free by default (--memory-headroom), "
                   f"so search would not offer it")
    lines.append(f"  {'peak':<{width}}{peak:>10.2f}  of {cap:.1f} GiB: {verdict}")
    from costmodel.data_parallel import runs_pipelined_fsdp

    zero, pp = lay.get("zero", 0), lay.get("pp", 1)
    if bool(runs_pipelined_fsdp(pp, zero, lay.get("fsdp") == "fsdp2")):
        lines.append(f"  ZeRO-{zero} under PP: FSDP2 in torch.distributed.pipelining keeps gradients (and weights")
        lines.append("  after a backward) unsharded until the last micro-batch, so memory is ZeRO-1's.")
    elif pp > 1 and zero == 2:
        lines.append("  ZeRO-2 under PP: gradients reduce-scattered after every micro-batch into a sharded FP32")
        lines.append("  accumulator (Llama 3 405B's FSDP); with --fsdp fsdp2 (torchtitan) they stay whole.")
    return "\n".join(lines)


def framework_lines(info: dict) -> list[str]:
    """Readable lines for a record's ``framework`` entry (``planner.frameworks.apply_framework``);
    a search row states only the release (and profile): its layout holds what the release set."""
    if "settings" not in info:
        profile = f" ({info['profile']} profile)" if info.get("profile") else ""
        return [f"framework {info['name']}{profile}: its settings as the layout states them (priced with it)"]
    settings = ", ".join(f"{k} {'+'.join(v) if isinstance(v, (tuple, list)) else v}"
                         for k, v in info["settings"].items()) or "nothing beyond the defaults"
    lines = [f"framework {info['name']} ({info['profile']} profile): {settings}"]
    lines += [f"  - {line}" for line in info["assumptions"]]
    lines += [f"  - {line}" for line in info.get("benchmark_only", ())]
    if info["overridden_by_flags"]:
        lines.append(f"  your flags kept: {', '.join(info['overridden_by_flags'])}")
    if info["not_applied"]:
        lines.append(f"  not applied here (evaluate and export only): {', '.join(info['not_applied'])}")
    if info["available"]:
        lines.append("  available, set by flag: " + ", ".join(
            f"--{k.replace('_', '-')}" for k in info["available"]))
    return lines
