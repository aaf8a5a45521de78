"""Sliding-window attention (ModelSpec.sliding_window / full_attention_every): FLOPs and keys
derived by hand, the reader of HF configs, the context-parallel rule and step-time properties."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from costmodel.flops import attention_core_flops_per_token, attention_keys_parts, windowed_keys
from hardware_catalog.errors import PlannerInputError
from hardware_catalog.hf_config import model_from_hf_config
from hardware_catalog.models import get_model

GPT_OSS_HF = {  # openai/gpt-oss-120b config.json, the keys the reader uses
    "model_type": "gpt_oss", "num_hidden_layers": 36, "hidden_size": 2880, "num_attention_heads": 64,
    "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "vocab_size": 201088,
    "max_position_embeddings": 131072, "num_local_experts": 128, "num_experts_per_tok": 4,
    "attention_bias": True, "tie_word_embeddings": False, "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
}
MISTRAL_V01 = {  # mistralai/Mistral-7B-v0.1 config.json: one 4096-key window on every layer
    "model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
    "max_position_embeddings": 32768, "sliding_window": 4096,
}


def run(*args):
    proc = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def test_windowed_keys_by_hand():
    # Query i attends min(i, w) keys: mean w - w^2/2s = 128 - 16384/8192 = 126 for w 128, s 4096.
    assert windowed_keys(128, 4096) == pytest.approx(126.0)
    # s 8192, w 4096: 4096 - 4096^2/16384 = 3072.
    assert windowed_keys(4096, 8192) == pytest.approx(3072.0)
    # A window as long as the sequence or longer is the causal s/2.
    assert windowed_keys(4096, 4096) == pytest.approx(2048.0)
    assert windowed_keys(8192, 2048) == pytest.approx(1024.0)


def test_gpt_oss_attention_flops_by_hand():
    m = get_model("gpt-oss-120b")
    assert (m.sliding_window, m.full_attention_every, m.windowed_layers) == (128, 2, 18)
    full, windowed = attention_keys_parts(m, 4096)
    # Half the layers attend s/2 = 2048 keys, half 126: weighted 1024 and 63.
    assert float(full) == pytest.approx(1024.0) and float(windowed) == pytest.approx(63.0)
    # 2 a (d_qk + d_v) x keys = 2 * 64 * 128 * 1087 FLOPs per token, mean over layers.
    assert float(attention_core_flops_per_token(m, 4096)) == pytest.approx(2 * 64 * 128 * 1087)
    # At 128K the windowed half costs almost nothing: (65536 + ~128) / 2 / 65536 of full attention.
    full_model = m.model_copy(update={"sliding_window": None, "full_attention_every": None})
    ratio = float(attention_core_flops_per_token(m, 131072) / attention_core_flops_per_token(full_model, 131072))
    assert ratio == pytest.approx((65536 + windowed_keys(128, 131072)) / 2 / 65536)


def test_every_n_th_layer_full_as_megatron_counts_them():
    # Megatron-Core is_layer_window_attention: layer_number % N != 0 is windowed (1-based).
    m = get_model("llama3-8b").model_copy(update={"sliding_window": 1024, "full_attention_every": 6})
    assert m.windowed_layers == 32 - 5  # layers 6, 12, ..., 30 are full
    every_layer = get_model("llama3-8b").model_copy(update={"sliding_window": 1024})
    assert every_layer.windowed_layers == 32


def test_schema_refuses_full_attention_every_without_a_window(tmp_path):
    f = tmp_path / "m.toml"
    f.write_text('name = "x"\nnum_layers = 4\nhidden_size = 256\nnum_attention_heads = 4\n'
                 'ffn_hidden_size = 512\nvocab_size = 1000\nfull_attention_every = 2\n')
    rc, out, err = run("evaluate", "--model", str(f), "--gpus", "8", "--gpu", "h100")
    assert rc == 2 and "full_attention_every" in err and "sliding_window" in err and "Traceback" not in err


def test_hf_reader_gpt_oss_mistral_qwen2():
    oss = model_from_hf_config(GPT_OSS_HF, "gpt-oss-120b")
    catalog = get_model("gpt-oss-120b")
    assert (oss.sliding_window, oss.full_attention_every) == (catalog.sliding_window, catalog.full_attention_every)
    mistral = model_from_hf_config(MISTRAL_V01, "mistral-7b-v0.1")
    assert (mistral.sliding_window, mistral.full_attention_every, mistral.windowed_layers) == (4096, None, 32)
    # Qwen2 configs name a window but turn it off.
    qwen2 = model_from_hf_config({**MISTRAL_V01, "model_type": "qwen2", "use_sliding_window": False}, "q")
    assert qwen2.sliding_window is None
    # Mixtral's null window: none.
    assert model_from_hf_config({**MISTRAL_V01, "sliding_window": None}, "m").sliding_window is None


def test_hf_reader_names_a_pattern_it_cannot_model():
    types = ["sliding_attention"] * 36
    types[0] = types[5] = "full_attention"  # full at layers 1 and 6: not every N-th
    with pytest.raises(PlannerInputError, match="layer_types"):
        model_from_hf_config({**GPT_OSS_HF, "layer_types": types}, "odd")


def test_windowed_cp_needs_a2a_or_allgather():
    args = ("evaluate", "--model", "gpt-oss-20b", "--gpus", "16", "--gpu", "h100", "--tp", "1", "--pp", "1",
            "--cp", "2", "--ep", "8", "--seq-len", "32768", "--gbs", "64", "--mbs", "1", "--zero", "1")
    rc, out, err = run(*args, "--cp-comm-type", "p2p")
    assert rc == 2 and "a2a or allgather" in err and "Traceback" not in err
    # Untyped, the p2p default TransformerEngine refuses becomes a2a: 8 KV heads split over 2 ranks.
    rc, out, err = run(*args)
    assert rc in (0, 3), err
    assert "cp-a2a" in out.splitlines()[1]
    # With TP 8 each rank holds one KV head, which a2a cannot split: allgather.
    rc, out, err = run("evaluate", "--model", "gpt-oss-20b", "--gpus", "16", "--gpu", "h100", "--tp", "8", "--pp", "1",
                       "--cp", "2", "--ep", "2", "--seq-len", "32768", "--gbs", "64", "--mbs", "1")
    assert rc in (0, 3), err
    assert "cp-allgather" in out.splitlines()[1]


def test_a_window_never_slows_a_step():
    """The windowed model runs fewer attention FLOPs at a lower efficiency; never slower overall,
    and at 128K tokens much faster (half its layers attend 128 keys instead of 64K)."""
    from costmodel import evaluate_batch
    from costmodel.layout import LayoutBatch
    from hardware_catalog import get_cluster

    m = get_model("gpt-oss-20b")
    full_model = m.model_copy(update={"sliding_window": None, "full_attention_every": None})
    cluster = get_cluster("dgx-h100")
    ratio = {}
    for seq in (4096, 32768, 131072):
        batch = LayoutBatch.from_arrays(tp=1, pp=1, dp=8, cp=1, vpp=1, ep=8, zero=1, mbs=1, gbs=64, seq_len=seq,
                                        recompute=2)
        t = [float(evaluate_batch(model, cluster, batch).step_time_s[0]) for model in (m, full_model)]
        assert t[0] <= t[1]
        ratio[seq] = t[0] / t[1]
    assert ratio[131072] < ratio[32768] < ratio[4096] <= 1.0
    assert ratio[131072] < 0.75


def test_search_switches_windowed_cp_to_a2a_or_allgather():
    """A windowed model's CP rows are priced as TransformerEngine runs them: a2a where each TP
    rank's 64 / tp query and 8 / tp KV heads split over the CP ranks, else allgather."""
    from search.rules import RuleContext, windowed_cp_comm_type

    ctx = RuleContext.build(get_model("gpt-oss-120b"), 64)
    cols = {"tp": np.array([1, 8, 1, 2]), "cp": np.array([2, 2, 1, 16]), "cp_comm_type": np.zeros(4, int)}
    # tp 1 cp 2: 8 KV heads split in 2 -> a2a; tp 8 cp 2: 1 KV head per rank -> allgather;
    # cp 1: no CP, p2p stays; tp 2 cp 16: 4 KV heads per TP rank do not split 16 ways -> allgather.
    assert windowed_cp_comm_type(ctx, cols).tolist() == [1, 2, 0, 2]

    rc, out, err = run("search", "--model", "gpt-oss-120b", "--gpus", "64", "--gpu", "h100", "--seq-len", "131072",
                       "--top", "3")
    assert rc == 0, err
    assert "cp: gpt-oss-120b attends a 128-key window on 18 of 36 layers" in out
    import json

    rc, out, err = run("search", "--model", "gpt-oss-120b", "--gpus", "64", "--gpu", "h100", "--seq-len", "131072",
                       "--top", "10", "--json")
    rows = [r["layout"] for r in json.loads(out)["results"]]
    assert any(r["cp"] > 1 for r in rows)
    assert all(r["cp_comm_type"] in ("a2a", "allgather") for r in rows if r["cp"] > 1)


def test_evaluate_header_says_the_window():
    rc, out, err = run("evaluate", "--model", "gpt-oss-20b", "--gpus", "8", "--gpu", "h100", "--tp", "1", "--pp", "1",
                       "--ep", "8", "--mbs", "1", "--gbs", "64")
    assert rc in (0, 3), err
    # gpt-oss-20b: 24 layers, every 2nd full (layers 2, 4, ..., 24), so 12 windowed.
    assert "128-key window on 12 of 24 layers" in out.splitlines()[0]


def test_catalog_lists_the_window():
    import json

    rc, out, err = run("catalog", "models", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert (rows["gpt-oss-120b"]["sliding_window"], rows["gpt-oss-120b"]["windowed_layers"]) == (128, 18)
    assert rows["llama3-8b"]["sliding_window"] is None and rows["llama3-8b"]["windowed_layers"] == 0


def test_search_with_cp_pinned_on_a_windowed_model():
    # The pinned CP is searched as a2a / allgather, not refused for the p2p default.
    rc, out, err = run("search", "--model", "gpt-oss-20b", "--gpus", "16", "--gpu", "h100", "--cp", "2",
                       "--seq-len", "16384", "--top", "2")
    assert rc == 0, err
    assert "the rows with CP use a2a" in out


def test_windowed_kernel_efficiency_near_cudnn_benchmark():
    """cuDNN-frontend's gpt_oss SDPA training benchmark (64 or 128 query heads, head dim 64, 2 x
    32,768 tokens, causal with a sliding window, BF16, fwd + bwd): H200 window 1024 runs 3.021 ms
    forward at 358 TFLOP/s and 9.045 ms backward at 299, fwd+bwd 3.5 F / (F/358 + 2.5 F/299) = 314
    TFLOP/s = 0.317 of 989; GB200 window 128 forward 104-167 TFLOP/s and backward 182-188, at 32K
    104 and 186: 3.5 / (1/104 + 2.5/186) = 150 TFLOP/s = 0.060 of 2,500, at 4K 161 and 182: 175 =
    0.070. The windowed kernel's efficiency here (e(2w) on the whole-sequence curve, at head dim
    128: no model passed) is within 30% of them; pricing it at the whole-sequence level (0.35,
    0.40) would be 6x off on GB200."""
    from costmodel.calibration import DEFAULT
    from costmodel.compute import attention_efficiency
    from costmodel.layout import LayoutBatch
    from hardware_catalog import get_gpu

    for gpu, window, seq, measured in (("h200", 1024, 32768, 0.317), ("gb200", 128, 32768, 0.060),
                                       ("gb200", 128, 4096, 0.070)):
        batch = LayoutBatch.from_arrays(tp=1, pp=1, dp=1, cp=1, vpp=1, mbs=1, gbs=1, seq_len=seq, attention=2)
        length = np.array([2.0 * float(windowed_keys(window, seq))])
        e = float(attention_efficiency(get_gpu(gpu), batch, DEFAULT, length)[0])
        assert 0.7 <= e / measured <= 1.3, (gpu, window, seq, e, measured)


def test_search_refuses_typed_p2p_for_a_windowed_model():
    rc, out, err = run("search", "--model", "gpt-oss-20b", "--gpus", "16", "--gpu", "h100", "--cp-comm-type", "p2p",
                       "--seq-len", "16384", "--top", "1")
    assert rc == 2 and "--cp-comm-type p2p" in err and "a2a or allgather" in err and "Traceback" not in err
    # With CP pinned off, p2p says nothing and the search runs; a dense model is not concerned.
    assert run("search", "--model", "gpt-oss-20b", "--gpus", "16", "--gpu", "h100", "--cp-comm-type", "p2p",
               "--cp", "1", "--seq-len", "16384", "--top", "1")[0] == 0
    assert run("search", "--model", "llama3-8b", "--gpus", "16", "--gpu", "h100", "--cp-comm-type", "p2p",
               "--seq-len", "16384", "--top", "1")[0] == 0


def test_runs_file_model_states_a_window():
    """A runs-file row's model block takes sliding_window / full_attention_every: a Mistral-7B
    shape (window 4096 on every layer) at 32K tokens predicts faster than without it, and a skip
    frequency without a window is named."""
    import copy

    from planner.validate import validate_rows
    from planner.validate.runs import load_runs

    rows = {r["id"]: r for r in load_runs(None)}
    row = copy.deepcopy(rows["nemo2407_h100_fp8_llama3_8b_8gpu"])
    row["model"] = {"name": "my-mistral", "family": "llama", "num_layers": 32, "hidden_size": 4096,
                    "num_attention_heads": 32, "num_kv_heads": 8, "ffn_hidden_size": 14336, "vocab_size": 32000}
    row["layout"]["seq_len"] = 32768
    (full,) = validate_rows([copy.deepcopy(row)])
    row["model"]["sliding_window"] = 4096
    (windowed,) = validate_rows([copy.deepcopy(row)])
    assert windowed.predicted > full.predicted * 1.1  # 4096 - 4096^2/65536 = 3840 mean keys, not 16384
    row["model"].pop("sliding_window")
    row["model"]["full_attention_every"] = 2
    (bad,) = validate_rows([row])
    assert bad.error is None and "full_attention_every" in bad.reason and "sliding_window" in bad.reason


def test_the_rank_with_most_full_attention_layers_bounds_the_pipeline():
    """gpt-oss-120b: layers 2, 4, ..., 36 full (Megatron numbers layers 1..36 across the model).
    pp 4: stages 1-9, 10-18, 19-27, 28-36 hold 4, 5, 4, 5 full layers: 4/9 of the heaviest windowed.
    pp 4 vpp 3: chunks of 3 (1-3, 4-6, ...) hold 1, 2, 1, 2, ... full; rank 1 holds chunks 1, 5, 9
    (layers 4-6, 16-18, 28-30): 6 full of 9, 1/3 windowed. pp 4 vpp 9: one-layer chunks, rank 1
    holds layers 2, 6, 10, ...: every one full. pp 2 and 3: even counts, 1/2. pp 4 with 7 and 7
    on the first and last stages (11 in the middle): 3/7, 6/11, 5/11, 4/7 full: 3/7 windowed."""
    from costmodel.layout import LayoutBatch
    from costmodel.pipeline import heaviest_rank_windowed_share

    m = get_model("gpt-oss-120b")
    batch = LayoutBatch.from_arrays(tp=1, pp=np.array([1, 2, 3, 4, 4, 4, 4]), vpp=np.array([1, 1, 1, 1, 3, 9, 1]),
                                    pp_first_layers=np.array([0, 0, 0, 0, 0, 0, 7]),
                                    pp_last_layers=np.array([0, 0, 0, 0, 0, 0, 7]), dp=1, cp=1, mbs=1, gbs=64,
                                    seq_len=4096)
    share = heaviest_rank_windowed_share(m, batch)
    np.testing.assert_allclose(share, [0.5, 0.5, 0.5, 4 / 9, 1 / 3, 0.0, 3 / 7])
    # A window on every layer, or none, mixes nothing.
    mistral_like = m.model_copy(update={"full_attention_every": None})
    assert heaviest_rank_windowed_share(mistral_like, batch) is None
    assert heaviest_rank_windowed_share(get_model("llama3-8b"), batch) is None
