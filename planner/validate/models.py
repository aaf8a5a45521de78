"""A runs-file row's model: a preset (any common spelling), a model or HF config.json file, or
shape fields over an architecture family.

Shape fields need what they do not carry (gated MLP or not, norms, biases, positions, tied
embeddings, vocab) from a preset of the same architecture: the row's ``model.family``
(``FAMILIES``), or for the reference set the family its name and source imply
(``_FAMILY_BASE``), or the preset its name resolves to. The row's shape fields then override it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from hardware_catalog.errors import PlannerInputError

# Reference-set names: (source key or "", model-name prefix, preset).
_FAMILY_BASE = (
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
            "llama3.1-405b": "llama3-405b", "gpt-oss-120b": "gpt-oss-120b", "gpt-oss-20b": "gpt-oss-20b"}

FAMILIES = {
    "llama": "llama3-8b",
    "gpt": "megatron-gpt-1.7b",
    "mcore-gpt": "mcore-gpt-1.7b",
    "gpt3": "nemo-gpt3-5b",
    "nemotron": "nemotron-8b",
    "mpt": "mpt-7b",
    "bloom": "bloom-176b",
    "mixtral": "mixtral-8x7b",
    "qwen3-moe": "qwen3-30b-a3b",
    "deepseek-v3": "deepseek-v3",
    "nemotron-h": "nemotron-h-8b",
    "gpt-oss": "gpt-oss-120b",
}
"""``model.family`` -> the preset whose architecture (not shape) a shaped row takes
(``family_description`` says what each means)."""
_SHAPE = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size")
_MOE_FIELDS = ("num_experts", "top_k", "expert_ffn_hidden_size", "num_shared_experts", "shared_expert_ffn_hidden_size",
               "num_dense_layers", "moe_layer_frequency", "router_groups", "router_group_topk")
_MOE_HF_NAMES = {"num_local_experts": "num_experts", "n_routed_experts": "num_experts", "num_experts_per_tok": "top_k",
                 "moe_intermediate_size": "expert_ffn_hidden_size", "n_shared_experts": "num_shared_experts"}
"""The Hugging Face config.json names of the MoE fields (Mixtral, Qwen-MoE, DeepSeek), as
``hardware_catalog.hf_config`` reads them."""


def _moe_fields(moe: dict) -> dict:
    """A row's model.moe with HF names read as ours; a key that is neither is refused (it used to
    be dropped, leaving the family's expert count in its place)."""
    import difflib

    fields = {}
    for key, value in moe.items():
        name = _MOE_HF_NAMES.get(key, key)
        if name not in _MOE_FIELDS:
            close = difflib.get_close_matches(key, [*_MOE_FIELDS, *_MOE_HF_NAMES], n=1, cutoff=0.6)
            hint = f"did you mean model.moe.{close[0]}? " if close else ""
            raise PlannerInputError(f"model.moe.{key}: not a MoE field ({hint}allowed: {', '.join(_MOE_FIELDS)}, "
                                    f"or the config.json names {', '.join(_MOE_HF_NAMES)})")
        if value is not None:
            fields[name] = value
    return fields


def family_description(family: str) -> str:
    """What a family means, read off its preset: 'gated MLP, rmsnorm, rope positions, untied
    embeddings (as llama3-8b)'."""
    from hardware_catalog import get_model

    m = get_model(FAMILIES[family])
    parts = ["gated MLP" if m.gated_mlp else "plain MLP", m.norm, f"{m.position_embedding} positions",
             "tied embeddings" if m.tied_embeddings else "untied embeddings"]
    parts += [p for p, on in (("biases", m.linear_bias), ("dropout", m.dropout), ("MoE", m.moe), ("MLA", m.mla)) if on]
    if m.sliding_window is not None:
        from planner.frameworks import window_text

        parts.append(window_text(m))
    if m.glu_clamp is not None:
        parts.append(f"GLU clamped at {m.glu_clamp:g}")
    return f"{', '.join(parts)} (as {m.name})"


def _file_model(text: str, base_dir: Optional[Path]):
    from hardware_catalog import get_model

    path = Path(text).expanduser()
    if base_dir is not None and not path.is_absolute() and (base_dir / path).exists():
        path = base_dir / path
    return get_model(path if path.exists() else text)


def _family_base(m, source_key: str):
    """(preset the shaped row builds on, whether the reference-set semantics apply)."""
    from hardware_catalog import get_model
    from hardware_catalog.models import match_model

    if m.family:
        family = m.family.strip().lower()
        if family not in FAMILIES:
            raise PlannerInputError(f"model.family '{m.family}': allowed {', '.join(FAMILIES)}")
        return get_model(FAMILIES[family]), True
    key = re.sub(r"[^a-z0-9.-]", "", (m.name or "").split(" (")[0].lower())
    for src, prefix, preset in _FAMILY_BASE:
        if key.startswith(prefix) and (not src or src == source_key):
            return get_model(preset), True
    preset = match_model(m.name) if m.name else None
    if preset is None:
        raise PlannerInputError(f"model '{m.name}': no preset and no architecture family "
                                f"(give model.family: {', '.join(FAMILIES)})")
    return preset, False


def _shaped(m, source_key: str):
    """A model from shape fields over a family base."""
    from hardware_catalog.schema import MoESpec

    name = (m.name or "custom").split(" (")[0]
    key = re.sub(r"[^a-z0-9.-]", "", name.lower())
    if key in _PRESETS:
        from hardware_catalog import get_model

        return get_model(_PRESETS[key])
    base, whole = _family_base(m, source_key)
    missing = [f for f in ("hidden_size", "num_attention_heads") if getattr(m, f) is None]
    if missing:
        raise PlannerInputError(f"model '{name}': shape fields need {' and '.join('model.' + f for f in missing)}")
    seq = m.seq_length or base.default_seq_len
    update = dict(name=key or "custom", aliases=[], head_dim=m.head_dim, params_published=None, default_seq_len=seq,
                  max_position_embeddings=max(seq, base.max_position_embeddings))
    if whole:  # the reference format's semantics: a shape is given whole (MHA, FFN 4h unless stated)
        update.update(num_layers=m.num_layers, hidden_size=m.hidden_size, num_attention_heads=m.num_attention_heads,
                      num_kv_heads=m.num_kv_heads or m.num_attention_heads, ffn_hidden_size=m.ffn_hidden_size or 4 * m.hidden_size)
    else:  # over a preset of the same name: only what the row gives
        update.update({f: getattr(m, f) for f in _SHAPE[:5] if getattr(m, f) is not None})
    if m.vocab_size:
        update["vocab_size"] = m.vocab_size
    if m.hybrid_pattern is not None:  # costmodel.ssm: one symbol a layer; the layers follow it
        update["hybrid_pattern"] = m.hybrid_pattern
        update["num_layers"] = len(m.hybrid_pattern.replace("|", ""))
    if m.sliding_window is not None:  # costmodel.flops.attention_keys_parts
        update["sliding_window"] = m.sliding_window
        update["full_attention_every"] = m.full_attention_every
    elif m.full_attention_every is not None:
        raise PlannerInputError(f"model.full_attention_every={m.full_attention_every} needs model.sliding_window "
                                "(the window the other layers attend)")
    if m.glu_clamp is not None:  # costmodel.moe.expert_epilogues
        update["glu_clamp"] = m.glu_clamp
    if m.mamba:
        update["mamba"] = {**(base.mamba.model_dump() if base.mamba else {}), **{k: v for k, v in m.mamba.items() if v is not None}}
    if m.moe:
        fields = _moe_fields(m.moe)
        try:
            update["moe"] = MoESpec(**{**(base.moe.model_dump() if base.moe else {}), **fields})
        except ValueError as err:
            raise PlannerInputError(f"model.moe: {_said(err)}") from None
    try:
        return base.model_validate({**base.model_dump(), **update})
    except ValueError as err:
        raise PlannerInputError(f"model '{name}': {_said(err)}") from None


def _said(err: ValueError) -> str:
    """A model check's error in one line: the field, what is wrong and the value, not pydantic's
    dump of the whole model ('1 validation error for ModelSpec ... input_value={...')."""
    from pydantic import ValidationError

    from planner.validate.schema import validation_message

    if isinstance(err, ValidationError):
        text = validation_message(err)
        return text if len(text) <= 300 else text[:297] + "..."
    return " ".join(str(err).split())[:300]


def map_model(row, base_dir: Optional[Path] = None, with_origin: bool = False):
    """The row's model (``row``: a ``RunRow`` or a runs-file dict). ``with_origin``: also say
    whether it is a preset or a file as is (its default sequence length then applies)."""
    from hardware_catalog.models import get_model
    from planner.validate.schema import RunRow, parse_row

    row = row if isinstance(row, RunRow) else parse_row(row)
    m = row.model
    try:
        if isinstance(m, str):
            spec, whole = _file_model(m, base_dir), True
        elif m.hf_config:
            spec, whole = _file_model(m.hf_config, base_dir), True
        elif not m.shaped():
            if not m.name:
                raise PlannerInputError("model: give a name, an hf_config or the shape fields")
            spec, whole = get_model(m.name), True
        else:
            spec, whole = _shaped(m, row.source_key() if row.source is not None else ""), False
    except PlannerInputError as err:
        raise PlannerInputError(err if str(err).startswith("model") else f"model: {err}") from None
    return (spec, whole) if with_origin else spec


def model_notes(row, model, from_preset: bool) -> list[str]:
    """How a row's model was read, for rows outside the reference set (which states it)."""
    if row.reference is not None:
        return []
    m = row.model
    named = m if isinstance(m, str) else (m.hf_config or m.name)
    if from_preset:
        return [f"model {model.name} (from '{named}')"] if named != model.name else []
    family = m.family or "the preset of its name"
    moe = model.moe
    experts = (f", MoE {moe.num_experts} experts top-{moe.top_k} (expert FFN {moe.expert_ffn_hidden_size}"
               f"{f', {moe.num_shared_experts} shared' if moe.num_shared_experts else ''})") if moe else ""
    return [f"model from the row's shape over {family}: {model.num_layers} layers, hidden {model.hidden_size}, "
            f"{model.num_attention_heads} heads ({model.kv_heads} KV), FFN {model.ffn_hidden_size}{experts}"]
