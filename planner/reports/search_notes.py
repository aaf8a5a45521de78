"""The lines around ``planner search``'s table: what it ranks by, the interval and ties, the
validated-envelope footnotes, folded rows and the published recipes (``planner.recipes``).

Imported when the CLI starts: nothing heavy at module level.
"""

from __future__ import annotations

OBJECTIVE_LABELS = {"step-time": "step time", "tokens-per-gpu": "tokens/s/GPU", "cost": "cost per token",
                    "time-to-train": "time to train", "energy": "energy per token"}


def ranked_by(stats: dict) -> str:
    """"by step time", or the pessimistic ranking spelled out."""
    label = OBJECTIVE_LABELS[stats.get("objective") or "step-time"]
    if stats.get("rank_by") == "p10":
        from search.ranking import RERANK_POOL

        pool = stats.get("rerank_pool") or RERANK_POOL  # 256, or 4 x --top beyond it
        return (f"by {label} at the pessimistic end (p10) of the 80% interval "
                f"(the {pool:,} best by the point prediction, re-ranked)")
    return f"by {label}"


def envelope_marks(records: list[dict]) -> tuple[list[str], list[str]]:
    """Each record's footnote marks ("[1,2]") for its layout mechanisms outside the validated
    envelope, and the numbered footnotes."""
    reasons: list[str] = []
    marks = []
    for rec in records:
        idx = []
        for f in rec.get("envelope") or []:
            if f["scope"] != "layout":
                continue
            if f["reason"] not in reasons:
                reasons.append(f["reason"])
            idx.append(reasons.index(f["reason"]) + 1)
        marks.append(f"[{','.join(str(i) for i in idx)}]" if idx else "")
    return marks, [f"  [{i}] {r}" for i, r in enumerate(reasons, 1)]


def _recipe_row(entry: dict) -> dict:
    rec = dict(entry["record"])
    rec["rank"] = f"({entry['rank']:,})" if entry.get("rank") else "(-)"
    rec["ties_best"] = entry.get("ties_best")
    return rec


def _interval_lines(results: list[dict], stats: dict, extra_ties: bool = False) -> list[str]:
    """``extra_ties``: a row shown beside the ranking (a recipe) is marked as a tie."""
    interval = stats.get("interval") or {}
    ties = sum(1 for r in results[1:] if r.get("ties_best"))
    lines = [f"80% range: tokens/s/GPU p10-p90 under each leave-one-source-out fold's constants and the held-out "
             f"errors (search/data/uncertainty.json, {interval.get('generated')})"]
    # A Pareto front is not a ranking; with --top 1 no row lies below #1 ("0 of 0 rows"): the legend
    # only where a recipe row carries the mark.
    if not stats.get("objectives") and (len(results) > 1 or extra_ties):
        counted = f": {ties} of {len(results) - 1} rows below #1" if len(results) > 1 else ""
        lines.append(f"≈: range overlaps #1's, the model cannot order the two{counted}")
    folded = sum(len(r.get("alternatives") or []) for r in results)
    if folded:
        lines.append(f"folded: {folded} more layout{'s' if folded > 1 else ''} priced the same as a row above "
                     f"(alternatives in --json)")
    return lines


def _envelope_lines(rows: list[dict], footnotes: list[str], stats: dict) -> list[str]:
    job = [f["reason"] for f in (rows[0].get("envelope") or []) if f["scope"] == "job"]
    lines = []
    if footnotes:
        lines.append("env: outside the validated envelope (what the reference runs cover; search/data/envelope.json); "
                     "there the interval is a floor")
        lines += footnotes
    else:
        lines.append("env: every row's mechanisms lie inside the validated envelope (search/data/envelope.json)")
    if job:
        lines.append("  the job itself: " + "; ".join(job))
    if stats.get("within_envelope"):
        # The envelope filters what the --framework domain kept (search.exhaustive.Pools.add): its
        # share is of the fitting layouts the release launches.
        domain = stats.get("domain") or {}
        asked = stats.get("fits", 0) - domain.get("left_out", 0)
        which = f"fitting layouts {domain['release']} launches" if domain else "fitting layouts"
        lines.append(f"--within-envelope: {stats.get('outside_envelope', 0):,} of {asked:,} {which} "
                     f"lie outside it and are left out")
    return lines


MFU_BASIS = ("MFU: model FLOPs per second over the GPUs' dense BF16 peak, FP8 rows included, as torchtitan "
             "reports it; an FP8 GEMM's dense peak is twice that")
MFU_BASIS_EVALUATE = ("over the dense BF16 peak, FP8 compute included (torchtitan's basis); an FP8 GEMM's dense "
                      "peak is twice that")
"""Said under a table (``MFU_BASIS``) or beside an evaluation's MFU and HFU (``MFU_BASIS_EVALUATE``) that
prices FP8 compute, where MFU's basis is ambiguous:
torchtitan divides by the BF16 peak whatever the precision (torchtitan/tools/utils.py get_peak_flops,
"hardcoded BF16 type peak flops"; components/metrics.py), and so does planner
(costmodel/utilization.py). "Twice": the dense FP8 rate of every GPU in hardware_catalog/data/gpus.toml
that has one is twice its dense BF16 rate, as their datasheets give them (H100 1978.9 / 989.4, B200
4500 / 2250, MI300X 2614.9 / 1307.4)."""


def below_bf16(records: list[dict]) -> bool:
    """Whether any of ``records`` computes in a precision other than BF16 (FP8)."""
    return any((rec.get("layout") or {}).get("precision", "bf16") != "bf16" for rec in records)


def mfu_basis_lines(records: list[dict]) -> list[str]:
    """``MFU_BASIS`` when any of ``records`` computes in FP8."""
    return [MFU_BASIS] if below_bf16(records) else []


def table_notes(rows: list[dict], results: list[dict], stats: dict) -> tuple[list[str], list[str]]:
    """(each shown row's envelope marks, the interval, tie, envelope and MFU-basis lines below the
    table); ``rows``: what the table shows (results and any extra rows), ``results``: the ranked ones."""
    marks, footnotes = envelope_marks(rows)
    extra_ties = any(r.get("ties_best") for r in rows[len(results):])
    return marks, ([""] + _interval_lines(results, stats, extra_ties) + _envelope_lines(rows, footnotes, stats)
                   + mfu_basis_lines(rows))


def table_rows(results: list[dict], recipes: list[dict], stats: dict) -> tuple[list[dict], list[str], list[str]]:
    """(the table's records: results then priced recipes, their envelope marks, the notes below)."""
    from planner.recipes import format_recipes

    rows = results + [_recipe_row(e) for e in recipes if e.get("record")]
    marks, notes = table_notes(rows, results, stats)
    if recipes:
        domain = stats.get("domain")
        fitting = ("layouts that fit" + (f" and {domain['release']} launches" if domain else "")
                   + (" inside the envelope" if stats.get("within_envelope") else ""))
        notes += format_recipes(recipes, fitting)
    return rows, marks, notes


def window_cp_lines(records: list[dict], specs: list) -> list[str]:
    """A line when shown rows run a sliding-window model under context parallelism: which
    cp_comm_type they priced and why (search.rules.windowed_cp_comm_type)."""
    kinds, model = set(), None
    for rec, spec in zip(records, specs):
        lay = rec.get("layout", {})
        if spec[0].sliding_window is not None and int(lay.get("cp", 1)) > 1:
            kinds.add(lay.get("cp_comm_type", "p2p"))
            model = spec[0]
    if model is None:
        return []
    return [f"cp: {model.name} attends a {model.sliding_window}-key window on {model.windowed_layers} of "
            f"{model.num_layers} layers, which TransformerEngine runs under context parallelism only as a2a or "
            f"allgather: the rows with CP use {' / '.join(sorted(kinds))} (--cp-comm-type)"]
