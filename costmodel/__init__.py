"""Analytic cost model: step time and peak memory per GPU for parallel layouts.

Pure functions over numpy arrays: ``evaluate_batch(model, cluster, batch)`` prices N layouts in
one vectorized call; ``evaluate(model, cluster, layout)`` prices one. The letters used in the
formulas are fixed in ``costmodel/NOTATION.md``.

Names load on first use, so ``import costmodel.options`` (what the CLI needs for its flags)
does not pull in numpy.
"""

from importlib import import_module

_EXPORTS = {
    "Layout": "costmodel.options",
    "OPTIONS": "costmodel.options",
    "PRECISIONS": "costmodel.options",
    "RECOMPUTE": "costmodel.options",
    "LayoutBatch": "costmodel.layout",
    "BatchResult": "costmodel.result",
    "MEMORY_TERMS": "costmodel.result",
    "TIME_TERMS": "costmodel.result",
    "evaluate": "costmodel.step",
    "evaluate_batch": "costmodel.step",
}

__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'costmodel' has no attribute {name!r}")
