"""planner: the fastest parallel layout that fits, for LLM training, without a cluster.

Python API (mirrors the CLI)::

    import planner
    rec = planner.evaluate(model="405b", gpus=16384, gpu="h100", tp=8, pp=16)
    res = planner.search(model="405b", gpus=16384, gpu="h100")
"""

from __future__ import annotations

__version__ = "0.1.0"


def evaluate(model, gpus: int, gpu: str | None = None, cluster: str | None = None, *, gbs=None,
             tokens_per_batch=None, seq_len=None, allow_cross_node_tp: bool = False, **layout) -> dict:
    """Evaluate one layout; returns the ``planner evaluate --json`` dict. ``layout`` takes the
    options of ``costmodel.options.Layout`` by name (tp, pp, recompute, precision, the
    implementation settings...; ``costmodel.OPTIONS`` lists them); dp is gpus / (tp·pp·cp)."""
    from costmodel import evaluate as _evaluate
    from costmodel.record import result_record
    from planner.common import build_layout, resolve_setup
    from search.rules import check_layout

    setup = resolve_setup(model, gpu, cluster, seq_len, gbs, tokens_per_batch)
    lay = build_layout(setup, gpus, **layout)
    check_layout(setup.model, setup.cluster, setup.gpu, lay, gpus=gpus, allow_cross_node_tp=allow_cross_node_tp,
                 batch_origin=setup.batch_origin)
    return result_record(setup.model, setup.cluster, setup.gpu, _evaluate(setup.model, setup.cluster, lay, gpu=setup.gpu))


def search(*args, **kwargs):
    """Search layouts; see ``search.api.search`` (same arguments)."""
    from search.api import search as _search

    return _search(*args, **kwargs)


__all__ = ["evaluate", "search", "__version__"]
