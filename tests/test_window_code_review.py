"""Code review of the sliding window: the window is said in one spelling,
``planner.frameworks.window_text`` ("a 128-key sliding window on 18 of 36 layers (full attention
every 2)"), wherever a reader or a refusal names a model's window. Expectations by hand: gpt-oss-20b
has 24 layers with every 2nd full (12 windowed); Llama 3 8B's 32 layers with a 4,096-key window
(--window-size 4095,0) and every 4th layer full (--window-attn-skip-freq 4) window 32 - 8 = 24.
"""

from __future__ import annotations

from hardware_catalog import get_model
from planner.frameworks import window_text

from test_sliding_window import run


def test_search_refusal_of_typed_p2p_names_the_window_as_window_text_does():
    model = get_model("gpt-oss-20b")
    assert window_text(model) == "a 128-key sliding window on 12 of 24 layers (full attention every 2)"
    rc, out, err = run("search", "--model", "gpt-oss-20b", "--gpus", "16", "--gpu", "h100", "--cp-comm-type", "p2p",
                       "--seq-len", "16384", "--top", "1")
    assert rc == 2 and "Traceback" not in err
    assert f"gpt-oss-20b has {window_text(model)}" in err


def test_megatron_file_shape_note_names_the_window_as_window_text_does(tmp_path):
    from planner.launch import read_launch

    words = ["--num-layers", "32", "--hidden-size", "4096", "--ffn-hidden-size", "14336", "--num-attention-heads", "32",
             "--group-query-attention", "--num-query-groups", "8", "--swiglu", "--normalization", "RMSNorm",
             "--position-embedding-type", "rope", "--untie-embeddings-and-output-weights", "--seq-length", "8192",
             "--max-position-embeddings", "131072", "--tokenizer-type", "NullTokenizer", "--vocab-size", "128255",
             "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16",
             "--window-size", "4095,0", "--window-attn-skip-freq", "4"]
    path = tmp_path / "args.txt"
    path.write_text(" ".join(words) + "\n")
    launch = read_launch(path, "megatron")
    # No preset has this window: the model is built from the file's shape, and the note says it.
    assert (launch.model.sliding_window, launch.model.windowed_layers) == (4096, 24)
    assert "built from the file's shape" in launch.model_note
    assert "a 4096-key sliding window on 24 of 32 layers (full attention every 4)" in launch.model_note
