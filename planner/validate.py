"""`planner validate`: predictions against real published training runs.

Each row of a runs file (format of shared/reference/published_runs.json) becomes a model, a
cluster and a set of candidate layouts: the knobs the source published are pinned, the ones it
left unstated (micro-batch, recompute with Megatron-Core's recompute-module sets, ZeRO /
distributed optimizer, virtual stages, sometimes the whole layout) are searched as a user would,
and the fastest layout that fits in memory is the prediction. Settings the framework's own
published scripts fix (e.g. NeMo's DeepEP for DeepSeek-V3 on H100) are pinned, with the source.
Rows that cannot be mapped are listed with the reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Optional

import numpy as np

from costmodel.calibration import DEFAULT, Calibration
from hardware_catalog.errors import PlannerInputError

# A catalog preset per model family supplies what a runs file does not carry (gated MLP or
# not, norms, biases, positions, tied embeddings, vocab); the row's own shape fields
# (layers, hidden, heads, KV heads, FFN, vocab, sequence) then override it.
_FAMILY_BASE = (
    # (source key or "", model-name prefix, preset)
    ("megatron_readme_2024", "gpt", "mcore-gpt-1.7b"),  # Megatron-Core 2024 series: untied embeddings
    ("nemo_perf_2407", "gpt3", "nemo-gpt3-5b"),
    ("", "gpt", "megatron-gpt-1.7b"),  # Narayanan 2021 / Korthikanti 2022 GPT: tied, dropout
    ("", "mpt", "mpt-7b"),
    ("", "nemotron", "nemotron-8b"),
    ("", "llama2", "llama2-7b"),
    ("", "llama3", "llama3-8b"),
)
# Rows whose architecture needs more than a family base (MLA, expert shapes): the preset itself.
_PRESETS = {"deepseekv3": "deepseek-v3", "qwen3-30b-a3b": "qwen3-30b-a3b", "qwen3-235b-a22b": "qwen3-235b-a22b",
            "llama3.1-405b": "llama3-405b"}

_GPU_CLUSTERS = {
    "A100-SXM-80GB": "dgx-a100",
    "A100-SXM-40GB": "dgx-a100-40gb",
    "H100-SXM-80GB": "dgx-h100",
}


@dataclass
class MappedRun:
    """One runs-file row mapped onto planner objects."""

    row: dict
    model: object
    cluster: object
    gpu: object
    gpus: int
    pins: dict
    """Layout knobs the source states."""
    searched: dict
    """Knob -> candidate values for what the source leaves unstated."""
    assumptions: list[str] = field(default_factory=list)


def load_runs(path: Optional[Path]) -> list[dict]:
    if path is None:
        text = resources.files("planner").joinpath("data/published_runs.json").read_text()
        source = "the shipped reference set"
    else:
        try:
            text = Path(path).read_text()
        except OSError as err:
            raise PlannerInputError(f"--runs {path}: cannot read ({err.strerror})")
        source = str(path)
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as err:
        raise PlannerInputError(f"--runs {source}: not valid JSON ({err.msg} at line {err.lineno})")
    if not isinstance(rows, list):
        raise PlannerInputError(f"--runs {source}: expected a JSON list of runs")
    return rows


def map_model(row: dict):
    from hardware_catalog import get_model

    m = row["model"]
    name = m["name"].split(" (")[0]
    key = re.sub(r"[^a-z0-9.-]", "", name.lower())
    if key in _PRESETS:
        return get_model(_PRESETS[key])
    source = (row.get("source") or {}).get("key", "")
    base = None
    for src, prefix, preset in _FAMILY_BASE:
        if key.startswith(prefix) and (not src or src == source):
            base = get_model(preset)
            break
    if base is None:
        raise PlannerInputError(f"no architecture family for model '{name}'")
    seq = m.get("seq_length") or base.default_seq_len
    update = dict(
        name=key,
        aliases=[],
        num_layers=m["num_layers"],
        hidden_size=m["hidden_size"],
        num_attention_heads=m["num_attention_heads"],
        num_kv_heads=m.get("num_kv_heads") or m["num_attention_heads"],
        head_dim=None,
        ffn_hidden_size=m.get("ffn_hidden_size") or 4 * m["hidden_size"],
        max_position_embeddings=max(seq, base.max_position_embeddings),
        default_seq_len=seq,
        params_published=None,
    )
    if m.get("vocab_size"):
        update["vocab_size"] = m["vocab_size"]
    return base.model_copy(update=update)


def _zero_from_row(layout: dict) -> Optional[list[int]]:
    z = layout.get("zero_stage")
    text = " ".join(str(layout.get(k) or "") for k in ("zero_stage", "fsdp", "distributed_optimizer"))
    if isinstance(z, int):
        return [z]
    if "SHARD_GRAD_OP" in text:
        return [2]
    if "FULL_SHARD" in text or "FSDP2" in text or "Megatron-FSDP" in text:
        return [3]
    if "distributed optimizer" in text or layout.get("distributed_optimizer") is True:
        return [1]
    return None  # unstated: Megatron with or without the distributed optimizer


def _recompute_from_row(layout: dict) -> Optional[list[str]]:
    r = str(layout.get("activation_recompute") or "").lower()
    for mode in ("none", "selective", "full"):
        if r.startswith(mode):
            return [mode]
    return None


def map_run(row: dict) -> MappedRun:
    from hardware_catalog import get_cluster, get_gpu

    hw = row["hardware"]
    lay = row["layout"]
    assumptions: list[str] = []
    gpu_name = hw["gpu"]
    if gpu_name.startswith("H100 (96GB"):
        cluster = get_cluster("h100-96gb-500w")
    elif gpu_name in _GPU_CLUSTERS:
        cluster = get_cluster(_GPU_CLUSTERS[gpu_name])
    else:
        raise PlannerInputError(f"GPU '{gpu_name}' has no cluster mapping")
    gpu = get_gpu(cluster.gpu)
    model = map_model(row)
    seq = row["model"].get("seq_length")
    if not seq:
        seq = 8192
        assumptions.append("seq_len 8192 (torchtitan default; unstated)")
    gbs = lay.get("global_batch_size")
    if not gbs:
        raise PlannerInputError("global batch size not published")
    pins: dict = {"seq_len": seq, "gbs": gbs}
    searched: dict = {}
    for knob in ("tp", "pp", "cp", "dp"):
        if lay.get(knob) is not None:
            pins[knob] = lay[knob]
    if model.moe is not None:
        pins["ep"] = lay.get("ep") or 1
    else:
        pins["ep"] = 1
    pins["etp"] = lay.get("expert_tp") or 1
    if lay.get("micro_batch_size"):
        pins["mbs"] = lay["micro_batch_size"]
    else:
        searched["mbs"] = [1, 2, 4, 8]
    if lay.get("vp"):
        pins["vpp"] = lay["vp"]
    else:
        # Every chunk count a stage's layers allow (the candidate filter keeps the divisors).
        searched["vpp"] = list(range(1, model.num_layers + 1))
    zero = _zero_from_row(lay)
    if zero is None:
        searched["zero"] = [0, 1]
    else:
        pins["zero"] = zero[0]
    rc = _recompute_from_row(lay)
    if rc is None:
        searched["recompute"] = ["none", "selective", "full"]
    else:
        pins["recompute"] = rc[0]
    framework = str(lay.get("framework") or "").lower()
    year = int((row.get("source") or {}).get("year") or 0)
    if year and year < 2022 or (row.get("source") or {}).get("key") == "korthikanti2022":
        # FlashAttention (Dao et al., May 2022) postdates these runs: Megatron then materialised
        # the attention scores and ran a fused scale-mask-softmax (Korthikanti 2022 Sec. 4.1
        # counts the 5as^2b bytes that storing them costs).
        pins["attention"] = "unfused"
        assumptions.append("unfused attention (the run predates FlashAttention)")
    if rc == ["selective"] and "torchtitan" in framework:
        # torchtitan's "selective" is per-op SAC: it keeps SDPA outputs and every other matmul
        # output and recomputes the rest (torchtitan activation_checkpoint.py, _save_list), i.e.
        # about half of each layer's forward in time and memory: priced as full recompute of
        # half the layers, not as Megatron's core-attention recompute.
        pins["recompute"] = "full"
        pins["recompute_layers"] = -2
        assumptions.append("torchtitan selective (per-op SAC) priced as full recompute of half the layers")
    if "eager" in framework or ("composer" in framework and "compile" not in framework):
        # Plain PyTorch operators (torchtitan without torch.compile; llm-foundry/Composer MPT):
        # unfused norms, rotary, activation and loss (see costmodel.compute).
        pins["kernels"] = "eager"
        assumptions.append("eager PyTorch kernels (no torch.compile: unfused norms, rotary, SwiGLU)")
    if "attention" not in pins and any(f in framework for f in ("megatron-core", "nemo", "megatron-bridge")):
        # TransformerEngine runs attention through cuDNN's fused kernels (FlashAttention-3
        # class on Hopper); torchtitan and llm-foundry call SDPA / flash-attn 2.
        pins["attention"] = "flash3"
        assumptions.append("TransformerEngine cuDNN attention (flash3 on Hopper)")
    if any(f in framework for f in ("nemo", "megatron-bridge", "composer")):
        # Fused cross entropy: NeMo 2 / Megatron-Bridge model configs default
        # cross_entropy_loss_fusion=True (TransformerEngine implementation); llm-foundry's MPT
        # default loss is flash-attn's fused CrossEntropyLoss. Megatron-LM's flag defaults off,
        # and torchtitan calls F.cross_entropy on FP32 logits.
        pins["loss"] = "fused"
        assumptions.append("fused cross entropy (framework default)")
    elif "torchtitan" in framework:
        # torchtitan computes F.cross_entropy(pred.flatten(0, 1).float(), ...) outside the
        # compiled blocks (torchtitan train.py; compiling the loss is disabled there).
        pins["loss"] = "eager"
        assumptions.append("eager F.cross_entropy on FP32 logits")
    precision = str(lay.get("precision") or "").lower()
    if any(f in framework for f in ("nemo", "megatron-bridge")) and "fp8" in precision:
        # NeMo FP8 recipes reduce gradients in BF16: NeMo 1 launcher configs set
        # optim.grad_sync_dtype: bf16 (conf/training/nemotron/nemotron_340b.yaml), NeMo 2 and
        # Megatron-Bridge performance scripts set grad_reduce_in_fp32 = False for FP8
        # (scripts/performance/helpers.py set_precision_configs).
        pins["grad_dtype"] = "bf16"
        assumptions.append("BF16 gradient reduction (NeMo FP8 recipes)")
    elif "composer" in framework and "pure" in precision:
        # Composer FSDP mixed_precision PURE: parameters, gradient reduction and buffers in BF16.
        pins["grad_dtype"] = "bf16"
        assumptions.append("BF16 gradient reduction (FSDP mixed_precision PURE)")
    if "deepspeed" in framework and year and year <= 2021:
        # DeepSpeed's first ZeRO-3 (v0.3.13-0.5, 2021) all-gathered each weight tensor after a
        # torch.cuda.synchronize() and reduce-scattered each gradient tensor on its own
        # (runtime/zero/partition_parameters.py of that release; coalesced collectives came
        # later). Priced from that code and its defaults in costmodel.zero3_blocking.
        pins["zero3_gather"] = "blocking"
        assumptions.append("blocking per-tensor ZeRO-3 gathers and reduce-scatters (DeepSpeed 2021)")
    if "deepspeed" in framework and "16-bit" in precision:
        # DeepSpeed's fp16 engine keeps 16-bit gradients and reduces them in 16 bits
        # (communication_data_type defaults to the training dtype; docs/_pages/config-json.md).
        pins["grad_dtype"] = "bf16"
        assumptions.append("16-bit gradient reduction (DeepSpeed fp16)")
    if "--tp-comm-overlap" in framework:
        pins["tp_comm_overlap"] = True
        assumptions.append("TP comm overlap (--tp-comm-overlap stated)")
    elif any(f in framework for f in ("megatron-core", "nemo", "megatron-bridge")):
        # TransformerEngine's userbuffers overlap (Megatron --tp-comm-overlap) is available to
        # these frameworks and their performance recipes set it per model and GPU (e.g.
        # Megatron-Bridge COMM_OVERLAP_CONFIG_MAP, userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192):
        # unstated, so searched like the other knobs.
        searched["tp_comm_overlap"] = [0, 1]
    megatron_family = any(f in framework for f in ("megatron-core", "nemo", "megatron-bridge"))
    if model.moe is not None and model.mla is not None and megatron_family and year >= 2025 and gpu.name.startswith("h100"):
        # NeMo's 2025 performance scripts, which produce these tables, run DeepSeek-V3 on H100
        # with the flex dispatcher and DeepEP (scripts/performance/llm/pretrain_deepseek_v3.py:
        # "For H100 we use deepEP"); their Qwen3 scripts keep the recipes' alltoall.
        pins["moe_dispatcher"] = "deepep"
        assumptions.append("DeepEP dispatcher (NeMo performance script for DeepSeek-V3 on H100)")
    # A runs file may state the implementation outright (the planner's own names); that wins
    # over what the framework string suggests.
    from costmodel.layout import IMPLEMENTATION_DEFAULTS, check_implementation

    stated = check_implementation({k: lay.get(k) for k in IMPLEMENTATION_DEFAULTS})
    for key, value in stated.items():
        pins[key] = value
        searched.pop(key, None)
        assumptions.append(f"{key}={value} (stated)")
    if lay.get("recompute_modules"):
        # Megatron-Core fine-grained selective recompute (--recompute-modules), stated outright.
        from costmodel.layout import parse_recompute_modules

        pins["recompute"] = "selective"
        pins["recompute_modules"] = parse_recompute_modules(lay["recompute_modules"])
        searched.pop("recompute", None)
        assumptions.append(f"recompute_modules={','.join(pins['recompute_modules'])} (stated)")
    pins["precision"] = "fp8" if ("fp8" in precision or "float8" in precision) else "bf16"
    if lay.get("sequence_parallel") is False:
        pins["sequence_parallel"] = False
    return MappedRun(row, model, cluster, gpu, int(hw["num_gpus"]), pins, searched, assumptions)


def _module_subset_masks(model) -> list[int]:
    """Bit masks of every non-empty set of the recompute modules this model has (Megatron-Core
    TransformerConfig: mla_up_proj needs multi-latent attention, moe_act / moe an MoE layer,
    shared_experts shared experts; mlp is the dense MLP, so only where dense layers exist)."""
    from itertools import combinations

    from costmodel.layout import RECOMPUTE_MODULES, recompute_modules_mask

    moe = model.moe
    present = {"core_attn", "layernorm"}
    if moe is None or moe.num_dense_layers > 0 or moe.moe_layer_frequency > 1:
        present.add("mlp")
    if model.mla is not None:
        present.add("mla_up_proj")
    if moe is not None:
        present |= {"moe_act", "moe"}
        if moe.num_shared_experts > 0:
            present.add("shared_experts")
    names = [name for name in RECOMPUTE_MODULES if name in present]
    return sorted(recompute_modules_mask(chosen) for r in range(1, len(names) + 1) for chosen in combinations(names, r))


def _candidates(run: MappedRun):
    """All layouts consistent with the pins (the unknown knobs as a grid), valid ones only."""
    from costmodel.layout import (
        IMPLEMENTATION_DEFAULTS, PRECISIONS, RECOMPUTE, LayoutBatch, implementation_columns, recompute_modules_mask,
    )
    from costmodel.pipeline import partial_recompute_per_chunk, stage_layer_split, vpp_divides_stages

    pins = run.pins
    n = run.gpus
    grids: dict[str, list] = {}

    def powers(limit):
        return [2**i for i in range(0, 20) if 2**i <= limit]

    layout_unknown = not all(k in pins for k in ("tp", "pp", "dp"))
    if layout_unknown:
        grids["tp"] = [t for t in powers(run.cluster.scaleup_domain_size) if run.model.num_attention_heads % t == 0]
        grids["pp"] = [p for p in range(1, min(run.model.num_layers, 64) + 1) if n % p == 0]
        grids["cp"] = [pins.get("cp", 1)]
    else:
        for k in ("tp", "pp", "cp"):
            grids[k] = [pins.get(k, 1)]
    grids["mbs"] = run.searched.get("mbs", [pins.get("mbs")])
    grids["vpp"] = run.searched.get("vpp", [pins.get("vpp")])
    grids["zero"] = run.searched.get("zero", [pins.get("zero")])
    grids["tp_comm_overlap"] = run.searched.get("tp_comm_overlap", [int(pins.get("tp_comm_overlap", False))])
    grids["recompute"] = [RECOMPUTE.index(r) for r in run.searched.get("recompute", [pins.get("recompute")])]
    # Unstated recompute also covers partial full recompute (3, 2 or 1 quarters of the layers).
    grids["recompute_layers"] = [0, -3, -2, -1] if "recompute" in run.searched else [pins.get("recompute_layers", 0)]
    mesh = np.meshgrid(*[np.asarray(v, dtype=np.int64) for v in grids.values()], indexing="ij")
    cols = {k: g.reshape(-1) for k, g in zip(grids, mesh)}
    dp = n // (cols["tp"] * cols["pp"] * cols["cp"])
    ok = dp * cols["tp"] * cols["pp"] * cols["cp"] == n
    if "dp" in pins and not layout_unknown:
        ok &= dp == pins["dp"]
    # Pinned implementation settings as batch codes; TP overlap may be a searched grid instead.
    impl = implementation_columns({k: pins.get(k) for k in IMPLEMENTATION_DEFAULTS})
    impl["tp_comm_overlap"] = cols["tp_comm_overlap"].astype(bool)
    batch = LayoutBatch.from_arrays(
        tp=cols["tp"], pp=cols["pp"], cp=cols["cp"], dp=np.maximum(dp, 1), ep=pins["ep"], etp=pins["etp"],
        vpp=cols["vpp"], zero=cols["zero"], mbs=cols["mbs"], gbs=pins["gbs"], seq_len=pins["seq_len"],
        recompute=cols["recompute"], precision=PRECISIONS.index(pins["precision"]),
        recompute_modules=recompute_modules_mask(pins.get("recompute_modules")),
        recompute_layers=cols["recompute_layers"],
        sequence_parallel=pins.get("sequence_parallel", True), **impl,
    )
    first, middle, last, split_ok = stage_layer_split(run.model.num_layers, batch.pp, 0, 0)
    m = batch.gbs // np.maximum(batch.dp * batch.mbs, 1)
    ok &= split_ok & vpp_divides_stages(first, middle, last, batch.vpp)
    ok &= (batch.gbs % (batch.dp * batch.mbs) == 0) | ("mbs" not in run.searched)
    ok &= (batch.vpp == 1) | ((batch.pp > 1) & (m % batch.pp == 0)) | ("vpp" not in run.searched)
    ok &= (batch.vpp == 1) | (batch.pp > 1)
    ok &= (batch.tp * batch.dp * batch.cp) % (batch.ep * batch.etp) == 0  # MoE parallel folding
    heads_ok = (run.model.num_attention_heads % batch.tp == 0)
    ok &= heads_ok
    _, distinct = partial_recompute_per_chunk(run.model.num_layers, batch.pp, batch.vpp, 0, 0, batch.recompute_layers)
    ok &= (batch.recompute_layers == 0) | ((batch.recompute == RECOMPUTE.index("full")) & distinct)
    batch = batch.take(np.nonzero(ok)[0])
    if "recompute" not in run.searched:
        return batch
    # Unstated selective recompute also covers Megatron-Core's fine-grained variant: each
    # selective layout once per set of the recompute modules this model has.
    masks = np.asarray(_module_subset_masks(run.model), dtype=np.int64)
    selective = batch.recompute == RECOMPUTE.index("selective")
    copies = np.where(selective, len(masks), 1)
    expanded = batch.take(np.repeat(np.arange(len(batch)), copies))
    starts = np.cumsum(copies) - copies
    rank_in_row = np.arange(len(expanded)) - np.repeat(starts, copies)
    expanded.recompute_modules = np.where(
        np.repeat(selective, copies), masks[rank_in_row % len(masks)], expanded.recompute_modules
    )
    return expanded


@dataclass
class RowResult:
    id: str
    source: str
    confidence: str
    gpus: int
    reported: float
    predicted: Optional[float] = None
    error: Optional[float] = None
    layout: str = ""
    chosen: dict = field(default_factory=dict)
    fits: bool = True
    reported_memory_gib: Optional[float] = None
    predicted_memory_gib: Optional[float] = None
    memory_error: Optional[float] = None
    reason: str = ""
    assumptions: list = field(default_factory=list)


def _modules_label(lay) -> str:
    """'(mla_up_proj,mlp)' after 'sel' when selective recompute runs other modules than core_attn."""
    if lay.recompute != "selective" or lay.recompute_modules in (None, ("core_attn",)):
        return ""
    return "(" + ",".join(lay.recompute_modules) + ")"


def predict_run(run: MappedRun, calib: Calibration = DEFAULT) -> RowResult:
    from costmodel import evaluate_batch
    from costmodel.layout import RECOMPUTE

    row = run.row
    ref = row["reference"]
    res = RowResult(
        id=row["id"], source=row["source"].get("key", "?"), confidence=row.get("confidence", "?"),
        gpus=run.gpus, reported=float(ref["tokens_per_s_per_gpu"]), reported_memory_gib=ref.get("peak_memory_gib"),
        assumptions=list(run.assumptions),
    )
    batch = _candidates(run)
    if len(batch) == 0:
        res.reason = "no layout satisfies the published knobs and the planner's rules"
        return res
    out = evaluate_batch(run.model, run.cluster, batch, gpu=run.gpu, calib=calib)
    fits = out.fits
    if fits.any():
        idx = np.nonzero(fits)[0]
        best = idx[np.argmax(out.tokens_per_s_per_gpu[idx])]
    else:
        best = int(np.argmin(out.memory_gib["peak"]))
        res.fits = False
    lay = batch.layout(int(best))
    res.predicted = float(out.tokens_per_s_per_gpu[best])
    res.error = (res.predicted - res.reported) / res.reported
    res.chosen = {k: getattr(lay, k) for k in run.searched}
    if not all(k in run.pins for k in ("tp", "pp", "dp")):
        res.chosen.update(tp=lay.tp, pp=lay.pp, dp=lay.dp)
    if "recompute" in run.searched and lay.recompute == "selective":
        res.chosen["recompute_modules"] = list(lay.recompute_modules or ("core_attn",))
    res.layout = (
        f"TP{lay.tp} PP{lay.pp} DP{lay.dp} CP{lay.cp}" + (f" EP{lay.ep}" if lay.ep > 1 else "")
        + f" v{lay.vpp} mbs{lay.mbs} z{lay.zero} {lay.recompute[:3]}" + _modules_label(lay)
        + (f"{-lay.recompute_layers}/4" if (lay.recompute_layers or 0) < 0 else "") + f" {lay.precision}"
        + (" tpo" if lay.tp_comm_overlap and lay.tp > 1 else "") + (" eager" if lay.kernels == "eager" else "")
    )
    res.predicted_memory_gib = float(out.memory_gib["peak"][best])
    if res.reported_memory_gib:
        res.memory_error = (res.predicted_memory_gib - res.reported_memory_gib) / res.reported_memory_gib
    return res


def validate_rows(rows: list[dict], calib: Calibration = DEFAULT) -> list[RowResult]:
    results = []
    for row in rows:
        try:
            run = map_run(row)
            results.append(predict_run(run, calib))
        except (PlannerInputError, KeyError, TypeError, ValueError) as err:
            ref = (row.get("reference") or {})
            results.append(RowResult(
                id=str(row.get("id", "?")), source=str((row.get("source") or {}).get("key", "?")),
                confidence=str(row.get("confidence", "?")), gpus=int((row.get("hardware") or {}).get("num_gpus") or 0),
                reported=float(ref.get("tokens_per_s_per_gpu") or 0.0), reason=str(err),
            ))
    return results


def summarize(results: list[RowResult], confidence: str = "high") -> dict:
    keep = [r for r in results if r.error is not None and (confidence == "all" or r.confidence == confidence
                                                            or (confidence == "medium" and r.confidence == "high"))]

    def stats(rs):
        errs = np.abs([r.error for r in rs])
        if len(errs) == 0:
            return {"rows": 0, "median_abs_error": None, "p90_abs_error": None, "mape": None}
        return {
            "rows": len(rs),
            "median_abs_error": float(np.median(errs)),
            "p90_abs_error": float(np.percentile(errs, 90)),
            "mape": float(np.mean(errs)),
            "mean_signed_error": float(np.mean([r.error for r in rs])),
        }

    summary = stats(keep)
    summary["confidence"] = confidence
    summary["per_source"] = {src: stats([r for r in keep if r.source == src]) for src in sorted({r.source for r in keep})}
    mem = [r for r in results if r.memory_error is not None]
    summary["memory"] = {
        "rows": len(mem),
        "median_abs_error": float(np.median(np.abs([r.memory_error for r in mem]))) if mem else None,
    }
    summary["unmapped"] = [{"id": r.id, "reason": r.reason} for r in results if r.error is None]
    return summary


def format_table(results: list[RowResult], summary: dict) -> str:
    lines = [f"{'run':<40}{'GPUs':>6}  {'layout (searched knobs chosen by planner)':<64}{'reported':>10}{'predicted':>11}{'error':>8}  mem GiB (rep/pred)"]
    for r in results:
        if r.error is None:
            continue
        mem = ""
        if r.reported_memory_gib:
            mem = f"{r.reported_memory_gib:.1f}/{r.predicted_memory_gib:.1f}"
        flag = "" if r.fits else " (nothing fits; least-memory layout)"
        lines.append(
            f"{r.id[:39]:<40}{r.gpus:>6}  {r.layout[:63]:<64}{r.reported:>10.1f}{r.predicted:>11.1f}{r.error * 100:>+7.1f}%  {mem}{flag}"
        )
    lines.append("")
    s = summary

    def fmt(st):
        if not st["rows"]:
            return "no rows"
        return (f"{st['rows']} rows: median |err| {st['median_abs_error'] * 100:.1f}%, "
                f"p90 {st['p90_abs_error'] * 100:.1f}%, MAPE {st['mape'] * 100:.1f}%, mean signed {st['mean_signed_error'] * 100:+.1f}%")

    lines.append(f"summary ({s['confidence']}-confidence rows) {fmt(s)}")
    for src, st in s["per_source"].items():
        lines.append(f"  {src:<24}{fmt(st)}")
    if s["memory"]["rows"]:
        lines.append(f"peak memory: {s['memory']['rows']} rows with published peak, median |err| {s['memory']['median_abs_error'] * 100:.1f}%")
    for u in s["unmapped"]:
        lines.append(f"not mapped: {u['id']}: {u['reason']}")
    return "\n".join(lines)


def llama3_405b_production_check() -> dict:
    """The Llama 3 405B production layout (Llama 3 paper, Table 4: TP8 CP1 PP16 DP128 on
    16,384 H100, 8K sequences, 16M-token batches): peak memory per recompute setting."""
    from costmodel import Layout, evaluate
    from hardware_catalog import get_cluster, get_gpu, get_model

    model, cluster = get_model("llama3-405b"), get_cluster("dgx-h100")
    gpu = get_gpu(cluster.gpu)
    out = {}
    variants = {
        "none": ("none", None, 1, None),
        "selective": ("selective", None, 1, None),
        # Megatron-Core's fine-grained selective recompute of the MLP (--recompute-modules mlp).
        "selective (mlp)": ("selective", None, 1, ("mlp",)),
        "full": ("full", None, 1, None),
        # Interleaved (the paper's schedule) with half of each stage's layers recomputed.
        "full, half the layers, vpp 4": ("full", -2, 4, None),
    }
    for label, (rc, layers, vpp, modules) in variants.items():
        lay = Layout(tp=8, cp=1, pp=16, dp=128, vpp=vpp, zero=1, mbs=1, gbs=2048, seq_len=8192, recompute=rc,
                     recompute_layers=layers, recompute_modules=modules)
        r = evaluate(model, cluster, lay, gpu=gpu)
        out[label] = {
            "peak_gib": float(r.memory_gib["peak"][0]),
            "capacity_gib": float(r.memory_capacity_gib),
            "fits": bool(r.fits[0]),
            "tokens_per_s_per_gpu": float(r.tokens_per_s_per_gpu[0]),
        }
    return out


def format_production_check(check: dict) -> str:
    lines = ["Llama 3 405B production layout (TP8 CP1 PP16 DP128, 16,384 x H100 80GB, seq 8192, gbs 2048 = 16M tokens):"]
    for rc, v in check.items():
        verdict = "fits" if v["fits"] else "does not fit"
        lines.append(f"  recompute {rc:<29} peak {v['peak_gib']:6.1f} of {v['capacity_gib']:.1f} GiB: {verdict:<13} "
                     f"{v['tokens_per_s_per_gpu']:.0f} tokens/s/GPU")
    fitting = [rc for rc, v in check.items() if v["fits"]]
    lines.append(f"  -> fits an 80 GB H100 with recompute: {'; '.join(fitting) if fitting else 'none of them'}")
    return "\n".join(lines)


def run_validate(runs: Optional[Path], as_json: bool = False, confidence: str = "high") -> None:
    import typer

    if confidence not in ("high", "medium", "all"):
        raise PlannerInputError(f"--confidence={confidence}: allowed high, medium, all")
    rows = load_runs(runs)
    results = validate_rows(rows)
    summary = summarize(results, confidence)
    check = llama3_405b_production_check()
    if as_json:
        typer.echo(json.dumps({"rows": [r.__dict__ for r in results], "summary": summary,
                               "llama3_405b_production": check}, indent=2))
    else:
        typer.echo(format_table(results, summary))
        typer.echo("")
        typer.echo(format_production_check(check))
