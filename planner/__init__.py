"""planner: the fastest parallel layout that fits, for LLM training, without a cluster.

Python API (mirrors the CLI)::

    import planner
    rec = planner.evaluate(model="405b", gpus=16384, gpu="h100", tp=8, pp=16)
    res = planner.search(model="405b", gpus=16384, gpu="h100")
"""

from __future__ import annotations

__version__ = "0.1.0"


def evaluate(model, gpus: int, gpu: str | None = None, cluster: str | None = None, *, gbs=None,
             tokens_per_batch=None, seq_len=None, **layout) -> dict:
    """Evaluate one layout; returns the ``planner evaluate --json`` dict. ``layout`` takes the
    knobs of ``costmodel.Layout`` (tp, pp, cp, ep, etp, vpp, zero, mbs, recompute, precision,
    sequence_parallel, pp_first_layers, pp_last_layers) and its implementation settings
    (attention, kernels, loss, tp_comm_overlap, ep_comm_overlap, moe_dispatcher, grad_dtype, zero3_gather)."""
    from costmodel import evaluate as _evaluate
    from costmodel.layout import IMPLEMENTATION_DEFAULTS
    from costmodel.record import result_record
    from planner.common import build_layout, resolve_setup
    from search.rules import check_layout

    allow = layout.pop("allow_cross_node_tp", False)
    setup = resolve_setup(model, gpu, cluster, seq_len, gbs, tokens_per_batch)
    impl = {k: layout.pop(k) for k in IMPLEMENTATION_DEFAULTS if k in layout}
    lay = build_layout(setup, gpus, implementation=impl, **layout)
    check_layout(setup.model, setup.cluster, setup.gpu, lay, allow_cross_node_tp=allow)
    return result_record(setup.model, setup.cluster, setup.gpu, _evaluate(setup.model, setup.cluster, lay, gpu=setup.gpu))


def search(*args, **kwargs):
    """Search layouts; see ``search.api.search`` (same arguments)."""
    from search.api import search as _search

    return _search(*args, **kwargs)


__all__ = ["evaluate", "search", "__version__"]
