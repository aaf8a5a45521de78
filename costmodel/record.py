"""One evaluated layout as a plain dict: the shape of ``planner evaluate --json`` and of each
entry of ``planner search --json``."""

from __future__ import annotations

from costmodel.result import MEMORY_TERMS, TIME_TERMS, BatchResult
from hardware_catalog.schema import ClusterSpec, GPUSpec, ModelSpec

STAGE_NAMES = ("first", "middle", "last")


def result_record(model: ModelSpec, cluster: ClusterSpec, gpu: GPUSpec, result: BatchResult, i: int = 0) -> dict:
    """The i-th layout of ``result`` as a JSON-ready dict."""
    layout = result.batch.layout(i)
    lay = recorded_layout(model, layout)
    notes = result.notes
    if "stage_layers_first" in notes and layout.pp > 1:
        first = int(notes["stage_layers_first"][i])
        middle = int(notes["stage_layers_middle"][i])
        last = int(notes["stage_layers_last"][i])
        lay["pp_first_layers"] = first
        lay["pp_last_layers"] = last
        lay["stage_layers"] = [first] + [middle] * max(layout.pp - 2, 0) + [last]
    breakdown = {t: float(result.time_terms[t][i]) for t in TIME_TERMS}
    memory = {k: float(result.memory_gib[k][i]) for k in list(MEMORY_TERMS) + ["peak"]}
    memory["capacity"] = float(result.memory_capacity_gib)
    record = {
        "model": model.name,
        "gpu": gpu.name,
        "cluster": cluster.name,
        "gpus": layout.gpus,
        "layout": lay,
        "step_time_s": float(result.step_time_s[i]),
        "tokens_per_s": float(result.tokens_per_s[i]),
        "tokens_per_s_per_gpu": float(result.tokens_per_s_per_gpu[i]),
        "mfu": float(result.mfu[i]),
        "hfu": float(result.hfu[i]),
        "memory_gib": memory,
        "fits": bool(result.fits[i]),
        "memory_margin_gib": float(result.memory_capacity_gib - result.memory_gib["peak"][i]),
        # What a checkpoint saves of the fullest stage's rank (its own weights + optimizer states).
        "checkpoint_state_gib": float(result.memory_gib["held_state"][i]),
        "breakdown": breakdown,
        "overlapped": {k: float(v[i]) for k, v in result.overlapped_terms.items()},
        "largest_term": str(result.largest_term()[i]),
    }
    if "slowest_stage" in notes and layout.pp > 1:
        record["slowest_stage"] = STAGE_NAMES[int(notes["slowest_stage"][i])]
        record["fullest_stage"] = STAGE_NAMES[int(notes["fullest_stage"][i])]
    if "dp_algorithm" in notes:
        from costmodel.collectives import ALGORITHMS

        record["dp_algorithm"] = ALGORITHMS[int(notes["dp_algorithm"][i])]
    return record


def recorded_layout(model: ModelSpec, layout) -> dict:
    """``layout`` as records state it (``Layout.to_dict``), its recompute in layers per stage."""
    lay = layout.to_dict()
    lay["recompute_layers"] = recompute_layers_per_stage(model, layout)
    return lay


def recompute_layers_per_stage(model: ModelSpec, layout) -> "int | None":
    """The layers per pipeline stage that full recompute covers, the one unit records, evaluate
    and export use: a search share (``layout.recompute_share`` = q quarters of a middle stage's
    model chunk, ``search.space``) becomes the layers it prices, (layers per chunk) x vpp;
    without a share, ``layout.recompute_layers`` as it is (None: every layer)."""
    from costmodel.pipeline import partial_recompute_per_chunk

    if not layout.recompute_share or layout.recompute != "full":
        return layout.recompute_layers
    per_chunk, _ = partial_recompute_per_chunk(model.num_layers, layout.pp, layout.vpp, layout.pp_first_layers or 0,
                                               layout.pp_last_layers or 0, 0, layout.recompute_share)
    return int(per_chunk) * layout.vpp
