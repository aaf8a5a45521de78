"""Activation recompute: which layers and submodules run their forward again, and its cost.

Full recompute (Chen et al. 2016; Korthikanti et al. 2022, Sec. 5) keeps each layer's input and
runs the whole forward again in backward, for every layer or, with Megatron's block method
(--recompute-method block --recompute-num-layers), the first layers of each model chunk.
Selective recompute (Korthikanti Sec. 5; Megatron-Core TransformerConfig.recompute_modules)
runs again only named submodules, core_attn alone by default. The only module that reads
``batch.recompute_layers``, ``batch.recompute_share`` and ``batch.recompute_modules``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.compute import LayerTimes
from costmodel.context import ChunkContext
from costmodel.layout import recompute_module_bit
from costmodel.pipeline import partial_recompute_per_chunk


def block_share(recomputed_per_stage, n_layers, partial, full):
    """Share of a stage's ``n_layers`` that full recompute covers: all of them, or under the
    block method ``recomputed_per_stage`` of them (per chunk x vpp chunks); 0 without it."""
    n = np.maximum(n_layers.astype(np.float64), 1.0)
    share = np.where(partial, np.minimum(recomputed_per_stage / n, 1.0), 1.0)
    return np.where(full, share, 0.0)


class FullRecompute:
    """Full recompute of a chunk's layouts: the share of each stage's layers it covers."""

    __slots__ = ("full", "partial", "recomputed_per_stage", "_shares")

    def __init__(self, ctx: ChunkContext, middle_layers):
        batch = ctx.batch
        model = ctx.model
        per_chunk, _ = partial_recompute_per_chunk(
            model.num_layers, batch.pp, batch.vpp, batch.pp_first_layers, batch.pp_last_layers,
            batch.recompute_layers, batch.recompute_share, middle=middle_layers,
        )
        self.full = ctx.full
        self.partial = (batch.recompute_layers != 0) | (batch.recompute_share != 0)
        self.recomputed_per_stage = (per_chunk * batch.vpp).astype(np.float64)
        self._shares: dict[int, np.ndarray] = {}

    def share(self, n_layers) -> np.ndarray:
        """Share of a stage of ``n_layers`` layers that runs its forward again (cached per
        stage array)."""
        key = id(n_layers)
        if key not in self._shares:
            if not self.partial.any():
                self._shares[key] = self.full.astype(np.float64)
            else:
                self._shares[key] = block_share(self.recomputed_per_stage, n_layers, self.partial, self.full)
        return self._shares[key]


class SelectiveRecompute:
    """Selective recompute of a chunk's layouts: the submodules each layout runs again."""

    __slots__ = ("modules", "_bits")

    def __init__(self, ctx: ChunkContext):
        # Bit mask over costmodel.layout.RECOMPUTE_MODULES; 0 where not selective.
        self.modules = np.where(ctx.selective, ctx.batch.recompute_modules, 0)
        self._bits: dict[str, np.ndarray] = {}

    def has(self, name: str) -> np.ndarray:
        """1.0 where submodule ``name`` is recomputed, else 0.0."""
        if name not in self._bits:
            self._bits[name] = recompute_module_bit(self.modules, name).astype(np.float64)
        return self._bits[name]

    def forward_time(self, layer: LayerTimes):
        """Seconds of the recomputed forwards of one layer: the attention core and the
        submodules selected."""
        t = self.has("core_attn") * layer.attention_forward
        for name, seconds in layer.module_forward.items():
            t = t + self.has(name) * seconds
        return t

    def flops_per_token(self, ctx: ChunkContext, dense: LayerTimes, moe: LayerTimes):
        """Hardware FLOPs per model token of the recomputed submodules' GEMMs: per micro-batch
        on one GPU, times t / tokens to count the whole model per token."""
        n_dense, n_moe = ctx.counts.num_dense_layers, ctx.counts.num_moe_layers
        return sum(
            self.has(name) * (n_dense * dense.module_flops[name] + n_moe * moe.module_flops[name])
            for name in dense.module_flops
        ) * ctx.tp / ctx.tokens_mb


@dataclass(frozen=True, slots=True)
class SelectiveCost:
    """What selective recompute adds per layer and micro-batch (0 where it is off)."""

    dense_forward: np.ndarray
    """Recomputed forward seconds of a dense layer."""
    moe_forward: np.ndarray
    """Recomputed forward seconds of an MoE layer."""
    tp_dense: np.ndarray
    """TP seconds a dense layer repeats: the all-gather / reduce-scatter pair of a recomputed
    MLP (half of the layer's two pairs)."""
    tp_moe: np.ndarray | float
    """TP seconds an MoE layer repeats: its shared experts' pair, when they or the whole MoE
    block run again."""
    moe_again: np.ndarray
    """Extra runs of an MoE layer's dispatch and combine all-to-alls: 1 where the moe module
    is recomputed."""


def selective_cost(sel: SelectiveRecompute, dense: LayerTimes, moe: LayerTimes, tp_dense, tp_moe,
                   shared_experts: bool) -> SelectiveCost:
    """Per-layer cost of the selected submodules: their forwards and the communication they
    repeat (``tp_dense`` / ``tp_moe``: exposed TP seconds per layer and pass)."""
    shared_tp = (tp_moe / 2.0) if shared_experts else 0.0
    return SelectiveCost(
        dense_forward=sel.forward_time(dense),
        moe_forward=sel.forward_time(moe),
        tp_dense=sel.has("mlp") * tp_dense / 2.0,
        tp_moe=np.maximum(sel.has("moe"), sel.has("shared_experts")) * shared_tp,
        moe_again=sel.has("moe"),
    )


def stage_time(ctx: ChunkContext, share, n_dense, n_moe, dense: LayerTimes, moe: LayerTimes, cost: SelectiveCost):
    """Recompute seconds of one micro-batch on a stage: the covered ``share`` of its layers'
    forwards under full recompute, the selected submodules' forwards under selective."""
    return np.where(
        ctx.full,
        share * (n_dense * dense.forward + n_moe * moe.forward),
        np.where(ctx.selective, n_dense * cost.dense_forward + n_moe * cost.moe_forward, 0.0),
    )
