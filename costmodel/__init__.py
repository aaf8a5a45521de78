"""Analytic cost model: step time and peak memory per GPU for parallel layouts.

Pure functions over numpy arrays: ``evaluate_batch(model, cluster, batch)`` prices N layouts in
one vectorized call; ``evaluate(model, cluster, layout)`` prices one.
"""

from costmodel.layout import Layout, LayoutBatch, PRECISIONS, RECOMPUTE
from costmodel.result import BatchResult, MEMORY_TERMS, TIME_TERMS
from costmodel.step import evaluate, evaluate_batch

__all__ = [
    "Layout",
    "LayoutBatch",
    "PRECISIONS",
    "RECOMPUTE",
    "BatchResult",
    "MEMORY_TERMS",
    "TIME_TERMS",
    "evaluate",
    "evaluate_batch",
]
