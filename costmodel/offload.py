"""CPU activation offload (Megatron-Core --cpu-offloading-num-layers; vectorized).

TransformerEngine's offload context (transformer_engine/pytorch/cpu_offload.py, which
Megatron-Core's TransformerBlock enters for its first ``cpu_offloading_num_layers`` layers)
copies the tensors a layer saves for backward to pinned host memory on a side stream once the
layer's forward is done, behind the next layer's forward, and brings them back on that stream
one layer ahead of backward, behind the later layer's backward (double buffering: one layer's
activations in flight on the GPU). Megatron-Core refuses it with pipeline parallelism.

What it costs is the copy beyond the compute it hides behind, per offloaded layer and pass:
max(0, bytes / host bandwidth - layer seconds). The host link is PCIe (Gen5 x16: 64 GB/s a
direction, H100 datasheet) or NVLink-C2C on Grace-Blackwell (900 GB/s bidirectional, capped by
the Grace memory two GPUs share: GPUSpec.host_bandwidth_gbps). The copies also read and write
HBM, beside the compute; at under a tenth of HBM bandwidth that is left out.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from costmodel.compute import LayerTimes

PCIE_GEN5_GBPS = 64.0
"""Host bandwidth per direction where the catalog has none: PCIe Gen5 x16 (H100 datasheet:
128 GB/s bidirectional)."""


def offloaded_layers(ctx, n_layers):
    """Layers of a stage of ``n_layers`` whose activations go to the host."""
    off = ctx.batch.cpu_offload_layers.astype(np.float64)
    return np.minimum(off, np.asarray(n_layers, dtype=np.float64))


def kept_fraction(ctx, n_layers):
    """Share of a stage's per-layer activations still on the GPU: the layers not offloaded,
    and one offloaded layer's in flight (double buffering)."""
    n = np.maximum(np.asarray(n_layers, dtype=np.float64), 1.0)
    off = offloaded_layers(ctx, n_layers)
    return 1.0 - np.maximum(off - 1.0, 0.0) / n


def host_bandwidth(gpu) -> float:
    """Bytes/s per direction between the GPU and host memory."""
    return (gpu.host_bandwidth_gbps or PCIE_GEN5_GBPS) * 1e9


def copy_exposure(copy_seconds, forward, backward):
    """(forward, backward) seconds a layer's copy out and back in is longer than the compute
    it hides behind (the next layer's forward, the later layer's backward)."""
    return np.maximum(copy_seconds - forward, 0.0), np.maximum(copy_seconds - backward, 0.0)


def with_offload(ctx, dense: LayerTimes, moe: LayerTimes, bytes_per_token_dense, bytes_per_token_moe):
    """Layer times with the offload copies' exposure spread over the stage's layers (the
    offloaded share of the layers pays it). ``bytes_per_token_*``: what one layer keeps per
    token for backward (costmodel.memory)."""
    if not np.any(ctx.batch.cpu_offload_layers > 0):
        return dense, moe
    share = offloaded_layers(ctx, ctx.model.num_layers) / float(ctx.model.num_layers)
    bw = host_bandwidth(ctx.gpu)

    def one(layer, per_token):
        copy = ctx.tokens_mb * per_token / bw
        fwd, bwd = copy_exposure(copy, layer.forward, layer.backward)
        return replace(layer, forward=layer.forward + share * fwd, backward=layer.backward + share * bwd)

    dense2 = one(dense, bytes_per_token_dense)
    return dense2, (dense2 if moe is dense else one(moe, bytes_per_token_moe))
