"""A run's measurement -> tokens/s/GPU, the quantity planner predicts, and how it was converted.

A row may give tokens/s/GPU, tokens/s, step time, samples/s, TFLOP/s/GPU or MFU (``Measured``).
The first of those it gives (in that order) is converted; the others, where they disagree with it
by more than ``DISAGREE``, are listed. A ``reference`` block (the curated reference set) wins and
adds no note: its ``method`` says how it was derived.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

DISAGREE = 0.05
"""Two measurements of one row that differ by more than this are listed."""
GIB = 2**30


def flops_per_token(model, seq_len: int, convention: str) -> float:
    """Training FLOPs per token under a convention (``schema.FLOP_CONVENTIONS``)."""
    from costmodel.flops import model_flops_per_token
    from costmodel.params import count_params

    counts = count_params(model)
    # 6N: forward 2N + backward 4N over the active matmul weights, LM head included (Kaplan et
    # al. 2020 Sec. 2.1); model_flops_per_token adds the causal attention core, fwd + bwd = 3x
    # its forward (PaLM App. B, causal as FlashAttention computes it).
    six_n = 6.0 * counts.matmul_active
    attention = float(model_flops_per_token(model, seq_len, counts)) - six_n
    if convention.startswith("8N"):
        # Full recompute runs each forward twice: 2N + 2N + 4N = 8N, and attention 4x its
        # forward instead of 3x (Narayanan et al. 2021 Sec. 5.1 count; hardware FLOPs, Chowdhery
        # et al. 2022 App. B).
        six_n, attention = six_n * 8.0 / 6.0, attention * 4.0 / 3.0
    return six_n + (attention if convention.endswith("attention") else 0.0)


@dataclass
class Reported:
    """The row's tokens/s/GPU and what planner did to get it."""

    tokens_per_s_per_gpu: float
    notes: list = field(default_factory=list)
    memory_gib: Optional[float] = None


def _flop_text(model, seq: int, measured) -> tuple[float, str]:
    convention = measured.flops or "6N+attention"
    per_token = flops_per_token(model, seq, convention)
    stated = "" if measured.flops else ", convention not stated: assumed"
    return per_token, f"{per_token / 1e9:.2f} GFLOP/token ({convention} at seq {seq}{stated})"


def _convert(kind: str, measured, model, gpu, gpus: int, gbs: Optional[int], seq: int) -> tuple[float, str]:
    """tokens/s/GPU from one kind of measurement, and the sentence saying how."""
    v = getattr(measured, kind)
    if kind == "tokens_per_s_per_gpu":
        return v, f"{v:,.1f} tokens/s/GPU as measured"
    if kind == "tokens_per_s":
        return v / gpus, f"from {v:,.0f} tokens/s / {gpus} GPUs"
    if kind == "step_time_s":
        if not gbs:
            raise ValueError("a step time needs the global batch size")
        # One step processes gbs sequences of seq tokens over all GPUs.
        return gbs * seq / v / gpus, f"from step time {v:g} s: gbs {gbs} x seq {seq} / {v:g} s / {gpus} GPUs"
    if kind == "samples_per_s":
        return v * seq / gpus, f"from {v:g} samples/s x seq {seq} / {gpus} GPUs"
    per_token, flop = _flop_text(model, seq, measured)
    if kind == "tflops_per_gpu":
        return v * 1e12 / per_token, f"from {v:g} TFLOP/s/GPU / {flop}"
    # MFU = achieved model FLOP/s / peak (Chowdhery et al. 2022 App. B); peak: the dense BF16
    # tensor-core peak of the GPU unless the row states the one its source used.
    peak = measured.peak_tflops or gpu.bf16_tflops
    whose = "as stated" if measured.peak_tflops else f"dense BF16 peak of {gpu.name}"
    return v * peak * 1e12 / per_token, f"from MFU {v * 100:.1f}% x {peak:g} TFLOP/s ({whose}) / {flop}"


MEMORY_SLACK = 1.1
"""A measured peak may exceed the catalog's usable HBM by this factor (GB/GiB and driver
reserve mix-ups) before it is refused as impossible."""


def peak_for_precision(gpu, precision: str = "") -> float:
    """The highest dense tensor peak (TFLOP/s) a run in ``precision`` (the row's text) can use, as
    the row is priced (``planner.validate.runs``: FP8 where the text says fp8 / float8, FP4 where
    fp4, else BF16, an unstated precision included): an FP8 run the FP8 peak, a 4-bit run the FP4
    one, any other the BF16 peak."""
    text = str(precision or "").lower()
    fp8 = max(gpu.bf16_tflops, gpu.fp8_tflops or 0.0)
    if "fp4" in text or "4bit" in text or "4-bit" in text:
        return max(fp8, gpu.fp4_tflops or 0.0)
    if "fp8" in text or "float8" in text:
        return fp8
    return gpu.bf16_tflops


def tokens_per_s_per_gpu_limit(model, gpu, precision: str = "") -> float:
    """The most tokens/s/GPU physics allows: every token costs at least 6N training FLOPs (N the
    active matmul weights; Kaplan et al. 2020 Sec. 2.1), done at no more than the GPU's dense
    tensor peak in the row's precision (``peak_for_precision``): implied MFU <= 100%."""
    from costmodel.params import count_params

    return peak_for_precision(gpu, precision) * 1e12 / (6.0 * count_params(model).matmul_active)


def plausible(value: float, memory_gib: Optional[float], model, gpu, precision: str = "") -> None:
    """ValueError naming the bound when a row's measurement is impossible on its GPU."""
    limit = tokens_per_s_per_gpu_limit(model, gpu, precision)
    if value > limit:
        peak = peak_for_precision(gpu, precision)
        what = f" {precision}" if precision else ""
        raise ValueError(f"{value:,.0f} tokens/s/GPU is implausible: {gpu.name}'s dense{what} peak of {peak:g} TFLOP/s "
                         f"allows at most {limit:,.0f} for {model.name} (6N FLOPs per token; MFU <= 100%)")
    if memory_gib is not None and memory_gib > gpu.memory_gib * MEMORY_SLACK:
        raise ValueError(f"peak memory {memory_gib:,.1f} GiB is implausible: {gpu.name} has {gpu.memory_gib:g} GiB")


def reported(row, model, gpu, gpus: int, gbs: Optional[int], seq: int) -> Reported:
    """The row's tokens/s/GPU (``reference`` first, else its first measurement converted), with
    the notes saying how, and its peak memory in GiB; ValueError for an impossible measurement
    (``plausible``)."""
    out = _reported(row, model, gpu, gpus, gbs, seq)
    plausible(out.tokens_per_s_per_gpu, out.memory_gib, model, gpu, str(row.layout.precision or ""))
    return out


def _reported(row, model, gpu, gpus: int, gbs: Optional[int], seq: int) -> Reported:
    if row.reference is not None and row.reference.tokens_per_s_per_gpu:
        return Reported(row.reference.tokens_per_s_per_gpu, [], row.reference.peak_memory_gib)
    m = row.measured
    kinds = m.given()
    if not kinds:
        raise ValueError("no measurement (give measured.tokens_per_s_per_gpu, tokens_per_s, step_time_s, "
                         "samples_per_s, tflops_per_gpu or mfu)")
    value, how = _convert(kinds[0], m, model, gpu, gpus, gbs, seq)
    notes = [f"reported {value:,.1f} tokens/s/GPU: {how}" if kinds[0] != "tokens_per_s_per_gpu" else f"reported {how}"]
    for kind in kinds[1:]:
        try:
            other, how = _convert(kind, m, model, gpu, gpus, gbs, seq)
        except ValueError:
            continue
        if abs(other / value - 1) > DISAGREE:
            notes.append(f"also given: {kind} gives {other:,.1f} tokens/s/GPU ({(other / value - 1) * 100:+.1f}%; {how})")
    memory = m.peak_memory_gib
    if memory is None and m.peak_memory_gb is not None:
        memory = m.peak_memory_gb * 1e9 / GIB
        notes.append(f"peak memory {m.peak_memory_gb:g} GB = {memory:.2f} GiB")
    elif memory is not None and m.peak_memory_gb is not None and abs(m.peak_memory_gb * 1e9 / GIB / memory - 1) > DISAGREE:
        notes.append(f"also given: peak_memory_gb {m.peak_memory_gb:g} GB = {m.peak_memory_gb * 1e9 / GIB:.2f} GiB "
                     f"({(m.peak_memory_gb * 1e9 / GIB / memory - 1) * 100:+.1f}%; peak_memory_gib {memory:g} is used)")
    return Reported(value, notes, memory)


# ------------------------------------------------------------------ runs that look like unit slips

MEMORY_SUSPECT = 2.0
"""A reported peak memory more than this factor from the prediction is flagged. Memory needs no
fitted constant and the reference set's median memory error is a few percent (``planner
validate``), so a factor of two is a slip of units (GB for GiB, MiB, a fraction) or a different
run, not the model's error; a slip of units is a factor of 1.07 (GB/GiB) or >= 1,000."""


def suspect_runs_warning(errors: list, limit: float, memory: list = (), against: str = "",
                         consequence: str = "") -> Optional[str]:
    """The one warning ``validate`` and ``calibrate`` give for runs whose measurement looks wrong:
    ``errors``: (id, signed throughput error with the constants in use) of every run, flagged past
    ``limit`` (``fit.CLIP``: the fit counts no error further); ``memory``: (id, reported GiB,
    predicted GiB), flagged past ``MEMORY_SUSPECT`` either way; ``against``: the constants the errors
    are with (" with the shipped constants"); ``consequence``: what such a run does to the command's
    result. None when no run is flagged."""
    from planner.reports import counted

    slow = [(rid, err) for rid, err in errors if abs(err) > limit]
    mem = [(rid, rep, pred) for rid, rep, pred in memory
           if rep and pred and not 1 / MEMORY_SUSPECT <= pred / rep <= MEMORY_SUSPECT]
    if not slow and not mem:
        return None
    parts = []
    if slow:
        said = ", ".join(f"{rid} {err * 100:+.0f}%" for rid, err in slow[:5]) + (", ..." if len(slow) > 5 else "")
        parts.append(f"{counted(len(slow), 'run')} off by more than {limit:.0%} in throughput{against} ({said})")
    if mem:
        said = ", ".join(f"{rid} {rep:g} GiB reported, {pred:.1f} predicted" for rid, rep, pred in mem[:5]) \
            + (", ..." if len(mem) > 5 else "")
        parts.append(f"{counted(len(mem), 'run')} whose peak memory is off by more than a factor of "
                     f"{MEMORY_SUSPECT:g} ({said})")
    return ("; ".join(parts) + (f": {consequence}" if consequence else "") + "; check the measurement and units (step_time_s in seconds, tokens_per_s the total "
            "of all GPUs, mfu a fraction, peak_memory_gib in GiB)")
