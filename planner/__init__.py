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
    from planner.job import Job, ProblemRequest, price

    problem = ProblemRequest(model, gpus, gpu, cluster, gbs=gbs, seq_len=seq_len, tokens_per_batch=tokens_per_batch,
                             allow_cross_node_tp=allow_cross_node_tp)
    return price(Job(problem), layout).record


def search(model, gpus, gpu=None, cluster=None, **keywords):
    """Search layouts; returns a ``search.api.SearchResult``. The keywords are the fields of
    ``search.request`` (problem: gbs, seq_len, tokens_per_batch, allow_cross_node_tp; options:
    pins, implementation, recompute_modules, method, trials, ...; ranking: top, pareto,
    objective, ...) and ``calib``."""
    from search.api import search as _search
    from search.request import SearchRequest

    return _search(SearchRequest.of(model, gpus, gpu, cluster, **keywords))


__all__ = ["evaluate", "search", "__version__"]
