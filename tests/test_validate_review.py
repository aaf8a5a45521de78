"""A user's own runs through validate and calibrate: what the table shows for rows as people
write them (review of the runs-file path)."""

from __future__ import annotations

from planner.validate.predict import RowResult
from planner.validate.report import format_table, summarize


def _row(rid, source, reported, predicted):
    return RowResult(id=rid, source=source, confidence="high", gpus=8, reported=reported, predicted=predicted,
                     error=(predicted - reported) / reported, layout="TP1 PP1 DP8")


def test_a_long_source_name_and_a_huge_error_stay_apart_from_their_neighbours():
    """'our cluster, Megatron-LM core_r0.9' is 34 characters: it used to run into its row count
    ('core_r0.91 rows'), and an error past 999.9% into the prediction ('8108.4+25882.1%')."""
    source = "our cluster, Megatron-LM core_r0.9"
    results = [_row("ok", source, 1000.0, 1100.0), _row("ms-as-s", source, 31.2, 8108.4)]
    text = format_table(results, summarize(results))
    assert f"  {source}  2 rows:" in text
    row = next(line for line in text.splitlines() if line.startswith("ms-as-s"))
    assert row.split()[-2:] == ["8108.4", "+25888%"]  # (8108.4 - 31.2) / 31.2 = +25888%
