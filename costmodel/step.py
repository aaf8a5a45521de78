"""Step time and memory for a batch of layouts (STUB: replaced by the real model shortly)."""

from __future__ import annotations

import numpy as np

from costmodel.layout import Layout, LayoutBatch
from costmodel.params import count_params
from costmodel.result import MEMORY_TERMS, TIME_TERMS, BatchResult


def evaluate_batch(model, cluster, batch: LayoutBatch, gpu=None) -> BatchResult:
    from hardware_catalog import get_gpu

    gpu = gpu or get_gpu(cluster.gpu)
    p = count_params(model)
    gpus = batch.tp * batch.pp * batch.dp * batch.cp
    tokens = batch.gbs * batch.seq_len
    flops = 6.0 * p.matmul_active * tokens
    step = flops / (gpus * gpu.bf16_tflops * 1e12 * 0.5) * (1 + 0.05 * batch.tp + 0.02 * batch.pp)
    zeros = np.zeros(len(batch))
    terms = {t: zeros.copy() for t in TIME_TERMS}
    terms["compute"] = step
    weights = p.total * 2 / (batch.tp * batch.pp) / 2**30
    mem = {m: zeros.copy() for m in MEMORY_TERMS}
    mem["weights"] = weights
    mem["optimizer"] = 12 * p.total / (batch.tp * batch.pp * np.where(batch.zero >= 1, batch.dp, 1)) / 2**30
    mem["activations"] = 34 * batch.seq_len * batch.mbs * model.hidden_size * model.num_layers / (batch.tp * batch.pp) / 2**30
    mem["peak"] = sum(mem[m] for m in MEMORY_TERMS)
    return BatchResult(
        batch=batch,
        step_time_s=step,
        tokens_per_s=tokens / step,
        tokens_per_s_per_gpu=tokens / step / gpus,
        mfu=flops / (step * gpus * gpu.bf16_tflops * 1e12),
        hfu=flops / (step * gpus * gpu.bf16_tflops * 1e12),
        time_terms=terms,
        overlapped_terms={},
        memory_gib=mem,
        memory_capacity_gib=gpu.memory_gib,
        fits=mem["peak"] <= gpu.memory_gib,
    )


def evaluate(model, cluster, layout: Layout, gpu=None) -> BatchResult:
    return evaluate_batch(model, cluster, LayoutBatch.from_layouts([layout]), gpu=gpu)
