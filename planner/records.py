"""``--from FILE [--rank N]``: a layout planner printed, read back for ``evaluate`` and ``export``.

FILE is what planner wrote: ``planner evaluate --json`` (one record), ``planner search --json``
(``results``, one record per rank) or ``planner search --csv`` (one row per rank). ``--rank N``
picks the entry whose ``rank`` is N; a file with several entries needs it. The record's job
(model, cluster, GPUs, batch) and every layout option come back as the values a user would
type; flags given next to ``--from`` replace them, each with a note on stderr.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Optional

from costmodel.options import (
    AUTO_FLAG, CHOICE, FLAG, FLOAT, GPUS, INT, MODULES, OPTIONAL_INT, OPTIONS_BY_NAME, RECORDED_OPTIONS, Bound,
)
from hardware_catalog.errors import PlannerInputError
from hardware_catalog.files import read_input_text, show

RANK = Bound("--rank", minimum=1, maximum=1_000_000)
"""A search result's rank (1 = best)."""
JOB_KEYS = ("model", "gpus", "cluster")
"""What a record says about the job besides the layout (``gpu`` follows from the cluster)."""


def _read_text(path: Path) -> str:
    try:
        return read_input_text(path, f"--from {show(path)}")
    except FileNotFoundError:
        raise PlannerInputError(f"--from {path}: no such file") from None
    except UnicodeDecodeError:
        raise PlannerInputError(f"--from {path}: not UTF-8 text (expected planner's JSON or CSV)") from None
    except OSError as err:
        raise PlannerInputError(f"--from {path}: cannot read ({err.strerror or err})") from None


def load_record(path: Path, rank: Optional[int]) -> tuple[dict, bool]:
    """(the evaluate-shaped record FILE holds at ``rank``, whether it came from a CSV)."""
    text = _read_text(path)
    if rank is not None:
        rank = RANK.parse(rank)
    if Path(path).suffix.lower() == ".csv" or text.startswith("rank,"):
        return _pick(path, _csv_records(path, text), rank, "row"), True
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise PlannerInputError(f"--from {path}: not valid JSON ({err.msg} at line {err.lineno}); expected "
                                "planner evaluate --json, search --json or search --csv output") from None
    if isinstance(data, dict) and "results" in data:
        if not isinstance(data["results"], list) or not data["results"]:
            raise PlannerInputError(f"--from {path}: the search result holds no layouts (nothing fitted)")
        return _pick(path, data["results"], rank, "entry"), False
    if rank not in (None, 1):
        raise PlannerInputError(f"--from {path}: --rank {rank} picks one layout of a search result; this file "
                                "holds a single evaluated layout (--rank 1 or none)")
    return _check_record(path, data), False


def _pick(path: Path, records: list, rank: Optional[int], what: str) -> dict:
    ranks = [r.get("rank") if isinstance(r, dict) else None for r in records]
    if rank is None:
        if len(records) > 1:
            raise PlannerInputError(f"--from {path} holds {len(records)} ranked layouts (a search result): give "
                                    f"--rank N to pick one (1 = the best)")
        rank = ranks[0] if ranks[0] is not None else 1
    for r, rec in zip(ranks, records):
        if r == rank:
            return _check_record(path, rec)
    known = sorted(r for r in ranks if isinstance(r, int))
    allowed = f"{known[0]} to {known[-1]}" if known else "none"
    raise PlannerInputError(f"--rank {rank}: {path} has no {what} of that rank (ranks: {allowed})")


def _check_record(path: Path, rec) -> dict:
    if not isinstance(rec, dict) or not isinstance(rec.get("layout"), dict) or not isinstance(rec.get("model"), str):
        raise PlannerInputError(f"--from {path}: expected an object with 'model' and 'layout' (planner evaluate "
                                "--json, or one entry of planner search --json)")
    return rec


# ------------------------------------------------------------------------------------ CSV


def _cell(opt, text: str, where: str):
    """One CSV cell of a layout option -> the value a user would type (None: not stated)."""
    if text == "":
        return None
    if opt.kind in (INT, OPTIONAL_INT):
        try:
            return int(text)
        except ValueError:
            raise PlannerInputError(f"{where}={text!r}: must be an integer") from None
    if opt.kind in (FLAG, AUTO_FLAG):
        if text not in ("True", "False"):
            raise PlannerInputError(f"{where}={text!r}: must be True or False")
        return text == "True"
    if opt.kind == MODULES:
        return tuple(text.split("+"))
    if opt.kind == FLOAT:
        try:
            return float(text)
        except ValueError:
            raise PlannerInputError(f"{where}={text!r}: must be a number") from None
    assert opt.kind == CHOICE
    return text


def _number(text: str, where: str):
    try:
        return float(text) if text != "" else None
    except ValueError:
        raise PlannerInputError(f"{where}={text!r}: must be a number") from None


def _csv_records(path: Path, text: str) -> list[dict]:
    """The rows of a ``planner search --csv`` file as records (layout and prediction)."""
    rows = list(csv.DictReader(io.StringIO(text)))
    need = {"rank", "model", "gpu", "cluster", "gpus", "step_time_s"} | {o.name for o in RECORDED_OPTIONS}
    if not rows or need - set(rows[0]):
        missing = sorted(need - set(rows[0])) if rows else ["every row"]
        raise PlannerInputError(f"--from {path}: not a planner search --csv file (lacks {', '.join(missing[:5])})")
    out = []
    for n, row in enumerate(rows, start=2):
        where = f"{path} line {n}"
        layout = {o.name: _cell(o, row[o.name], f"{where}: {o.name}") for o in RECORDED_OPTIONS}
        rec = {"rank": _cell(OPTIONS_BY_NAME["tp"], row["rank"], f"{where}: rank"), "model": row["model"],
               "gpu": row["gpu"], "cluster": row["cluster"],
               "gpus": _cell(OPTIONS_BY_NAME["tp"], row["gpus"], f"{where}: gpus"), "layout": layout}
        for key in ("step_time_s", "tokens_per_s_per_gpu", "mfu"):
            rec[key] = _number(row.get(key, ""), f"{where}: {key}")
        if row.get("calibration"):  # the profile that priced the row and its constants (planner.calibration_use)
            from planner.calibration_use import CONSTANTS_KEY, parse_csv_constants

            rec["calibration"] = row["calibration"]
            rec[CONSTANTS_KEY] = parse_csv_constants(row.get(CONSTANTS_KEY) or "", f"{where}: {CONSTANTS_KEY}")
        if row.get("framework"):  # the --framework release that priced the row (planner.frameworks.releases)
            from planner.frameworks.releases import RELEASES_BY_NAME

            name = row["framework"].strip().lower()
            if name not in RELEASES_BY_NAME:
                raise PlannerInputError(f"{where}: framework {row['framework'][:40]!r} is not a framework release "
                                        f"(allowed: {', '.join(RELEASES_BY_NAME)})")
            rec["framework"] = {"name": name}
        out.append(rec)
    return out


# ------------------------------------------------------------------------------- merging


def job_values(rec: dict) -> dict:
    """The record as the values of evaluate's flags: model, gpus, cluster and every layout
    option it states (dp follows from gpus / (tp*pp*cp); gbs and seq_len are the batch)."""
    layout = {k: v for k, v in rec["layout"].items() if k in OPTIONS_BY_NAME and OPTIONS_BY_NAME[k].recorded and k != "dp"}
    return {"model": rec.get("model"), "gpus": rec.get("gpus"), "cluster": rec.get("cluster"), "layout": layout}


def _shown(value) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _canonical(name: str, value) -> str:
    """The catalog name a --model / --gpu / --cluster value stands for."""
    from hardware_catalog import get_cluster, get_gpu, get_model

    return {"model": get_model, "gpu": get_gpu, "cluster": get_cluster}[name](value).name


def _resolves(rec: dict, name: str, path: Path) -> None:
    """The record's model or cluster must be one planner knows, or the user must give its file."""
    try:
        _canonical(name, rec.get(name))
    except PlannerInputError as err:
        raise PlannerInputError(f"--from {path}: {err}; a record made from a {name} file needs "
                                f"--{name} FILE") from None


def _resolve_share(rec: dict, layout: dict, path: Path) -> None:
    """A search record of an older planner states partial recompute as -q (q quarters of a
    stage's chunk): turn it into layers per pipeline stage, the unit everything else uses."""
    share = layout.get("recompute_layers")
    if not (isinstance(share, int) and not isinstance(share, bool) and share < 0):
        return
    from costmodel.options import Layout
    from costmodel.record import recompute_layers_per_stage
    from hardware_catalog import get_model

    _resolves(rec, "model", path)
    rest = Layout.from_values({**layout, "recompute_layers": None}, where=f"--from {path}: layout.")
    legacy = replace(rest, recompute_layers=None, recompute_share=-share)  # -q meant q quarters (recompute_share)
    layout["recompute_layers"] = recompute_layers_per_stage(get_model(rec["model"]), legacy)


def merge(rec: dict, given: dict, path: Path) -> tuple[dict, list[str]]:
    """The record's values with the flags the user gave (``given``: name -> value; layout
    options by name, model / gpus / gpu / cluster / tokens_per_batch) put over them, and one note
    for each flag that changes what the record says (a --model / --gpu / --cluster naming what
    the record already names, e.g. its file, changes nothing)."""
    values = job_values(rec)
    _resolve_share(rec, values["layout"], path)
    for name, value in values["layout"].items():  # what the file says, checked and named as in it
        if value is not None:
            values["layout"][name] = OPTIONS_BY_NAME[name].parse(value, f"--from {path}: layout.{name}")
    if values["gpus"] is not None:
        values["gpus"] = GPUS.parse(values["gpus"], f"--from {path}: gpus")
    notes = []
    for name, value in given.items():
        if name in ("model", "gpu", "cluster"):
            old = rec.get(name)
            same = _canonical(name, value) == old
            values[name] = value
            if name == "gpu" and not same:
                values["cluster"] = None  # another GPU type: its default cluster
        elif name == "tokens_per_batch":
            old, same = f"gbs {values['layout'].pop('gbs', None)}", False
            values["tokens_per_batch"] = value
        else:
            old = values["layout"].get(name) if name in OPTIONS_BY_NAME else values.get(name)
            same = _shown(old) == _shown(value)
            (values["layout"] if name in OPTIONS_BY_NAME else values)[name] = value
        if not same:
            notes.append(f"note: --{name.replace('_', '-')} {_shown(value)} replaces {name}={_shown(old)} from {path}")
    for name in ("model", "cluster"):
        if name not in given and not (name == "cluster" and "gpu" in given):
            _resolves(rec, name, path)
    return values, notes
