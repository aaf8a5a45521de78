"""Runs files: load one, and map each row to a model, a cluster, pins and searched grids.

A row (format of ``planner/data/published_runs.json``) states some of a layout (degrees, batch,
recompute, ZeRO, precision) and names its framework in free text. What the row states is pinned,
what it leaves out is searched, and the framework's profile (``profiles.py``) adds how that
framework runs a layout. Settings the row states by the planner's own option names
(``layout.attention``, ``layout.recompute_modules``, ...) win over the profile.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Optional

from costmodel.options import IMPLEMENTATION_OPTIONS, OPTIONS_BY_NAME, RECOMPUTE
from hardware_catalog.errors import PlannerInputError
from planner.validate.profiles import RowFacts, apply_profiles

# A catalog preset per model family supplies what a runs file does not carry (gated MLP or
# not, norms, biases, positions, tied embeddings, vocab); the row's own shape fields
# (layers, hidden, heads, KV heads, FFN, vocab, sequence) then override it.
_FAMILY_BASE = (
    # (source key or "", model-name prefix, preset)
    ("megatron_readme_2024", "gpt", "mcore-gpt-1.7b"),  # Megatron-Core 2024 series: untied embeddings
    ("nemo_perf_2407", "gpt3", "nemo-gpt3-5b"),
    ("", "gpt", "megatron-gpt-1.7b"),  # Narayanan 2021 / Korthikanti 2022 GPT: tied, dropout
    ("", "mpt", "mpt-7b"),
    ("", "nemotron", "nemotron-8b"),
    ("", "llama2", "llama2-7b"),
    ("", "llama3", "llama3-8b"),
)
# Rows whose architecture needs more than a family base (MLA, expert shapes): the preset itself.
_PRESETS = {"deepseekv3": "deepseek-v3", "qwen3-30b-a3b": "qwen3-30b-a3b", "qwen3-235b-a22b": "qwen3-235b-a22b",
            "llama3.1-405b": "llama3-405b"}

_GPU_CLUSTERS = {
    "A100-SXM-80GB": "dgx-a100",
    "A100-SXM-40GB": "dgx-a100-40gb",
    "H100-SXM-80GB": "dgx-h100",
}

MBS_CHOICES = [1, 2, 4, 8]
"""Micro-batch sizes tried where a row does not state one."""
STATED_SETTINGS = (*IMPLEMENTATION_OPTIONS, "recompute_modules")
"""Settings a row may state under the option's own name; they override the framework profile."""


@dataclass
class MappedRun:
    """One runs-file row mapped onto planner objects."""

    row: dict
    model: object
    cluster: object
    gpu: object
    gpus: int
    pins: dict
    """Layout knobs the source states."""
    searched: dict
    """Knob -> candidate values for what the source leaves unstated."""
    assumptions: list[str] = field(default_factory=list)


def load_runs(path: Optional[Path]) -> list[dict]:
    """The rows of a runs file (None: the shipped reference set); one-line errors."""
    if path is None:
        text = resources.files("planner").joinpath("data/published_runs.json").read_text()
        source = "the shipped reference set"
    else:
        try:
            text = Path(path).read_text()
        except OSError as err:
            raise PlannerInputError(f"--runs {path}: cannot read ({err.strerror})")
        source = str(path)
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as err:
        raise PlannerInputError(f"--runs {source}: not valid JSON ({err.msg} at line {err.lineno})")
    if not isinstance(rows, list):
        raise PlannerInputError(f"--runs {source}: expected a JSON list of runs")
    return rows


def map_model(row: dict):
    """The row's model: a catalog preset, or a family base with the row's shape fields."""
    from hardware_catalog import get_model

    m = row["model"]
    name = m["name"].split(" (")[0]
    key = re.sub(r"[^a-z0-9.-]", "", name.lower())
    if key in _PRESETS:
        return get_model(_PRESETS[key])
    source = (row.get("source") or {}).get("key", "")
    base = None
    for src, prefix, preset in _FAMILY_BASE:
        if key.startswith(prefix) and (not src or src == source):
            base = get_model(preset)
            break
    if base is None:
        raise PlannerInputError(f"no architecture family for model '{name}'")
    seq = m.get("seq_length") or base.default_seq_len
    update = dict(
        name=key,
        aliases=[],
        num_layers=m["num_layers"],
        hidden_size=m["hidden_size"],
        num_attention_heads=m["num_attention_heads"],
        num_kv_heads=m.get("num_kv_heads") or m["num_attention_heads"],
        head_dim=None,
        ffn_hidden_size=m.get("ffn_hidden_size") or 4 * m["hidden_size"],
        max_position_embeddings=max(seq, base.max_position_embeddings),
        default_seq_len=seq,
        params_published=None,
    )
    if m.get("vocab_size"):
        update["vocab_size"] = m["vocab_size"]
    return base.model_copy(update=update)


def _cluster(gpu_name: str):
    from hardware_catalog import get_cluster

    if gpu_name.startswith("H100 (96GB"):
        return get_cluster("h100-96gb-500w")
    if gpu_name in _GPU_CLUSTERS:
        return get_cluster(_GPU_CLUSTERS[gpu_name])
    raise PlannerInputError(f"GPU '{gpu_name}' has no cluster mapping")


def _zero_from_row(layout: dict) -> Optional[list[int]]:
    z = layout.get("zero_stage")
    text = " ".join(str(layout.get(k) or "") for k in ("zero_stage", "fsdp", "distributed_optimizer"))
    if isinstance(z, int):
        return [z]
    if "SHARD_GRAD_OP" in text:
        return [2]
    if "FULL_SHARD" in text or "FSDP2" in text or "Megatron-FSDP" in text:
        return [3]
    if "distributed optimizer" in text or layout.get("distributed_optimizer") is True:
        return [1]
    return None  # unstated: Megatron with or without the distributed optimizer


def _recompute_from_row(layout: dict) -> Optional[list[str]]:
    r = str(layout.get("activation_recompute") or "").lower()
    for mode in RECOMPUTE:
        if r.startswith(mode):
            return [mode]
    return None


def _layout_from_row(lay: dict, model, pins: dict) -> dict:
    """Pins the row's degrees, batch split, ZeRO and recompute into ``pins``; returns what it
    leaves unstated as searched grids."""
    searched: dict = {}
    for knob in ("tp", "pp", "cp", "dp"):
        if lay.get(knob) is not None:
            pins[knob] = lay[knob]
    pins["ep"] = (lay.get("ep") or 1) if model.moe is not None else 1
    pins["etp"] = lay.get("expert_tp") or 1
    if lay.get("micro_batch_size"):
        pins["mbs"] = lay["micro_batch_size"]
    else:
        searched["mbs"] = list(MBS_CHOICES)
    if lay.get("vp"):
        pins["vpp"] = lay["vp"]
    else:
        # Every chunk count a stage's layers allow (the rules keep the ones that split stages).
        searched["vpp"] = list(range(1, model.num_layers + 1))
    zero = _zero_from_row(lay)
    if zero is None:
        searched["zero"] = [0, 1]
    else:
        pins["zero"] = zero[0]
    rc = _recompute_from_row(lay)
    if rc is None:
        searched["recompute"] = list(RECOMPUTE)
    else:
        pins["recompute"] = rc[0]
    return searched


def _row_facts(row: dict, model, gpu) -> RowFacts:
    lay, source = row["layout"], row.get("source") or {}
    rc = _recompute_from_row(lay)
    parts = {name for name, part in (("moe", model.moe), ("mla", model.mla)) if part is not None}
    return RowFacts(framework=str(lay.get("framework") or "").lower(), year=int(source.get("year") or 0),
                    source=source.get("key") or "", precision=str(lay.get("precision") or "").lower(),
                    recompute=rc[0] if rc else None, gpu=gpu.name, model_parts=frozenset(parts))


def _apply_stated(lay: dict, pins: dict, searched: dict, assumptions: list[str]) -> None:
    """Settings the row states by option name (``STATED_SETTINGS``), checked, over the profile."""
    for name in STATED_SETTINGS:
        value = lay.get(name)
        if value is None or (name == "recompute_modules" and not value):
            continue
        value = pins[name] = OPTIONS_BY_NAME[name].parse(value)
        searched.pop(name, None)
        if name == "recompute_modules":  # Megatron-Core fine-grained selective recompute
            pins["recompute"] = "selective"
            searched.pop("recompute", None)
            value = ",".join(value)
        assumptions.append(f"{name}={value} (stated)")


def map_run(row: dict) -> MappedRun:
    """A runs-file row -> model, cluster, pinned knobs, searched grids and the assumptions."""
    from hardware_catalog import get_gpu

    hw, lay = row["hardware"], row["layout"]
    cluster = _cluster(hw["gpu"])
    gpu = get_gpu(cluster.gpu)
    model = map_model(row)
    assumptions: list[str] = []
    seq = row["model"].get("seq_length")
    if not seq:
        seq = 8192
        assumptions.append("seq_len 8192 (torchtitan default; unstated)")
    gbs = lay.get("global_batch_size")
    if not gbs:
        raise PlannerInputError("global batch size not published")
    pins: dict = {"seq_len": seq, "gbs": gbs}
    searched = _layout_from_row(lay, model, pins)
    settings, notes = apply_profiles(_row_facts(row, model, gpu))
    assumptions += notes
    for name, value in settings.items():
        if isinstance(value, list):
            searched[name] = list(value)
            pins.pop(name, None)
        else:
            pins[name] = value
            searched.pop(name, None)
    _apply_stated(lay, pins, searched, assumptions)
    precision = str(lay.get("precision") or "").lower()
    pins["precision"] = "fp8" if ("fp8" in precision or "float8" in precision) else "bf16"
    if lay.get("sequence_parallel") is False:
        pins["sequence_parallel"] = False
    return MappedRun(row, model, cluster, gpu, int(hw["num_gpus"]), pins, searched, assumptions)
