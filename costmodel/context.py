"""What every mechanism of the step-time model reads, computed once per chunk of layouts.

``ChunkContext`` gathers the model, the hardware and the layouts' common columns as floats, so
each mechanism module (``tensor_parallel``, ``context_parallel``, ``expert_parallel``,
``recompute``, ``schedule``, ``data_parallel``, ``memory``...) takes one argument for them and
reads only the option columns it owns from ``batch``. Letters follow ``costmodel/NOTATION.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.calibration import Calibration
from costmodel.collectives import Fabric
from costmodel.compute import power_limited
from costmodel.layout import LayoutBatch
from costmodel.params import ParamCounts
from hardware_catalog.schema import ClusterSpec, GPUSpec, ModelSpec

BF16 = 2.0
"""Bytes of a BF16 element: activations, P2P messages, KV chunks and all-to-all tokens."""


@dataclass(frozen=True, slots=True)
class ChunkContext:
    """The shared inputs of one vectorized pass (arrays have one entry per layout)."""

    model: ModelSpec
    """The model being trained."""
    counts: ParamCounts
    """Its parameter counts (whole model, not per GPU)."""
    gpu: GPUSpec
    """The GPU at its datasheet peaks: what MFU and HFU are measured against."""
    gpu_clocked: GPUSpec
    """The GPU at the clocks the cluster's power cap and sustained training allow: what kernel
    times are priced with (``compute.power_limited``)."""
    fabric: Fabric
    """Scale-up domain and network, as the collectives see them."""
    calib: Calibration
    """Global constants (efficiencies, overheads, overlap fractions)."""
    batch: LayoutBatch
    """The layouts; each mechanism reads the option columns it owns from here."""
    domain: int
    """D: GPUs of one scale-up domain (``cluster.scaleup_domain_size``)."""
    n: int
    """Layouts in this chunk."""
    tp: np.ndarray
    """Tensor-parallel degree t, float."""
    cp: np.ndarray
    """Context-parallel degree c, float."""
    dp: np.ndarray
    """Data-parallel degree, float."""
    pp: np.ndarray
    """Pipeline-parallel degree p, float."""
    ep: np.ndarray
    """Expert-parallel degree, float."""
    etp: np.ndarray
    """Expert tensor-parallel degree, float."""
    vpp: np.ndarray
    """Virtual pipeline chunks per stage v, float (1 = not interleaved)."""
    m: np.ndarray
    """Micro-batches per step per pipeline, gbs / (dp · b), at least 1, float."""
    gpus: np.ndarray
    """GPUs of the job, t · c · dp · p, float."""
    tokens_mb: np.ndarray
    """Tokens of one micro-batch on one GPU, b · s / c."""
    act_bytes: np.ndarray
    """One micro-batch's activations [s/c, b, h] in BF16 on one GPU, bytes: what a TP collective
    or (divided by t under SP) a pipeline P2P send moves."""
    sp: np.ndarray
    """Sequence parallelism runs (bool; always off where t = 1)."""
    full: np.ndarray
    """Full activation recompute (bool)."""
    selective: np.ndarray
    """Selective recompute of submodules (bool)."""
    fp8: np.ndarray
    """FP8 linear layers (bool)."""
    h: float
    """Hidden size."""
    shared_experts: bool
    """The model's MoE layers have shared experts (their MLP runs under TP like a dense one)."""


def chunk_context(model, cluster: ClusterSpec, batch: LayoutBatch, gpu, calib, fabric, counts) -> ChunkContext:
    """The ``ChunkContext`` of ``batch`` on ``cluster``."""
    tp = batch.tp.astype(np.float64)
    cp = batch.cp.astype(np.float64)
    dp = batch.dp.astype(np.float64)
    pp = batch.pp.astype(np.float64)
    h = float(model.hidden_size)
    tokens_mb = batch.mbs * batch.seq_len / cp
    return ChunkContext(
        model=model,
        counts=counts,
        gpu=gpu,
        # Kernel times use the clocks the cluster's power cap allows; MFU keeps the nominal peak.
        gpu_clocked=power_limited(gpu, cluster.power_limit_watts, calib.sustained_clock_fraction),
        fabric=fabric,
        calib=calib,
        batch=batch,
        domain=cluster.scaleup_domain_size,
        n=len(batch),
        tp=tp,
        cp=cp,
        dp=dp,
        pp=pp,
        ep=batch.ep.astype(np.float64),
        etp=batch.etp.astype(np.float64),
        vpp=batch.vpp.astype(np.float64),
        m=np.maximum(batch.gbs // np.maximum(batch.dp * batch.mbs, 1), 1).astype(np.float64),
        gpus=tp * cp * dp * pp,
        tokens_mb=tokens_mb,
        act_bytes=tokens_mb * h * BF16,
        sp=batch.sequence_parallel,
        full=batch.is_("recompute", "full"),
        selective=batch.is_("recompute", "selective"),
        fp8=batch.is_("precision", "fp8"),
        h=h,
        shared_experts=model.moe is not None and model.moe.num_shared_experts > 0,
    )
