"""A model from the shape a launch file states: a catalog preset when one matches, else a ModelSpec.

``shape_model(fields, vocab_candidates, name)`` takes ModelSpec fields as a launch file gives them
(Megatron flags, a NeMo / Megatron-Bridge model config) and returns the catalog preset whose
architecture equals them (vocabulary up to Megatron's padding), or a new ``ModelSpec`` with the
closest preset named in the note.
"""

from __future__ import annotations

from hardware_catalog.errors import PlannerInputError

_SHAPE = ("num_layers", "hidden_size", "num_attention_heads", "kv_heads", "head_size", "ffn_hidden_size",
          "gated_mlp", "norm", "position_embedding", "tied_embeddings", "linear_bias", "qkv_bias", "dropout",
          "mtp_layers", "sliding_window", "full_attention_every")
"""What must agree for a file's model to be a catalog preset (ModelSpec attributes)."""


def _moe_key(moe):
    if moe is None:
        return None
    shared = moe.num_shared_experts * (moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size)
    return (moe.num_experts, moe.top_k, moe.expert_ffn_hidden_size, shared, moe.num_dense_layers,
            moe.moe_layer_frequency)


def _mla_key(mla):
    return None if mla is None else (mla.q_lora_rank, mla.kv_lora_rank, mla.qk_nope_head_dim, mla.qk_rope_head_dim,
                                     mla.v_head_dim)


def differences(a, b, clamp: bool = True) -> list[str]:
    """Shape fields where ModelSpecs ``a`` and ``b`` differ (vocabulary not included); ``clamp``:
    compare ``glu_clamp`` too (False where ``a`` comes from a file that cannot state one)."""
    keys = _SHAPE + (("glu_clamp",) if clamp else ())
    out = [f"{k} {getattr(a, k)} vs {getattr(b, k)}" for k in keys if getattr(a, k) != getattr(b, k)]
    if _moe_key(a.moe) != _moe_key(b.moe):
        out.append(f"experts {_moe_key(a.moe)} vs {_moe_key(b.moe)}")
    if _mla_key(a.mla) != _mla_key(b.mla):
        out.append("multi-latent attention")
    return out


def shape_model(fields: dict, vocab_candidates: tuple, name: str, vocab_note: str = ""):
    """(ModelSpec, one-line note). ``fields``: ModelSpec fields (``vocab_size`` = what the framework
    trains with, e.g. Megatron's padded vocabulary; None when the file gives none).
    ``vocab_candidates``: vocabulary sizes the file may mean (the tokenizer's, before EOD and
    padding) that a preset may carry."""
    from hardware_catalog import list_models
    from hardware_catalog.schema import ModelSpec
    from pydantic import ValidationError

    probe = dict(fields)
    vocab = probe.get("vocab_size")
    probe["vocab_size"] = vocab or 1
    try:
        spec = ModelSpec(name=name, **probe)
    except ValidationError as err:
        from hardware_catalog.hf_config import condense_validation_error

        raise PlannerInputError(f"the model shape in the launch file is not valid: {condense_validation_error(err)}") from None
    clamp = "glu_clamp" in fields  # unstated: a matching preset brings its own (clamp_fields)
    ranked = sorted(list_models(), key=lambda m: len(differences(spec, m, clamp)))
    same = [m for m in ranked if not differences(spec, m, clamp)]
    for preset in same:
        if vocab is not None and preset.vocab_size == vocab or preset.vocab_size in vocab_candidates:
            extra = ""
            if vocab is not None and preset.vocab_size != vocab:
                extra = f"; priced with its vocabulary {preset.vocab_size}: {vocab_note}"
            return preset, f"catalog preset {preset.name} (the file's shape matches it{extra})"
    if vocab is None:
        if len(same) == 1:
            return same[0], (f"catalog preset {same[0].name} (the file's shape matches it; the file gives no "
                             f"vocabulary size, the preset's {same[0].vocab_size} is used)")
        raise PlannerInputError("the launch file gives no vocabulary size (its tokenizer reads it from files) and "
                                "its shape matches no single catalog preset: give --model NAME or a model file")
    closest = ranked[0]
    diff = differences(spec, closest, clamp) or [f"vocab_size {vocab} vs {closest.vocab_size}"]
    note = (f"built from the file's shape ({_summary(spec)}); no catalog preset matches (closest {closest.name}: "
            f"{', '.join(diff[:3])})")
    return spec, note + (f"; {vocab_note}" if vocab_note else "")


def _summary(m) -> str:
    parts = [f"{m.num_layers} layers", f"hidden {m.hidden_size}", f"ffn {m.ffn_hidden_size}",
             f"{m.num_attention_heads} heads"]
    if m.kv_heads != m.num_attention_heads:
        parts.append(f"{m.kv_heads} kv heads")
    if m.moe is not None:
        parts.append(f"{m.moe.num_experts} experts top-{m.moe.top_k}")
    if m.sliding_window is not None:  # as every reader and exporter says it
        from planner.frameworks import window_text

        parts.append(window_text(m))
    parts.append(f"vocab {m.vocab_size}")
    return ", ".join(parts)
