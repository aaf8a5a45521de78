"""Time to train as it really goes at scale: failures, checkpoints, restarts, energy and cost.

A step time says how fast a job runs while it runs. A long run at scale is also interrupted:
every failure loses the work since the last checkpoint plus a restart, and every checkpoint
costs the time it blocks training. This module prices that, after the step time is known:

* **Failure rate** of the job: each GPU (and, if given, each node) fails independently at a
  constant rate (exponential inter-failure times, the model behind Young 1974 and Daly 2006):
  ``lambda = gpus / MTBF_gpu + nodes / MTBF_node``; the job's MTBF is ``M = 1 / lambda``.
* **Checkpoint size** from what a rank holds (``costmodel.memory``'s byte counts):
  BF16 weights (2 B/param) + FP32 master weights and Adam's two moments (12 B/param), the
  layout's ZeRO / dp_shard sharding deciding what each rank holds.
* **Write time** from the storage bandwidth: the slower of the aggregate file system and each
  node's own storage link. **Sync** save blocks for the whole write; **async** save
  (PyTorch DCP ``async_save``, Megatron-Core ``--async-save``) blocks only for the copy of the
  rank's state to host memory, and the write runs behind training.
* **Restart**: relaunch + NCCL initialisation + checkpoint load.
* **Interval**: Young 1974 ``sqrt(2 C M)``; Daly 2006's higher-order optimum (used).
* **Goodput** = useful time / wall time, from Daly 2006's expected wall time.

Everything is a pure function of numbers (numpy broadcasts where it helps the search rank a
vector of GPU counts); ``run_block`` assembles the "run" block planner prints from an
evaluate-shaped record and a ``RunInputs``. Every default is a ``RunSetting`` declared once in
``RUN_SETTINGS`` (flag, bound, default, help, source): the CLI flags derive from it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields, replace
from typing import Optional

from costmodel.options import Bound


class _LazyNumpy:
    """numpy on first use: the CLI imports this module for its flags (``RUN_SETTINGS``) and
    ``planner --help`` must start fast."""

    def __getattr__(self, name):
        import numpy

        return getattr(numpy, name)


np = _LazyNumpy()

GIB = float(2**30)
GB = 1e9
HOUR = 3600.0
DAY = 86400.0

# ------------------------------------------------------------------------------------ defaults

LLAMA3_INTERRUPTIONS = 419
LLAMA3_DAYS = 54
LLAMA3_GPUS = 16_384
MTBF_GPU_HOURS = LLAMA3_GPUS * LLAMA3_DAYS * 24 / LLAMA3_INTERRUPTIONS
"""Per-GPU mean time between job interruptions, hours (~50,677 h, ~5.8 years). Llama 3 paper
(Dubey et al. 2024, arXiv 2407.21783) Sec. 3.3.4 / Table 5: 419 unexpected interruptions in a
54-day snapshot of pre-training on 16,384 H100 GPUs (78% attributed to confirmed or suspected
hardware issues). Spread evenly over the GPUs, that is one interruption per 16,384 x 54 x 24 /
419 GPU-hours. Kokolis et al. 2024 ("Revisiting Reliability in Large-Scale Machine Learning
Research Clusters", arXiv 2410.21680) fit the same linear-in-GPUs failure model to 11 months
of two Meta A100 clusters (150M GPU-hours); pass their per-node rate with --mtbf-node-hours."""

SCALABLE_UNIT_GPUS = 256
"""GPUs per storage sizing unit: a DGX SuperPOD scalable unit (SU) is 32 DGX H100 systems
(NVIDIA DGX SuperPOD reference architecture, DGX H100: 'a modular architecture based on SUs
of 32 DGX H100 systems each'), i.e. 256 GPUs."""
APPLIANCE_WRITE_GBPS = 65.0
"""Aggregate checkpoint write bandwidth per SU, GB/s: one DDN AI400X2 appliance (DDN A3I
AI400X2 datasheet: up to 65 GB/s write, 90 GB/s read), the storage building block DDN's
reference architectures pair with DGX SuperPOD SUs. planner sizes the file system with the
cluster: one appliance per SU (an assumption; --checkpoint-write-gbps sets the aggregate)."""
APPLIANCE_READ_GBPS = 90.0
"""Aggregate read bandwidth per SU, GB/s (DDN AI400X2 datasheet: up to 90 GB/s read)."""
NODE_STORAGE_GBPS = 40.0
"""One node's storage I/O, GB/s: NVIDIA DGX SuperPOD (H100) reference architecture, storage
fabric: 'a GDS-enabled application should be able to read data at over 40 GBps' per DGX
(two ConnectX-7 storage ports). Used for writes too (an upper bound; --checkpoint-node-gbps)."""
NCCL_INIT_S = 150.0
"""NCCL communicator initialisation at a restart, s: NVIDIA/nccl issue #1156 (kwen2501,
PyTorch, 2024): '2.5-minute init time at large scale (above certain K GPUs)' on the default
init path, the idle time paid 'at initial training launch or restart of training'."""
RELAUNCH_S = 300.0
"""Detecting the failure, draining and rescheduling the job, starting containers and
Python on every node, s: planner's assumption (range 60-900 s; no vendor figure covers it),
set it from your scheduler with --relaunch-s."""
PUE = 1.10
"""Power usage effectiveness: Google data centers' fleet-wide trailing-twelve-month PUE
1.10 (google.com/about/datacenters/efficiency, 2023). Industry average is higher (Uptime
Institute Global Data Center Survey 2023: 1.58); set --pue for your facility."""
NODE_OVERHEAD = 10_200.0 / (8 * 700.0)
"""Node power per watt of GPU TDP where a cluster's catalog entry has no node power: DGX
H100 datasheet, system power ~10.2 kW max for 8 x 700 W H100 (CPUs, NICs, fans, NVSwitch)."""
DIMINISHING = 0.8
"""A step up in GPU count 'stops paying' when less than 80% of the GPUs added turn into speed:
(days before / days after - 1) / (GPUs after / GPUs before - 1) < 0.8; for a doubling, the run
then costs more than 11% more GPU-hours (2 / 1.8) for the time it saves. planner's threshold,
set with ``planner sweep --min-scaling-efficiency``."""
MIN_SCALING_EFFICIENCY = Bound("--min-scaling-efficiency", integer=False, above=0, maximum=1)


@dataclass(frozen=True)
class RunSetting:
    """One number (or switch) of the run model the user may set: declared once, the CLI flag,
    its range and the JSON's inputs derive from it."""

    name: str
    flag: str
    default: object
    help: str
    bound: Optional[Bound] = None
    """Range checked wherever the value enters (None: a switch)."""


def _b(flag, **kw) -> Bound:
    return Bound(flag, integer=False, **kw)


RUN_SETTINGS = (
    RunSetting("mtbf_gpu_hours", "--mtbf-gpu-hours", MTBF_GPU_HOURS,
               "Mean time between job interruptions per GPU, hours (default: Llama 3 paper, 419 in 54 days on 16,384 H100s).",
               _b("--mtbf-gpu-hours", above=0, maximum=1e9)),
    RunSetting("mtbf_node_hours", "--mtbf-node-hours", None,
               "Also a failure rate per node: its MTBF in hours (arXiv 2410.21680 reports per node-day rates). Default: none.",
               _b("--mtbf-node-hours", above=0, maximum=1e9)),
    RunSetting("checkpoint_write_gbps", "--checkpoint-write-gbps", None,
               "Aggregate checkpoint write bandwidth of the file system, GB/s. Default: 65 GB/s (DDN AI400X2) per 256 GPUs.",
               _b("--checkpoint-write-gbps", above=0, maximum=1e6)),
    RunSetting("checkpoint_read_gbps", "--checkpoint-read-gbps", None,
               "Aggregate read bandwidth for the restart's load, GB/s. Default: 90 GB/s (DDN AI400X2) per 256 GPUs.",
               _b("--checkpoint-read-gbps", above=0, maximum=1e6)),
    RunSetting("checkpoint_node_gbps", "--checkpoint-node-gbps", NODE_STORAGE_GBPS,
               "One node's storage bandwidth, GB/s (DGX SuperPOD H100 RA: over 40 GB/s per DGX).",
               _b("--checkpoint-node-gbps", above=0, maximum=1e5)),
    RunSetting("async_checkpoint", "--async-checkpoint", False,
               "Asynchronous save (PyTorch DCP async_save, Megatron --async-save): only the copy to host memory blocks."),
    RunSetting("checkpoint_interval_min", "--checkpoint-interval-min", None,
               "Minutes of training between checkpoints. Default: Daly's optimum for the failure rate and the save time.",
               _b("--checkpoint-interval-min", above=0, maximum=1e6)),
    RunSetting("relaunch_s", "--relaunch-s", RELAUNCH_S,
               "Seconds to detect a failure and relaunch the job (scheduler, containers, Python), before NCCL init and load.",
               _b("--relaunch-s", minimum=0, maximum=1e6)),
    RunSetting("nccl_init_s", "--nccl-init-s", NCCL_INIT_S,
               "Seconds of NCCL initialisation at each restart (NVIDIA/nccl#1156: 2.5 min at scale).",
               _b("--nccl-init-s", minimum=0, maximum=1e6)),
    RunSetting("pue", "--pue", PUE,
               "Power usage effectiveness of the facility (default 1.10, Google fleet 2023).",
               _b("--pue", minimum=1, maximum=5)),
)
RUN_SETTINGS_BY_NAME = {s.name: s for s in RUN_SETTINGS}


def refuse_unused_run_settings(flags, command: str, needs: str) -> None:
    """Run-model ``flags`` (of ``RUN_SETTINGS``) given where ``command`` computes no figure they
    change: refused in one line naming the first and what puts them to use (``needs``), not
    accepted and dropped without a word."""
    if flags:
        from hardware_catalog.errors import PlannerInputError

        raise PlannerInputError(f"{flags[0]} sets the run model (failures, checkpoints, restarts, power), which "
                                f"{command} uses only with {needs}: give that, or leave "
                                f"{'it' if len(flags) == 1 else ', '.join(flags)} out")


TRAIN_TOKENS = Bound("--train-tokens", integer=False, above=0, maximum=1e15)
"""Tokens of a whole training run (1e15: a thousand trillion)."""
PRICE_PER_GPU_HOUR = Bound("--price-per-gpu-hour", integer=False, above=0, maximum=1000)
"""USD per GPU-hour: 1,000 is far above any rental price and catches a wrong unit."""

PRICES_ALLOWED = ("USD per GPU-hour > 0, e.g. 2.5, or per GPU type h100=2.5,b200=4.2 (a bare number: the types "
                  "not named)")
"""What ``--price-per-gpu-hour`` takes, in its errors."""


def parse_prices(text, gpu_types=(), what: str = "") -> dict:
    """``--price-per-gpu-hour`` as every command reads it: ``"2.5"`` (or a number) -> {"*": 2.5};
    ``"h100=2.5,b200=4,1"`` -> per GPU type (the catalog's names) and "*" for the types not named;
    a mapping {name: USD} is read the same way. ``gpu_types``: the GPU types (catalog names) the
    command prices, ``what`` naming it ("this sweep"): a price for another type, a type without a
    price, or a type priced twice is refused in one line (a price would be dropped, or a row left
    without its cost, without a word)."""
    from hardware_catalog import get_gpu
    from hardware_catalog.errors import PlannerInputError

    if text is None or (isinstance(text, str) and text.strip() == ""):
        return {}
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        parts = [("", text)]
    elif isinstance(text, dict):
        parts = [("" if k in ("", "*") else str(k), v) for k, v in text.items()]
    else:
        parts = [part.rpartition("=")[::2] for part in str(text).replace(" ", "").split(",")]
    shown = text if isinstance(text, str) else ",".join(f"{k}={v}" if k else f"{v}" for k, v in parts)
    prices = {}
    for name, value in parts:
        try:
            if "=" in name:  # 'h100=2.5 b200=3': two prices run together, not a GPU named 'h100=2.5b200'
                raise ValueError
            price = float(value)
        except (TypeError, ValueError):
            raise PlannerInputError(f"--price-per-gpu-hour {shown!r} is not understood "
                                    f"(allowed: {PRICES_ALLOWED})") from None
        price = PRICE_PER_GPU_HOUR.parse(price, where=f"--price-per-gpu-hour {name}" if name else "")
        key = get_gpu(name).name if name else "*"
        if key in prices:
            raise PlannerInputError(f"--price-per-gpu-hour {shown!r}: {name or 'a price for every GPU type'} given "
                                    f"twice; allowed: one price per GPU type")
        if gpu_types and key != "*" and key not in gpu_types:
            raise PlannerInputError(f"--price-per-gpu-hour {name}={value}: {key} is not a GPU type of "
                                    f"{what or 'this run'} (allowed: {', '.join(gpu_types)})")
        prices[key] = price
    unpriced = [g for g in gpu_types if price_for(prices, g) is None]
    if unpriced:
        raise PlannerInputError(f"--price-per-gpu-hour {shown!r}: no price for {', '.join(unpriced)} of "
                                f"{what or 'this run'} (allowed: a price for each of {', '.join(gpu_types)}, "
                                f"or a bare number for the types not named, e.g. {shown},2.5)")
    return prices


def price_for(prices: Optional[dict], gpu_name: str) -> Optional[float]:
    """The price of ``gpu_name`` (a catalog name) in ``parse_prices``' mapping; None: none given."""
    if not prices:
        return None
    return prices.get(gpu_name, prices.get("*"))


def prices_as_stored(prices: Optional[dict]):
    """``parse_prices``' mapping as outputs and shared studies state it: one price for every GPU
    type as a bare number (as they named it before per-type prices, so a study stored then still
    matches), per-type prices as the mapping, an empty or absent mapping as given."""
    if prices and set(prices) == {"*"}:
        return prices["*"]
    return prices


_SUFFIX = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}


def parse_tokens(text, flag: str = "--train-tokens") -> float:
    """A token count as people write it: ``15T``, ``300B``, ``15e12``, ``1.5e13``, ``2_000M``,
    ``1,000B`` (K M B/G T P = 10^3 ... 10^15); one line naming the flag on anything else."""
    from hardware_catalog.errors import PlannerInputError

    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return TRAIN_TOKENS.parse(float(text), where=flag)
    s = str(text).strip().replace("_", "")
    # A comma only between groups of three digits ('1,000B'): '1,5T' is a decimal comma (1.5T), not 15T.
    thousands = re.fullmatch(r"[+-]?[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\s*[a-zA-Z]?", s)
    if thousands:
        s = s.replace(",", "")
    m = re.fullmatch(r"([+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtTpP]?)", s)
    if not m:
        raise PlannerInputError(f"{flag} {str(text)[:40]!r}: not a number of tokens (allowed: e.g. 15T, 300B, "
                                f"15e12, 1,000B; {TRAIN_TOKENS.allowed()})")
    return TRAIN_TOKENS.parse(float(m.group(1)) * _SUFFIX[m.group(2).upper()], where=flag)



def parse_token_count(text, flag: str = "--tokens-per-batch") -> Optional[int]:
    """A whole number of tokens as --train-tokens reads them (``costmodel.goodput.parse_tokens``:
    16M, 4194304, 4.2e6, 1,000K, 2_000K; K M B/G T P = 10^3 ... 10^15), in the range of
    ``costmodel.options.TOKENS_PER_BATCH``; None where not given. Otherwise one line naming the
    value typed: not a number, a fraction of a token, or out of range."""
    from costmodel.options import TOKENS_PER_BATCH
    from hardware_catalog.errors import PlannerInputError

    if text is None:
        return None
    shown = repr(str(text)[:40])
    lo, hi = int(TOKENS_PER_BATCH.minimum), int(TOKENS_PER_BATCH.maximum)
    allowed = "(allowed: e.g. 4194304 or 4M; K, M, B, T = 10^3, 10^6, 10^9, 10^12)"
    try:
        tokens = parse_tokens(text, flag)
    except PlannerInputError:
        # Its own line states --train-tokens' range (up to 1e15 tokens, fractions too): every value
        # it refuses (not a number, <= 0, > 1e15) is outside this range too, which this line states.
        raise PlannerInputError(f"{flag} {shown}: not a number of tokens from {lo:,} to {hi:,} {allowed}") from None
    whole = round(tokens)
    # A typed decimal times its suffix is exact to ~1e-16 of the value (16.7M is 16,700,000.000000002
    # in binary); anything further from a whole number is a fraction of a token.
    if not math.isclose(tokens, whole, rel_tol=1e-12, abs_tol=0.0):
        raise PlannerInputError(f"{flag} {shown}: {tokens:,.6g} tokens, not a whole number {allowed}")
    if not lo <= whole <= hi:
        raise PlannerInputError(f"{flag} {shown}: {whole:,} tokens, not from {lo:,} to {hi:,} {allowed}")
    return whole

@dataclass(frozen=True)
class RunInputs:
    """What the run model takes besides the layout's price: the token budget, the price and
    the ``RUN_SETTINGS`` (None = its default, or derived from the cluster)."""

    train_tokens: Optional[float] = None
    price_per_gpu_hour: Optional[float] = None
    mtbf_gpu_hours: float = MTBF_GPU_HOURS
    mtbf_node_hours: Optional[float] = None
    checkpoint_write_gbps: Optional[float] = None
    checkpoint_read_gbps: Optional[float] = None
    checkpoint_node_gbps: float = NODE_STORAGE_GBPS
    async_checkpoint: bool = False
    checkpoint_interval_min: Optional[float] = None
    relaunch_s: float = RELAUNCH_S
    nccl_init_s: float = NCCL_INIT_S
    pue: float = PUE

    @classmethod
    def from_values(cls, values: dict) -> "RunInputs":
        """From option values as typed (None = default); each checked against its bound."""
        out = {}
        for s in RUN_SETTINGS:
            v = values.get(s.name)
            if v is None:
                continue
            out[s.name] = bool(v) if s.bound is None else s.bound.parse(v)
        if values.get("train_tokens") is not None:
            out["train_tokens"] = parse_tokens(values["train_tokens"])
        if values.get("price_per_gpu_hour") is not None:
            out["price_per_gpu_hour"] = PRICE_PER_GPU_HOUR.parse(values["price_per_gpu_hour"])
        return cls(**out)

    def with_(self, **kw) -> "RunInputs":
        return replace(self, **kw)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# ---------------------------------------------------------------------------------- mechanisms


def job_mtbf_s(gpus, gpus_per_node, mtbf_gpu_hours, mtbf_node_hours=None):
    """The job's mean time between failures, seconds: independent exponential failures add
    their rates, ``1 / (gpus / MTBF_gpu + nodes / MTBF_node)`` (Young 1974 and Daly 2006 assume
    exponential inter-failure times; Kokolis et al. 2024, arXiv 2410.21680 Sec. 5, model the
    job's failure rate as linear in its node count)."""
    gpus = np.asarray(gpus, dtype=np.float64)
    rate = gpus / float(mtbf_gpu_hours)
    if mtbf_node_hours:
        rate = rate + np.ceil(gpus / gpus_per_node) / float(mtbf_node_hours)
    return HOUR / rate


def checkpoint_bytes(total_params):
    """Bytes of the whole training state, each byte written once: BF16 weights (2 B/param) and
    the FP32 master weights + Adam's two moments (12 B/param), as ``costmodel.memory`` counts
    them (Megatron-Core distributed checkpoints save the model's params and the distributed
    optimizer's ``param`` / ``exp_avg`` / ``exp_avg_sq`` shards; gradients are not saved)."""
    from costmodel.memory import OPTIMIZER_BYTES, WEIGHT_BYTES

    return (WEIGHT_BYTES + OPTIMIZER_BYTES) * np.asarray(total_params, dtype=np.float64)


def held_state_bytes(record: dict):
    """Checkpointed state one rank holds (its fullest pipeline stage): its own weights and
    optimizer states after TP/PP/EP splitting and ZeRO / dp_shard sharding, without the layers
    ZeRO-3 gathers for a moment (the record's ``checkpoint_state_gib``,
    ``costmodel.memory.stage_memory``); a record written before it existed: weights + optimizer."""
    held = record.get("checkpoint_state_gib")
    if held is None:
        held = record["memory_gib"]["weights"] + record["memory_gib"]["optimizer"]
    return np.asarray(held) * GIB


def write_time_s(total_bytes, gpus, gpus_per_node, aggregate_gbps, node_gbps):
    """Seconds to persist one checkpoint: each byte is written by one rank, spread evenly over
    all ranks (PyTorch DCP deduplicates replicated tensors across ranks,
    ``torch/distributed/checkpoint/_dedup_save_plans.py``; Megatron-Core's fully parallel save
    spreads them over the data-parallel group, ``dist_checkpointing/strategies/fully_parallel.py``),
    so a node writes ``total / nodes``; the slower of the file system's aggregate bandwidth
    and a node's own link sets the time."""
    gpus = np.asarray(gpus, dtype=np.float64)
    nodes = np.ceil(gpus / gpus_per_node)
    return np.maximum(total_bytes / (aggregate_gbps * GB), total_bytes / nodes / (node_gbps * GB))


def snapshot_time_s(held_bytes, host_link_gbps):
    """Seconds the async save blocks: each rank copies the state it holds to pinned host
    memory over its host link (DCP ``async_save`` stages the rank's state dict on the CPU
    before returning; Megatron-Core ``--async-save`` likewise copies to host first)."""
    return np.asarray(held_bytes, dtype=np.float64) / (host_link_gbps * GB)


def load_time_s(held_bytes, gpus, gpus_per_node, aggregate_read_gbps, node_gbps):
    """Seconds to load the checkpoint at a restart: every rank reads what it holds (replicas
    read their copy), bounded by the aggregate read bandwidth and each node's link, which the job's
    GPUs on that node share (all of them, or the job's own where it holds less than a node)."""
    gpus = np.asarray(gpus, dtype=np.float64)
    held = np.asarray(held_bytes, dtype=np.float64)
    on_node = np.minimum(gpus, gpus_per_node)
    return np.maximum(held * gpus / (aggregate_read_gbps * GB), held * on_node / (node_gbps * GB))


def young_interval_s(save_s, mtbf_s):
    """Young 1974 ('A first order approximation to the optimum checkpoint interval', CACM
    17(9)): compute time between checkpoints ``sqrt(2 C M)``."""
    with np.errstate(over="ignore"):  # a save past float range (a bandwidth near 0): interval inf
        return np.sqrt(2.0 * np.asarray(save_s, dtype=np.float64) * mtbf_s)


def daly_interval_s(save_s, mtbf_s):
    """Daly 2006 ('A higher order estimate of the optimum checkpoint interval for restart
    dumps', FGCS 22(3), Sec. 4): ``sqrt(2 C M) [1 + sqrt(C / 2M) / 3 + (C / 2M) / 9] - C`` for
    C < 2M, else M."""
    c = np.asarray(save_s, dtype=np.float64)
    x = c / (2.0 * mtbf_s)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow only where C >= 2M: M taken below
        tau = np.sqrt(2.0 * c * mtbf_s) * (1.0 + np.sqrt(x) / 3.0 + x / 9.0) - c
    return np.where(c < 2.0 * mtbf_s, tau, mtbf_s)


def goodput_fraction(interval_s, save_s, restart_s, mtbf_s):
    """Useful time / wall time under exponential failures (Daly 2006, Sec. 3, the expected
    wall time of a run of T useful seconds: ``T_w = M e^(R/M) (e^((tau + C)/M) - 1) T / tau``):
    ``tau / (M e^(R/M) (e^((tau + C)/M) - 1))``. ``interval_s`` tau: compute between
    checkpoints; ``save_s`` C: what a checkpoint blocks; ``restart_s`` R: what a failure costs
    besides the lost work."""
    tau = np.asarray(interval_s, dtype=np.float64)
    m = np.asarray(mtbf_s, dtype=np.float64)
    with np.errstate(over="ignore"):  # (R + tau + C) / M past ~709: the wall time leaves float range, goodput 0
        return tau / (m * np.exp(restart_s / m) * np.expm1((tau + save_s) / m))


# ------------------------------------------------------------------------------------ the model


@dataclass(frozen=True)
class Hardware:
    """What the run model reads from the catalog for one GPU type on its cluster."""

    gpus_per_node: int
    host_link_gbps: float
    gpu_watts: float
    """Each GPU's board power (the cluster's power cap where set), W."""
    node_watts: float
    """One node's system power, W."""
    node_watts_source: str

    @property
    def watts_per_gpu(self) -> float:
        """Each GPU's share of its node's system power, W: what a job draws per GPU it holds."""
        return self.node_watts / self.gpus_per_node

    @classmethod
    def of(cls, cluster, gpu) -> "Hardware":
        gpu_w = float(cluster.power_limit_watts or gpu.tdp_watts or 700.0)
        node_w = getattr(cluster, "node_power_watts", None)
        if node_w:
            source = f"catalog: {cluster.name} node_power_watts"
        else:
            node_w = NODE_OVERHEAD * gpu_w * cluster.gpus_per_node
            source = (f"estimated: {cluster.gpus_per_node} x {gpu_w:g} W GPUs x {NODE_OVERHEAD:.2f} "
                      f"(DGX H100 system/GPU power ratio)")
        from costmodel.offload import host_bandwidth  # the catalog's cited GPU <-> host link, one place

        link = host_bandwidth(gpu) / 1e9
        return cls(int(cluster.gpus_per_node), float(link), gpu_w, float(node_w), source)


def storage_bandwidths(inputs: RunInputs, gpus):
    """(aggregate write, aggregate read) GB/s: as given, or one storage appliance per SU."""
    units = np.maximum(np.ceil(np.asarray(gpus, dtype=np.float64) / SCALABLE_UNIT_GPUS), 1.0)
    write = inputs.checkpoint_write_gbps or APPLIANCE_WRITE_GBPS * units
    read = inputs.checkpoint_read_gbps or APPLIANCE_READ_GBPS * units
    return write, read


@dataclass
class Goodput:
    """The run model's numbers for one layout (or arrays over GPU counts)."""

    mtbf_s: object
    total_bytes: object
    held_bytes: object
    write_s: object
    snapshot_s: object
    save_s: object
    """What each checkpoint blocks: the write (sync) or the snapshot (async)."""
    restart_s: object
    load_s: object
    lost_extra_s: object
    """Async only: a failure during the background write falls back to the checkpoint before."""
    interval_s: object
    young_s: object
    daly_s: object
    goodput: object


def goodput_model(gpus, total_params, held_bytes, hw: Hardware, inputs: RunInputs, step_s=None) -> Goodput:
    """The whole chain for ``gpus`` GPUs (scalar or array) holding ``held_bytes`` each;
    ``step_s``: the step time, when known (a checkpoint is taken between steps: the interval
    is rounded to whole steps)."""
    m = job_mtbf_s(gpus, hw.gpus_per_node, inputs.mtbf_gpu_hours, inputs.mtbf_node_hours)
    total = checkpoint_bytes(total_params)
    write_bw, read_bw = storage_bandwidths(inputs, gpus)
    write = write_time_s(total, gpus, hw.gpus_per_node, write_bw, inputs.checkpoint_node_gbps)
    snap = snapshot_time_s(held_bytes, hw.host_link_gbps)
    load = load_time_s(held_bytes, gpus, hw.gpus_per_node, read_bw, inputs.checkpoint_node_gbps)
    restart = inputs.relaunch_s + inputs.nccl_init_s + load
    if inputs.async_checkpoint:
        # Only the snapshot blocks; a checkpoint counts once written, so a failure during the
        # write (about W of every interval) falls back one more interval: ~W more lost per failure.
        save, extra = snap, write
    else:
        save, extra = write, 0.0 * write
    young, daly = young_interval_s(save, m), daly_interval_s(save, m)
    tau = daly if inputs.checkpoint_interval_min is None else inputs.checkpoint_interval_min * 60.0 + 0.0 * daly
    if inputs.async_checkpoint:  # the next snapshot waits for the previous write
        tau = np.maximum(tau, write)
    if step_s is not None:
        tau = np.maximum(np.round(tau / step_s), 1.0) * step_s
        if inputs.async_checkpoint:  # rounding must not undo the wait for the write: whole steps covering it
            tau = np.maximum(tau, np.ceil(write / step_s) * step_s)
    g = goodput_fraction(tau, save, restart + extra, m)
    return Goodput(mtbf_s=m, total_bytes=total, held_bytes=held_bytes, write_s=write, snapshot_s=snap, save_s=save,
                   restart_s=restart, load_s=load, lost_extra_s=extra, interval_s=tau, young_s=young, daly_s=daly,
                   goodput=g)


def diminishing_from(counts, days, threshold: float = DIMINISHING) -> Optional[int]:
    """The first GPU count whose step up from the previous one turns less than ``threshold``
    of the added GPUs into speed (None if every step pays)."""
    for (n0, d0), (n1, d1) in zip(zip(counts, days), zip(counts[1:], days[1:])):
        if (d0 / d1 - 1.0) / (n1 / n0 - 1.0) < threshold:
            return n1
    return None


def _f(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


NEVER_FINISHES_GOODPUT = 1e-3
"""Goodput below which a run is refused as never finishing (more than 1,000 x its training time in
wall time): the failures outpace the checkpoints, and the day count stops meaning anything."""


def _never_finishes(gpus, mtbf_s, restart_s, interval_s, save_s, inputs: RunInputs) -> None:
    """One line instead of a division by zero or a day count of many digits: Daly's expected wall
    time ``M e^(R/M) (e^((tau + C)/M) - 1) / tau`` per useful second overflows a double once
    ``(R + tau + C) / M`` passes ~709, and passes 1,000 (``NEVER_FINISHES_GOODPUT``) well before:
    the job fails far more often than it can restart and save, or than it checkpoints."""
    from hardware_catalog.errors import PlannerInputError

    given = inputs.checkpoint_interval_min is not None
    raise PlannerInputError(
        f"the run never finishes: {gpus:,} GPUs at --mtbf-gpu-hours {inputs.mtbf_gpu_hours:g}"
        + (f" and --mtbf-node-hours {inputs.mtbf_node_hours:g}" if inputs.mtbf_node_hours else "")
        + f" fail every {mtbf_s:.3g} s, against a restart of {restart_s:.3g} s and "
        + (f"--checkpoint-interval-min {inputs.checkpoint_interval_min:g}" if given else f"a checkpoint every {interval_s:.3g} s")
        + f" (each save blocks {save_s:.3g} s); allowed: a job MTBF well above the restart, the save and the interval "
        + "(raise the MTBF" + (", lower --checkpoint-interval-min" if given else "")
        + "; the restart and save follow --relaunch-s, --nccl-init-s and the --checkpoint-*-gbps bandwidths)")


def run_block(record: dict, model, cluster, gpu, inputs: RunInputs) -> dict:
    """The "run" block of an evaluate-shaped ``record`` (its step time, tokens/s and memory):
    failures, checkpoint, restart, interval, goodput and, with ``train_tokens``, the days,
    GPU-hours, energy and cost of the run; ``inputs``: every number it used."""
    from costmodel.params import count_params

    hw = Hardware.of(cluster, gpu)
    gpus = int(record["gpus"])
    params = count_params(model).total
    held = _f(held_state_bytes(record))
    g = goodput_model(gpus, params, held, hw, inputs, step_s=float(record["step_time_s"]))
    other = goodput_model(gpus, params, held, hw, inputs.with_(async_checkpoint=not inputs.async_checkpoint),
                          step_s=float(record["step_time_s"]))
    write_bw, read_bw = storage_bandwidths(inputs, gpus)
    nodes = math.ceil(gpus / hw.gpus_per_node)
    # The job's share of its nodes' power, as the search ranks energy (joules_per_gpu_second) and
    # as GPU-hours are counted: 4 GPUs of an 8-GPU node draw half of it, not all.
    it_watts = gpus * hw.watts_per_gpu
    mtbf = _f(g.mtbf_s)
    if not _f(g.goodput) >= NEVER_FINISHES_GOODPUT:
        _never_finishes(gpus, mtbf, _f(g.restart_s) + _f(g.lost_extra_s), _f(g.interval_s), _f(g.save_s), inputs)
    out = {
        "inputs": {**inputs.to_dict(), "checkpoint_write_gbps": _f(write_bw), "checkpoint_read_gbps": _f(read_bw),
                   "gpus": gpus, "nodes": nodes, "gpus_per_node": hw.gpus_per_node, "params": int(params),
                   "host_link_gbps": hw.host_link_gbps, "gpu_watts": hw.gpu_watts, "node_watts": hw.node_watts,
                   "node_watts_source": hw.node_watts_source,
                   "step_time_s": float(record["step_time_s"]), "tokens_per_s": float(record["tokens_per_s"])},
        "failures": {"job_mtbf_h": mtbf / HOUR, "per_day": DAY / mtbf},
        "checkpoint": {
            "total_tb": _f(g.total_bytes) / 1e12,
            "held_per_gpu_gib": held / GIB,
            "written_per_gpu_gib": _f(g.total_bytes) / gpus / GIB,
            "write_s": _f(g.write_s),
            "snapshot_s": _f(g.snapshot_s),
            "blocking_s": _f(g.save_s),
            "mode": "async" if inputs.async_checkpoint else "sync",
            "interval_min": _f(g.interval_s) / 60.0,
            "interval_steps": int(round(_f(g.interval_s) / float(record["step_time_s"]))),
            "young_interval_min": _f(g.young_s) / 60.0,
            "daly_interval_min": _f(g.daly_s) / 60.0,
            "interval_source": "given" if inputs.checkpoint_interval_min is not None else "Daly 2006",
            "goodput_sync": _f(other.goodput if inputs.async_checkpoint else g.goodput),
            "goodput_async": _f(g.goodput if inputs.async_checkpoint else other.goodput),
        },
        "restart": {"relaunch_s": inputs.relaunch_s, "nccl_init_s": inputs.nccl_init_s, "load_s": _f(g.load_s),
                    "total_s": _f(g.restart_s), "lost_write_s": _f(g.lost_extra_s)},
        "goodput": _f(g.goodput),
        "power": {"it_mw": it_watts / 1e6, "gpu_mw": gpus * hw.gpu_watts / 1e6, "pue": inputs.pue},
    }
    if inputs.price_per_gpu_hour:  # as the search's $/step: the step at steady state, no goodput
        out["cost_per_step_usd"] = gpus * float(record["step_time_s"]) * inputs.price_per_gpu_hour / HOUR
    if inputs.train_tokens:
        useful_s = inputs.train_tokens / float(record["tokens_per_s"])
        wall_s = useful_s / out["goodput"]
        out["train_tokens"] = inputs.train_tokens
        out["useful_days"] = useful_s / DAY
        out["days"] = wall_s / DAY
        out["failures"]["expected"] = wall_s / mtbf
        out["checkpoints"] = useful_s / _f(g.interval_s)
        out["gpu_hours"] = gpus * wall_s / HOUR
        out["energy_mwh"] = it_watts * inputs.pue * wall_s / HOUR / 1e6
        if inputs.price_per_gpu_hour:
            out["cost_usd"] = out["gpu_hours"] * inputs.price_per_gpu_hour
    return out


def wall_factor(gpus, model, cluster, gpu, inputs: RunInputs, held_bytes=None):
    """1 / goodput for ``gpus`` (array): what the search multiplies useful time by. The held
    state per GPU defaults to the whole state spread evenly (the rank-level split is the
    report's; it moves the snapshot and load by seconds, not the ranking)."""
    from costmodel.params import count_params

    hw = Hardware.of(cluster, gpu)
    params = count_params(model).total
    gpus = np.asarray(gpus, dtype=np.float64)
    held = checkpoint_bytes(params) / gpus if held_bytes is None else held_bytes
    with np.errstate(divide="ignore"):  # goodput 0 (a run that never finishes): infinite wall time
        return 1.0 / goodput_model(gpus, params, held, hw, inputs).goodput


def joules_per_gpu_second(cluster, gpu, inputs: RunInputs) -> float:
    """Facility energy per GPU-second, J: the node's power shared by its GPUs, times PUE."""
    return Hardware.of(cluster, gpu).watts_per_gpu * inputs.pue


@dataclass(frozen=True, eq=False)
class RunModel:
    """What a search needs to rank by whole-run time, cost or energy: the model (checkpoint
    size), each GPU type's cluster, and the inputs. ``factor``: wall time / useful time."""

    model: object
    hardware: dict
    """GPU name -> (ClusterSpec, GPUSpec)."""
    inputs: RunInputs

    def _hw(self, gpu_name):
        return self.hardware.get(gpu_name) or next(iter(self.hardware.values()))

    def factor(self, gpus, gpu_name=None):
        cluster, gpu = self._hw(gpu_name)
        counts, where = np.unique(np.asarray(gpus, dtype=np.float64), return_inverse=True)
        out = wall_factor(counts, self.model, cluster, gpu, self.inputs)[where.reshape(-1)]
        return out.reshape(np.shape(gpus)) if np.ndim(gpus) else float(out[0])

    def joules_per_gpu_second(self, gpu_name=None) -> float:
        cluster, gpu = self._hw(gpu_name)
        return joules_per_gpu_second(cluster, gpu, self.inputs)
