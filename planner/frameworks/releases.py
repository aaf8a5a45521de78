"""``--framework NAME``: a framework release's profile applied to evaluate, search and export.

``planner validate`` matches a run's framework text to a profile (``planner.frameworks.profiles``):
what that framework fixes about how a layout runs (attention kernel, loss, gradient dtype,
ZeRO-3 gathers, dispatcher), each entry with its source. A ``Release`` names one framework and
release a user can type, with the text and year that pick the same entries, so a layout priced
with ``--framework nemo-24.07`` is priced the way validate prices a NeMo 24.07 run: one table,
two readers.

What a profile pins becomes the setting's value unless the user typed that flag (a flag wins).
What a profile leaves open (a list: e.g. TP comm overlap, which the frameworks offer and their
recipes set per model) stays the flag's choice; the notes say it is available.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

from hardware_catalog.errors import PlannerInputError
from planner.frameworks import bridge
from planner.frameworks.profiles import RowFacts, apply_profiles, model_parts, profiles_for


@dataclass(frozen=True)
class Release:
    name: str
    """What the user types after --framework (lowercase, e.g. "nemo-24.07")."""
    text: str
    """Framework text as a runs file would state it; it picks the validate profile."""
    year: int
    """Release year; profile entries of an era (e.g. attention before FlashAttention) test it."""
    source: str
    """Where the release and its date come from."""
    export_release: str = ""
    """For torchtitan: the release the export's files target (a name ``planner.frameworks.torchtitan.
    release_for`` takes, as ``--torchtitan-version`` does), so one name picks the profile and the files."""
    formats: tuple = ()
    """The export formats that launch this framework (``planner export --format``); empty: planner
    writes none of its files."""
    megatron_release: str = ""
    """The Megatron-LM tag whose arguments.py the Megatron-LM formats (megatron, torchrun, slurm)
    write for this release (``planner.frameworks.megatron.RELEASE_ARGUMENTS``); "": Megatron-LM
    ``MEGATRON_COMMIT`` (main)."""
    bridge_release: str = ""
    """The Megatron-Bridge commit of this release's container where it is not v0.2.0, which the
    megatron-bridge file is written for (``planner.frameworks.bridge.COMMIT_2509``): the file's header
    names what that container reads otherwise. "": v0.2.0."""


RELEASES: tuple[Release, ...] = (
    # No formats: the Megatron exporters write main's arguments.py, and v2.6's (megatron/arguments.py)
    # has none of --use-distributed-optimizer, --swiglu, --normalization, --sequence-parallel, ...
    Release("megatron-lm-2021", "Megatron-LM (PTD-P)", 2021,
            "Narayanan et al. 2021 (SC'21), Megatron-LM v2.x: PTD-P, before FlashAttention"),
    Release("megatron-core-0.8", "Megatron-Core r0.8", 2024,
            "Megatron-LM tag core_r0.8.0 (July 2024), TransformerEngine attention", formats=("megatron", "torchrun", "slurm"),
            megatron_release="core_r0.8.0"),
    Release("megatron-core-0.13", "Megatron-Core r0.13", 2025,
            "Megatron-LM tag core_r0.13.0 (2025), TransformerEngine attention", formats=("megatron", "torchrun", "slurm"),
            megatron_release="core_v0.13.0"),
    Release("nemo-24.07", "NeMo 24.07 (Megatron-Core)", 2024,
            "NVIDIA NeMo container 24.07 performance recipes", formats=("megatron", "torchrun", "slurm", "megatron-bridge"),
            # NeMo r2.0.0rc1 Dockerfile.ci MCORE_TAG 338af51452 (core_r0.8.0 less --moe-router-pre-softmax)
            megatron_release="core_r0.8.0"),
    Release("nemo-25.04", "NeMo 25.04 (Megatron-Core)", 2025,
            "NVIDIA NeMo container 25.04 performance scripts (scripts/performance/llm)", formats=("megatron", "torchrun", "slurm", "megatron-bridge"),
            # NeMo v2.3.0 requirements/manifest.json megatron-lm 3cdfd613e6 (core_r0.12.0 branch; its
            # arguments.py is core_v0.12.0's)
            megatron_release="core_v0.12.0"),
    Release("megatron-bridge-25.09", "Megatron-Bridge 25.09 (Megatron-Core)", 2025,
            "NVIDIA Megatron-Bridge 25.09 performance recipes", formats=("megatron-bridge",),
            bridge_release=bridge.COMMIT_2509),
    Release("torchtitan-0.2", "torchtitan 0.2", 2025,
            "pytorch/torchtitan v0.2.x: SDPA attention, per-op SAC, eager FP32 loss; priced with [compile] "
            "on (add --kernels eager without it)", export_release="0.2", formats=("torchtitan",)),
    Release("llm-foundry-0.10", "llm-foundry 0.10 (Composer FSDP)", 2024,
            "mosaicml/llm-foundry v0.10 with Composer FSDP; no compile_config by default, so eager "
            "operators (add --kernels fused when you compile)"),
    # No formats: the DeepSpeed exporter writes 0.19.8's keys; 0.5 has no "bf16" (v0.6.0
    # runtime/constants.py; 0.5.5-0.5.10 spell it "bfloat16", ZeRO-2 only), no grad_accum_dtype and
    # no pipeline.pipe_partitioned, and ignores keys it does not know: the file would run FP32.
    Release("deepspeed-0.5", "DeepSpeed 0.5 (ZeRO-3)", 2021,
            "microsoft/DeepSpeed v0.5 (2021): per-tensor ZeRO-3 gathers, before FlashAttention"),
)
"""The releases --framework takes; each maps to a validate profile by its text."""

RELEASES_BY_NAME = {r.name: r for r in RELEASES}


@dataclass
class FrameworkSettings:
    """What one release sets for one job."""

    release: Release
    profile: str
    """The validate profile its text matched ("generic" when none)."""
    pinned: dict = field(default_factory=dict)
    """Option -> Layout value the profile fixes (the user's flags not yet applied)."""
    available: dict = field(default_factory=dict)
    """Option -> values the framework offers and leaves to the user (flags)."""
    assumptions: list = field(default_factory=list)
    """Lines naming what the profile fixes, as validate lists them."""
    translated: frozenset = frozenset()
    """Options the profile sets because of the recompute mode the job states (torchtitan's
    "selective" is per-op SAC, priced as full recompute of half the layers): a translation of
    that flag, applied together or not at all."""
    not_applied: list = field(default_factory=list)
    """Profile settings the command does not take (e.g. recompute_layers in search)."""


_STATED_AS = {"recompute_share": "recompute_layers"}
"""Internal options and the flag a user states them with (a share of layers: --recompute-layers)."""


def get_release(name: str) -> Release:
    """The release called ``name``; one-line error naming the value and the allowed ones."""
    key = (name or "").strip().lower()
    if key not in RELEASES_BY_NAME and key.startswith("torchtitan-"):  # a torchtitan release of the export
        from planner.frameworks.torchtitan import release_for

        family = release_for(key).family
        match = [r for r in RELEASES if r.export_release == family]
        if match:
            return match[0]
    if key not in RELEASES_BY_NAME:
        raise PlannerInputError(f"--framework {name!r}: unknown framework release (allowed: {', '.join(RELEASES_BY_NAME)})")
    return RELEASES_BY_NAME[key]


def framework_settings(name: str, model, gpu_name: str = "", precision: str = "bf16",
                       recompute: Optional[str] = None, takes=None) -> FrameworkSettings:
    """The settings release ``name`` fixes for a job on ``model`` (a model spec) and GPU
    ``gpu_name`` (catalog name, "" when several) at ``precision``, with ``recompute`` the mode the
    job pins (None: searched). ``takes``: the options the command accepts (None: all); a
    profile setting outside them is listed in ``not_applied``."""
    release = get_release(name)
    if takes is not None and "recompute_layers" in takes:
        takes = set(takes) | {"recompute_share"}  # a share of layers: records state it as recompute_layers
    facts = RowFacts(framework=release.text.lower(), year=release.year, precision=str(precision or "").lower(),
                     recompute=recompute, gpu=gpu_name or "", model_parts=model_parts(model),
                     model_name=getattr(model, "name", "") or "")
    values, assumptions = apply_profiles(facts)
    without, without_notes = apply_profiles(replace(facts, recompute=None))
    translated = frozenset(k for k in values if without.get(k) != values[k])
    not_applied = []
    if takes is not None and any(k not in takes for k in translated):  # applied whole or not at all
        not_applied = sorted(translated)
        values, assumptions, translated = without, without_notes, frozenset()
    not_applied += [k for k in values if takes is not None and k not in takes and k not in not_applied]
    pinned = {k: v for k, v in values.items() if not isinstance(v, list) and k not in not_applied}
    not_applied = [_STATED_AS.get(k, k) for k in not_applied]
    available = {k: list(v) for k, v in values.items() if isinstance(v, list)}
    profile = profiles_for(facts.framework)[0].name
    return FrameworkSettings(release, profile, pinned, available, assumptions, translated, not_applied)


_APPLIES = {
    "recompute_modules": lambda layout: layout.get("recompute") in (None, "selective"),
    "tp_overlap_kind": lambda layout: bool(layout.get("tp_comm_overlap")),
    "tp_overlap_rs_ring": lambda layout: bool(layout.get("tp_comm_overlap")),
    "zero3_gather": lambda layout: layout.get("zero") in (None, 3),
}
"""Settings that qualify another (search.rules: recompute modules belong to selective
recompute, the overlap kind and the reduce-scatter method to TP overlap, the ZeRO-3 gather mode to ZeRO-3): applied only where
the job uses that other one (or leaves it to the search)."""


def apply_framework(fw: FrameworkSettings, layout: dict, given) -> dict:
    """Put ``fw``'s pinned settings into ``layout`` (option -> value, changed in place) where the
    user did not type the flag (``given``; a translation of the user's own recompute flag
    applies all the same). A profile's share of layers (``recompute_share``) is priced as it is;
    the record states it in layers per stage (``planner.job.price``). Returns the record's
    ``framework`` entry."""
    applied, overridden = {}, []
    for option, value in fw.pinned.items():
        if option in _APPLIES and not _APPLIES[option](layout):
            continue  # the setting qualifies another the job does not use
        if option in given and option not in fw.translated:
            overridden.append(option)
        else:
            layout[option] = value
            applied[option] = value
    return {"name": fw.release.name, "profile": fw.profile, "settings": applied,
            "overridden_by_flags": overridden, "not_applied": fw.not_applied,
            "available": {k: v for k, v in fw.available.items() if k not in given},
            "assumptions": fw.assumptions, "source": fw.release.source}


_CATALOG_CASES = (("fp8", dict(precision="fp8")), ("selective", dict(recompute="selective")),
                  ("moe", dict(model_parts=frozenset({"moe"}))),
                  ("moe+mla on h100", dict(model_parts=frozenset({"moe", "mla"}), gpu="h100-sxm")))
"""The job facts the catalog tries beside a dense BF16 job, to show what an entry depends on; a
case that extends an earlier one (moe+mla on h100 after moe) lists only what it adds."""


def _shown(values: dict) -> dict:
    def one(k, v):
        if isinstance(v, list):
            return "flag"
        if isinstance(v, tuple):
            return "+".join(v)
        if k == "recompute_share":  # q quarters of each stage's layers
            return f"{v}/4 of each stage"
        return v
    return {_STATED_AS.get(k, k): one(k, v) for k, v in values.items()}


def catalog_rows() -> list[dict]:
    """One row per release: what its profile sets on a dense BF16 job with no recompute stated
    (``always``), and what changes with FP8, ``--recompute selective``, or an MoE+MLA model on H100."""
    rows = []
    for r in RELEASES:
        base = RowFacts(framework=r.text.lower(), year=r.year, precision="bf16")
        always, notes = apply_profiles(base)
        cases, seen = {}, {}
        for label, change in _CATALOG_CASES:
            values = apply_profiles(replace(base, **change))[0]
            diff = {k: v for k, v in values.items() if always.get(k) != v}
            seen[label] = diff
            earlier = seen.get(label.split("+")[0], {}) if "+" in label else {}
            diff = {k: v for k, v in diff.items() if earlier.get(k) != v}
            if diff:
                cases[label] = _shown(diff)
        rows.append({"name": r.name, "profile": profiles_for(base.framework)[0].name, "year": r.year,
                     "always": _shown(always), "when": cases, "assumptions": notes, "source": r.source})
    return rows


def format_catalog(rows: list[dict]) -> str:
    """The release table: name, profile, what it sets ('flag': offered, left to the flag)."""
    def text(values: dict) -> str:
        return ", ".join(f"{k} {v}" for k, v in values.items())

    lines = [f"{'name':<24}{'profile':<36}sets (flags you type win; 'flag': offered, your flag decides)"]
    for row in rows:
        lines.append(f"{row['name']:<24}{row['profile']:<36}{text(row['always']) or '-'}")
        for label, values in row["when"].items():
            lines.append(f"{'':<60}with {label}: {text(values)}")
    return "\n".join(lines)
