"""How layers are split over pipeline stages (even, or uneven first/last stages).

Megatron-LM expresses uneven pipelines with ``--decoder-first-pipeline-num-layers`` and
``--decoder-last-pipeline-num-layers``; the middle stages share the rest equally. Llama 3 405B
(126 layers) trained at PP 16 this way (Llama 3 paper, Sec. 3.3.2: fewer layers on the first and
last stages, which also hold the embedding and the LM head/loss).
"""

from __future__ import annotations

import numpy as np

from hardware_catalog.limits import MAX_LAYERS


def stage_layer_split(num_layers, pp, first=0, last=0):
    """Layers on the (first, middle, last) pipeline stages, and whether the split is valid.

    Arguments broadcast as numpy arrays. ``first``/``last`` = 0 asks for the planner's split:
    even when ``num_layers % pp == 0``; otherwise every middle stage gets ceil(L/pp) layers and
    the first and last stages share what is left (the first gets the smaller half, since it
    also runs the embedding while the last runs the LM head and loss, which cost more).
    With ``pp == 1`` all three are ``num_layers``; with ``pp == 2`` there is no middle stage
    (its value is then reported equal to ``last``).
    """
    L = np.asarray(num_layers, dtype=np.int64)
    pp = np.asarray(pp, dtype=np.int64)
    first = np.asarray(first, dtype=np.int64)
    last = np.asarray(last, dtype=np.int64)
    L, pp, first, last = np.broadcast_arrays(L, pp, first, last)

    # Planner's split.
    even = L % pp == 0
    middle_auto = -(-L // pp)
    rest = L - np.maximum(pp - 2, 0) * middle_auto
    first_auto = np.where(even, L // pp, rest // 2)
    last_auto = np.where(even, L // pp, rest - rest // 2)

    user = (first > 0) | (last > 0)
    # User's split: missing side defaults to the even share of the remainder.
    f_user = np.where(first > 0, first, 0)
    l_user = np.where(last > 0, last, 0)
    middles = np.maximum(pp - 2, 1)
    rem = L - f_user - l_user
    # When only one side is given, the other side gets a middle-sized share.
    only_first = (first > 0) & (last == 0)
    only_last = (last > 0) & (first == 0)
    share = np.where(only_first | only_last, rem // np.maximum(pp - 1, 1), 0)
    f_user = np.where(only_last, share, f_user)
    l_user = np.where(only_first, share, l_user)
    rem = L - f_user - l_user
    middle_user = np.where(pp > 2, rem // middles, l_user)

    first_out = np.where(user, f_user, first_auto)
    last_out = np.where(user, l_user, last_auto)
    middle_out = np.where(user, middle_user, np.where(pp > 2, middle_auto, last_auto))

    total = first_out + last_out + np.maximum(pp - 2, 0) * middle_out
    single = pp == 1
    first_out = np.where(single, L, first_out)
    last_out = np.where(single, L, last_out)
    middle_out = np.where(single, L, middle_out)
    total = np.where(single, L, total)
    valid = (total == L) & (first_out >= 1) & (last_out >= 1) & (middle_out >= 1) & (pp <= L)
    return first_out, middle_out, last_out, valid


def heaviest_rank_windowed_share(model, batch):
    """Per layout, the share of windowed layers on the pipeline rank that holds the most
    full-attention layers, the rank that bounds the pipeline; None for a model whose layers do
    not mix windowed and full attention.

    Megatron-Core numbers layers 1..L across the whole model and makes layers N, 2N, ... full
    (transformer/utils.py is_layer_window_attention with --window-attn-skip-freq N). A rank holds
    its stage's layers in order, or under interleaving its model chunks r, r + pp, r + 2pp, ...
    (equal chunks of L / (pp · vpp) layers, Narayanan et al. 2021 Sec. 2.2.2). gpt-oss-120b (full
    every 2nd of 36 layers) at pp 4: stages of 9 layers hold 4, 5, 4, 5 full ones, so 4/9 of the
    heaviest rank's layers are windowed, not 1/2; at pp 4 vpp 3 the chunks of 3 layers hold 1, 2,
    1, 2, ... full ones, and rank 1 (chunks 1, 5, 9) has 6 of 9. Uneven first/last stages under
    interleaving are taken as contiguous stages."""
    every = getattr(model, "full_attention_every", None)
    if getattr(model, "sliding_window", None) is None or every is None:
        return None
    num_layers = model.num_layers
    first, middle, last, valid = stage_layer_split(num_layers, batch.pp, batch.pp_first_layers, batch.pp_last_layers)
    pp, vpp = np.broadcast_arrays(np.asarray(batch.pp, dtype=np.int64), np.asarray(batch.vpp, dtype=np.int64))
    # One int64 per (pp, vpp, first, last): np.unique on one column is far cheaper than on rows, and
    # the middle stages and validity follow from those four. vpp and the stage layer counts are at
    # most MAX_LAYERS (the options' bounds); a pp above it holds fewer than one layer a stage (invalid),
    # so it is clipped there, in a key of its own.
    span = MAX_LAYERS + 2
    key = ((np.minimum(pp, span - 1) * span + vpp) * span + first) * span + last
    unique, index, inverse = np.unique(key, return_index=True, return_inverse=True)
    full = (np.arange(1, num_layers + 1) % every) == 0
    shares = np.full(len(unique), model.windowed_layers / num_layers)
    for i, j in enumerate(index):
        pp_i, vpp_i, f, m, l, ok = pp[j], vpp[j], first[j], middle[j], last[j], valid[j]
        if not ok or pp_i < 2:
            continue  # one stage holds every layer; an invalid split is refused by its rule
        if vpp_i > 1 and f == m == l and num_layers % (pp_i * vpp_i) == 0:
            owner = (np.arange(num_layers) // (num_layers // (pp_i * vpp_i))) % pp_i
        else:
            owner = np.repeat(np.arange(pp_i), [f] + [m] * (pp_i - 2) + [l])
        held = np.bincount(owner, minlength=pp_i)
        full_held = np.bincount(owner, weights=full, minlength=pp_i)
        shares[i] = 1.0 - float(np.max(full_held / np.maximum(held, 1)))
    return shares[np.asarray(inverse).reshape(-1)]


def vpp_divides_stages(first, middle, last, vpp) -> np.ndarray:
    """Interleaving splits each stage into ``vpp`` model chunks.

    Middle stages need equal chunks (layers divisible by vpp). The first and last stages may
    hold fewer layers, as Megatron allows with --account-for-embedding-in-pipeline-split /
    --account-for-loss-in-pipeline-split or an explicit --pipeline-model-parallel-layout (the
    embedding and the loss count as chunk members there): they must not exceed a middle stage
    and need at least vpp - 1 layers (one chunk may hold only the embedding or the loss).
    """
    vpp = np.asarray(vpp)
    return (middle % vpp == 0) & (first >= vpp - 1) & (last >= vpp - 1) & (first <= middle) & (last <= middle)



def partial_recompute_per_chunk(num_layers, pp, vpp, first, last, recompute_layers, recompute_share=0, middle=None):
    """Layers per virtual chunk that partial full recompute covers, and whether the layout is
    distinct from recomputing every layer.

    Megatron's block method takes --recompute-num-layers per model chunk, so a
    ``recompute_share`` of q quarters becomes round(q/4 x chunk) layers (at least 1) of a middle
    stage's chunk; ``recompute_layers`` is per stage and is divided by vpp. Both 0: all layers.
    ``distinct`` is False where a share rounds to the same layers as a larger one. ``middle``:
    the middle stage's layer count when the caller already has it.
    """
    if middle is None:
        _, middle, _, _ = stage_layer_split(num_layers, pp, first, last)
    vpp = np.maximum(np.asarray(vpp), 1)
    rl = np.asarray(recompute_layers)
    q = np.asarray(recompute_share)
    chunk = np.maximum(middle // vpp, 1)
    from_share = np.clip(np.round(q / 4.0 * chunk), 1, chunk)
    from_layers = np.clip(rl // vpp, 1, chunk)
    per_chunk = np.where(q > 0, from_share, np.where(rl > 0, from_layers, chunk)).astype(np.int64)
    # A share is its own layout only if it covers fewer layers than the next larger share
    # (q + 1 quarters; 4 quarters = every layer).
    larger = np.where(q + 1 >= 4, chunk, np.clip(np.round((q + 1) / 4.0 * chunk), 1, chunk))
    every = (rl == 0) & (q == 0)
    distinct = every | ((per_chunk < chunk) & ((rl > 0) | (per_chunk < larger)))
    return per_chunk, distinct


def stage_layer_mix(model, counts, n_layers, first_stage: bool):
    """(dense layers, MoE layers) on a stage of ``n_layers``; leading dense layers sit on the
    first stage (DeepSeek's first_k_dense_replace), the rest keep the model's MoE fraction."""
    n = n_layers.astype(np.float64)
    if model.moe is None:
        return n, np.zeros_like(n)
    lead = model.moe.num_dense_layers
    rest_layers = model.num_layers - lead
    moe_fraction = counts.num_moe_layers / rest_layers if rest_layers else 0.0
    lead_here = np.minimum(n, lead) if first_stage else np.zeros_like(n)
    moe = (n - lead_here) * moe_fraction
    return n - moe, moe


def argmax3(a, b, c):
    """Index of the largest of three arrays (the first on ties, like np.argmax), elementwise;
    cheaper than np.argmax over a stacked (3, n) array."""
    return np.where((a >= b) & (a >= c), 0, np.where(b >= c, 1, 2))


def select3(index, a, b, c):
    """Elementwise a, b or c by ``index`` in {0, 1, 2} (np.choose without its overhead)."""
    return np.where(index == 0, a, np.where(index == 1, b, c))


class StageSplit:
    """The three kinds of pipeline stage of a chunk of layouts: the first (embedding; with
    pp = 1 also the last), the middle ones (pp - 2 of them, all alike) and the last (LM head)."""

    __slots__ = ("first", "middle", "last", "single", "has_middle")

    def __init__(self, model, batch, pp):
        # Layers on the first, a middle and the last stage (int arrays).
        self.first, self.middle, self.last, _ = stage_layer_split(
            model.num_layers, batch.pp, batch.pp_first_layers, batch.pp_last_layers
        )
        # pp = 1: the first stage is also the last (embedding and head included).
        self.single = pp == 1
        # Some stage is neither first nor last.
        self.has_middle = pp > 2

    def present(self, first, middle, last):
        """The three per-stage values with 0 for stage kinds a layout lacks (no middle stage
        below pp = 3, no separate last stage at pp = 1), for taking a maximum over stages."""
        return first, np.where(self.has_middle, middle, 0.0), np.where(self.single, 0.0, last)
