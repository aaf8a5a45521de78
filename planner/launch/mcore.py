"""Megatron-Core settings -> a ``Launch``: shared by the Megatron-LM and NeMo / Megatron-Bridge readers.

A reader turns its file into ``Settings``: Megatron-LM argument names (the ``dest`` of each
``add_argument`` in megatron/training/arguments.py, which are also Megatron-Core's
``TransformerConfig`` / ``DistributedDataParallelConfig`` field names where the two share one)
-> value, each with how the file wrote it. ``to_launch`` maps them onto planner's options and
model. The layout settings are read through the Megatron table (``planner.frameworks.megatron.TABLE``),
the one the exporter writes them with, whose rows cite the upstream declarations; the shape, the
pipeline split, the batch and recompute are mapped here. Unless a comment names another file, the
flag and its default are those of arguments.py at ``MEGATRON_COMMIT`` (``ARGS``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from costmodel.options import OPTIONS, RECOMPUTE_MODULES
from hardware_catalog.schema import windowed_layer_count
from planner.frameworks.bridge import GLU_CLAMP
from planner.frameworks.megatron import ARGS
from planner.frameworks.megatron import READ_TABLE as TABLE
from planner.launch.spec import Launch, boolean, check_range, integer, number

TCFG = "Megatron-Core transformer_config.py"


@dataclass
class Settings:
    """Megatron argument dest -> value as the file states it, and how it states each."""

    values: dict = field(default_factory=dict)
    where: dict = field(default_factory=dict)
    source: str = ARGS
    """Where unstated settings take their defaults (named in ``Launch.defaults``)."""
    unpriced: dict = field(default_factory=dict)
    """Dest -> value of the flags the file states that planner does not price (listed as not
    priced), kept for the checks validate_args makes of them (``_fsdp2_preconditions``)."""

    def has(self, dest: str) -> bool:
        return dest in self.values

    def get(self, dest: str, default=None):
        return self.values.get(dest, default)

    def label(self, dest: str) -> str:
        """How the file states ``dest`` (or would: a Megatron flag, else the Megatron-Core field name)."""
        return self.where.get(dest) or ("--" + dest.replace("_", "-") if self.source == ARGS else dest)

    def said(self, dest: str) -> str:
        """``dest`` with its value as the file writes it: ``--flag value`` (a switch: ``--flag``) on a
        Megatron-LM command line, ``key=value`` in a NeMo / Megatron-Bridge config."""
        value = self.values.get(dest)
        if self.source != ARGS:
            return f"{self.label(dest)}={str(value).lower() if isinstance(value, bool) else value}"
        if isinstance(value, bool) and self.where.get(dest, "").startswith("--"):  # a switch
            return self.label(dest)
        return f"{self.label(dest)} {' '.join(map(str, value)) if isinstance(value, list) else value}"

    def int(self, dest: str, default=None, minimum: int = 1):
        return integer(self.values[dest], self.label(dest), minimum) if dest in self.values else default

    def flag(self, dest: str, default: bool = False) -> bool:
        return boolean(self.values[dest], self.label(dest)) if dest in self.values else default


def _ffn(s: Settings, hidden: int) -> int:
    """--ffn-hidden-size, or validate_args' default: 4h, or int(4h * 2/3 / 64) * 64 with --swiglu."""
    if s.has("ffn_hidden_size"):
        return s.int("ffn_hidden_size")
    return int((4 * hidden * 2 / 3) / 64) * 64 if s.flag("swiglu") else 4 * hidden


def _vocab(s: Settings, tp: int) -> tuple:
    """(padded vocabulary Megatron trains, sizes a preset may state, note). NullTokenizer adds one
    EOD id (training/tokenizer/tokenizer.py _NullTokenizer.vocab_size); _vocab_size_with_padding
    rounds up to a multiple of --make-vocab-size-divisible-by (default 128) x TP."""
    tokenizer = s.get("tokenizer_type")
    if s.has("padded_vocab_size"):
        v = s.int("padded_vocab_size")
        return v, (v,), ""
    if s.has("vocab_size"):
        raw = s.int("vocab_size")
    elif tokenizer == "GPT2BPETokenizer":
        raw = 50257  # the GPT-2 BPE vocabulary (gpt2-vocab.json)
    else:
        return None, (), ""
    orig = raw + 1 if tokenizer == "NullTokenizer" else raw
    multiple = s.int("make_vocab_size_divisible_by", 128) * tp
    padded = -(-orig // multiple) * multiple
    how = [(f"{tokenizer} {raw}" if tokenizer else f"--vocab-size {raw}") + (" + 1 EOD id" if orig != raw else "")]
    if padded != orig:
        how.append(f"padded to a multiple of {multiple}")
    return padded, (raw, orig, padded), f"Megatron trains a vocabulary of {padded} ({', '.join(how)})"


def _attention_fields(s: Settings, hidden: int, heads: int) -> dict:
    if s.flag("multi_latent_attention"):
        from hardware_catalog.schema import MLASpec

        return {"mla": MLASpec(q_lora_rank=s.int("q_lora_rank"), kv_lora_rank=s.int("kv_lora_rank", 32),
                               qk_nope_head_dim=s.int("qk_head_dim", 128), qk_rope_head_dim=s.int("qk_pos_emb_head_dim", 64),
                               v_head_dim=s.int("v_head_dim", 128))}
    out = {}
    # --num-query-groups (default 1) applies only with --group-query-attention (core_transformer_config_from_args).
    if s.flag("group_query_attention"):
        out["num_kv_heads"] = s.int("num_query_groups", 1)
    if s.has("kv_channels") and s.int("kv_channels") * heads != hidden:
        out["head_dim"] = s.int("kv_channels")
    return out


def _moe_fields(s: Settings, ffn: int, num_layers: int):
    if not s.has("num_experts"):
        return None
    from hardware_catalog.schema import MoESpec

    expert_ffn = s.int("moe_ffn_hidden_size", ffn)  # validate_args: defaults to --ffn-hidden-size
    shared = s.int("moe_shared_expert_intermediate_size", 0, minimum=0)
    dense, freq = _moe_layer_freq(s, num_layers)
    return MoESpec(num_experts=s.int("num_experts"), top_k=s.int("moe_router_topk", 2), expert_ffn_hidden_size=expert_ffn,
                   num_shared_experts=1 if shared else 0, shared_expert_ffn_hidden_size=shared or None,
                   num_dense_layers=dense, moe_layer_frequency=freq,
                   router_groups=s.int("moe_router_num_groups"), router_group_topk=s.int("moe_router_group_topk"))


def _pattern(s: Settings, dest: str, value, example: str) -> list[int] | int:
    """A moe_freq_type value (arguments.py): an integer, or a per-layer list ("([0]*3+[1]*58)" on
    a command line, a list in a config) as its bits."""
    if isinstance(value, (list, tuple)):
        return [int(b) for b in value]
    if isinstance(value, int) or str(value).strip().isdigit():
        return int(value)
    import re

    text = str(value).strip()
    if not re.fullmatch(r"[\d,\[\]()+* ]+", text):
        raise _bad(s, dest, value, f"an integer or a pattern like {example}")
    return list(eval(text, {"__builtins__": {}}, {}))  # digits, brackets, + and * only


def _moe_layer_freq(s: Settings, num_layers: int) -> tuple[int, int]:
    """(leading dense layers, MoE every n-th layer) from --moe-layer-freq: an int, or a pattern
    "([0]*3+[1]*58)" (moe_freq_type in arguments.py)."""
    value = s.get("moe_layer_freq", 1)
    bits = _pattern(s, "moe_layer_freq", value, "([0]*3+[1]*58)")
    if isinstance(bits, int):
        return 0, bits
    dense = next((i for i, b in enumerate(bits) if b), len(bits))
    rest = bits[dense:]
    freq = next((i for i, b in enumerate(rest[1:], 1) if b), len(rest)) if rest else 1
    if len(bits) != num_layers or any(b != (1 if (i % freq == 0) else 0) for i, b in enumerate(rest)):
        raise _bad(s, "moe_layer_freq", value, "leading dense layers, then MoE every n-th layer (what planner prices)")
    return dense, freq


def window_size(s: Settings) -> tuple[int, int] | None:
    """--window-size L,R as (L, R): arguments.py tuple_type reads "127,0" or "(127,0)", a Megatron-Bridge /
    NeMo config holds [127, 0]; None without one. L keys left of the query, R right of it, -1 no limit
    (TransformerConfig.window_size)."""
    import re

    value = s.get("window_size")
    if value is None or str(value).strip() in ("", "None", "none", "null"):
        return None
    words = [str(v).strip() for v in value] if isinstance(value, (list, tuple)) else \
        [w.strip() for w in str(value).strip().strip("()[]").split(",")]
    if len(words) != 2 or not all(re.fullmatch(r"-?\d+", w) for w in words) or min(map(int, words)) < -1:
        raise _bad(s, "window_size", value, "two integers L,R (e.g. 127,0: 127 keys left of the query; -1: no limit)")
    left, right = map(int, words)
    return left, right


def _full_attention_every(s: Settings, num_layers: int) -> int | None:
    """N of --window-attn-skip-freq (layers N, 2N, ... full attention; None: every layer windowed; 1:
    none), from an integer or a per-layer list of 1 (window) / 0 (full): transformer/utils.py
    is_layer_window_attention. A list is read when its full layers are every N-th."""
    value = s.get("window_attn_skip_freq")
    if value is None or str(value).strip() in ("", "None", "none", "null"):
        return None
    bits = _pattern(s, "window_attn_skip_freq", value, "([1]*1+[0]*1)*18")
    if isinstance(bits, int):
        if bits < 1:
            raise _bad(s, "window_attn_skip_freq", value, "a positive integer N (layers N, 2N, ... full attention)")
        return bits if bits <= num_layers else None
    if len(bits) != num_layers:
        raise _bad(s, "window_attn_skip_freq", value, f"one bit per layer ({num_layers}; 1 window, 0 full attention)")
    full = [i + 1 for i, b in enumerate(bits) if not b]
    if not full:
        return None
    if full != list(range(full[0], num_layers + 1, full[0])):
        raise _bad(s, "window_attn_skip_freq", value, "full attention (0) on every N-th layer only (N, 2N, ...), "
                   "what planner prices")
    return full[0]


def window_fields(s: Settings, num_layers: int) -> dict:
    """ModelSpec ``sliding_window`` (L + 1 keys, the query included) and ``full_attention_every``
    from --window-size L,R and --window-attn-skip-freq; {} for full attention everywhere (no
    window, L = -1, or every layer full). R is priced as 0 (``window_notes``)."""
    size = window_size(s)
    if size is None or size[0] < 0:
        return {}
    every = _full_attention_every(s, num_layers)
    if every == 1:
        return {}
    return {"sliding_window": size[0] + 1, **({"full_attention_every": every} if every else {})}


def window_notes(s: Settings, launch: Launch) -> None:
    """What the file states about the window that planner prices otherwise, or that does nothing."""
    size = window_size(s)
    if size is not None and size[1] != 0:
        launch.cannot(f"{s.label('window_size')} {size[0]},{size[1]}",
                      f"as {size[0]},0: a causal model attends no key right of the query (TransformerEngine "
                      "dot_product_attention/utils.py check_set_window_size sets the right side to 0)")
    if s.has("window_attn_skip_freq") and (size is None or size[0] < 0):
        launch.notes.append(f"{s.label('window_attn_skip_freq')} without a window ({s.label('window_size')}) "
                            "does nothing: every layer attends the whole prefix")


def _bad(s: Settings, dest: str, value, allowed: str):
    from hardware_catalog.errors import PlannerInputError

    return PlannerInputError(f"{s.label(dest)}={value!r}: planner reads {allowed}")


def model_fields(s: Settings, tp: int) -> tuple[dict, tuple, str]:
    """ModelSpec fields from the shape settings, the vocabulary sizes a preset may state, a note."""
    from hardware_catalog.errors import PlannerInputError

    missing = [s.label(d) for d in ("num_layers", "hidden_size", "num_attention_heads") if not s.has(d)]
    if missing:
        raise PlannerInputError(f"the launch file does not state {', '.join(missing)} (validate_args requires them): "
                                "give --model NAME")
    L, h, a = s.int("num_layers"), s.int("hidden_size"), s.int("num_attention_heads")
    ffn = _ffn(s, h)
    vocab, candidates, vocab_note = _vocab(s, tp)
    position = str(s.get("position_embedding_type", "learned_absolute"))
    pos = {"learned_absolute": "learned", "rope": "rope", "mrope": "rope", "none": "none"}.get(position)
    if pos is None:
        raise _bad(s, "position_embedding_type", position, "learned_absolute, rope, mrope or none")
    seq = s.int("seq_length")
    fields = dict(
        num_layers=L, hidden_size=h, num_attention_heads=a, ffn_hidden_size=ffn, vocab_size=vocab,
        gated_mlp=s.flag("swiglu"), norm="rmsnorm" if str(s.get("normalization", "LayerNorm")) == "RMSNorm" else "layernorm",
        position_embedding=pos, tied_embeddings=not s.flag("untie_embeddings_and_output_weights"),
        linear_bias=s.flag("add_bias_linear", True), dropout=_dropout(s),
        max_position_embeddings=s.int("max_position_embeddings", seq or 4096),
        family="llama" if s.flag("swiglu") and pos == "rope" else "gpt",
        **_attention_fields(s, h, a),
    )
    fields["qkv_bias"] = s.flag("add_qkv_bias") and not fields["linear_bias"]
    fields["moe"] = _moe_fields(s, ffn, L)
    fields["mtp_layers"] = s.int("mtp_num_layers") or 0  # --mtp-num-layers (default none: no MTP head)
    fields.update(window_fields(s, L))
    fields.update(clamp_fields(s))
    if seq:
        fields["default_seq_len"] = seq
    return fields, candidates, vocab_note


def clamp_fields(s: Settings) -> dict:
    """ModelSpec ``glu_clamp`` where the file states TransformerConfig.activation_func_clamp_value (a
    NeMo / Megatron-Bridge config; null: no clamp). Unstated (every Megatron-LM command line: the
    field has no flag) the model's own is kept: a preset the shape matches brings its clamp."""
    if not s.has(GLU_CLAMP):
        return {}
    value = s.get(GLU_CLAMP)
    if value is None:
        return {"glu_clamp": None}
    clamp = number(value, s.label(GLU_CLAMP))
    if not clamp > 0:
        raise _bad(s, GLU_CLAMP, value, "a positive number (or null: no clamp)")
    return {"glu_clamp": clamp}


def _shape_given_away(s: Settings, model, launch: Launch) -> None:
    """--model (or the recipe a NeMo file names) replaces the file's shape: say so where the file
    states a different one."""
    differ = [f"{s.label(d)} {s.get(d)}" for d in ("num_layers", "hidden_size", "num_attention_heads")
              if s.has(d) and str(s.get(d)) != str(getattr(model, d))]
    # A recipe's overrides may leave the window to the recipe: compared there when stated (null
    # included: it clears the recipe's). Megatron-LM's --window-size defaults to None (arguments.py),
    # so a command line without it trains no window.
    if s.has("window_size") or s.source == ARGS:
        window = window_fields(s, model.num_layers)
        if _windowed_layers(window.get("sliding_window"), window.get("full_attention_every"), model.num_layers) \
                != (model.sliding_window, model.windowed_layers):
            said = [f"{s.label(d)} {'null' if s.get(d) is None else s.get(d)}"
                    for d in ("window_size", "window_attn_skip_freq") if s.has(d)]
            differ += said or [f"no {s.label('window_size')}"]
    if s.has(GLU_CLAMP) and clamp_fields(s)["glu_clamp"] != model.glu_clamp:
        differ.append(f"{s.label(GLU_CLAMP)} {'null' if s.get(GLU_CLAMP) is None else s.get(GLU_CLAMP)}")
    if differ:
        launch.model_note = f"{launch.model_note or 'from --model'}, in place of the file's shape ({', '.join(differ)})"


def _windowed_layers(window, every, num_layers: int) -> tuple:
    """(window, layers attending it): what a window prices as, whatever spelling states it (a
    skip frequency above the layer count windows every layer, as none does)."""
    return (None, 0) if window is None else (window, windowed_layer_count(num_layers, every))


def _dropout(s: Settings) -> bool:
    """--attention-dropout / --hidden-dropout, default 0.1 each (_add_regularization_args)."""
    return any(number(s.get(d, 0.1), s.label(d)) > 0 for d in ("attention_dropout", "hidden_dropout"))


# ----------------------------------------------------------------------------------- layout


def to_launch(s: Settings, launch: Launch, model=None) -> Launch:
    """Fill ``launch`` (values, model, lists) from ``s``. ``model``: a ModelSpec to use instead of
    the file's shape (``--model``); else the shape must be in the file."""
    launch.defaults_from = s.source
    _degrees(s, launch)
    if model is None:
        from planner.launch.models import shape_model

        fields, candidates, vocab_note = model_fields(s, launch.values["tp"])
        launch.model, launch.model_note = shape_model(fields, candidates, "launch-model", vocab_note)
    else:
        launch.model = model
        _shape_given_away(s, model, launch)
    window_notes(s, launch)
    if launch.model.moe is None:
        launch.values["etp"] = 1
    _pipeline(s, launch)
    _batch(s, launch)
    _recompute(s, launch)
    _data_parallel(s, launch)
    _precision(s, launch)
    _implementation(s, launch)
    prune_defaults(launch)
    return launch


def prune_defaults(launch: Launch) -> None:
    """Drop defaults of settings that do not apply to this model or layout (MoE settings of a
    dense model, TP settings at tp 1, the virtual pipeline without a pipeline)."""
    moot = moot_options(launch)
    launch.defaults = [d for d in launch.defaults if d.option not in moot]


def moot_options(launch: Launch) -> set:
    """The options that do not apply to ``launch``'s model or layout as read so far."""
    v = launch.values
    moot = set()
    if launch.model is not None and launch.model.moe is None:
        moot |= {"ep", "etp", "ep_comm_overlap", "moe_dispatcher", "moe_grouped_gemm", "moe_capacity_factor",
                 "moe_pad_to_capacity"}
    if v.get("tp", 1) == 1:
        moot |= {"tp_comm_overlap", "sequence_parallel"}
    if v.get("pp", 1) == 1:
        moot |= {"vpp"}
    if v.get("cp", 1) == 1:
        moot |= {"cp_comm_type"}
    # Settings that apply only in some layouts say so themselves (Option.applies_with: fsdp at
    # ZeRO-3, the FP8 recipe under FP8).
    moot |= {o.name for o in OPTIONS if o.applies_with and not o.applies(v)}
    return moot


def _read(s: Settings, launch: Launch, option: str, convert=None, why: str = ""):
    """``option`` through the table: stated when the file holds one of its rows' keys, else the
    table's default (``None`` there: not set). Returns the value."""
    value, keys = TABLE.read(option, s.values)
    flags = {key for row in TABLE.rows_for(option) for key, _ in row.sets}
    if not keys and len(flags) == 1 and str(s.values.get(next(iter(flags)))).lower() == "false":
        keys = sorted(flags)  # a config YAML states the one switch off (a command line cannot): the default, stated
    if keys:
        launch.state(option, convert(value, s.label(keys[0])) if convert else value,
                     said=" ".join(s.said(k) for k in keys if k in s.values))
    elif value is not None:
        first = next((r.sets[0][0] for r in TABLE.rows_for(option) if r.sets), option)
        launch.default(option, value, f"no {s.label(first)}" + (f", {why}" if why else ""))
    return launch.values.get(option)


def _degrees(s: Settings, launch: Launch) -> None:
    for option in ("tp", "pp", "cp", "ep"):
        _read(s, launch, option, integer)
    check_range(launch, "tp", "pp", "cp", "ep")
    tp = launch.values["tp"]
    # validate_args: expert_tensor_parallel_size None -> tensor_model_parallel_size.
    if _read(s, launch, "etp", integer) is None:
        launch.default("etp", tp, f"no {s.label('expert_tensor_parallel_size')}, = TP")
    _read(s, launch, "sequence_parallel", lambda v, where: boolean(v, where))
    if s.get("pipeline_model_parallel_layout") not in (None, "", []):
        launch.cannot(s.label("pipeline_model_parallel_layout"), "planner's own pipeline layout")
    _cp_comm_type(s, launch)


def _words(value) -> list[str]:
    """A list-valued (nargs) setting as its words: "a2a", ["a2a"], "a2a a2a" or "[a2a, a2a]"."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value]
    return [w for w in str(value).strip("[]").replace(",", " ").replace("'", " ").split() if w]


def _cp_comm_type(s: Settings, launch: Launch) -> None:
    """--cp-comm-type (one value per layer; planner prices one for all) through the table, and
    --hierarchical-context-parallel-sizes A P, which a2a+p2p needs (A * P = cp)."""
    kinds = _words(s.get("cp_comm_type"))
    sizes = _words(s.get("hierarchical_context_parallel_sizes"))
    value, keys = TABLE.read("cp_comm_type", {"cp_comm_type": kinds[0]} if kinds else {})
    if kinds and (len(set(kinds)) > 1 or not keys):
        launch.cannot(f"{s.label('cp_comm_type')} {' '.join(kinds)}", "one CP communication type for every layer "
                      "(p2p, a2a, all_gather or a2a+p2p)")
        value, keys = "p2p", ()
    if keys:
        launch.state("cp_comm_type", value)
    else:
        launch.default("cp_comm_type", value, f"no {s.label('cp_comm_type')}")
    if value == "a2a+p2p":
        cp = launch.values.get("cp", 1)
        if len(sizes) != 2 or not all(w.isdigit() for w in sizes) or int(sizes[0]) * int(sizes[1]) != cp:
            launch.cannot(f"{s.label('hierarchical_context_parallel_sizes')} {' '.join(sizes) or '(none)'}",
                          f"all-to-all inside the scale-up domain, ring across (two sizes whose product is cp={cp})")
        else:
            launch.notes.append(f"{s.label('hierarchical_context_parallel_sizes')} {sizes[0]} {sizes[1]}: priced with "
                                "the all-to-all over the CP ranks of one scale-up domain (costmodel.placement)")
    elif sizes:
        launch.cannot(s.label("hierarchical_context_parallel_sizes"), "without hierarchical CP (it needs "
                      "--cp-comm-type a2a+p2p)")


_VIRTUAL = ("num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank",
            "pipeline_model_parallel_layout")
"""The settings that each set the virtual pipeline; validate_args allows one at a time."""


def _virtual_stages(s: Settings, launch: Launch, L: int, pp: int, extra: int) -> None:
    """vpp from --num-layers-per-virtual-pipeline-stage N, with validate_args' checks ('Uneven
    virtual pipeline parallelism'), refused in the file's words: N must divide each stage's
    layers, which need the (embedding / loss counted) layers to divide over the stages."""
    from hardware_catalog.errors import PlannerInputError

    dest = "num_layers_per_virtual_pipeline_stage"
    said = s.said(dest)
    n = s.int(dest)
    uneven = [s.said(d) for d in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers") if s.has(d)]
    if uneven:
        raise PlannerInputError(f"{said} with {' and '.join(uneven)}: Megatron-LM refuses uneven stages with it "
                                f"(validate_args): give {s.label('num_virtual_stages_per_pipeline_rank')} instead")
    if (L + extra) % pp:
        counted = f"{L} layers" + (f" + {extra} (the embedding / loss counted as layers)" if extra else "")
        raise PlannerInputError(f"{said}: the {counted} do not divide over the {pp} pipeline stages "
                                f"({s.label('pipeline_model_parallel_size')} {pp}), which validate_args requires")
    per_stage = (L + extra) // pp
    if per_stage % n:
        allowed = ", ".join(str(d) for d in range(1, per_stage + 1) if per_stage % d == 0)
        raise PlannerInputError(f"{said}: does not divide the {per_stage} layers of each of the {pp} pipeline stages "
                                f"(allowed: {allowed})")
    launch.state("vpp", per_stage // n, said=f"vpp {per_stage // n} from {said}")


def _pipeline(s: Settings, launch: Launch) -> None:
    """vpp and the first/last stage layers (validate_args, 'Uneven virtual pipeline parallelism')."""
    from hardware_catalog.errors import PlannerInputError

    L, pp = launch.model.num_layers, launch.values["pp"]
    extra = int(s.flag("account_for_embedding_in_pipeline_split")) + int(s.flag("account_for_loss_in_pipeline_split"))
    given = [d for d in _VIRTUAL if s.get(d) not in (None, "", [])]
    # validate_args: 'No more than one of the following arguments can be set at the same time'.
    if len(given) > 1 and s.source == ARGS:
        raise PlannerInputError(f"{' with '.join(s.said(d) for d in given)}: Megatron-LM takes one of "
                                f"{', '.join(s.label(d) for d in _VIRTUAL)} (validate_args)")
    if TABLE.read("vpp", s.values)[1]:
        key = "num_virtual_stages_per_pipeline_rank"
        launch.state("vpp", s.int(key), said=s.said(key))
    elif s.has("num_layers_per_virtual_pipeline_stage"):
        _virtual_stages(s, launch, L, pp, extra)
    else:
        launch.default("vpp", 1, "no virtual pipeline flag")
    first, last = s.int("decoder_first_pipeline_num_layers"), s.int("decoder_last_pipeline_num_layers")
    if extra and pp > 1 and first is None and last is None:
        per = (L + extra) // pp  # the embedding / loss count as one layer on the first / last stage
        first = per - 1 if s.flag("account_for_embedding_in_pipeline_split") else None
        last = per - 1 if s.flag("account_for_loss_in_pipeline_split") else None
    for option, value, dest in (("pp_first_layers", first, "decoder_first_pipeline_num_layers"),
                                ("pp_last_layers", last, "decoder_last_pipeline_num_layers")):
        if value is not None and pp > 1:
            launch.state(option, value, said=s.said(dest) if s.has(dest) else None)


def _batch(s: Settings, launch: Launch) -> None:
    if s.has("micro_batch_size"):
        launch.state("mbs", s.int("micro_batch_size"), said=s.said("micro_batch_size"))
    else:
        launch.default("mbs", 1, f"no {s.label('micro_batch_size')}")
    if s.has("global_batch_size"):
        launch.state("gbs", s.int("global_batch_size"), said=s.said("global_batch_size"))
    else:  # validate_args: global_batch_size = micro_batch_size * data_parallel_size
        launch.gbs_rule = "mbs*dp"
    if s.has("seq_length"):
        launch.state("seq_len", s.int("seq_length"))


def _recompute(s: Settings, launch: Launch) -> None:
    """--recompute-granularity full|selective (+ --recompute-method / --recompute-num-layers /
    --recompute-modules); --recompute-activations is the old spelling of selective."""
    granularity = s.get("recompute_granularity")
    if granularity is None and s.flag("recompute_activations"):
        granularity = "selective"
    if granularity in (None, "", "none", "None"):
        launch.default("recompute", "none", f"no {s.label('recompute_granularity')}")
        return
    if granularity not in ("full", "selective"):
        raise _bad(s, "recompute_granularity", granularity, "full or selective")
    launch.state("recompute", granularity)
    if granularity == "selective":
        _recompute_modules(s, launch)
        return
    method, n = s.get("recompute_method"), s.int("recompute_num_layers")
    if method == "block" and n:
        launch.state("recompute_layers", n * launch.values.get("vpp", 1))  # per chunk -> per stage
    elif method == "uniform" and n and n > 1:
        launch.cannot(f"{s.label('recompute_method')} uniform with {s.label('recompute_num_layers')} {n}",
                      "every layer recomputed on its own (full recompute)")


def _recompute_modules(s: Settings, launch: Launch) -> None:
    modules = s.get("recompute_modules")
    if not modules:
        return
    names = [modules] if isinstance(modules, str) else list(modules)
    known = tuple(m for m in names if m in RECOMPUTE_MODULES)
    for m in names:
        if m not in RECOMPUTE_MODULES:
            launch.cannot(f"{s.label('recompute_modules')} {m}", "without that module")
    if known:
        launch.state("recompute_modules", known)


def _data_parallel(s: Settings, launch: Launch) -> None:
    """ZeRO stage (the table: distributed optimizer, Megatron-FSDP strategies, FSDP2), hybrid
    sharding (distributed-optimizer instances) and the gradient-reduce overlap."""
    strategies = ("no_shard", "optim", "optim_grads", "optim_grads_params")
    strategy = str(s.get("data_parallel_sharding_strategy", "no_shard"))
    if s.flag("use_megatron_fsdp") and strategy not in strategies:
        raise _bad(s, "data_parallel_sharding_strategy", strategy, ", ".join(strategies))
    _fsdp2_with_distributed_optimizer(s, launch)
    _fsdp2_preconditions(s, launch)
    _read(s, launch, "zero")
    _read(s, launch, "dp_comm_overlap", lambda v, where: boolean(v, where))
    instances = s.int("num_distributed_optimizer_instances", 1)
    if instances > 1:  # dp_shard = dp / instances, once the GPU count gives dp
        launch.shard_replicas = instances
        launch.shard_replicas_said = s.said("num_distributed_optimizer_instances")


def _fsdp2_with_distributed_optimizer(s: Settings, launch: Launch) -> None:
    """PyTorch FSDP2 and Megatron's distributed optimizer together. Megatron-LM refuses the pair:
    megatron/training/arguments.py validate_args asserts "--use-torch-fsdp2 is not supported with
    MCore's distributed optimizer" (at ``ARGS``' commit). Megatron-Bridge's config validation
    (training/config.py) does not check it, so a NeMo / Bridge config is priced as the table reads
    it and the pair is listed."""
    if not (s.flag("use_torch_fsdp2") and s.flag("use_distributed_optimizer")):
        return
    pair = f"{s.said('use_distributed_optimizer')} with {s.said('use_torch_fsdp2')}"
    if s.source == ARGS:
        from hardware_catalog.errors import PlannerInputError

        raise PlannerInputError(f"{pair}: Megatron-LM refuses the pair (validate_args: --use-torch-fsdp2 is not "
                                "supported with MCore's distributed optimizer); keep one: --use-torch-fsdp2 (FSDP2, "
                                "ZeRO-3) or --use-distributed-optimizer (ZeRO-1)")
    launch.cannot(pair, "as ZeRO-1 (the distributed optimizer); Megatron-LM refuses the pair, Megatron-Bridge's "
                        "config does not check it")


def _fsdp2_preconditions(s: Settings, launch: Launch) -> None:
    """The rest of what validate_args asserts of --use-torch-fsdp2 (megatron/training/arguments.py
    at ``ARGS``' commit, lines 1031-1047): no pipeline or expert parallelism, no gradient-accumulation
    fusion (on by default), a torch_dist or torch_dcp checkpoint (the default torch_dist), untied
    embeddings, no fp16. A Megatron-LM command line that breaks one does not start; a NeMo /
    Bridge config is not checked by validate_args and is priced as read."""
    if s.source != ARGS or not s.flag("use_torch_fsdp2"):
        return
    from hardware_catalog.errors import PlannerInputError

    fsdp2 = s.said("use_torch_fsdp2")
    broken = [
        (launch.values.get("pp", 1) > 1, f"{s.said('pipeline_model_parallel_size')} (pipeline parallelism)"),
        (launch.values.get("ep", 1) > 1, f"{s.said('expert_model_parallel_size')} (expert parallelism)"),
        (s.unpriced.get("no_gradient_accumulation_fusion") is not True,
         "gradient-accumulation fusion (on by default: add --no-gradient-accumulation-fusion)"),
        (str(s.unpriced.get("ckpt_format", "torch_dist")) not in ("torch_dist", "torch_dcp"),
         f"--ckpt-format {s.unpriced.get('ckpt_format')} (it takes torch_dist or torch_dcp)"),
        (not s.flag("untie_embeddings_and_output_weights"),
         "tied embeddings (add --untie-embeddings-and-output-weights)"),
        (s.flag("fp16"), f"{s.label('fp16')}"),
    ]
    reasons = [why for bad, why in broken if bad]
    if reasons:
        raise PlannerInputError(f"{fsdp2} with {'; with '.join(reasons)}: Megatron-LM's validate_args refuses it "
                                "(megatron/training/arguments.py, the --use-torch-fsdp2 assertions)")


def _precision(s: Settings, launch: Launch) -> None:
    fp8 = s.get("fp8_format") or s.get("fp8") or s.get("fp4_format") or s.get("fp4")
    if fp8 not in (None, "", False, "None"):  # --fp4-format: TE's NVFP4 recipe, the fp8_recipe nvfp4
        launch.state("precision", "fp8")
        recipe = _read(s, launch, "fp8_recipe", why="Megatron's default delayed scaling")
        if s.has("fp8_recipe") and not TABLE.read("fp8_recipe", s.values)[1]:
            launch.cannot(f"{s.label('fp8_recipe')} {s.get('fp8_recipe')}", f"as {recipe} scaling")
    elif s.flag("bf16"):
        launch.state("precision", "bf16")
    elif s.flag("fp16"):
        launch.state("precision", "bf16")
        launch.cannot(s.label("fp16"), "as bf16 (same tensor-core rate; no loss-scaling cost)")
    else:
        launch.default("precision", "bf16", f"neither {s.label('bf16')} nor {s.label('fp16')}")
        launch.cannot(f"fp32 parameters (no {s.label('bf16')} / {s.label('fp16')})", "as bf16")
    if launch.values.get("precision") != "fp8":
        launch.values["fp8_recipe"] = TABLE.read("fp8_recipe", {})[0]  # moot without FP8
    if s.flag("fp4_param_gather"):  # --fp8-param-gather is a table option (read with the others)
        launch.cannot(s.label("fp4_param_gather"), "with BF16 parameter all-gathers")
    _read(s, launch, "grad_dtype", why="FP32 main grads")


_READ_ELSEWHERE = frozenset({"tp", "pp", "cp", "ep", "etp", "sequence_parallel", "vpp", "zero", "dp_shard",
                             "dp_comm_overlap", "grad_dtype", "precision", "moe_dispatcher", "attention",
                             "cp_comm_type", "fp8_recipe", "cpu_offload_layers", "moe_capacity_factor"})
"""Table options read with the degrees, pipeline, data parallelism and precision; ``_implementation``
reads every other option of the table, so a new Megatron setting is one row of the table."""


def _implementation(s: Settings, launch: Launch) -> None:
    for option in TABLE.options:
        if option in _READ_ELSEWHERE:
            continue
        if not any(row.sets for row in TABLE.rows_for(option)):  # what Megatron always runs
            launch.values[option] = TABLE.read(option, {})[0]
        else:
            _read(s, launch, option)
    if s.has("cuda_graph_impl") and not TABLE.read("cuda_graphs", s.values)[1]:
        launch.cannot(f"{s.label('cuda_graph_impl')} {s.get('cuda_graph_impl')}", "as per-layer CUDA graphs")
    # --cpu-offloading-num-layers N (0: off, Megatron's default)
    offload = s.int("cpu_offloading_num_layers", minimum=0)
    if offload:
        launch.state("cpu_offload_layers", offload)
    _attention(s, launch)
    if launch.model.moe is None:
        launch.values["moe_dispatcher"] = "alltoall"
        return
    backend = s.get("moe_flex_dispatcher_backend")
    if s.get("moe_token_dispatcher_type") == "flex" and backend not in (None, "deepep", "hybridep"):
        # ncclep (TransformerEngine's NCCL EP): a flex backend planner has no price for.
        launch.cannot(f"{s.label('moe_flex_dispatcher_backend')} {backend}", "as DeepEP (--moe-dispatcher deepep)")
    _read(s, launch, "moe_dispatcher", why="Megatron's default allgather dispatcher")
    # --moe-expert-capacity-factor F (None: dropless)
    _read(s, launch, "moe_capacity_factor", number, why="dropless")


def _attention(s: Settings, launch: Launch) -> None:
    """--attention-backend flash|fused|unfused|local|auto (default auto: TransformerEngine picks at
    run time); --use-flash-attn."""
    values = dict(s.values)
    if "attention_backend" in values:  # AttnBackend.fused -> fused
        values["attention_backend"] = str(values["attention_backend"]).split(".")[-1]
    value, keys = TABLE.read("attention", values)
    if keys:
        launch.state("attention", value)
    else:
        launch.default("attention", "flash", f"{s.label('attention_backend')} auto: TransformerEngine picks a "
                                             "FlashAttention-class kernel; --attention flash3 prices cuDNN's")
