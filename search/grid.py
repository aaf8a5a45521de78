"""Candidate layouts from explicit per-option choices: a Cartesian product filtered by the rules.

``planner validate`` states, for each published run, the values each option may take (one value
where the source published it, a list where it did not). :func:`candidate_grid` turns that into
a ``LayoutBatch``: every combination, in ``np.meshgrid(..., indexing="ij")`` order over the
options as given (the last option varies fastest), with dp derived from the GPU count, the fixed
settings applied where their rules allow (``search.rules.where_settings_apply``) and only the
layouts that obey every rule of ``search.rules.RULES`` kept. :func:`expand_recompute_modules`
then adds Megatron-Core's fine-grained selective recompute: each selective layout once per set
of the recompute modules the model has.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from costmodel.layout import LayoutBatch
from costmodel.options import OPTIONS_BY_NAME, RECOMPUTE, SETTING
from costmodel.pipeline import partial_recompute_per_chunk
from search.rules import RuleContext, model_recompute_modules, valid_mask, where_settings_apply, windowed_cp_comm_type


def _product_columns(choices: dict[str, list]) -> dict[str, np.ndarray]:
    """Column codes of the Cartesian product of ``choices`` (option -> ``Layout`` values)."""
    names = list(choices)
    index = np.meshgrid(*[np.arange(len(choices[k])) for k in names], indexing="ij")
    cols = {}
    for name, idx in zip(names, index):
        opt = OPTIONS_BY_NAME[name]
        codes = np.asarray([opt.encode(v) for v in choices[name]])
        cols[name] = codes[idx.reshape(-1)]
    return cols


def candidate_grid(model, cluster, gpu, gpus: int, choices: dict[str, list], fixed: dict) -> LayoutBatch:
    """Every valid layout from ``choices`` (option -> list of ``Layout`` values, crossed in the
    given order) with ``fixed`` (option -> one ``Layout`` value) on all of them.

    dp is ``gpus // (tp*pp*cp)`` unless ``choices`` or ``fixed`` give it; the rules then drop
    layouts whose degrees do not multiply to ``gpus``. Fixed implementation settings (and
    recompute modules) are switched back to their default where their rules say they do not
    apply, as the search prices them. Also dropped: partial-recompute shares that round to
    recomputing every layer (``costmodel.pipeline.partial_recompute_per_chunk``).
    """
    cols = _product_columns(choices)
    codes = {k: OPTIONS_BY_NAME[k].encode(v) for k, v in fixed.items() if k not in cols}
    if "dp" not in cols and "dp" not in codes:
        size = len(next(iter(cols.values()))) if cols else 1
        model_parallel = np.ones(size, np.int64)
        for k in ("tp", "pp", "cp"):
            model_parallel = model_parallel * np.asarray(cols.get(k, codes.get(k, 1)))
        cols["dp"] = np.maximum(gpus // model_parallel, 1)
    batch = LayoutBatch.from_arrays(**cols, **codes)
    ctx = RuleContext.build(model, gpus, cluster, gpu)
    settings = {k: c for k, c in codes.items() if OPTIONS_BY_NAME[k].search == SETTING}
    applied = where_settings_apply(ctx, settings, batch.columns())
    if "cp_comm_type" not in cols and "cp_comm_type" not in codes:
        # Left unset, a window's CP is what TransformerEngine runs it as, as the search and
        # evaluate price it (search.rules.windowed_cp_comm_type), not the p2p default it refuses.
        applied["cp_comm_type"] = windowed_cp_comm_type(ctx, {**batch.columns(), **applied})
    batch = LayoutBatch.from_arrays(**{**batch.columns(), **applied})
    _, distinct = partial_recompute_per_chunk(model.num_layers, batch.pp, batch.vpp, batch.pp_first_layers,
                                              batch.pp_last_layers, batch.recompute_layers, batch.recompute_share)
    return batch.take(np.nonzero(valid_mask(ctx, batch) & distinct)[0])


def recompute_module_masks(model) -> list[int]:
    """Bit masks (``recompute_modules`` codes, ascending) of every non-empty set of the
    recompute modules ``model`` has (``search.rules.model_recompute_modules``)."""
    opt = OPTIONS_BY_NAME["recompute_modules"]
    names = model_recompute_modules(model)
    return sorted(opt.encode(chosen) for r in range(1, len(names) + 1) for chosen in combinations(names, r))


def expand_recompute_modules(batch: LayoutBatch, model) -> LayoutBatch:
    """Each selective-recompute layout of ``batch`` repeated once per recompute-module set of
    ``model`` (in :func:`recompute_module_masks` order, in place of the original row); the
    other layouts unchanged, order kept."""
    masks = np.asarray(recompute_module_masks(model), dtype=np.int64)
    selective = batch.recompute == RECOMPUTE.index("selective")
    copies = np.where(selective, len(masks), 1)
    expanded = batch.take(np.repeat(np.arange(len(batch)), copies))
    starts = np.cumsum(copies) - copies
    rank_in_row = np.arange(len(expanded)) - np.repeat(starts, copies)
    expanded.recompute_modules = np.where(
        np.repeat(selective, copies), masks[rank_in_row % len(masks)], expanded.recompute_modules
    )
    return expanded
