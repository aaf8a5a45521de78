"""Read a torchtitan launch: a TOML job config (0.1 / 0.2 names) or a command line (0.3's
``--module llama3 --config <fn> <overrides> activation_checkpoint:<mode>``, or an older
``--job.config_file FILE`` with overrides), given as a script or as the words themselves.

Fields and defaults are those of the releases' config dataclasses (copies in
tests/data/torchtitan: 0.1.0 config_manager.py, 0.2.x config/job_config.py, 0.3.0
config/configs.py, trainer.py and models/llama3/config_registry.py); the 0.3 config functions
``llama3_8b``, ``llama3_70b`` and ``llama3_405b`` supply what the command line leaves out
(``CONFIG_FUNCTIONS``). Decisions, each said in the output:

* data parallelism: ``data_parallel_shard_degree`` > 1 (or -1, the leftover ranks) is FSDP2:
  ZeRO-3 with ``fsdp_reshard_after_forward`` always (and "default" without PP), ZeRO-2 with never
  (and "default" under PP: torchtitan/distributed/fsdp.py get_fsdp_reshard_after_forward_policy);
  shard 1 with replication is ZeRO-0; both > 1 (HSDP) is priced as FSDP over all ranks;
* ``selective_ac_option`` "op" (per-op SAC) is priced as full recompute of half the layers
  (``planner.frameworks.torchtitan.PER_OP_SAC_SHARE``, the pricing ``--framework torchtitan-0.2``
  uses); an integer n (every n-th layer
  checkpointed) as full recompute of 1/n of the layers;
* the pipeline split follows ``generate_llm_fqn_per_model_part`` (first/last-stage weights) or
  0.1's ``pipeline_parallel_split_points``; multi-stage schedules run 2 stages per rank unless
  ``pipeline_parallel_layers_per_stage`` says otherwise (pipeline_parallel.py);
* torchtitan's loss is F.cross_entropy on FP32 logits (loss eager), attention SDPA (flash),
  elementwise kernels fused only under ``compile``.
"""

from __future__ import annotations

import math
import tomllib

from hardware_catalog.errors import PlannerInputError
from planner.frameworks.torchtitan import (
    CONFIG_FUNCTIONS, FLAVORS, GPT_OSS_WINDOW, MOE_FLAVORS, PER_OP_SAC_SHARE, TABLE, cli_settings, cli_word, stage_split,
)
from hardware_catalog.files import read_input_text
from planner.launch.spec import Launch, boolean, check_range, integer

SOURCE = "torchtitan config dataclasses (0.1.0 config_manager.py, 0.2.x job_config.py, 0.3.0 configs.py)"
DEFAULTS = {
    "training.local_batch_size": 8, "training.global_batch_size": -1, "training.seq_len": 2048,
    "parallelism.data_parallel_replicate_degree": 1, "parallelism.data_parallel_shard_degree": -1,
    "parallelism.fsdp_reshard_after_forward": "default", "parallelism.tensor_parallel_degree": 1,
    "parallelism.enable_sequence_parallel": True, "parallelism.pipeline_parallel_degree": 1,
    "parallelism.pipeline_parallel_first_stage_less_layers": 1, "parallelism.pipeline_parallel_last_stage_less_layers": 1,
    "parallelism.pipeline_parallel_layers_per_stage": None, "parallelism.pipeline_parallel_schedule": "1F1B",
    "parallelism.pipeline_parallel_microbatch_size": 1, "parallelism.context_parallel_degree": 1,
    "activation_checkpoint.mode": "selective", "activation_checkpoint.selective_ac_option": "2",
    "compile.enable": False, "compile.enable_async_tensor_parallel": False, "model.converters": [],
}
"""The dataclass defaults that matter here (identical in 0.1.0, 0.2.x and 0.3.0 where the field exists)."""
QUIET_SECTIONS = ("job", "profiling", "metrics", "optimizer", "lr_scheduler", "checkpoint", "validation", "comm",
                  "memory_estimation", "fault_tolerance", "experimental", "dataloader", "debug", "float8",
                  "quantize", "mx", "ft", "hf_assets_path", "loss")
PRICED = set(DEFAULTS) | {
    "model.name", "model.flavor", "training.compile", "training.mixed_precision_param", "training.enable_cpu_offload",
    "parallelism.pipeline_parallel_split_points", "parallelism.expert_parallel_degree", "parallelism.disable_loss_parallel",
    "parallelism.expert_tensor_parallel_degree",
    "parallelism.enable_async_tensor_parallel", "parallelism.module_fqns_per_model_part", "activation_checkpoint",
} | TABLE.keys()
QUIET_KEYS = {"model.tokenizer_path", "model.hf_assets_path", "model.print_after_conversion", "training.dataset",
              "training.dataset_path", "training.max_norm", "training.steps", "training.gc_freq", "training.gc_debug",
              "training.seed", "training.deterministic", "training.dtype", "training.mixed_precision_reduce",
              "compile.components", "compile.backend", "parallelism.spmd_backend",
              "parallelism.context_parallel_load_balancer",
              "parallelism.enable_compiled_autograd", "parallelism.pipeline_parallel_schedule_csv",
              "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns", "activation_checkpoint.early_stop",
              "activation_checkpoint.preserve_rng_state", "activation_checkpoint.determinism_check",
              "activation_checkpoint.debug", "module", "config"}
SINGLE_STAGE = ("1F1B", "GPipe")
TABLES = frozenset(key.split(".", 1)[0] for key in PRICED if "." in key)
"""The config sections planner reads settings from: each is a table ([parallelism] ...; on the
command line --parallelism.<field>), never a value of its own."""


# ----------------------------------------------------------------------------------- input


def flatten(table: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _from_script(text: str, path: str, launch: Launch) -> tuple[dict, frozenset]:
    """Settings of a shell script or command line that runs torchtitan (0.3 overrides, or a
    --job.config_file TOML read relative to the script, with overrides on top), and the keys the
    TOML states (the others are command-line words)."""
    from pathlib import Path

    from planner.launch.megatron import gpu_count
    from planner.launch.shell import read_script

    script = read_script(text, path, {"PWD": "."})
    launch.notes += script.notes
    words = next((c for c in script.commands if "torchtitan.train" in c), None)
    if words is not None:
        k = words.index("torchtitan.train")
        gpu_count(words[:k], script, launch)
        launch.launcher = "torchrun -m torchtitan.train"
        words = words[k + 1:]
    else:
        words = [w for c in script.commands for w in c] or [w for n in script.array_order for w in script.arrays[n]]
        launch.launcher = "torchtitan command-line words"
    settings = cli_settings(words)
    config_file = settings.pop("job.config_file", None)
    if config_file:
        toml_path = Path(path).parent / str(config_file)
        if not toml_path.is_file():
            raise PlannerInputError(f"{path}: --job.config_file {config_file} is not at {toml_path}: give the TOML itself")
        from_toml = _parse_toml(read_input_text(toml_path, str(toml_path)), str(toml_path))
        return {**from_toml, **settings}, frozenset(from_toml) - frozenset(settings)
    return settings, frozenset()


def _parse_toml(text: str, path: str) -> dict:
    try:
        return flatten(tomllib.loads(text))
    except tomllib.TOMLDecodeError as err:
        raise PlannerInputError(f"{path}: invalid TOML ({' '.join(str(err).split())})") from None


# ----------------------------------------------------------------------------------- mapping


class _Config:
    """Settings with the config function's and the dataclasses' defaults behind them."""

    def __init__(self, settings: dict, launch: Launch, toml_keys: frozenset = frozenset()):
        self.settings = settings
        self.function = CONFIG_FUNCTIONS.get(str(settings.get("config", "")), {})
        self.launch = launch
        self.toml_keys = toml_keys
        """Keys a TOML states (written ``[section] field = value``); the others are command-line words."""

    def said(self, key: str, value=None) -> str:
        """``key`` (with ``value``, default its own) as the file writes it: ``[parallelism]
        tensor_parallel_degree = 8`` in a TOML, ``--parallelism.tensor_parallel_degree 8`` on a
        command line, or the config function that sets it."""
        value = self.get(key) if value is None else value
        if key in self.toml_keys:
            section, _, name = key.rpartition(".")
            return f"[{section}] {name} = {_toml(value)}" if section else f"{name} = {_toml(value)}"
        if key in self.settings:
            word, rest = cli_word(key, value)
            return " ".join([word, *rest])
        if key in self.function:
            return f"{key} {_toml(value)} (set by --config {self.settings['config']})"
        return f"{key} {_toml(value)} (the default)"

    def stated(self, key: str) -> bool:
        return key in self.settings or key in self.function

    def get(self, key: str):
        if key in self.settings:
            return self.settings[key]
        if key in self.function:
            return self.function[key]
        return DEFAULTS.get(key)

    def why(self, key: str) -> str:
        if key in self.function:
            return f"--config {self.settings['config']} sets {key}"
        return f"no {key}"

    def int(self, key: str, minimum: int = 1) -> int:
        return integer(self.get(key), key, minimum, said=self.said(key))


def _toml(value) -> str:
    """A value as TOML writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        import json

        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(_toml, value)) + "]"
    return str(value)


def _tables(c: "_Config") -> None:
    """A section planner reads (``TABLES``) given a value of its own (``parallelism = 5``) is no
    config torchtitan takes: refused, not read as a section left at its defaults."""
    for key in c.settings:
        if key in TABLES and (key in c.toml_keys or key != "activation_checkpoint"):  # 0.3: activation_checkpoint:<mode>
            if key in c.toml_keys:
                raise PlannerInputError(f"{c.said(key)}: a table is expected, not a value ([{key}] with its fields "
                                        f"under it, e.g. {_EXAMPLE.get(key, f'[{key}] ...')})")
            raise PlannerInputError(f"{c.said(key)}: {key} is a section, not a value: give its fields as "
                                    f"--{key}.<field> VALUE (e.g. --{_EXAMPLE_CLI.get(key, key + '.<field> VALUE')})")


_EXAMPLE = {"parallelism": "[parallelism] tensor_parallel_degree = 8", "training": "[training] seq_len = 8192",
            "model": '[model] name = "llama3"', "activation_checkpoint": '[activation_checkpoint] mode = "full"',
            "compile": "[compile] enable = true"}
_EXAMPLE_CLI = {"parallelism": "parallelism.tensor_parallel_degree 8", "training": "training.seq_len 8192",
                "model": "model.name llama3", "compile": "compile.enable"}


def _model(c: _Config, model) -> None:
    launch = c.launch
    name = c.get("model.name") or c.get("module") or "llama3"  # torchtitan's default model
    if model is not None:
        launch.model, launch.model_note = model, "from --model"
        # torchtitan's gpt_oss windows alternate layers (GPT_OSS_WINDOW); llama3 attends every earlier key.
        if model.sliding_window is not None and (name != "gpt_oss" or (model.sliding_window, model.full_attention_every)
                                                  != GPT_OSS_WINDOW):
            from planner.frameworks import window_text

            launch.model_note += (f"; it has {window_text(model)}, which torchtitan's {name} model does not attend "
                                  "(priced with the window)")
        elif model.sliding_window is None and name == "gpt_oss":
            launch.model_note += (f"; torchtitan's gpt_oss model attends a {GPT_OSS_WINDOW[0]}-key sliding window on "
                                  "every other layer, which it has not (priced without)")
        return
    from hardware_catalog import get_model

    flavor = c.get("model.flavor")
    config = c.settings.get("config")
    if config is not None and config not in CONFIG_FUNCTIONS:
        raise PlannerInputError(f"--config {config}: planner knows the torchtitan 0.3.0 config functions "
                                f"{', '.join(CONFIG_FUNCTIONS)}; give --model NAME for another")
    moe = MOE_FLAVORS.get((str(name), str(flavor)))
    if moe is not None:
        preset = get_model(moe.preset)
        launch.model = preset.model_copy(update={"mtp_layers": 0}) if preset.mtp_layers else preset
        launch.model_note = f"torchtitan {name} flavor {flavor} = catalog preset {preset.name}"
        if preset.mtp_layers:  # torchtitan's models train no multi-token-prediction module
            launch.model_note += f" without its {preset.mtp_layers} MTP layer(s), which torchtitan does not train"
        return
    if name != "llama3" or flavor not in FLAVORS:
        known = [f"llama3 {f}" for f in FLAVORS] + [f"{n} {f}" for n, f in MOE_FLAVORS]
        raise PlannerInputError(f"torchtitan model {name} flavor {flavor or 'debugmodel (the default)'}: planner maps the "
                                f"flavors {', '.join(known)} to its presets; give --model NAME for another")
    launch.model = get_model(FLAVORS[flavor])
    launch.model_note = f"torchtitan llama3 flavor {flavor} = catalog preset {launch.model.name}"


def _put(c: _Config, option: str, value, key: str) -> None:
    """``option`` from ``key``: stated when the file (or its config function) sets it."""
    if key in c.settings:
        c.launch.state(option, value, said=c.said(key))
    else:
        c.launch.default(option, value, c.why(key))


def _degrees(c: _Config) -> None:
    launch = c.launch
    for option, key in (("tp", "parallelism.tensor_parallel_degree"), ("pp", "parallelism.pipeline_parallel_degree"),
                        ("cp", "parallelism.context_parallel_degree")):
        _put(c, option, c.int(key), key)
    check_range(launch, "tp", "pp", "cp")
    _experts(c)
    check_range(launch, "ep", "etp")
    sp = boolean(c.get("parallelism.enable_sequence_parallel"), "parallelism.enable_sequence_parallel",
                 said=c.said("parallelism.enable_sequence_parallel"))
    _put(c, "sequence_parallel", sp and launch.values["tp"] > 1, "parallelism.enable_sequence_parallel")
    async_tp = c.get("compile.enable_async_tensor_parallel") or c.settings.get("parallelism.enable_async_tensor_parallel")
    key = "compile.enable_async_tensor_parallel"  # 0.3; 0.1 and 0.2 spell it parallelism.enable_async_tensor_parallel
    if key not in c.settings and "parallelism.enable_async_tensor_parallel" in c.settings:
        key = "parallelism.enable_async_tensor_parallel"
    _put(c, "tp_comm_overlap", bool(async_tp) and launch.values["tp"] > 1, key)
    if async_tp and launch.values["tp"] > 1:  # torchtitan's only TP overlap: PyTorch async TP
        launch.state("tp_overlap_kind", "asynctp")
    if c.get("parallelism.module_fqns_per_model_part"):
        launch.cannot("parallelism.module_fqns_per_model_part", "with the first/last-stage weights' split")
    if c.get("parallelism.disable_loss_parallel"):
        launch.cannot("parallelism.disable_loss_parallel", "with the loss parallel over TP")


def _experts(c: _Config) -> None:
    """ep and etp of an MoE model: expert_parallel_degree, and expert_tensor_parallel_degree (default 1)
    with EP; without EP torchtitan shards the experts over the TP ranks (apply_moe_ep_tp), so etp = tp."""
    launch = c.launch
    ep = c.int("parallelism.expert_parallel_degree") if c.get("parallelism.expert_parallel_degree") is not None else 1
    if launch.model.moe is None:
        launch.values["ep"] = launch.values["etp"] = 1
        if ep != 1:
            launch.cannot("parallelism.expert_parallel_degree", f"as 1 ({launch.model.name} is dense)")
        return
    _put(c, "ep", ep, "parallelism.expert_parallel_degree")
    tp = launch.values["tp"]
    if ep == 1:
        launch.values["etp"] = tp
        return
    key = "parallelism.expert_tensor_parallel_degree"
    etp = c.int(key) if c.get(key) is not None else 1  # the 0.2.x default; 0.3.0 has no field and folds TP into EP
    if etp not in (1, tp):
        raise PlannerInputError(f"{c.said(key)}: torchtitan allows 1 or tensor_parallel_degree ({tp}) with EP")
    (launch.state if key in c.settings else lambda o, v: launch.default(o, v, f"no {key} (default 1)"))("etp", etp)


def _data_parallel(c: _Config) -> None:
    launch = c.launch
    replicate = c.int("parallelism.data_parallel_replicate_degree")
    key = "parallelism.data_parallel_shard_degree"
    shard = integer(c.get(key), key, -1, said=c.said(key))
    if shard == 0 or shard < -1:
        raise PlannerInputError(f"{c.said(key)}: allowed -1 (the leftover ranks) or >= 1")
    policy = str(c.get("parallelism.fsdp_reshard_after_forward"))
    if policy not in ("default", "always", "never"):
        raise PlannerInputError(f"{c.said('parallelism.fsdp_reshard_after_forward')}: allowed default, always, never")
    if shard == 1 and launch.values["cp"] == 1:  # with CP, FSDP2 shards over dp_shard x cp (parallelize.py)
        zero = 0
    elif policy == "default":
        zero = 3 if launch.values["pp"] == 1 else 2
    else:
        zero = 3 if policy == "always" else 2
    stated = "parallelism.data_parallel_shard_degree" in c.settings or "parallelism.fsdp_reshard_after_forward" in c.settings
    if stated:
        launch.state("zero", zero, said=" and ".join(c.said(k) for k in ("parallelism.data_parallel_shard_degree",
                                                                         "parallelism.fsdp_reshard_after_forward")
                                                      if k in c.settings))
    else:
        launch.default("zero", zero, "FSDP2 over the leftover ranks")
    if shard > 1 and replicate > 1:  # HSDP: FSDP over shard groups, replicated across them
        launch.state("dp_shard", shard, said=c.said(key))
    elif shard == -1 and replicate > 1:  # HSDP over the leftover ranks: dp_shard = dp / replicate once dp is known
        launch.shard_replicas = replicate
        launch.shard_replicas_said = c.said("parallelism.data_parallel_replicate_degree")
    if shard > 0:
        launch.dp = replicate * shard
        launch.dp_note = c.said(key)
        if replicate > 1 or "parallelism.data_parallel_replicate_degree" in c.settings:
            launch.dp_note = f"{c.said('parallelism.data_parallel_replicate_degree')} x {launch.dp_note}"


def _batch(c: _Config) -> None:
    launch = c.launch
    local = c.int("training.local_batch_size")
    pp = launch.values["pp"]
    if pp > 1:
        _put(c, "mbs", c.int("parallelism.pipeline_parallel_microbatch_size"), "parallelism.pipeline_parallel_microbatch_size")
    else:
        _put(c, "mbs", local, "training.local_batch_size")
    total = integer(c.get("training.global_batch_size"), "training.global_batch_size", -1,
                    said=c.said("training.global_batch_size"))
    if total > 0:
        launch.state("gbs", total, said=c.said("training.global_batch_size"))
    else:  # global_batch_size -1: local_batch_size on every data-parallel rank, no accumulation
        launch.gbs_rule, launch.gbs_per_dp = "per_dp*dp", local
    _put(c, "seq_len", c.int("training.seq_len"), "training.seq_len")


def _pipeline(c: _Config) -> None:
    """vpp and the first/last ranks' layers, as torchtitan places them."""
    launch = c.launch
    pp, L = launch.values["pp"], launch.model.num_layers
    schedule = str(c.get("parallelism.pipeline_parallel_schedule"))
    if pp == 1:
        launch.values["vpp"] = 1
        return
    if schedule not in ("1F1B", "Interleaved1F1B"):
        launch.cannot(f"parallelism.pipeline_parallel_schedule {schedule}",
                      "as 1F1B" if schedule in SINGLE_STAGE else "as interleaved 1F1B")
    points = c.get("parallelism.pipeline_parallel_split_points")
    if points:
        bounds = [int(str(p).rsplit(".", 1)[-1]) for p in points]
        counts = [b - a for a, b in zip([0] + bounds, bounds + [L])]
    else:
        first_less = c.int("parallelism.pipeline_parallel_first_stage_less_layers", 0)
        last_less = c.int("parallelism.pipeline_parallel_last_stage_less_layers", 0)
        per_stage = c.get("parallelism.pipeline_parallel_layers_per_stage")
        said = c.said("parallelism.pipeline_parallel_degree")
        if per_stage:
            key = "parallelism.pipeline_parallel_layers_per_stage"
            stages = math.ceil((L + first_less + last_less) / integer(per_stage, key, said=c.said(key)))
            said = c.said(key)
        else:
            stages = pp * (1 if schedule in SINGLE_STAGE else 2)
        counts = stage_split(L, stages, first_less, last_less)
        if counts is None:
            raise PlannerInputError(f"{said}: torchtitan cannot split {L} layers into {stages} stages with first/last-stage "
                                    f"weights {first_less}/{last_less} (generate_llm_fqn_per_model_part raises)")
    if len(counts) % pp:
        raise PlannerInputError(f"{c.said('parallelism.pipeline_parallel_degree')}: the {len(counts)} pipeline stages "
                                f"do not divide over it")
    how = [c.said(k) for k in ("parallelism.pipeline_parallel_split_points", "parallelism.pipeline_parallel_layers_per_stage",
                               "parallelism.pipeline_parallel_schedule") if k in c.settings]
    launch.state("vpp", len(counts) // pp, said=f"vpp {len(counts) // pp} from {' and '.join(how)}" if how else None)
    per_rank = [sum(counts[r::pp]) for r in range(pp)]
    if len(set(per_rank[1:-1])) > 1:
        launch.cannot(f"middle ranks holding {'/'.join(map(str, per_rank[1:-1]))} layers", "with planner's even middle split")
    if len(set(per_rank)) > 1:
        launch.state("pp_first_layers", per_rank[0])
        launch.state("pp_last_layers", per_rank[-1])


def _recompute(c: _Config) -> None:
    launch = c.launch
    mode = str(c.get("activation_checkpoint.mode")).replace("-", "_")
    option = str(c.get("activation_checkpoint.selective_ac_option"))
    if "config" in c.settings or "module" in c.settings:
        option = "op"  # 0.3's SelectiveAC is per-op SAC only (torchtitan/distributed/activation_checkpoint.py)
    key = "activation_checkpoint.mode"
    if mode in ("none", "full"):
        _put(c, "recompute", mode, key)
    elif mode == "memory_budget":
        launch.state("recompute", "selective")
        launch.cannot("activation_checkpoint.mode memory_budget", "as selective recompute")
    elif mode != "selective":
        raise PlannerInputError(f"{c.said('activation_checkpoint.mode')}: allowed selective, full, memory_budget, none")
    elif option == "op":
        _put(c, "recompute", "full", key)
        launch.state("recompute_share", PER_OP_SAC_SHARE)
        if launch.model.moe is not None:  # _op_sac_save_list has no torch._grouped_mm nor all_to_all_single
            launch.cannot("selective_ac_option op on an MoE model (its expert GEMMs and EP all-to-alls are all "
                          "recomputed)", "as full recompute of half the layers")
        launch.notes.append("selective_ac_option op (per-op SAC: matmul outputs saved except every second one) is "
                            "priced as full recompute of half of each stage's layers, as --framework torchtitan-0.2 "
                            "prices it (planner.frameworks.torchtitan.PER_OP_SAC_SHARE)")
    else:
        every = integer(option, "activation_checkpoint.selective_ac_option",
                        said=c.said("activation_checkpoint.selective_ac_option"))
        _put(c, "recompute", "full", key)
        if every > 1:
            stage = launch.model.num_layers // launch.values["pp"]
            if every in (2, 4):  # a share of each stage: 4 // every quarters
                launch.state("recompute_share", 4 // every)
            else:
                launch.state("recompute_layers", max(math.ceil(stage / every), 1))
        launch.notes.append(f"selective_ac_option {every}: every {every}th layer fully checkpointed"
                            + (f" ({c.why('activation_checkpoint.selective_ac_option')})" if every else ""))


def _kernels_precision(c: _Config) -> None:
    launch = c.launch
    compiled = c.get("compile.enable") or c.settings.get("training.compile")
    key = "compile.enable" if "compile.enable" in c.settings or "training.compile" not in c.settings else "training.compile"
    _put(c, "kernels", "fused" if compiled else "eager", key)
    converters = [str(x) for x in (c.get("model.converters") or [])]
    if isinstance(c.get("model.converters"), str):
        converters = [x.strip() for x in str(c.get("model.converters")).split(",") if x.strip()]
    fp8 = [x for x in converters if x.endswith("float8")]
    mx = [x for x in converters if x.endswith("mx")]
    _put(c, "precision", "fp8" if fp8 or mx else "bf16", "model.converters")
    moe = launch.model.moe is not None
    if "quantize.linear.mx" in mx and not fp8:  # torchtitan 0.2.x MXLinear (+ MXGroupedMM on the experts)
        launch.state("fp8_recipe", "mxfp8")
        recipe = str(c.get("quantize.linear.mx.recipe_name") or "mxfp8_cublas")
        if recipe != "mxfp8_cublas":
            launch.cannot(f"quantize.linear.mx.recipe_name {recipe}", "as mxfp8_cublas")
        if moe and not ("quantize.grouped_mm.mx" in mx and c.get("quantize.grouped_mm.mx.fqns")):
            launch.cannot("expert grouped GEMMs in BF16 (no quantize.grouped_mm.mx with fqns)", "as MXFP8")
    else:
        for x in mx:
            launch.cannot(f"model.converters {x}", "as FP8 with per-tensor scaling")
        if fp8 and moe:
            launch.cannot("expert grouped GEMMs in BF16 (the float8 converter swaps nn.Linear only)", "as FP8")
    if str(c.get("training.mixed_precision_param") or "bfloat16") != "bfloat16":
        launch.cannot("training.mixed_precision_param float32", "as bf16")
    if c.get("training.enable_cpu_offload"):
        launch.cannot("training.enable_cpu_offload", "with everything in GPU memory")
    for key in ("float8.recipe_name", "quantize.linear.float8.recipe_name"):
        if fp8 and c.get(key) not in (None, "tensorwise"):
            launch.cannot(f"{key} {c.get(key)}", "as tensorwise (current) scaling")
    _cuda_graphs(c)
    _table_options(c)
    if launch.values.get("cp", 1) == 1:  # the CP exchange is moot without CP
        launch.values["cp_comm_type"] = "p2p"


def _cuda_graphs(c: _Config) -> None:
    """0.3.0 (its command line) captures the step in CUDA graphs unless training.disable_cuda_graphs
    (trainer.py); the job-config releases (0.1, 0.2: TOML) have no capture."""
    launch = c.launch
    if c.launch.launcher == "TOML job config":
        launch.values["cuda_graphs"] = False
        return
    disabled = boolean(c.get("training.disable_cuda_graphs") or False, "training.disable_cuda_graphs",
                       said=c.said("training.disable_cuda_graphs"))
    _put(c, "cuda_graphs", not disabled, "training.disable_cuda_graphs")


def _table_options(c: _Config) -> None:
    """The table's options the readers above leave unset: what torchtitan always runs (rows without
    a setting: loss eager, SDPA attention, FP32 gradient reduction, FSDP2 prefetch and overlap, dense
    models), and any other option read from its rows (so a new torchtitan setting is one row)."""
    from planner.launch.mcore import moot_options

    launch = c.launch
    stated = {key: c.get(key) for key in TABLE.keys() if c.get(key) is not None}
    moot = moot_options(launch)  # e.g. the FP8 recipe of a BF16 run, the expert GEMMs of a dense model
    for option in TABLE.options:
        if option in launch.values or option == "tp_overlap_kind":  # the kind: with async TP only
            continue
        value, keys = TABLE.read(option, stated)
        if keys and any(c.stated(k) for k in keys):
            launch.state(option, value)
        elif value is not None and option not in moot:
            launch.values[option] = value
    launch.notes.append("torchtitan: loss eager (F.cross_entropy on FP32 logits), attention flash (SDPA)")


def _classify(settings: dict, launch: Launch) -> None:
    for key in settings:
        section = key.split(".", 1)[0]
        if key in PRICED or key.startswith("activation_checkpoint") and key in DEFAULTS:
            continue
        if section in QUIET_SECTIONS or key in QUIET_KEYS:
            launch.ignored.append(key)
        elif not key.startswith(("model.", "training.", "parallelism.", "activation_checkpoint.", "compile.")):
            launch.ignored.append(key)
        else:
            launch.unknown.append(key)


def read(text: str, path: str, model=None) -> Launch:
    """A torchtitan TOML job config or command line -> ``Launch``."""
    launch = Launch(format="torchtitan", path=path, defaults_from=SOURCE)
    if path.lower().endswith(".toml"):
        settings = _parse_toml(text, path)
        toml_keys = frozenset(settings)
        launch.launcher = "TOML job config"
    else:
        settings, toml_keys = _from_script(text, path, launch)
    c = _Config(settings, launch, toml_keys)
    _tables(c)
    _model(c, model)
    _degrees(c)
    _data_parallel(c)
    _batch(c)
    _pipeline(c)
    _recompute(c)
    _kernels_precision(c)
    _classify(settings, launch)
    from planner.launch.mcore import prune_defaults

    prune_defaults(launch)
    return launch
