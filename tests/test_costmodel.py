"""Cost model: hand-derived values and properties."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from costmodel import Layout, LayoutBatch, evaluate, evaluate_batch
from costmodel.flops import model_flops_per_token
from costmodel.memory import (
    activation_bytes_per_token,
    full_recompute_bytes_per_token,
    inflight_microbatches,
    model_state_bytes,
)
from costmodel.params import count_params
from costmodel.pipeline import stage_layer_split
from costmodel.placement import group_span
from hardware_catalog import get_cluster, get_gpu, get_model
from hardware_catalog.schema import ModelSpec

GPT = ModelSpec(  # Korthikanti et al. 2022 GPT layer: GeLU 4h MLP, MHA, dropout
    name="gpt-test", num_layers=24, hidden_size=2048, num_attention_heads=16, ffn_hidden_size=8192,
    gated_mlp=False, vocab_size=51200, tied_embeddings=True, norm="layernorm",
    position_embedding="learned", max_position_embeddings=2048, linear_bias=True, dropout=True,
    default_seq_len=2048,
)
LLAMA_405B = ModelSpec(
    name="llama3-405b-test", num_layers=126, hidden_size=16384, num_attention_heads=128, num_kv_heads=8,
    ffn_hidden_size=53248, vocab_size=128256, default_seq_len=8192,
)


def test_llama3_405b_flops_per_token_by_hand():
    # Layers: attention 2*h*h (q, o) + 2*h*(8*128) (k, v); MLP 3*h*53248; norms 2h.
    h = 16384
    layer = 2 * h * h + 2 * h * 1024 + 3 * h * 53248 + 2 * h
    matmul = 126 * layer + 128256 * h  # + LM head; the input embedding is a lookup
    s = 8192
    attention = 3 * 126 * 2 * 128 * (128 + 128) * (s / 2)  # causal core, fwd + bwd
    assert model_flops_per_token(LLAMA_405B, s) == pytest.approx(6 * matmul + attention, rel=1e-12)
    # ~2.65 TFLOP per token: 6 * 405B plus ~4% attention at 8K.
    assert 2.5e12 < model_flops_per_token(LLAMA_405B, s) < 2.7e12


def test_korthikanti_activation_formula_gpt():
    # Korthikanti Table 2 with FlashAttention (no 5as/h term): SP + TP -> 34h/t bytes per token
    # per layer; TP without SP -> 10h + 24h/t; no parallelism -> 34h.
    h = GPT.hidden_size
    for t in (1, 2, 4, 8):
        with_sp = activation_bytes_per_token(GPT, t, np.array(t > 1), moe_layer=False)
        assert float(with_sp) == pytest.approx(34 * h / t)
        no_sp = activation_bytes_per_token(GPT, t, np.array(False), moe_layer=False)
        assert float(no_sp) == pytest.approx(10 * h + 24 * h / t)
    # Full recompute keeps 2sbh (Korthikanti Table 2), /t with SP.
    assert float(full_recompute_bytes_per_token(GPT, 8, np.array(True))) == pytest.approx(2 * h / 8)


def test_zero_memory_simple_case():
    # 1e9 params on one GPU's stage, DP 64 (Rajbhandari et al. 2020 Fig. 1 structure with
    # Megatron's bytes: 2 B weights, 4 B fp32 grads, 12 B Adam).
    P, d = 1e9, 64
    expect = {
        0: 2 * P + 4 * P + 12 * P,
        1: 2 * P + 4 * P + 12 * P / d,
        2: 2 * P + (4 * P + 12 * P) / d,
        3: (2 * P + 4 * P + 12 * P) / d,
    }
    for z, total in expect.items():
        w, g, o = model_state_bytes(P, 0.0, z, d, 1, False)
        assert float(w + g + o) == pytest.approx(total)


def test_uneven_pipeline_split_llama3_405b():
    first, middle, last, ok = stage_layer_split(126, 16)
    assert (int(first), int(middle), int(last), bool(ok)) == (7, 8, 7, True)
    first, middle, last, ok = stage_layer_split(96, 8)
    assert (int(first), int(middle), int(last)) == (12, 12, 12)
    first, middle, last, ok = stage_layer_split(126, 16, 6, 6)  # 6 + 14*m + 6 = 126 -> m = 8.14: invalid
    assert not bool(ok)


def test_interleaved_inflight_matches_korthikanti():
    # First stage holds p * (1 + (p-1)/(p*v)) micro-batches' worth (Korthikanti Sec. 4.2.3).
    for p, v in ((4, 2), (8, 3), (16, 4)):
        got = float(inflight_microbatches(0, p, v, 10_000))
        assert got == pytest.approx(p * (1 + (p - 1) / (p * v)))
    assert float(inflight_microbatches(0, 8, 1, 100)) == 8
    assert float(inflight_microbatches(7, 8, 1, 100)) == 1
    assert float(inflight_microbatches(0, 8, 1, 4)) == 4  # never more than m


def test_group_span_megatron_order():
    # TP8 fills a DGX node; DP (stride 8) then has one rank per node.
    assert tuple(map(int, group_span(8, 1, 8))) == (8, 1)
    assert tuple(map(int, group_span(128, 8, 8))) == (1, 128)
    # TP2: DP ranks stride 2 -> 4 per node.
    assert tuple(map(int, group_span(64, 2, 8))) == (4, 16)
    # NVL72 domain: TP8 leaves 9 DP ranks per domain.
    assert tuple(map(int, group_span(72, 8, 72))) == (9, 8)


@pytest.fixture(scope="module")
def h100():
    return get_cluster("dgx-h100")


def _layouts(n=64):
    rng = np.random.default_rng(0)
    tps = rng.choice([1, 2, 4, 8], n)
    pps = rng.choice([1, 2, 4], n)
    return LayoutBatch.from_arrays(
        tp=tps, pp=pps, dp=64 // (tps * pps) * 2, cp=1, vpp=1, zero=rng.choice([0, 1, 2, 3], n),
        mbs=1, gbs=512, seq_len=2048, recompute=rng.choice([0, 1, 2], n),
    )


def test_step_time_is_sum_of_terms_and_throughput_consistent(h100):
    batch = _layouts()
    out = evaluate_batch(GPT, h100, batch)
    total = sum(out.time_terms.values())
    np.testing.assert_allclose(total, out.step_time_s, rtol=1e-12)
    gpus = batch.tp * batch.pp * batch.dp * batch.cp
    np.testing.assert_allclose(out.tokens_per_s_per_gpu * gpus * out.step_time_s, batch.gbs * batch.seq_len, rtol=1e-9)
    assert np.all(out.mfu > 0) and np.all(out.mfu < 1)
    assert np.all(out.hfu >= out.mfu - 1e-12)


def test_vectorized_equals_scalar(h100):
    batch = _layouts(16)
    out = evaluate_batch(GPT, h100, batch)
    for i in range(len(batch)):
        one = evaluate(GPT, h100, batch.layout(i))
        assert float(one.step_time_s[0]) == pytest.approx(float(out.step_time_s[i]), rel=1e-12)
        assert float(one.memory_gib["peak"][0]) == pytest.approx(float(out.memory_gib["peak"][i]), rel=1e-12)


def test_more_bandwidth_never_slower(h100):
    batch = _layouts()
    base = evaluate_batch(GPT, h100, batch)
    gpu = get_gpu(h100.gpu)
    faster = [
        dataclasses.replace(gpu) if False else gpu.model_copy(update={"scaleup_bandwidth_gbps": gpu.scaleup_bandwidth_gbps * 2}),
        gpu.model_copy(update={"memory_bandwidth_gbps": gpu.memory_bandwidth_gbps * 2}),
        gpu.model_copy(update={"bf16_tflops": gpu.bf16_tflops * 2}),
    ]
    for g in faster:
        out = evaluate_batch(GPT, h100, batch, gpu=g)
        assert np.all(out.step_time_s <= base.step_time_s * (1 + 1e-12))
    better_network = h100.model_copy(update={"network_efficiency": 1.0, "nics_per_node": 16})
    out = evaluate_batch(GPT, better_network, batch)
    assert np.all(out.step_time_s <= base.step_time_s * (1 + 1e-12))


def test_higher_zero_never_more_memory(h100):
    base = dict(tp=np.array([1, 2, 8, 1]), pp=np.array([1, 2, 1, 4]), dp=np.array([64, 16, 8, 16]), mbs=1, gbs=256, seq_len=2048)
    peaks = []
    for z in range(4):
        out = evaluate_batch(LLAMA_405B, h100, LayoutBatch.from_arrays(zero=z, **base))
        peaks.append(out.memory_gib["peak"])
    for lo, hi in zip(peaks, peaks[1:-1]):
        assert np.all(hi <= lo + 1e-9)
    # ZeRO-3 under a pipeline is FSDP2 in torch.distributed.pipelining, which keeps gradients
    # unsharded for the step (ZeRO-1's footprint) and, per micro-batch, a gradient receive
    # buffer and (in flight) the stage output, [1, 2048, h] BF16 split by TP under SP, on the first stage: above
    # ZeRO-2's there, below it without PP. m = 256 / 16 = 16 micro-batches on both pipelines.
    flat = base["pp"] == 1
    assert np.all(peaks[3][flat] <= peaks[2][flat] + 1e-9)
    assert np.all(peaks[3][~flat] >= peaks[1][~flat])
    # tp 2 (SP), pp 2: 16 + 2 in flight = 18 buffers of 2048 x 16384 x 2 B / 2 = 32 MiB; tp 1,
    # pp 4: 16 + 4 = 20 of 64 MiB; each plus the 10% fragmentation allowance on activations.
    np.testing.assert_allclose(peaks[3][~flat] - peaks[1][~flat], [18 * 32 / 1024 * 1.1, 20 * 64 / 1024 * 1.1])


def test_smaller_shard_group_never_less_memory(h100):
    # Hybrid sharding over fewer ranks holds larger shards: per-GPU memory never lower.
    base = dict(tp=np.array([1, 8]), pp=1, dp=np.array([64, 8]), mbs=1, gbs=256, seq_len=2048, zero=3)
    peaks = []
    for shard in (0, 8, 4, 2):  # 0: all data-parallel ranks
        out = evaluate_batch(LLAMA_405B, h100, LayoutBatch.from_arrays(dp_shard=shard, **base))
        peaks.append(out.memory_gib["peak"])
    for lo, hi in zip(peaks, peaks[1:]):
        assert np.all(hi >= lo - 1e-9)


def test_zero_3_under_a_pipeline_keeps_zero_1_footprint_zero_2_shards_gradients(h100):
    # FSDP2 under torch.distributed.pipelining (stage.py backward_maybe_with_nosync) keeps
    # gradients, and after a backward the weights, unsharded until the step's last micro-batch:
    # ZeRO-3 has ZeRO-1's memory and gathers again for each backward. ZeRO-2 under a pipeline
    # shards the FP32 gradients over dp = 16 (Llama 3 paper Sec. 3.3.2) and reduce-scatters them
    # after each of the 16 micro-batches: 4 B x params / 16 instead of 4 B x params.
    kw = dict(tp=8, pp=8, dp=16, mbs=1, gbs=256, seq_len=8192, recompute="full")
    z1, z2, z3 = (evaluate(LLAMA_405B, h100, Layout(zero=z, **kw)) for z in (1, 2, 3))
    for k in ("weights", "optimizer"):
        assert z2.memory_gib[k][0] == pytest.approx(z1.memory_gib[k][0])
    assert z2.memory_gib["gradients"][0] == pytest.approx(z1.memory_gib["gradients"][0] / 16)
    for k in ("weights", "gradients", "optimizer"):
        assert z3.memory_gib[k][0] == pytest.approx(z1.memory_gib[k][0])
    # ... plus torch.distributed.pipelining's buffers on the fullest (a middle) stage: for each
    # of m = 16 micro-batches an activation and a gradient receive buffer (the in-flight ones'
    # inputs are the first layer's saved input) and the in-flight outputs: 2m = 32 boundaries
    # of 8192 x 16384 x 2 B / 8 (SP) = 32 MiB, 1 GiB.
    assert z3.memory_gib["activations"][0] - z1.memory_gib["activations"][0] == pytest.approx(32 * 32 / 1024)
    assert z2.step_time_s[0] >= z1.step_time_s[0]
    assert z3.step_time_s[0] >= z1.step_time_s[0]
    assert z3.overlapped_terms["dp_comm"][0] + z3.time_terms["zero3_comm"][0] > (
        z1.overlapped_terms["dp_comm"][0] + z1.time_terms["dp_comm"][0])
    # Without a pipeline ZeRO-3 shards the weights and gradients: far less than ZeRO-1.
    flat = dict(kw, pp=1, dp=128)
    assert evaluate(LLAMA_405B, h100, Layout(zero=3, **flat)).memory_gib["peak"][0] < 0.5 * evaluate(
        LLAMA_405B, h100, Layout(zero=1, **flat)).memory_gib["peak"][0]


def test_more_recompute_never_more_activation_memory(h100):
    base = dict(tp=np.array([1, 4, 8]), pp=np.array([1, 2, 8]), dp=np.array([64, 8, 1]), mbs=2, gbs=64, seq_len=4096)
    acts = [
        evaluate_batch(LLAMA_405B, h100, LayoutBatch.from_arrays(recompute=r, **base)).memory_gib["activations"]
        for r in range(3)
    ]
    assert np.all(acts[1] <= acts[0] + 1e-12) and np.all(acts[2] <= acts[1] + 1e-12)
    assert np.all(acts[2] < acts[0])


def test_bubble_fraction_matches_interleaved_1f1b(h100):
    # Equal stages (96 layers / 8) and no communication-dominated terms: bubble / (stage time x m)
    # = (p-1) / (v m) (Narayanan et al. 2021, Sec. 2.2.2).
    # A tiny vocabulary makes the LM head negligible, so all stages cost the same.
    model = GPT.model_copy(update={"num_layers": 96, "tied_embeddings": False, "vocab_size": 128})
    for v, m in ((1, 8), (2, 16), (4, 32)):
        lay = Layout(tp=8, pp=8, dp=1, vpp=v, mbs=1, gbs=m, seq_len=2048, recompute="none")
        out = evaluate(model, h100, lay)
        t = out.time_terms
        per_mb = (t["compute"] + t["recompute"] + t["tp_comm"] + t["cp_comm"] + t["ep_comm"])[0] / m
        assert t["bubble"][0] / (per_mb * m) == pytest.approx((8 - 1) / (v * m), rel=0.01)


def test_parameter_counts_by_formula():
    # Narayanan et al. 2021 Sec. 5.1: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)).
    l, h, V, s = 96, 12288, 51200, 2048
    gpt3 = GPT.model_copy(update={"num_layers": l, "hidden_size": h, "num_attention_heads": 96,
                                  "ffn_hidden_size": 4 * h, "max_position_embeddings": s})
    expected = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
    assert count_params(gpt3).total == pytest.approx(expected, rel=1e-3)
    assert count_params(gpt3).total == pytest.approx(174.6e9, rel=2e-3)
    assert count_params(LLAMA_405B).total == pytest.approx(405.85e9, rel=1e-3)


def test_partial_recompute_sits_between_none_and_full(h100):
    # Megatron's block method: recomputing some layers costs less time than all, and keeps
    # more memory than all but less than none.
    base = dict(tp=8, pp=16, dp=128, vpp=4, mbs=1, gbs=2048, seq_len=8192)
    none = evaluate(LLAMA_405B, h100, Layout(recompute="none", **base))
    half = evaluate(LLAMA_405B, h100, Layout(recompute="full", recompute_share=2, **base))
    full = evaluate(LLAMA_405B, h100, Layout(recompute="full", **base))
    acts = [r.memory_gib["activations"][0] for r in (none, half, full)]
    assert acts[0] > acts[1] > acts[2]
    rec = [r.time_terms["recompute"][0] for r in (none, half, full)]
    assert rec[0] < rec[1] < rec[2]
    # Half of an 8-layer stage in 4 chunks of 2: one layer per chunk, 4 of 8 layers.
    assert rec[1] == pytest.approx(rec[2] / 2, rel=1e-9)


def test_korthikanti_full_formula_with_unfused_attention():
    # Korthikanti Table 2, TP + SP, no recompute: s*b*h*(34/t + 5*a*s/(h*t)) bytes per layer,
    # i.e. per token 34h/t + 5as/t. Unfused attention adds the 5as/t scores term.
    from costmodel.memory import attention_scores_bytes_per_token

    s, t, h, a = 2048, 8, GPT.hidden_size, GPT.num_attention_heads
    per_token = activation_bytes_per_token(GPT, t, np.array(True), moe_layer=False) + attention_scores_bytes_per_token(
        GPT, t, s, np.array(True)
    )
    assert float(per_token) == pytest.approx(34 * h / t + 5 * a * s / t)
    assert float(attention_scores_bytes_per_token(GPT, t, s, np.array(False))) == 0.0


def test_unfused_attention_is_slower_than_flash(h100):
    lay = dict(tp=8, pp=1, dp=1, mbs=1, gbs=8, seq_len=8192, recompute="none")
    flash = evaluate(GPT, h100, Layout(**lay))
    unfused = evaluate(GPT, h100, Layout(attention="unfused", **lay))
    assert unfused.step_time_s[0] > flash.step_time_s[0]
    assert unfused.memory_gib["activations"][0] > flash.memory_gib["activations"][0]


def test_selective_recompute_of_unfused_attention_holds_one_layers_scores(h100):
    # Selective recompute drops the scores from what each layer keeps (Korthikanti Sec. 4.2), but
    # rebuilds them one layer at a time: the peak holds one layer's 5as/t bytes per token (GPT has
    # dropout: softmax output 2 B, mask 1 B, dropout output 2 B per score) over the flash layout's.
    s, t, a = 8192, 8, GPT.num_attention_heads
    lay = dict(tp=t, pp=1, dp=1, mbs=1, gbs=8, seq_len=s, recompute="selective")
    flash = evaluate(GPT, h100, Layout(**lay))
    unfused = evaluate(GPT, h100, Layout(attention="unfused", **lay))
    one_layer = 5 * a * s / t * s / 2**30
    extra = unfused.memory_gib["activations"][0] - flash.memory_gib["activations"][0]
    assert extra == pytest.approx(one_layer, rel=1e-6)


LLAMA2_7B = ModelSpec(  # Llama 2 7B: MHA (32 KV heads), SwiGLU 11008, no dropout
    name="llama2-7b-test", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=32,
    ffn_hidden_size=11008, vocab_size=32000, default_seq_len=4096,
)


def test_fp8_activation_bytes_follow_transformer_engine_saves():
    # What one Megatron-Core layer keeps per token under TransformerEngine FP8, TP 4 with SP,
    # read off TE v1.4: LayerNormLinear saves its LN input (BF16) and its FP8 ln_out, Linear its
    # FP8 input, FusedAttnFunc q, k, v and out (BF16); the SwiGLU keeps its BF16 input (2F).
    h, F, t = 4096, 11008, 4
    norms = 2 * (2 * h) + 2 * (1 * h)  # two LN inputs (BF16) and two FP8 LN outputs, SP region
    qkv = 2 * 3 * h  # q, k, v in BF16 (32 + 2 x 32 heads of 128)
    out = 2 * h + 1 * h  # the attention output for the kernel (BF16) and its FP8 copy for linear_proj
    mlp = 2 * (2 * F) + 1 * F  # SwiGLU input (gate and up, BF16) and FP8 fc2 input
    fused = activation_bytes_per_token(LLAMA2_7B, t, np.array(True), moe_layer=False, fp8=np.array(True))
    assert float(fused) == pytest.approx((norms + qkv + out + mlp) / t)  # 29,120 bytes
    # Unfused attention: nothing else keeps the output, so linear_proj's FP8 copy is all of it.
    unfused = activation_bytes_per_token(LLAMA2_7B, t, np.array(True), moe_layer=False, fp8=np.array(True),
                                         fused_attention=np.array(False))
    assert float(unfused) == pytest.approx((norms + qkv + 1 * h + mlp) / t)
    # BF16: the LN outputs, the output projection's and fc2's inputs are single BF16 tensors.
    bf16 = activation_bytes_per_token(LLAMA2_7B, t, np.array(True), moe_layer=False)
    assert float(bf16) == pytest.approx((4 * h + 4 * h + 6 * h + 2 * h + 6 * F) / t)
    assert float(bf16) - float(fused) == pytest.approx((h + F) / t)


def test_zero3_gathers_only_what_other_ranks_hold(h100):
    # ZeRO-3 holds the current and the prefetched layer whole: beyond each rank's own shard of them,
    # 2 x layer x (1 - 1/N) BF16 weights. With nothing to shard (dp 1) it is ZeRO-2's memory; over 8
    # ranks the extra is 2 x 2 B x layer x 7/8 (Llama 3 8B layer: 218,112,000 weights).
    lay = dict(tp=8, pp=1, mbs=1, gbs=8, seq_len=4096, recompute="full")
    z2, z3 = (evaluate(get_model("llama3-8b"), h100, Layout(dp=1, zero=z, **lay)) for z in (2, 3))
    assert z3.memory_gib["peak"][0] == pytest.approx(z2.memory_gib["peak"][0], rel=1e-12)
    lay8 = dict(lay, tp=1, gbs=64)
    w3 = evaluate(get_model("llama3-8b"), h100, Layout(dp=8, zero=3, **lay8)).memory_gib["weights"][0]
    layer = 4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 14336 + 2 * 4096
    sharded_only = (count_params(get_model("llama3-8b")).total * 2 / 8) / 2**30
    assert w3 - sharded_only == pytest.approx(2 * 2 * layer * 7 / 8 / 2**30, rel=1e-3)
