"""MFU's basis under FP8: the dense BF16 peak, and the reports say so (planner/reports/search_notes.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from planner.reports.search_notes import MFU_BASIS, mfu_basis_lines

# Llama 3 8B by hand (meta-llama/Meta-Llama-3-8B config.json): 32 layers, hidden 4096, 32 query and
# 8 KV heads, FFN 14336, vocabulary 128256. Per layer: Q and O 2h^2, K and V 2h(h/4), MLP 3h*ffn,
# two RMSNorm scales. Training FLOPs per token: 6 x the weights a token multiplies (Kaplan et al.
# 2020; the LM head counted, the input embedding a lookup), plus attention's scores and weighted
# sum, 4*s*h per layer forward (Narayanan et al. 2021, Appendix), halved for the s/2 keys a causal
# query sees and tripled for forward + backward: 6*L*h*s.
H, LAYERS, FFN, VOCAB, SEQ = 4096, 32, 14336, 128256, 8192
PER_LAYER = 2 * H * H + 2 * H * (H // 4) + 3 * H * FFN + 2 * H
WEIGHTS_MULTIPLIED = LAYERS * PER_LAYER + VOCAB * H + H  # + LM head + final norm
FLOPS_PER_TOKEN = 6 * WEIGHTS_MULTIPLIED + 6 * LAYERS * H * SEQ
H100_BF16_PEAK = 989.4e12  # dense BF16, NVIDIA H100 whitepaper, H100 SXM5 table (FP8: 1978.9e12)


def run(*args):
    proc = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


EVALUATE = ("evaluate", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--tp", "1", "--pp", "1", "--seq-len", "8192",
            "--recompute", "full")


def test_fp8_mfu_divides_by_the_bf16_peak():
    rec = json.loads(run(*EVALUATE, "--precision", "fp8", "--json"))
    flops_per_token = rec["mfu"] * H100_BF16_PEAK * rec["gpus"] / rec["tokens_per_s"]
    assert flops_per_token == pytest.approx(FLOPS_PER_TOKEN, rel=0.01)


def test_evaluate_states_the_basis_for_fp8_only():
    assert "over the dense BF16 peak" in run(*EVALUATE, "--precision", "fp8")
    assert "over the dense BF16 peak" not in run(*EVALUATE, "--precision", "bf16")


def test_search_notes_state_the_basis_when_any_row_computes_in_fp8():
    bf16, fp8 = {"layout": {"precision": "bf16"}}, {"layout": {"precision": "fp8"}}
    assert mfu_basis_lines([bf16, bf16]) == []
    assert mfu_basis_lines([bf16, fp8]) == [MFU_BASIS]
    assert mfu_basis_lines([]) == []
