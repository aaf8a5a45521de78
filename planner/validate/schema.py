"""The runs format: one JSON object per measured training run, validated by pydantic.

A row names the hardware, the model, what is known of the layout, the framework and one
measurement; everything else is optional. Blocks and their fields (the reference format of
``planner/data/published_runs.json`` is this format; short spellings in ``ALIASES``):

* ``hardware``: ``gpu`` (as ``--gpu`` takes it, any common spelling), ``num_gpus``, optional
  ``cluster`` (preset or file) and the cluster facts a user knows (``gpus_per_node``,
  ``scaleup_domain_size``, ``nic``, ``nics_per_node``).
* ``model``: a preset name (as ``--model``), or an object: ``name``, ``hf_config`` (a
  config.json), or the shape fields with ``family`` when the name is not a preset.
* ``layout``: degrees, batch, recompute, ZeRO, precision, ``framework``; a value may be unknown
  (null, "not stated", text such as "interleaved (V not stated)"): it is then searched.
* ``settings``: implementation options by their ``costmodel.options`` names.
* ``measured``: tokens/s/GPU, tokens/s, step time, samples/s, TFLOP/s/GPU or MFU (with the
  FLOP convention, ``flops``), and peak memory.
* ``reference``: a curated tokens/s/GPU (the reference set's; wins over ``measured``).

Fields may also be written flat at the top level (``"gpu": "H100", "tp": 8, "step_time_s":
12.3``): they are moved into their block. Fields this format does not know are kept and listed
in the row's assumptions as ignored. ``RunRow.model_json_schema()`` is the published schema
(``planner validate --schema``).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from typing import Annotated, Any, ClassVar, Optional, Union

from pydantic import (AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, WithJsonSchema,
                      model_validator)

from costmodel.options import IMPLEMENTATION_OPTIONS
from hardware_catalog.errors import PlannerInputError

CONFIDENCES = ("high", "medium", "low")
FLOP_CONVENTIONS = ("6N+attention", "6N", "8N+attention", "8N")
"""TFLOP/s and MFU conventions: model FLOPs (6N, Kaplan et al. 2020) with or without the causal
attention core (PaLM App. B), with (8N: one more forward, HFU-style) or without recompute."""
FLOP_SYNONYMS = {"model": "6N+attention", "mfu": "6N+attention", "model_no_attention": "6N",
                 "hardware": "8N+attention", "hfu": "8N+attention", "with_recompute": "8N+attention",
                 "model_with_recompute": "8N+attention", "hardware_no_attention": "8N"}
STATED_SETTINGS = (*IMPLEMENTATION_OPTIONS, "recompute_modules")
"""Settings a row may state under the option's own name; they override the framework profile."""


# ------------------------------------------------------------------------------- value checks


def _kind(value: Any) -> str:
    return "text" if isinstance(value, str) else "true/false" if isinstance(value, bool) else type(value).__name__


def _pos_int(value: Any) -> Optional[int]:
    """A positive integer (8, or 8.0 as some writers emit), or null; never text."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"expected an integer >= 1, got {value!r} ({_kind(value)})")
    return value


def _pos_float(value: Any) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"expected a number > 0, got {value!r} ({_kind(value)})")
    return float(value)


MEASURE_LIMITS = {
    # No training run comes near these (a 125M model on a B200 at its FP8 peak: ~6M tokens/s/GPU);
    # a value past one is a typo or a unit mistake. The GPU-specific bound (implied MFU <= 100%)
    # is checked once the row's model and GPU are known (planner.validate.measure.plausible).
    "tokens_per_s_per_gpu": 1e8, "tokens_per_s": 1e14, "samples_per_s": 1e12, "tflops_per_gpu": 1e5,
    "step_time_s": 1e7, "peak_tflops": 1e5, "peak_memory_gib": 1e5, "peak_memory_gb": 1e5,
}


def _measure(name: str):
    limit = MEASURE_LIMITS[name]

    def check(value: Any) -> Optional[float]:
        value = _pos_float(value)
        if value is not None and value > limit:
            raise ValueError(f"implausible: at most {limit:g} (got {value:g})")
        return value
    return check


def _fraction(value: Any) -> Optional[float]:
    """A fraction in (0, 1]; text ('45%'), a percentage (45) or a number <= 0 is refused with
    what is allowed (it used to say 'expected a number > 0' for '45%', which 45 also is)."""
    if value is None:
        return None
    number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if number is None or not math.isfinite(number) or not 0 < number <= 1:
        raise ValueError(f"expected a fraction in (0, 1] (0.45 for 45%), got {value!r} ({_kind(value)})")
    return float(number)


# Words with which a source says a value is unknown; text holding them reads as unknown (then
# searched), even when it names a schedule with digits ("interleaved 1F1B (V not stated)"). Other
# text ("lots", "8 or 16") is an error: it is neither a value nor said to be unknown.
_UNKNOWN_WORDS = re.compile(r"not (?:stated|known|published|given|reported)|unstated|unpublished|unspecified|"
                            r"unknown|n/a|\?", re.I)


def says_unknown(text: str) -> bool:
    """Whether text says a value is not known ('not stated', '?', 'n/a', '-', empty)."""
    said = text.strip()
    return not said or said.lower() in ("na", "none", "-") or bool(_UNKNOWN_WORDS.search(said))


def _knob(value: Any) -> Union[int, str, None]:
    """A layout degree or batch: an integer, or unknown (null, or text saying so: "not stated",
    "?", "unknown", "interleaved 1F1B (V not stated)"); any other text is refused."""
    if isinstance(value, str):
        said = value.strip()
        if not says_unknown(said):
            raise ValueError(f"expected an integer, or null / text saying it is not known (\"not stated\", \"unknown\", "
                             f"\"?\"), got {value!r} (text)")
        return said or None
    return _pos_int(value)


def _vp(value: Any) -> Union[int, str, None]:
    """Virtual stages: as ``_knob``, and text naming the interleaved schedule ("interleaved",
    "interleaved 1F1B") reads as unknown, searched from 2 (as the field's description says)."""
    if isinstance(value, str) and "interleav" in value.lower():
        return value.strip()
    return _knob(value)


def _flag(value: Any) -> Optional[bool]:
    """On / off: true, false (or 'true', 'on', 'yes', 1 ...), or unknown (null, or text saying
    so: 'not stated'), as the other knobs; other text is refused saying what is allowed."""
    if isinstance(value, str) and _UNKNOWN_WORDS.search(value):
        return None
    words = {"true": True, "on": True, "yes": True, "1": True, "false": False, "off": False, "no": False, "0": False}
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in words:
        return words[value.strip().lower()]
    raise ValueError(f"expected true or false, or null / text saying it is not known (\"not stated\"), got {value!r} ({_kind(value)})")


def _text(value: Any) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"expected text, got {value!r} ({_kind(value)})")


def _recompute(value: Any) -> Optional[str]:
    """Recompute as text; true / false (activation checkpointing on / off) read as full / none."""
    if isinstance(value, bool):
        return "full (stated as true)" if value else "none (stated as false)"
    return _text(value)


def _zero(value: Any) -> Union[int, str, None]:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 3:
        raise ValueError(f"expected a ZeRO stage 0-3 or text such as 'FSDP FULL_SHARD', got {value!r} ({_kind(value)})")
    return value


def _flops(value: Any) -> Optional[str]:
    if value is None:
        return None
    key = re.sub(r"[\s_]+", "", str(value)).lower() if isinstance(value, str) else None
    for name in FLOP_CONVENTIONS:
        if key == name.lower():
            return name
    for name, convention in FLOP_SYNONYMS.items():
        if key == name.replace("_", ""):
            return convention
    raise ValueError(f"expected one of {', '.join(FLOP_CONVENTIONS)} (or {', '.join(FLOP_SYNONYMS)}), got {value!r}")


def _confidence(value: Any) -> str:
    if value is None:
        return "high"
    if isinstance(value, str) and value.strip().lower() in CONFIDENCES:
        return value.strip().lower()
    raise ValueError(f"expected one of {', '.join(CONFIDENCES)}, got {value!r}")


_NULL = {"type": "null"}
PosInt = Annotated[Optional[int], BeforeValidator(_pos_int),
                   WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1}, _NULL]})]
PosFloat = Annotated[Optional[float], BeforeValidator(_pos_float),
                     WithJsonSchema({"anyOf": [{"type": "number", "exclusiveMinimum": 0}, _NULL]})]
Fraction = Annotated[Optional[float], BeforeValidator(_fraction),
                     WithJsonSchema({"anyOf": [{"type": "number", "exclusiveMinimum": 0, "maximum": 1}, _NULL]})]
Knob = Annotated[Union[int, str, None], BeforeValidator(_knob), WithJsonSchema({"anyOf": [
    {"type": "integer", "minimum": 1}, {"type": "string", "pattern": "^[^0-9]*$", "description": "not known: searched"}, _NULL]})]
Text = Annotated[Optional[str], BeforeValidator(_text)]
VirtualStages = Annotated[Union[int, str, None], BeforeValidator(_vp), WithJsonSchema({"anyOf": [
    {"type": "integer", "minimum": 1}, {"type": "string", "pattern": "^[^0-9]*$|interleav",
                                        "description": "not known: searched ('interleaved': from 2)"}, _NULL]})]


def Measure(name: str):  # noqa: N802 - a type, as PosFloat
    """A measured quantity > 0 and at most ``MEASURE_LIMITS[name]``."""
    return Annotated[Optional[float], BeforeValidator(_measure(name)), WithJsonSchema(
        {"anyOf": [{"type": "number", "exclusiveMinimum": 0, "maximum": MEASURE_LIMITS[name]}, _NULL]})]


def _f(*names: str, default: Any = None, description: str = "") -> Any:
    """A field accepted under its canonical name (first) and the other spellings given."""
    return Field(default, validation_alias=AliasChoices(*names), description=description)


class _Block(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    INFO: ClassVar[tuple] = ()
    """Fields the reference format carries for people, not for planner (not reported as ignored)."""

    @classmethod
    def spellings(cls) -> list[str]:
        """Every name a field of this block is accepted under."""
        names = []
        for name, info in cls.model_fields.items():
            alias = info.validation_alias
            names += list(alias.choices) if isinstance(alias, AliasChoices) else [name]
        return names

    def ignored(self, prefix: str) -> list[tuple[str, str]]:
        """The fields this format does not know: ('block.field', ' (did you mean X?)' or '')."""
        out = []
        for key in self.model_extra or {}:
            if key in self.INFO:
                continue
            close = difflib.get_close_matches(key, self.spellings(), n=1, cutoff=0.75)
            out.append((f"{prefix}{key}", f"; did you mean {prefix}{close[0]}?" if close else ""))
        return out


# ------------------------------------------------------------------------------------ blocks


class Hardware(_Block):
    INFO: ClassVar[tuple] = ("gpu_memory_gb", "interconnect", "system")

    gpu: Text = _f("gpu", "gpu_type", description="GPU, as --gpu takes it: 'H100', 'H100 80GB SXM5', 'A100-SXM4-40GB', 'B200'.")
    num_gpus: PosInt = _f("num_gpus", "gpus", "gpu_count", "world_size", description="GPUs in the job.")
    num_nodes: PosInt = _f("num_nodes", "nodes", description="With gpus_per_node, instead of num_gpus.")
    cluster: Text = _f("cluster", description="Cluster preset or cluster file (relative to the runs file); default: the GPU's preset.")
    gpus_per_node: PosInt = _f("gpus_per_node", description="Overrides the cluster's.")
    scaleup_domain_size: PosInt = _f("scaleup_domain_size", "nvlink_domain_gpus", "nvlink_domain",
                                     description="GPUs sharing NVLink (8 for HGX, 72 for NVL72); overrides the cluster's.")
    nic: Text = _f("nic", description="Network adapter, e.g. 'ndr', '400G NDR InfiniBand', 'RoCE 400G'; overrides the cluster's.")
    nics_per_node: PosInt = _f("nics_per_node", description="Overrides the cluster's.")


class Model(_Block):
    INFO: ClassVar[tuple] = ("total_params_reported", "arch_source", "params")

    name: Text = _f("name", "preset", description="Preset name or alias (as --model), any common spelling.")
    hf_config: Text = _f("hf_config", "config", "config_json", description="A Hugging Face config.json (relative to the runs file).")
    family: Text = _f("family", "architecture", description="Architecture family when the name is no preset (see FAMILIES).")
    num_layers: PosInt = _f("num_layers", "layers", "n_layers", "num_hidden_layers")
    hidden_size: PosInt = _f("hidden_size", "hidden", "d_model")
    num_attention_heads: PosInt = _f("num_attention_heads", "heads", "n_heads")
    num_kv_heads: PosInt = _f("num_kv_heads", "kv_heads", "num_key_value_heads")
    ffn_hidden_size: PosInt = _f("ffn_hidden_size", "intermediate_size", "ffn")
    head_dim: PosInt = _f("head_dim", "kv_channels", description="Where heads x head_dim is not hidden_size (Qwen3, Gemma).")
    vocab_size: PosInt = _f("vocab_size", "vocab")
    seq_length: PosInt = _f("seq_length", "seq_len", "sequence_length")
    moe: Optional[dict] = _f("moe", description="MoE shape (num_experts, top_k, expert_ffn_hidden_size, ...).")
    hybrid_pattern: Text = _f("hybrid_pattern", "hybrid_override_pattern", "hybrid_layer_pattern",
                              description="Megatron hybrid layer pattern, one symbol a layer: M Mamba-2, * attention, - MLP, E MoE.")
    mamba: Optional[dict] = _f("mamba", description="Mamba-2 mixer (state_dim, head_dim, num_heads, num_groups, conv_kernel, chunk_size).")
    sliding_window: PosInt = _f("sliding_window", "attention_window",
                                description="Keys a query attends in a sliding-window layer, itself included (HF sliding_window; Megatron --window-size w-1,0).")
    full_attention_every: PosInt = _f("full_attention_every", "window_attn_skip_freq",
                                      description="With sliding_window: layers N, 2N, ... attend every key (Megatron --window-attn-skip-freq N); absent: every layer windowed.")
    glu_clamp: PosFloat = _f("glu_clamp", "swiglu_limit", "activation_func_clamp_value",
                             description="Clamp on the experts' gated activation (gpt-oss: HF swiglu_limit 7.0; Megatron-Core activation_func_clamp_value); MoE only.")

    def shaped(self) -> bool:
        return self.num_layers is not None or self.hybrid_pattern is not None


class LayoutBlock(_Block):
    """Names as the frameworks' own configs write them are accepted too: Megatron-LM's arguments
    (tensor_model_parallel_size, recompute_granularity, use_distributed_optimizer), torchtitan's
    [parallelism] degrees (tensor_parallel_degree), DeepSpeed's batch keys (train_batch_size,
    train_micro_batch_size_per_gpu)."""

    INFO: ClassVar[tuple] = ("grad_accum_steps", "pipeline_schedule", "fsdp_note")

    tp: Knob = _f("tp", "tensor_parallel", "tensor_model_parallel_size", "tensor_parallel_degree")
    pp: Knob = _f("pp", "pipeline_parallel", "pipeline_model_parallel_size", "pipeline_parallel_degree")
    dp: Knob = _f("dp", "data_parallel")
    cp: Knob = _f("cp", "context_parallel", "context_parallel_size", "context_parallel_degree")
    ep: Knob = _f("ep", "expert_parallel", "expert_model_parallel_size", "expert_parallel_degree")
    expert_tp: Knob = _f("expert_tp", "etp", "expert_tensor_parallel_size")
    vp: VirtualStages = _f("vp", "vpp", "virtual_pipeline", "virtual_pipeline_model_parallel_size",
                  description="Virtual stages per pipeline rank; text mentioning 'interleaved' searches 2 and up.")
    micro_batch_size: Knob = _f("micro_batch_size", "mbs", "train_micro_batch_size_per_gpu")
    global_batch_size: Knob = _f("global_batch_size", "gbs", "train_batch_size")
    global_batch_tokens: PosInt = _f("global_batch_tokens", "tokens_per_batch", description="Instead of global_batch_size.")
    seq_len: PosInt = _f("seq_len", "seq_length", "sequence_length")
    activation_recompute: Annotated[Optional[str], BeforeValidator(_recompute)] = _f(
        "activation_recompute", "recompute", "activation_checkpointing", "recompute_granularity",
        description="none | selective | full (text may follow); true = full, false = none.")
    zero_stage: Annotated[Union[int, str, None], BeforeValidator(_zero)] = _f("zero_stage", "zero", description="0-3, or text such as 'FSDP FULL_SHARD'.")
    fsdp: Text = _f("fsdp")
    distributed_optimizer: Union[bool, Text] = _f("distributed_optimizer", "use_distributed_optimizer")
    precision: Text = _f("precision", description="bf16 | fp8 | nvfp4 (text may follow; NVFP4 is priced with "
                         "TransformerEngine's NVFP4 recipe, MXFP4 as MXFP8, on Blackwell only, said in the row's "
                         "assumptions).")
    sequence_parallel: Annotated[Optional[bool], BeforeValidator(_flag)] = _f("sequence_parallel")
    framework: Text = _f("framework", description="Framework and release in free text, e.g. 'NeMo 24.07', 'torchtitan', 'Megatron-Core 0.8'.")
    framework_release: Text = _f("framework_release", "release", "framework_version")


class Measured(_Block):
    INFO: ClassVar[tuple] = ("hfu", "other", "flops_definition")

    tokens_per_s_per_gpu: Measure("tokens_per_s_per_gpu") = _f("tokens_per_s_per_gpu", "tokens_per_sec_per_gpu", "tps_per_gpu")
    tokens_per_s: Measure("tokens_per_s") = _f("tokens_per_s", "tokens_per_s_total", "tokens_per_sec", "throughput_tokens_per_s")
    step_time_s: Measure("step_time_s") = _f("step_time_s", "iteration_time_s", "step_time", "iteration_time")
    samples_per_s: Measure("samples_per_s") = _f("samples_per_s", "sequences_per_s")
    tflops_per_gpu: Measure("tflops_per_gpu") = _f("tflops_per_gpu", "tflops", "model_tflops_per_gpu")
    mfu: Fraction = _f("mfu")
    flops: Annotated[Optional[str], BeforeValidator(_flops),
                     WithJsonSchema({"anyOf": [{"enum": [*FLOP_CONVENTIONS, *FLOP_SYNONYMS]}, _NULL]})] = _f(
        "flops", "flops_convention", description="FLOP convention of tflops_per_gpu and mfu: " + ", ".join(FLOP_CONVENTIONS))
    peak_tflops: Measure("peak_tflops") = _f("peak_tflops", "peak_tflops_assumed_by_source", description="MFU's denominator; default the GPU's dense BF16 peak.")
    peak_memory_gib: Measure("peak_memory_gib") = _f("peak_memory_gib", "max_memory_gib", "memory_gib")
    peak_memory_gb: Measure("peak_memory_gb") = _f("peak_memory_gb", description="In GB (1e9 bytes), instead of GiB.")

    def given(self) -> list[str]:
        names = ("tokens_per_s_per_gpu", "tokens_per_s", "step_time_s", "samples_per_s", "tflops_per_gpu", "mfu")
        return [n for n in names if getattr(self, n) is not None]


class Reference(_Block):
    tokens_per_s_per_gpu: PosFloat = None
    method: Text = ""
    peak_memory_gib: PosFloat = None


class Source(_Block):
    INFO: ClassVar[tuple] = ("authors", "arxiv_id", "url", "venue", "location", "access", "repo_commit")

    key: Text = None
    year: PosInt = None
    title: Text = None

    def label(self) -> str:
        return self.key or self.title or "unsourced"


# -------------------------------------------------------------------------------------- a row

FLAT = {"hardware": tuple(Hardware.spellings()), "layout": tuple(LayoutBlock.spellings()),
        "measured": tuple(Measured.spellings())}
"""Top-level spellings moved into their block (a flat row): every name the block takes, read off
the block so a spelling it accepts is never refused at the top ("tokens_per_sec", "tensor_parallel")."""


def _fold_flat(raw: Any) -> Any:
    """A flat row's fields moved into their blocks (implementation options into ``settings``);
    a field given both ways must agree."""
    if not isinstance(raw, dict):
        return raw
    row = dict(raw)
    for block, names in (*FLAT.items(), ("settings", STATED_SETTINGS)):
        for name in names:
            if name not in row:
                continue
            value = row.pop(name)
            target = row.get(block)
            if target is None:
                target = row[block] = {}
            if not isinstance(target, dict):
                row[name] = value  # the block itself is wrong: let its own check say so
                continue
            if name in target and target[name] != value:
                raise ValueError(f"{name} is given as {value!r} and as {block}.{name} {target[name]!r}")
            row[block] = {**target, name: value}
    return row


class RunRow(_Block):
    """One measured training run."""

    INFO: ClassVar[tuple] = ("run_kind", "derived", "checks", "quote", "notes", "layout_summary", "split", "date", "comment")

    id: Text = _f("id", "name", "run", description="Names the row in tables and errors; default 'row N'.")
    source: Union[Source, Text] = _f("source", description="Where the numbers come from: text, or {key, year, title, url}.")
    confidence: Annotated[str, BeforeValidator(_confidence), WithJsonSchema({"enum": list(CONFIDENCES)})] = _f(
        "confidence", default="high", description="high | medium | low (default high: your own measurements).")
    model: Union[Text, Model] = _f("model", description="Preset name, or {name | hf_config | shape fields + family}.")
    hardware: Hardware = Field(default_factory=Hardware)
    layout: LayoutBlock = Field(default_factory=LayoutBlock)
    settings: dict = _f("settings", default={}, description="Implementation options by name: " + ", ".join(STATED_SETTINGS))
    measured: Measured = Field(default_factory=Measured)
    reference: Optional[Reference] = None

    _fold = model_validator(mode="before")(classmethod(lambda cls, raw: _fold_flat(raw)))

    @classmethod
    def spellings(cls) -> list[str]:
        """A row's own fields and what a flat row may give at its top (block fields, settings),
        so a misspelt one gets its 'did you mean'."""
        return [*super().spellings(), *(n for names in FLAT.values() for n in names), *STATED_SETTINGS]

    @model_validator(mode="after")
    def _complete(self):
        if self.model is None:
            raise ValueError("missing model: a preset name, or {name | hf_config | shape fields + family}" + self.unread())
        if self.hardware.gpu is None and self.hardware.cluster is None:
            raise ValueError("missing hardware.gpu (or hardware.cluster)" + self.unread())
        if (self.reference is None or self.reference.tokens_per_s_per_gpu is None) and not self.measured.given():
            raise ValueError("missing measurement: give one of measured.tokens_per_s_per_gpu, tokens_per_s, "
                             "step_time_s, samples_per_s, tflops_per_gpu, mfu" + self.unread())
        unknown = sorted(set(self.settings) - set(STATED_SETTINGS))
        if unknown:
            close = difflib.get_close_matches(unknown[0], STATED_SETTINGS, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ValueError(f"settings.{unknown[0]}: not an implementation option{hint} (allowed: {', '.join(STATED_SETTINGS)})")
        self._check_settings()
        if isinstance(self.model, Model) and self.model.seq_length and self.layout.seq_len \
                and self.model.seq_length != self.layout.seq_len:
            raise ValueError(f"model.seq_length {self.model.seq_length} and layout.seq_len {self.layout.seq_len} disagree")
        return self

    def _check_settings(self) -> None:
        from costmodel.options import OPTIONS_BY_NAME

        for name, value in self.stated_settings().items():
            if value is None or (name == "recompute_modules" and not value):
                continue
            try:
                OPTIONS_BY_NAME[name].parse(value)
            except PlannerInputError as err:
                raise ValueError(f"{'settings' if name in self.settings else 'layout'}.{name}: {err}") from None

    def source_key(self) -> str:
        return self.source.label() if isinstance(self.source, Source) else (self.source or "unsourced")

    def source_year(self) -> int:
        return (self.source.year or 0) if isinstance(self.source, Source) else 0

    def seq_len(self) -> Optional[int]:
        return (self.model.seq_length if isinstance(self.model, Model) else None) or self.layout.seq_len

    def framework_text(self) -> str:
        return " ".join(t for t in (self.layout.framework, self.layout.framework_release) if t)

    def ignored_fields(self) -> list[tuple[str, str]]:
        """Fields the format does not know, as ('block.field', hint) (listed as ignored, never an error)."""
        blocks = [("", self), ("hardware.", self.hardware), ("layout.", self.layout), ("measured.", self.measured)]
        if isinstance(self.model, Model):
            blocks.append(("model.", self.model))
        out = [f for prefix, block in blocks for f in block.ignored(prefix)]
        # A model's shape written at the top of a flat row: it belongs in the model object.
        out = [(f, "; a model field: give it as model.{0}".format(f)) if f in Model.spellings() else (f, hint) for f, hint in out]
        return [(f, hint) for f, hint in out if f.removeprefix("layout.") not in STATED_SETTINGS]

    def unread(self) -> str:
        """'; not read: step_time_ms, peak_mem_gb (did you mean peak_memory_gb?)': the fields this
        format does not know, for an error that a misspelt field may explain ('' if none)."""
        fields = self.ignored_fields()
        if not fields:
            return ""
        said = [f"{f} ({hint.removeprefix('; ')})" if hint else f for f, hint in fields[:6]]
        return f"; fields not in the runs format, not read: {', '.join(said)}" + (", ..." if len(fields) > 6 else "")

    def stated_settings(self) -> dict:
        """Implementation settings by option name: the ``settings`` block, and (reference format)
        the option names under ``layout``."""
        extra = self.layout.model_extra or {}
        return {**{k: extra[k] for k in STATED_SETTINGS if k in extra}, **self.settings}


def runs_json_schema() -> dict:
    """The JSON Schema of a runs file: a list of rows (or ``{"runs": [...]}``)."""
    row = RunRow.model_json_schema(ref_template="#/$defs/{model}")
    defs = row.pop("$defs", {})
    defs["RunRow"] = row
    items = {"$ref": "#/$defs/RunRow"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "planner runs file",
        "description": "Measured training runs for `planner validate --runs` and `planner calibrate --runs`. Fields may "
                       "also be written flat at the top level of a row; other fields are kept and listed as ignored.",
        "anyOf": [{"type": "array", "items": items, "minItems": 1},
                  {"type": "object", "properties": {"runs": {"type": "array", "items": items, "minItems": 1}},
                   "required": ["runs"]}],
        "$defs": defs,
    }


# ------------------------------------------------------------------------------------ one row


def _label(raw, index: Optional[int]) -> str:
    ident = raw.get("id") if isinstance(raw, dict) else None
    at = f"row {index}" if index else "row"
    return f"{at} (id {ident!r})" if isinstance(ident, str) else at


class RowError(PlannerInputError):
    """A row the runs format refuses: which row (``label``), which field, and why."""

    def __init__(self, label: str, field: str, reason: str):
        self.label, self.field, self.reason = label, field, reason
        super().__init__(f"{label}: field {field}: {reason}" if field else f"{label}: {reason}")


def parse_row(raw, index: Optional[int] = None) -> RunRow:
    """One row checked against the runs format; ``index`` (1-based) names it in errors
    (``RowError``)."""
    if isinstance(raw, RunRow):
        return raw
    if not isinstance(raw, dict):
        raise RowError(_label(raw, index), "", f"expected an object (one run), got {json.dumps(raw)[:40]} "
                                               f"({type(raw).__name__})")
    try:
        row = RunRow.model_validate(raw)
    except ValidationError as err:
        raise RowError(_label(raw, index), *validation_parts(err)) from None
    if row.id is None:
        row.id = f"row {index}" if index else "row"
    return row


def _is_union_tag(part) -> bool:
    return isinstance(part, str) and ("[" in part or part in ("Model", "Source", "str", "bool"))


def validation_message(err: ValidationError) -> str:
    """The deepest error of a pydantic ValidationError as 'field a.b: what is wrong (got X)'."""
    field, msg = validation_parts(err)
    return f"field {field}: {msg}" if field else msg


def validation_parts(err: ValidationError) -> tuple[str, str]:
    """(the field 'a.b' or '', what is wrong) of the deepest error of a ValidationError."""
    items = [([str(p) for p in e["loc"] if not _is_union_tag(p)], e) for e in err.errors()]
    depth = max(len(loc) for loc, _ in items)
    deepest = [(loc, e) for loc, e in items if len(loc) == depth]
    loc, e = deepest[0]
    # Several errors at one field: every branch of a union refused it. Errors at different fields
    # (two fields wrong at once) are not a union's: the first is said as it is.
    deepest = [(other, x) for other, x in deepest if other == loc]
    msg = e["msg"].removeprefix("Value error, ")
    got = e.get("input")
    if e["type"] == "missing":
        msg = "missing (required)"
    elif e["type"] in ("model_type", "dict_type"):  # not pydantic's 'valid dictionary or instance of LayoutBlock'
        block = {"Hardware": Hardware, "LayoutBlock": LayoutBlock, "Measured": Measured, "Model": Model,
                 "Source": Source, "Reference": Reference}.get((e.get("ctx") or {}).get("class_name"))
        fields = f" with fields such as {', '.join(list(block.model_fields)[:4])}" if block else ""
        msg = f"expected an object{fields}, got {json.dumps(got, default=str)[:40]}"
    elif len(deepest) > 1:  # every branch of a union refused it
        msg = f"expected text or an object, got {json.dumps(got)[:40]}"
    elif "got" not in msg and loc:
        msg = f"{msg} (got {json.dumps(got, default=str)[:40]})"
    return ".".join(loc), msg
