"""Where each parallel group's ranks sit: inside one scale-up domain or across the network.

Megatron-Core orders ranks tp-cp-ep-dp-pp by default (``--order`` / RankGenerator in
``megatron/core/parallel_state.py``): TP ranks are adjacent, CP ranks stride TP, the
data-parallel ranks stride TP·CP, pipeline stages stride TP·CP·DP. MoE layers use "parallel
folding" (Megatron-Core MoE docs): their own order etp-ep-edp over the same TP·CP·DP ranks.
A group of ``size`` ranks spaced ``stride`` apart puts min(size, domain/stride) ranks in each
scale-up domain and spans the rest over the network.
"""

from __future__ import annotations

import numpy as np


def group_span(size, stride, domain_size: int):
    """(ranks per scale-up domain, domains spanned) for a group of ``size`` ranks ``stride`` apart."""
    size = np.asarray(size, dtype=np.int64)
    stride = np.asarray(stride, dtype=np.int64)
    per_domain = np.maximum(domain_size // np.maximum(stride, 1), 1)
    n_local = np.where(stride >= domain_size, 1, np.minimum(size, per_domain))
    n_nodes = -(-size // n_local)
    return n_local, n_nodes


def pipeline_crosses_network(tp, cp, dp, pp, domain_size: int):
    """Pipeline neighbours stride TP·CP·DP ranks: the slowest hop crosses the network as soon
    as the whole pipeline does not fit in one domain."""
    stride = np.asarray(tp) * np.asarray(cp) * np.asarray(dp)
    return stride * np.asarray(pp) > domain_size


def cp_a2a_ranks(cp_comm_type, cp, tp, domain_size: int):
    """Ranks of the all-to-all (Ulysses) part of context parallelism, by ``cp_comm_type`` code
    (costmodel.options.CP_COMM_TYPES): every CP rank for a2a; for a2a+p2p the CP ranks inside one
    scale-up domain (CP ranks stride TP: min(cp, domain / tp); Megatron-LM
    --hierarchical-context-parallel-sizes, all-to-all on NVLink and the ring over the network,
    TransformerEngine PR #1209); 1 for p2p and allgather. The ring then runs over cp / these."""
    from costmodel.options import CP_COMM_TYPES

    kind = np.asarray(cp_comm_type)
    cp = np.asarray(cp, dtype=np.int64)
    inside = np.clip(domain_size // np.maximum(np.asarray(tp, dtype=np.int64), 1), 1, np.maximum(cp, 1))
    return np.where(kind == CP_COMM_TYPES.index("a2a"), cp, np.where(kind == CP_COMM_TYPES.index("a2a+p2p"), inside, 1))
