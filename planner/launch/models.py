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
_SIZES = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "kv_heads", "head_size")
"""The shape proper (with the vocabulary, the experts and MLA): what ranks the closest preset
before the switches (gated MLP, norm, biases, tied embeddings, dropout, ...) do."""


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
    # The closest preset is the nearest by shape, then by switches: a file with Llama 3 8B's sizes
    # and Megatron's default biases / tied embeddings is llama3-8b with those switches off, not a
    # GPT preset of other sizes that happens to share more defaults.
    ranked = sorted(list_models(), key=lambda m: (_shape_distance(spec, m, vocab, vocab_candidates),
                                                  len(differences(spec, m, clamp))))
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
    note = (f"built from the file's shape ({_summary(spec)}); no catalog preset matches (closest {closest.name}: "
            f"{_closest_text(spec, closest, clamp, vocab, vocab_candidates)})")
    return spec, note + (f"; {vocab_note}" if vocab_note else "")


def _same_vocab(m, vocab, candidates) -> bool:
    return vocab is None or m.vocab_size == vocab or m.vocab_size in candidates


def _shape_distance(spec, m, vocab, candidates) -> tuple:
    """(how many shape fields differ, how far apart they are): the sizes, the vocabulary, the
    experts and MLA; the switches are left to ``differences``."""
    import math

    sizes = [k for k in _SIZES if getattr(spec, k) != getattr(m, k)]
    count = len(sizes) + (not _same_vocab(m, vocab, candidates)) + (_moe_key(spec.moe) != _moe_key(m.moe)) \
        + (_mla_key(spec.mla) != _mla_key(m.mla))
    gap = sum(abs(math.log(getattr(spec, k) / getattr(m, k))) for k in sizes if getattr(spec, k) and getattr(m, k))
    return count, gap


def _closest_text(spec, closest, clamp: bool, vocab, candidates) -> str:
    """The closest preset's differences: the shape's first, then every switch that differs."""
    diff = differences(spec, closest, clamp)
    shape = [d for d in diff if d.split()[0] in _SIZES or d.startswith(("experts", "multi-latent"))]
    if not _same_vocab(closest, vocab, candidates):
        shape.append(f"vocab_size {vocab} vs {closest.vocab_size}")
    switches = [d for d in diff if d not in shape]
    if not shape:
        return f"the same shape; differs in {', '.join(switches)}" if switches else "the same shape"
    return ", ".join(shape[:4]) + (f"; and in {', '.join(switches[:4])}" if switches else "") \
        + (f" and {len(switches) - 4} more" if len(switches) > 4 else "")


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
