"""The optimizer step: Adam over the parameters a GPU owns, bound by HBM bandwidth.

Mixed-precision Adam (Micikevicius et al. 2018; Megatron-Core DistributedOptimizer) streams
each owned parameter's FP32 state once per step and does a few FLOPs per byte, so it runs at
the memory-bound kernels' share of HBM bandwidth. ZeRO >= 1 owns 1/shard of the states.
"""

from __future__ import annotations

import numpy as np

from costmodel.context import ChunkContext

OPTIMIZER_STEP_BYTES = 34.0
"""Adam step traffic per owned parameter: read grad, master, m, v (4 x 4 B), write master, m, v
(3 x 4 B) and the BF16 weight (2 B), plus reading the grad once more for the norm/clip."""


def owned_params(zero, dense, expert, dense_shard, expert_shard):
    """Parameters whose optimizer states this GPU updates: a 1/shard slice under ZeRO >= 1
    (Rajbhandari et al. 2020, Sec. 5.1), all it holds otherwise."""
    return np.where(zero >= 1, dense / dense_shard + expert / expert_shard, dense + expert)


def optimizer_time(ctx: ChunkContext, sharding, heavy):
    """Seconds of the optimizer step on the stage holding most parameters (``heavy``, a
    ``stage_params.HeaviestStage``) under ``sharding`` (``data_parallel.Sharding``): 34 B per
    owned parameter over achievable HBM bandwidth."""
    owned = owned_params(sharding.zero, heavy.dense, heavy.expert, sharding.dense_shard, sharding.expert_shard)
    bandwidth = ctx.gpu.memory_bandwidth_gbps * 1e9 * ctx.calib.memory_bound_efficiency
    return OPTIMIZER_STEP_BYTES * owned / bandwidth
