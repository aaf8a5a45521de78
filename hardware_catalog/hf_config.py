"""Hugging Face ``config.json`` -> ModelSpec.

Each supported ``model_type`` has a small converter that maps that family's keys (GPT-2's
``n_embd``/``n_layer``, Llama's ``hidden_size``/``num_key_value_heads``, DeepSeek's MLA and MoE
keys, ...) and fills in what the config leaves implicit: gated vs plain MLP, biases, norm type,
position embedding, tied embeddings, following each family's ``modeling_*.py`` in transformers.
Only shapes that change parameter, FLOP or activation counts are read.
"""

from __future__ import annotations

import difflib
from typing import Any, Callable, Optional

from pydantic import ValidationError

from hardware_catalog.errors import PlannerInputError
from hardware_catalog.schema import MambaSpec, MLASpec, ModelSpec, MoESpec

# Sequence length / batch used when a config gives no training recipe: 4M tokens at <= 4096.
_DEFAULT_SEQ = 4096
_DEFAULT_TOKENS = 4 * 1024 * 1024

# architectures[0] -> model_type, for configs that lack model_type.
_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "GPT2LMHeadModel": "gpt2",
    "GPTNeoXForCausalLM": "gpt_neox",
    "OPTForCausalLM": "opt",
    "BloomForCausalLM": "bloom",
    "BloomModel": "bloom",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "MPTForCausalLM": "mpt",
    "MptForCausalLM": "mpt",
    "NemotronHForCausalLM": "nemotron_h",
    "GptOssForCausalLM": "gpt_oss",
    "Llama4ForConditionalGeneration": "llama4",
    "Llama4ForCausalLM": "llama4_text",
}


def condense_validation_error(err: ValidationError) -> str:
    """One line from a pydantic error: every offending field, its value and what is wrong,
    joined by "; " (a misspelt field first)."""
    items = err.errors()
    if not items:
        return str(err).splitlines()[0]
    # A misspelt field shows up as "unknown x" + "missing y": report the unknown one first.
    items.sort(key=lambda e: e.get("type") != "extra_forbidden")
    missing = [".".join(str(p) for p in e.get("loc", ())) for e in items if e.get("type") == "missing"]
    parts = [_one_error(e, missing) for e in items]
    # What is allowed, once per level, after that level's last unknown field.
    last = {}
    for i, e in enumerate(items):
        if e.get("type") == "extra_forbidden":
            last[tuple(e.get("loc", ()))[:-1]] = i
    for parent, i in last.items():
        allowed = _allowed_at((*parent, ""))
        if allowed:
            where = f" in {'.'.join(map(str, parent))}" if parent else ""
            parts[i] += f" (allowed{where}: {', '.join(allowed)})"
    return " ".join("; ".join(parts).split())


def _one_error(e: dict, missing: list[str]) -> str:
    loc = ".".join(str(p) for p in e.get("loc", ()))
    msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
    kind = e.get("type", "")
    if kind == "missing":
        return f"missing field '{loc}'"
    if kind == "extra_forbidden":
        # The missing fields first (a misspelt required one), then every field of that level
        # (a misspelt optional one, 'num_kv_head'); the caller lists what is allowed.
        allowed = _allowed_at(e.get("loc", ()))
        prefix = loc.rsplit(".", 1)[0] + "." if "." in loc else ""
        close = difflib.get_close_matches(loc, missing, n=1) or [
            prefix + c for c in difflib.get_close_matches(loc.rsplit(".", 1)[-1], allowed, n=1)]
        return f"unknown field '{loc}'" + (f" (did you mean '{close[0]}'?)" if close else "")
    value = e.get("input")
    shown = "" if isinstance(value, dict) else f" (got {_short(value)})"
    return f"field '{loc}': {msg}{shown}" if loc else f"{msg}"


_NESTED = {"moe": MoESpec, "mla": MLASpec, "mamba": MambaSpec}


def _allowed_at(loc: tuple) -> list[str]:
    """The ModelSpec field names allowed where an unknown field ``loc`` sits (top level, or in
    the moe / mla / mamba table); [] where that is not a ModelSpec place."""
    parents = [str(p) for p in loc[:-1]]
    if not parents:
        return sorted(ModelSpec.model_fields)
    if len(parents) == 1 and parents[0] in _NESTED:
        return sorted(_NESTED[parents[0]].model_fields)
    return []


def _short(value: Any, limit: int = 60) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Reader:
    """Typed, error-reporting access to one config dict."""

    def __init__(self, config: dict, label: str, model_type: str):
        self.config = config
        self.label = label  # how errors name this config
        self.model_type = model_type

    def get(self, *keys: str, default: Any = None) -> Any:
        """First present, non-null key among ``keys`` (aliases), else ``default``."""
        for key in keys:
            if self.config.get(key) is not None:
                return self.config[key]
        return default

    def integer(self, *keys: str, default: Optional[int] = None) -> int:
        value = self.get(*keys, default=default)
        if value is None:
            raise PlannerInputError(
                f"{self.label} ({self.model_type}): missing '{keys[0]}'"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not value.is_integer()
        ):
            raise PlannerInputError(
                f"{self.label}: '{keys[0]}' must be an integer (got {_short(value)})"
            )
        return int(value)

    def opt_integer(self, *keys: str) -> Optional[int]:
        return self.integer(*keys) if self.get(*keys) is not None else None

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default=default)
        if not isinstance(value, bool):
            raise PlannerInputError(
                f"{self.label}: '{key}' must be true or false (got {_short(value)})"
            )
        return value

    def dropout(self, *keys: str) -> bool:
        """Any of the dropout probabilities ``keys`` above 0 (absent or null = 0)."""
        return any(self.probability(k) > 0.0 for k in keys)

    def probability(self, key: str) -> float:
        value = self.get(key, default=0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise PlannerInputError(
                f"{self.label}: '{key}' must be a probability from 0 to 1 (got {_short(value)})"
            )
        return float(value)


def _llama_like(r: _Reader, family: str, *, tied_default: bool = False) -> dict:
    """Llama/Mistral/Qwen decoder: SwiGLU, RMSNorm, RoPE, GQA; no biases unless the config says."""
    spec = dict(
        family=family,
        num_layers=r.integer("num_hidden_layers"),
        hidden_size=r.integer("hidden_size"),
        num_attention_heads=r.integer("num_attention_heads"),
        num_kv_heads=r.opt_integer("num_key_value_heads"),
        head_dim=r.opt_integer("head_dim"),
        ffn_hidden_size=r.integer("intermediate_size"),
        gated_mlp=True,
        vocab_size=r.integer("vocab_size"),
        tied_embeddings=r.flag("tie_word_embeddings", tied_default),
        norm="rmsnorm",
        position_embedding="rope",
        max_position_embeddings=r.integer("max_position_embeddings", default=4096),
        dropout=r.dropout("attention_dropout", "hidden_dropout"),
    )
    spec.update(_sliding_window(r))
    # Llama's attention_bias covers q/k/v/o, mlp_bias the MLP; the schema has "all linears" or
    # "QKV only" (the o_proj bias, h per layer, is dropped in the latter case).
    if r.flag("attention_bias", False) and r.flag("mlp_bias", False):
        spec["linear_bias"] = True
    elif r.flag("attention_bias", False):
        spec["qkv_bias"] = True
    return spec


def _sliding_window(r: _Reader) -> dict:
    """``sliding_window`` and ``full_attention_every`` from ``sliding_window`` (keys a query
    attends, itself included: transformers masking_utils sliding_window_overlay) and
    ``layer_types`` ("sliding_attention" / "full_attention" per layer; absent: every layer
    windowed, as Mistral 7B v0.1). Qwen2's ``use_sliding_window: false`` (its released configs)
    turns the window off."""
    # Qwen2 / Qwen3 (and their MoE) configs switch the window with use_sliding_window, default
    # false, and window the layers from max_window_layers (default 28) up (transformers
    # Qwen2Config / Qwen3Config / Qwen3MoeConfig); Mistral, Mixtral and gpt-oss have no switch.
    qwen = r.model_type.lower().startswith("qwen")
    window = r.get("sliding_window")
    if window is None or r.get("use_sliding_window", default=not qwen) is False:
        return {}
    window = r.integer("sliding_window")
    types = r.get("layer_types")
    full_below = r.integer("max_window_layers", default=28) if qwen and types is None else 0
    if full_below > 0:
        # Without layer_types, layer i (0-based) is windowed where i >= max_window_layers, so
        # none when it covers every layer.
        if full_below >= r.integer("num_hidden_layers"):
            return {}
        raise PlannerInputError(f"{r.label}: use_sliding_window with max_window_layers="
                                f"{full_below} (full attention below it) is not modelled")
    if types is None:
        return {"sliding_window": window}
    if not isinstance(types, list) or not set(types) <= {"sliding_attention", "full_attention"}:
        raise PlannerInputError(f"{r.label}: 'layer_types' must list 'sliding_attention' / 'full_attention' "
                                f"per layer (got {_short(types)})")
    layers = r.integer("num_hidden_layers")
    if len(types) != layers:  # transformers configuration_utils layer_type_validation refuses it too
        raise PlannerInputError(f"{r.label}: 'layer_types' lists {len(types)} layers; num_hidden_layers is {layers} "
                                "(one entry per layer)")
    full = [i + 1 for i, t in enumerate(types) if t == "full_attention"]
    if not full:
        return {"sliding_window": window}
    if len(full) == len(types):
        return {}
    every = full[0]
    # Megatron-Core's integer --window-attn-skip-freq N: layers N, 2N, ... full (transformer/utils.py
    # is_layer_window_attention); other patterns are not modelled.
    if full != list(range(every, len(types) + 1, every)):
        raise PlannerInputError(f"{r.label}: 'layer_types' has full attention at layers {_short(full)} (1-based): "
                                "only every N-th layer (N, 2N, ...) is modelled")
    return {"sliding_window": window, "full_attention_every": every}


def _moe_qwen(r: _Reader, shared: bool) -> MoESpec:
    """Qwen2-MoE / Qwen3-MoE: every ``decoder_sparse_step``-th layer, except ``mlp_only_layers``."""
    dense_only = list(r.get("mlp_only_layers", default=[]) or [])
    num_dense = len(dense_only)
    if dense_only != list(range(num_dense)):
        raise PlannerInputError(
            f"{r.label}: mlp_only_layers={dense_only} is not supported "
            "(only a leading run of dense layers, e.g. [0, 1, 2])"
        )
    shared_ffn = r.opt_integer("shared_expert_intermediate_size") if shared else None
    return MoESpec(
        num_experts=r.integer("num_experts"),
        top_k=r.integer("num_experts_per_tok"),
        expert_ffn_hidden_size=r.integer("moe_intermediate_size"),
        # Qwen2-MoE has one shared expert of shared_expert_intermediate_size (its 1-wide sigmoid
        # gate, h weights a layer, is not counted).
        num_shared_experts=1 if shared_ffn else 0,
        shared_expert_ffn_hidden_size=shared_ffn,
        num_dense_layers=num_dense,
        moe_layer_frequency=r.integer("decoder_sparse_step", default=1),
    )


def _llama(r: _Reader) -> dict:
    return _llama_like(r, "llama")


def _mistral(r: _Reader) -> dict:
    return _llama_like(r, "mistral")


def _mixtral(r: _Reader) -> dict:
    spec = _llama_like(r, "mixtral")
    spec["moe"] = MoESpec(
        num_experts=r.integer("num_local_experts"),
        top_k=r.integer("num_experts_per_tok"),
        expert_ffn_hidden_size=spec["ffn_hidden_size"],
    )
    return spec


def _qwen2(r: _Reader) -> dict:
    spec = _llama_like(r, "qwen2")
    spec["qkv_bias"] = True  # Qwen2Attention: q/k/v carry biases, o_proj does not
    spec.pop("linear_bias", None)
    return spec


def _qwen2_moe(r: _Reader) -> dict:
    spec = _qwen2(r)
    spec["moe"] = _moe_qwen(r, shared=True)
    return spec


def _qwen3(r: _Reader) -> dict:
    # Qwen3 drops the QKV bias of Qwen2 (attention_bias=false) and adds q/k RMSNorm over head_dim
    # (2 x head_dim weights a layer, not counted).
    return _llama_like(r, "qwen3")


def _qwen3_moe(r: _Reader) -> dict:
    spec = _qwen3(r)
    spec["moe"] = _moe_qwen(r, shared=False)
    return spec


def _deepseek(r: _Reader) -> dict:
    """DeepSeek-V2/V3: MLA attention, leading dense layers, routed + shared experts.

    V3's multi-token-prediction layers (``num_nextn_predict_layers``) are training-time extra
    blocks: priced on the last stage (``ModelSpec.mtp_layers``, costmodel.mtp), kept out of the
    parameter counts (the 671B/37B exclude them)."""
    spec = _llama_like(r, "deepseek")
    spec["mtp_layers"] = r.integer("num_nextn_predict_layers", default=0)
    spec["num_kv_heads"] = None  # MLA: K/V come from a shared latent; heads = query heads
    spec["head_dim"] = None
    spec["mla"] = MLASpec(
        q_lora_rank=r.opt_integer("q_lora_rank"),
        kv_lora_rank=r.integer("kv_lora_rank"),
        qk_nope_head_dim=r.integer("qk_nope_head_dim"),
        qk_rope_head_dim=r.integer("qk_rope_head_dim"),
        v_head_dim=r.integer("v_head_dim"),
    )
    routed = r.opt_integer("n_routed_experts")
    if routed:
        expert_ffn = r.integer("moe_intermediate_size")
        n_shared = r.integer("n_shared_experts", default=0)
        # HF builds the shared experts as one MLP of n_shared * moe_intermediate_size: the same
        # weights and FLOPs as n_shared experts of moe_intermediate_size (the schema's default).
        spec["moe"] = MoESpec(
            num_experts=routed,
            top_k=r.integer("num_experts_per_tok"),
            expert_ffn_hidden_size=expert_ffn,
            num_shared_experts=n_shared,
            num_dense_layers=r.integer("first_k_dense_replace", default=0),
            moe_layer_frequency=r.integer("moe_layer_freq", default=1),
            router_groups=r.opt_integer("n_group"),
            router_group_topk=r.opt_integer("topk_group"),
        )
    return spec


def _nemotron_h(r: _Reader) -> dict:
    """Nemotron-H (transformers models/nemotron_h): a hybrid_override_pattern of Mamba-2 ('M'),
    attention-only ('*'), MLP-only ('-') and MoE ('E') layers; squared-ReLU MLP (relu2, not
    gated), RMSNorm, no position embedding, untied embeddings by default."""
    spec = _llama_like(r, "nemotron-h")
    spec["head_dim"] = r.opt_integer("head_dim", "attention_head_dim")
    spec["gated_mlp"] = str(r.get("mlp_hidden_act", default="relu2")) not in ("relu2", "squared_relu", "relu", "gelu")
    spec["position_embedding"] = "none"
    spec["hybrid_pattern"] = r.get("hybrid_override_pattern")
    if not isinstance(spec["hybrid_pattern"], str):
        raise PlannerInputError(f"{r.label} (nemotron_h): missing 'hybrid_override_pattern'")
    hidden = spec["hidden_size"]
    head_dim = r.integer("mamba_head_dim", default=64)
    spec["mamba"] = MambaSpec(
        state_dim=r.integer("ssm_state_size"),
        head_dim=head_dim,
        num_heads=r.integer("mamba_num_heads", default=r.integer("expand", default=2) * hidden // head_dim),
        num_groups=r.integer("n_groups", "mamba_n_groups", default=8),
        conv_kernel=r.integer("conv_kernel", default=4),
        chunk_size=r.integer("chunk_size", default=128),
    )
    if "E" in spec["hybrid_pattern"]:  # Nemotron 3: routed + shared experts in the 'E' layers
        shared = r.opt_integer("moe_shared_expert_intermediate_size")
        spec["moe"] = MoESpec(
            num_experts=r.integer("n_routed_experts"),
            top_k=r.integer("num_experts_per_tok"),
            expert_ffn_hidden_size=r.integer("moe_intermediate_size"),
            num_shared_experts=1 if shared else 0,
            shared_expert_ffn_hidden_size=shared,
        )
    return spec


def _gpt_oss(r: _Reader) -> dict:
    """gpt-oss (transformers models/gpt_oss): every layer MoE, experts gated with biases
    (gate_up_proj_bias, down_proj_bias), attention with biases (attention_bias) and sinks,
    explicit head_dim; the 128-key sliding window of alternate layers (layer_types)."""
    spec = _llama_like(r, "gpt-oss")
    if "sliding_window" in spec and r.get("layer_types") is None:
        # Without layer_types, GptOssConfig alternates them: layer i (0-based) sliding where
        # (i + 1) % 2, so 1-based layers 2, 4, ... full (transformers configuration_gpt_oss.py).
        spec["full_attention_every"] = 2
    spec["linear_bias"] = r.flag("attention_bias", True)
    spec.pop("qkv_bias", None)
    spec["glu_clamp"] = r.get("swiglu_limit")
    spec["moe"] = MoESpec(
        num_experts=r.integer("num_local_experts"),
        top_k=r.integer("num_experts_per_tok"),
        expert_ffn_hidden_size=spec["ffn_hidden_size"],
    )
    return spec


def _llama4_text(r: _Reader) -> dict:
    """Llama 4 text model (transformers models/llama4, Llama4TextConfig): routed experts of
    intermediate_size plus one shared expert, every interleave_moe_layer_step-th layer MoE, the
    others dense of intermediate_size_mlp; chunked attention and NoPE layers not modelled."""
    spec = _llama_like(r, "llama")
    spec["ffn_hidden_size"] = r.integer("intermediate_size_mlp", default=spec["ffn_hidden_size"])
    spec["moe"] = MoESpec(
        num_experts=r.integer("num_local_experts"),
        top_k=r.integer("num_experts_per_tok"),
        expert_ffn_hidden_size=r.integer("intermediate_size"),
        num_shared_experts=1,
        moe_layer_frequency=r.integer("interleave_moe_layer_step", default=1),
    )
    return spec


def _llama4(r: _Reader) -> dict:
    """Llama 4 (Llama4ForConditionalGeneration): the text model of ``text_config``."""
    text = r.get("text_config")
    if not isinstance(text, dict):
        raise PlannerInputError(f"{r.label} (llama4): missing 'text_config'")
    return _llama4_text(_Reader(text, r.label, "llama4_text"))


def _gpt2(r: _Reader) -> dict:
    """GPT-2: learned positions, LayerNorm, biases everywhere, 4h GeLU, LM head tied to wte."""
    hidden = r.integer("n_embd", "hidden_size")
    return dict(
        family="gpt2",
        num_layers=r.integer("n_layer", "num_hidden_layers"),
        hidden_size=hidden,
        num_attention_heads=r.integer("n_head", "num_attention_heads"),
        ffn_hidden_size=r.integer("n_inner", default=4 * hidden),
        gated_mlp=False,
        vocab_size=r.integer("vocab_size"),
        tied_embeddings=r.flag("tie_word_embeddings", True),
        norm="layernorm",
        position_embedding="learned",
        max_position_embeddings=r.integer("n_positions", "n_ctx", "max_position_embeddings"),
        linear_bias=True,
        dropout=r.dropout("resid_pdrop", "attn_pdrop", "embd_pdrop"),
    )


def _gpt_neox(r: _Reader) -> dict:
    """GPT-NeoX / Pythia: rotary (partial), LayerNorm, biases, 4h GeLU, untied by default."""
    hidden = r.integer("hidden_size")
    return dict(
        family="gpt-neox",
        num_layers=r.integer("num_hidden_layers"),
        hidden_size=hidden,
        num_attention_heads=r.integer("num_attention_heads"),
        ffn_hidden_size=r.integer("intermediate_size", default=4 * hidden),
        gated_mlp=False,
        vocab_size=r.integer("vocab_size"),
        tied_embeddings=r.flag("tie_word_embeddings", False),
        norm="layernorm",
        position_embedding="rope",
        max_position_embeddings=r.integer("max_position_embeddings", default=2048),
        linear_bias=r.flag("attention_bias", True),
        dropout=r.dropout("attention_dropout", "hidden_dropout"),
    )


def _opt(r: _Reader) -> dict:
    """OPT: learned positions with an offset of 2 (the table has max_position_embeddings + 2 rows,
    counted here by widening the table), LayerNorm, biases, ReLU MLP of ffn_dim, tied head.

    OPT-350m's word_embed_proj_dim != hidden_size (extra project_in/out matrices) is not modelled."""
    max_pos = r.integer("max_position_embeddings", default=2048)
    return dict(
        family="opt",
        num_layers=r.integer("num_hidden_layers"),
        hidden_size=r.integer("hidden_size"),
        num_attention_heads=r.integer("num_attention_heads"),
        ffn_hidden_size=r.integer("ffn_dim"),
        gated_mlp=False,
        vocab_size=r.integer("vocab_size"),
        tied_embeddings=r.flag("tie_word_embeddings", True),
        norm="layernorm",
        position_embedding="learned",
        max_position_embeddings=max_pos + 2,
        linear_bias=r.flag("enable_bias", True),
        dropout=r.dropout("dropout", "attention_dropout"),
        default_seq_len=min(max_pos, _DEFAULT_SEQ),
    )


def _bloom(r: _Reader) -> dict:
    """BLOOM: ALiBi, LayerNorm (+ one after the word embedding, which params.py adds for family
    "bloom"), biases, 4h GeLU, tied head."""
    hidden = r.integer("hidden_size", "n_embed")
    seq = r.integer("seq_length", default=2048)
    return dict(
        family="bloom",
        num_layers=r.integer("n_layer", "num_hidden_layers"),
        hidden_size=hidden,
        num_attention_heads=r.integer("n_head", "num_attention_heads"),
        ffn_hidden_size=r.integer("n_inner", default=4 * hidden),
        gated_mlp=False,
        vocab_size=r.integer("vocab_size"),
        tied_embeddings=r.flag("tie_word_embeddings", True),
        norm="layernorm",
        position_embedding="alibi",
        max_position_embeddings=seq,
        linear_bias=True,
        dropout=r.dropout("hidden_dropout", "attention_dropout"),
        default_seq_len=min(seq, _DEFAULT_SEQ),
    )


def _mpt(r: _Reader) -> dict:
    """MPT (mosaicml/mpt-*): ALiBi or learned positions, optional biases (``no_bias``), 4h GeLU
    (or GLU), tied head. A bias-free LayerNorm has the parameters of an RMSNorm, which is how the
    schema (where "layernorm" carries a bias) expresses it."""
    attn = r.get("attn_config", default={}) or {}
    ffn_cfg = r.get("ffn_config", default={}) or {}
    hidden = r.integer("d_model")
    heads = r.integer("n_heads")
    no_bias = r.flag("no_bias", False)
    if attn.get("alibi"):
        position = "alibi"
    elif attn.get("rope"):
        position = "rope"
    elif r.flag("learned_pos_emb", True):
        position = "learned"
    else:
        position = "none"
    ffn = ffn_cfg.get("ffn_hidden_size") or int(r.get("expansion_ratio", default=4) * hidden)
    kv = attn.get("kv_n_heads") if attn.get("attn_type") in ("grouped_query_attention", "multiquery_attention") else None
    if attn.get("attn_type") == "multiquery_attention":
        kv = 1
    seq = r.integer("max_seq_len", default=2048)
    return dict(
        family="mpt",
        num_layers=r.integer("n_layers"),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv,
        ffn_hidden_size=int(ffn),
        gated_mlp=str(ffn_cfg.get("ffn_type", "mptmlp")).endswith("glu"),
        vocab_size=r.integer("vocab_size"),
        tied_embeddings=r.flag("tie_word_embeddings", True),
        norm="rmsnorm" if no_bias or "rms" in str(r.get("norm_type", default="")) else "layernorm",
        position_embedding=position,
        max_position_embeddings=seq,
        linear_bias=not no_bias,
        dropout=r.dropout("resid_pdrop", "emb_pdrop") or float(attn.get("attn_pdrop", 0) or 0) > 0,
        default_seq_len=min(seq, _DEFAULT_SEQ),
    )


_CONVERTERS: dict[str, Callable[[_Reader], dict]] = {
    "llama": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "qwen2_moe": _qwen2_moe,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "opt": _opt,
    "bloom": _bloom,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "mpt": _mpt,
    "nemotron_h": _nemotron_h,
    "gpt_oss": _gpt_oss,
    "llama4": _llama4,
    "llama4_text": _llama4_text,
    "kimi_k2": _deepseek,  # Kimi K2 ships DeepseekV3ForCausalLM shapes (MLA, 384 experts, 1 dense layer)
}

SUPPORTED_MODEL_TYPES = tuple(sorted(_CONVERTERS))


def is_hf_config(data: Any) -> bool:
    """A Hugging Face config.json (vs a planner model file): it has model_type or architectures."""
    return isinstance(data, dict) and ("model_type" in data or "architectures" in data)


def model_from_hf_config(config: dict, name: str) -> ModelSpec:
    """ModelSpec from a parsed Hugging Face ``config.json`` (raises PlannerInputError, one line)."""
    return hf_config_to_model(config, name, label=f"Hugging Face config '{name}'")


def hf_config_to_model(config: dict, name: str, label: str) -> ModelSpec:
    """``model_from_hf_config`` with ``label`` (e.g. the file path) leading every error message."""
    if not isinstance(config, dict):
        raise PlannerInputError(f"{label}: expected a JSON object")
    model_type = config.get("model_type")
    if not model_type:
        archs = config.get("architectures") or []
        model_type = next((_ARCHITECTURES[a] for a in archs if a in _ARCHITECTURES), None)
        if model_type is None:
            raise PlannerInputError(
                f"{label}: no model_type and unsupported architectures "
                f"{_short(archs)} (supported model_type: {', '.join(SUPPORTED_MODEL_TYPES)})"
            )
    converter = _CONVERTERS.get(str(model_type).lower())
    if converter is None:
        raise PlannerInputError(
            f"{label}: unsupported model_type '{model_type}' "
            f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
        )
    reader = _Reader(config, label, str(model_type))
    try:
        spec = converter(reader)
        ctx = spec["max_position_embeddings"]
        spec.setdefault("default_seq_len", min(ctx, _DEFAULT_SEQ))
        spec.setdefault("default_tokens_per_batch", _DEFAULT_TOKENS)
        src = config.get("_name_or_path") or name
        return ModelSpec(
            name=name,
            source=f"Hugging Face config.json ({src}, model_type {model_type})",
            **spec,
        )
    except ValidationError as err:
        raise PlannerInputError(f"{label}: {_in_config_words(condense_validation_error(err), config)}") from None
    except (TypeError, ValueError) as err:
        if isinstance(err, PlannerInputError):
            raise
        raise PlannerInputError(f"{label}: {_in_config_words(' '.join(str(err).split()), config)}") from None


_CONFIG_KEYS = {
    "num_layers": ("num_hidden_layers", "n_layer"),
    "hidden_size": ("hidden_size", "n_embd"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "num_kv_heads": ("num_key_value_heads",),
    "ffn_hidden_size": ("intermediate_size", "n_inner"),
    "vocab_size": ("vocab_size",),
    "max_position_embeddings": ("max_position_embeddings", "n_positions"),
    "default_seq_len": ("max_position_embeddings", "n_positions"),
    "head_dim": ("head_dim",),
    "sliding_window": ("sliding_window",),
}
"""planner's field -> the config.json keys it is read from (the first present is named)."""


def _in_config_words(message: str, config: dict) -> str:
    """An error about planner's fields, in the config.json's own keys ('num_kv_heads=5' ->
    'num_key_value_heads=5'); a field read from none of them stays as it is."""
    import re

    for field, keys in _CONFIG_KEYS.items():
        key = next((k for k in keys if k in config), None)
        if key is not None and key != field:
            message = re.sub(rf"\b{field}\b", key, message)
    return "; ".join(dict.fromkeys(message.split("; ")))  # two fields read from one key: said once
