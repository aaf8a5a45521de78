"""What a launch file says, in planner's terms: ``Launch``.

Every reader (``planner.launch.megatron``, ``torchtitan``, ``deepspeed``, ``nemo``) returns one
``Launch``: the layout option values the file states (``costmodel.options`` names), the model and
GPU count where the file names them, and four lists that keep nothing silent:

* ``defaults``: options the file leaves unstated, set to the framework's own default (with where
  that default is declared);
* ``unsupported``: settings the file states that planner cannot express, each with how it was
  priced instead;
* ``unknown``: names the reader does not know (a typo, or a newer framework);
* ``ignored``: settings known to leave step time and memory alone (data, optimizer
  hyperparameters, logging, checkpoints).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hardware_catalog.errors import PlannerInputError

READERS = {"megatron": "planner.launch.megatron", "torchtitan": "planner.launch.torchtitan",
           "deepspeed": "planner.launch.deepspeed", "nemo": "planner.launch.nemo",
           "megatron-bridge": "planner.launch.nemo", "torchrun": "planner.launch.megatron",
           "slurm": "planner.launch.megatron"}
"""The one registry of readers: launch format -> the module whose ``read(text, path, model)`` reads it
(imported when used). Every export format is a name here too, read by its framework's reader
(megatron-bridge: the NeMo / Megatron-Bridge reader; torchrun and slurm: the Megatron reader)."""
FORMATS = tuple(READERS)
"""Launch formats ``--launch-format`` takes."""


@dataclass(frozen=True)
class Default:
    """An option the file leaves unstated, and the framework default it takes."""

    option: str
    value: Any
    source: str
    """Why it is a default, e.g. "no --recompute-granularity" (``Launch.defaults_from`` names the file)."""


@dataclass(frozen=True)
class Unsupported:
    """A setting the file states that planner cannot express."""

    name: str
    """As the file writes it (a flag, a dotted key)."""
    priced: str
    """What planner priced instead, in a few words."""


@dataclass
class Launch:
    """One launch file, read."""

    format: str
    """megatron, torchtitan, deepspeed or nemo."""
    path: str
    values: dict = field(default_factory=dict)
    """Layout option name -> ``Layout`` value, for every option the reader sets (stated or defaulted)."""
    stated: set = field(default_factory=set)
    """Options the file states (the others in ``values`` are defaults or derived)."""
    model: Any = None
    """``ModelSpec`` the file names or shapes; None: the file names no model (give --model)."""
    model_note: str = ""
    gpus: Optional[int] = None
    """GPU count the file states (torchrun / SLURM / trainer nodes x devices); None: not stated."""
    gpus_note: str = ""
    dp: Optional[int] = None
    """Data-parallel width the file states where it gives no GPU count (DeepSpeed batch identity,
    torchtitan degrees): GPUs = dp * tp * pp * cp."""
    dp_note: str = ""
    """Where ``dp`` comes from, in the file's words."""
    gpu: Optional[str] = None
    """GPU type the file names (a recipe name, ``--gres=gpu:h100:8``); None: give --gpu."""
    defaults_from: str = ""
    """Where the framework declares the defaults in ``defaults`` (e.g. "Megatron-LM arguments.py@000c4ac24f61")."""
    gbs_rule: str = ""
    """When the file gives no global batch: how the framework derives it ("mbs*dp": micro-batch x
    data-parallel ranks; "per_dp*dp": ``gbs_per_dp`` sequences per data-parallel rank)."""
    gbs_per_dp: int = 0
    mbs_from_gbs_ga: int = 0
    """DeepSpeed without ``train_micro_batch_size_per_gpu``: the micro-batch is gbs / (this
    gradient-accumulation count x dp), once the GPU count gives dp (0: the file states mbs)."""
    shard_replicas: int = 0
    """Hybrid sharding the file states as a replica count (Megatron's distributed-optimizer
    instances, torchtitan's replicate degree beside shard degree -1): dp_shard = dp /
    shard_replicas once the GPU count gives dp (0: not stated)."""
    shard_replicas_said: str = ""
    """How the file states ``shard_replicas``, in its own words."""
    launcher: str = ""
    """How the file launches (torchrun, srun + torchrun, a bare argument list, ...)."""
    defaults: list = field(default_factory=list)
    unsupported: list = field(default_factory=list)
    unknown: list = field(default_factory=list)
    ignored: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    said: dict = field(default_factory=dict)
    """Option name -> how the file states it, in its own words ("--num-layers-per-virtual-pipeline-stage 3",
    "[parallelism] tensor_parallel_degree = 8"; a derived value says so: "vpp 5 from ..."), so an
    error about the option names what the user wrote (``planner.cli.from_launch.resolve``)."""

    def state(self, option: str, value, said: Optional[str] = None) -> None:
        """The file states ``option`` (``said``: in these words)."""
        self.values[option] = value
        self.stated.add(option)
        if said:
            self.said[option] = said

    def default(self, option: str, value, source: str) -> None:
        """The file leaves ``option`` unstated: the framework default ``value`` (declared at ``source``)."""
        self.values[option] = value
        self.defaults.append(Default(option, value, source))

    def cannot(self, name: str, priced: str) -> None:
        if all(u.name != name for u in self.unsupported):
            self.unsupported.append(Unsupported(name, priced))

    def to_dict(self) -> dict:
        """JSON-ready summary (``planner evaluate --json`` puts it under ``launch``)."""
        return {
            "format": self.format,
            "file": self.path,
            "launcher": self.launcher,
            "model": getattr(self.model, "name", None),
            "model_note": self.model_note,
            "gpus": self.gpus,
            "gpu": self.gpu,
            "stated": sorted(self.stated),
            "defaults_from": self.defaults_from,
            "defaults": [{"option": d.option, "value": _plain(d.value), "source": d.source} for d in self.defaults],
            "unsupported": [{"name": u.name, "priced": u.priced} for u in self.unsupported],
            "unknown": list(self.unknown),
            "ignored": list(self.ignored),
            "notes": list(self.notes),
        }


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


def integer(value, where: str, minimum: int = 1, said: Optional[str] = None) -> int:
    """``value`` as an integer >= ``minimum``; one-line error naming ``where`` otherwise (``said``:
    the setting as the file writes it, in place of ``where=value``)."""
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value) if isinstance(value, str) else value
        if not isinstance(number, (int, float)) or int(number) != number:
            raise ValueError
    except (TypeError, ValueError):
        raise PlannerInputError(f"{said or f'{where}={value!r}'}: must be an integer") from None
    if number < minimum:
        raise PlannerInputError(f"{said or f'{where}={int(number)}'}: must be >= {minimum}")
    return int(number)


def check_range(launch: Launch, *options: str) -> None:
    """Each stated ``option`` within planner's bounds for it (``costmodel.options``), else one line
    naming the file's setting (``Launch.said``) rather than the planner flag it becomes: checked as
    read, before a degree shapes anything else (Megatron pads the vocabulary to a multiple of TP)."""
    from costmodel.options import OPTIONS_BY_NAME, range_text

    for name in options:
        said = launch.said.get(name)
        if said is None or name not in launch.stated:
            continue
        opt = OPTIONS_BY_NAME[name]
        try:
            opt.parse(launch.values[name])
        except PlannerInputError:
            raise PlannerInputError(f"{said}: must be {range_text(True, opt.minimum, opt.maximum)}") from None


def number(value, where: str) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        return float(value)
    except (TypeError, ValueError):
        raise PlannerInputError(f"{where}={value!r}: must be a number") from None


def boolean(value, where: str, said: Optional[str] = None) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise PlannerInputError(f"{said or f'{where}={value!r}'}: must be true or false")
