"""``--from-launch`` refusals and notes name the file's own settings, as the user wrote them.

Each test writes a small launch file and runs ``planner evaluate --from-launch`` in-process: a bad
file gets one line (exit 2) naming the file's flag or key and its value, never the planner option
it would become (``--tp=...``, ``vpp=5``), and a setting planner cannot price is never priced as
something else without a word.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from planner.cli.main import app

# Llama 3 8B's shape as a Megatron-LM command line (torchrun: 1 node x 8 GPUs).
LLAMA_SHAPE = ("--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
               "--group-query-attention --num-query-groups 8 --tokenizer-type NullTokenizer --vocab-size 128256")
LLAMA_SWITCHES = ("--swiglu --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights "
                  "--disable-bias-linear --attention-dropout 0.0 --hidden-dropout 0.0")
BATCH = "--seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --bf16"


def megatron(tmp_path, *args: str, switches: str = LLAMA_SWITCHES):
    path = tmp_path / "pretrain.sh"
    path.write_text(f"torchrun --nproc-per-node 8 pretrain_gpt.py {LLAMA_SHAPE} {switches} {BATCH} {' '.join(args)}\n")
    return path


def titan(tmp_path, parallelism: str):
    path = tmp_path / "job.toml"
    path.write_text('[model]\nname = "llama3"\nflavor = "8B"\n\n[training]\nlocal_batch_size = 1\nseq_len = 4096\n\n'
                    + parallelism)
    return path


def evaluate(path, *args: str):
    res = CliRunner().invoke(app, ["evaluate", "--from-launch", str(path), "--gpu", "h100", *args])
    return res.exit_code, res.output


def refused(path, *args: str) -> str:
    """The one line a refused file gets (exit 2, no traceback)."""
    code, out = evaluate(path, *args)
    assert code == 2, out
    assert "Traceback" not in out and len(out.strip().splitlines()) == 1, out
    return out.strip()


def test_torch_fsdp2_with_the_distributed_optimizer_is_refused_as_megatron_refuses_it(tmp_path):
    # megatron/training/arguments.py validate_args: "--use-torch-fsdp2 is not supported with MCore's
    # distributed optimizer". It was read as "zero 1, fsdp fsdp2" and priced as ZeRO-1.
    line = refused(megatron(tmp_path, "--use-distributed-optimizer", "--use-torch-fsdp2"))
    assert "--use-distributed-optimizer" in line and "--use-torch-fsdp2" in line and "refuses" in line, line
    # Either one alone is read (FSDP2 with gradient-accumulation fusion off, as validate_args wants it).
    code, out = evaluate(megatron(tmp_path, "--use-torch-fsdp2", "--no-gradient-accumulation-fusion"))
    assert code in (0, 3) and "zero 3" in out, out


@pytest.mark.parametrize("extra, switches, named", [
    # validate_args' other --use-torch-fsdp2 assertions (megatron/training/arguments.py at the pinned
    # commit): each was read and priced as FSDP2, a run Megatron-LM does not start.
    (("--pipeline-model-parallel-size 2",), LLAMA_SWITCHES, "--pipeline-model-parallel-size 2"),
    ((), LLAMA_SWITCHES.replace("--untie-embeddings-and-output-weights ", ""), "tied embeddings"),
    (("--ckpt-format torch",), LLAMA_SWITCHES, "--ckpt-format torch"),
    (("--fp16",), LLAMA_SWITCHES, "--fp16"),
])
def test_torch_fsdp2_preconditions_are_megatrons(tmp_path, extra, switches, named):
    line = refused(megatron(tmp_path, "--use-torch-fsdp2", "--no-gradient-accumulation-fusion", *extra,
                            switches=switches))
    assert line.startswith("error: --use-torch-fsdp2 with ") and named in line and "validate_args" in line, line
    # Without --no-gradient-accumulation-fusion the fusion (on by default) is named.
    line = refused(megatron(tmp_path, "--use-torch-fsdp2"))
    assert "--no-gradient-accumulation-fusion" in line, line


def test_layers_per_virtual_stage_is_refused_in_the_users_words(tmp_path):
    # 32 layers over 2 stages: 16 per stage, which 3 does not divide (validate_args asserts it). It
    # was refused as "vpp=5 does not split the pipeline stages", a value the user never wrote.
    line = refused(megatron(tmp_path, "--pipeline-model-parallel-size 2", "--num-layers-per-virtual-pipeline-stage 3"))
    assert "--num-layers-per-virtual-pipeline-stage 3" in line and "vpp=5" not in line, line
    assert "16 layers of each of the 2 pipeline stages" in line and "allowed: 1, 2, 4, 8, 16" in line, line
    # A value that divides is read as the virtual stages it makes: 16 / 4 = 4.
    code, out = evaluate(megatron(tmp_path, "--pipeline-model-parallel-size 2",
                                  "--num-layers-per-virtual-pipeline-stage 4"))
    assert code in (0, 3) and "vpp 4" in out, out


def test_torchtitan_degrees_are_named_by_their_toml_keys(tmp_path):
    # A degree over planner's bound was reported as "--tp=2000000".
    for key in ("tensor_parallel_degree", "pipeline_parallel_degree", "context_parallel_degree"):
        line = refused(titan(tmp_path, f"[parallelism]\n{key} = 2000000\n"), "--gpus", "8")
        assert f"[parallelism] {key} = 2000000" in line and "--tp=" not in line and "--pp=" not in line, line
    # A degree that does not fit the GPU count names the key too.
    line = refused(titan(tmp_path, "[parallelism]\ntensor_parallel_degree = 3\n"), "--gpus", "8")
    assert "[parallelism] tensor_parallel_degree = 3" in line, line
    # The data-parallel degrees fix dp: a GPU count they do not make is torchtitan's refusal, not DeepSpeed's.
    line = refused(titan(tmp_path, "[parallelism]\ndata_parallel_shard_degree = 3\n"), "--gpus", "8")
    assert "[parallelism] data_parallel_shard_degree = 3" in line and "DeepSpeed" not in line, line
    line = refused(titan(tmp_path, "[parallelism]\ndata_parallel_shard_degree = 0\n"), "--gpus", "8")
    assert "[parallelism] data_parallel_shard_degree = 0" in line, line


def test_closest_preset_is_the_nearest_shape_with_the_switches_that_differ(tmp_path):
    # Llama 3 8B's sizes with Megatron's defaults (LayerNorm, GELU, learned positions, biases, tied
    # embeddings, dropout) used to be "closest megatron-gpt-7.5b: num_layers 32 vs 36, ...".
    code, out = evaluate(megatron(tmp_path, switches=""))
    assert code in (0, 3), out
    note = " ".join(out.split("  GPUs")[0].split())
    assert "closest llama3-8b: the same shape" in note and "megatron-gpt-7.5b" not in note, note
    for switch in ("gated_mlp", "norm", "position_embedding", "tied_embeddings", "linear_bias", "dropout"):
        assert switch in note, (switch, note)


def test_a_torchtitan_section_given_as_a_value_is_refused(tmp_path):
    # "parallelism = 5" replaced the [parallelism] table: it was listed as "not priced" and priced as TP 1.
    path = tmp_path / "job.toml"
    path.write_text('parallelism = 5\n\n[model]\nname = "llama3"\nflavor = "8B"\n')
    line = refused(path, "--gpus", "8")
    assert "parallelism = 5" in line and "table" in line, line
