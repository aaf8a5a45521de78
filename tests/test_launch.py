"""``--from-launch``: reading Megatron-LM, torchtitan, DeepSpeed and NeMo / Megatron-Bridge launch files.

Expected values are read off the files in tests/data/launch by hand (see its README), never
copied from planner's output.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hardware_catalog import get_model
from hardware_catalog.errors import PlannerInputError
from planner.launch import detect_format, read_launch
from planner.cli.from_launch.resolve import resolve
from planner.launch.shell import read_script

DATA = Path(__file__).parent / "data" / "launch"
LLAMA = DATA / "train_llama3_8b_h100_fp8.sh"
GPT3 = DATA / "train_gpt3_175b_distributed.sh"


def run(*args):
    proc = subprocess.run([sys.executable, "-m", "planner", *map(str, args)], capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


# ----------------------------------------------------------------------------------- shell


def test_shell_expansion_follows_bash():
    text = """
N=${UNSET:-4}
ARGS=(--a 1 "--b two"  # comment inside an array
  --c)
ARGS+=(--d)
W=$((N*2))
cmd ${ARGS[@]} "${ARGS[@]}" "$@" $W ${N:+set} '$N' "x$N"
"""
    s = read_script(text)
    # unquoted ${ARGS[@]} splits "--b two"; quoted keeps it; "$@" is no word at all
    assert s.commands == [["cmd", "--a", "1", "--b", "two", "--c", "--d", "--a", "1", "--b two", "--c", "--d",
                           "8", "set", "$N", "x4"]]


def test_shell_if_branches_and_exit():
    text = """
MODE=fp8
if [[ "$MODE" == "bf16" ]]; then a; elif [ -z "$EMPTY" ] && [[ $MODE != x ]]; then b; else c; fi
if [ ! -f "$SCRIPT" ]; then echo missing; exit 1; fi
last
exit 0
never
"""
    assert read_script(text).commands == [["b"], ["last"]]


def test_shell_never_runs_commands():
    s = read_script('X="$(rm -rf /tmp/nothing)"\necho "$X"')
    assert s.commands == [["echo", "<command-substitution>"]]
    assert any("not run" in n for n in s.notes)


# ----------------------------------------------------------------------------------- Megatron-LM


def test_megatron_llama3_example_script():
    launch = read_launch(LLAMA)
    assert detect_format(LLAMA, LLAMA.read_text()) == "megatron"
    assert launch.model.name == "llama3-8b"  # 32 x 4096, 14336 SwiGLU, 32 heads / 8 groups, RMSNorm, RoPE, untied
    assert launch.gpus == 8  # GPUS_PER_NODE=8 x NUM_NODES=1 via torchrun --nproc_per_node / --nnodes
    v = launch.values
    assert (v["tp"], v["cp"], v["pp"], v["mbs"], v["gbs"], v["seq_len"]) == (1, 1, 1, 1, 128, 8192)
    assert v["precision"] == "fp8"  # DTYPE="fp8" -> --fp8-format hybrid
    assert v["zero"] == 1 and v["dp_comm_overlap"] is True  # --use-distributed-optimizer --overlap-grad-reduce
    assert v["grad_dtype"] == "bf16" and v["loss"] == "fused" and v["attention"] == "flash3"
    assert v["recompute"] == "none" and "recompute" not in launch.stated
    assert v["fp8_param_gather"] is True and "fp8_param_gather" in launch.stated  # --fp8-param-gather
    assert not any(u.name == "--fp8-param-gather" for u in launch.unsupported)
    assert "--lr" in launch.ignored and "--save" in launch.ignored
    assert launch.unknown == []


def test_megatron_gpt3_example_lists_unknown_and_fp16():
    launch = read_launch(GPT3)
    assert launch.model.name == "gpt3-175b"  # 96 x 12288, 96 heads, GeLU, LayerNorm, learned positions
    assert (launch.values["tp"], launch.values["pp"], launch.values["gbs"]) == (8, 16, 1536)
    # --step-batch-size-schedule is a TrainingConfig field at the pinned Megatron-LM (known, not priced); the
    # script expands its array unquoted, so bash splits the schedule and the words after 0:16 have no flag.
    assert any(u.name == "--step-batch-size-schedule" for u in launch.unsupported)
    assert "2.4B:320 (a word with no flag before it)" in launch.unknown
    assert any(u.name == "--fp16" for u in launch.unsupported)
    assert launch.values["zero"] == 0 and launch.values["dp_comm_overlap"] is False  # Megatron's defaults


def test_megatron_bare_argument_list_and_shape_without_preset(tmp_path):
    args = tmp_path / "args.txt"
    args.write_text("--num-layers 4 --hidden-size 512 --num-attention-heads 8 --swiglu --normalization RMSNorm\n"
                    "--position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear\n"
                    "--seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 2 --tokenizer-type NullTokenizer\n"
                    "--vocab-size 1000 --recompute-granularity full --recompute-method block --recompute-num-layers 1\n"
                    "--bf16 --no-such-flag 3\n")
    launch = read_launch(args)
    m = launch.model
    # validate_args: ffn = int(4 * 512 * 2/3 / 64) * 64 = 1344; NullTokenizer 1000 + EOD = 1001 -> padded to 1024
    assert (m.num_layers, m.ffn_hidden_size, m.vocab_size, m.gated_mlp, m.tied_embeddings) == (4, 1344, 1024, True, False)
    assert m.dropout is True  # --attention-dropout / --hidden-dropout default 0.1
    assert launch.values["recompute"] == "full" and launch.values["recompute_layers"] == 1
    assert launch.unknown == ["--no-such-flag"] and launch.gpus is None
    assert launch.gbs_rule == "mbs*dp"
    r = resolve(launch, gpu="h100", gpus=8)
    assert r.layout.gbs == 2 * 8  # validate_args: global batch = micro-batch x data-parallel size


def test_megatron_overrides_and_derived_batch():
    launch = read_launch(LLAMA)
    r = resolve(launch, gpu="h100", gpus=32, given={"tp": 2})
    assert r.layout.tp == 2 and r.layout.dp == 16 and r.layout.gbs == 128
    assert any(o.startswith("--tp 2 (the file: 1)") for o in r.overrides)
    assert r.layout.sequence_parallel is True  # the file's --sequence-parallel applies at tp 2


# ----------------------------------------------------------------------------------- torchtitan


def test_torchtitan_toml_70b():
    launch = read_launch(DATA / "torchtitan_llama3_70b.toml")
    assert launch.model.name == "llama3-70b"
    v = launch.values
    # tensor_parallel_degree 8, shard -1 (FSDP), mode full, local_batch_size 8, seq_len 8192, compile off
    assert (v["tp"], v["zero"], v["recompute"], v["mbs"], v["seq_len"], v["kernels"]) == (8, 3, "full", 8, 8192, "eager")
    r = resolve(launch, gpu="a100", gpus=64)  # the file's comment: a preset for 64 A100 GPUs
    assert r.layout.dp == 8 and r.layout.gbs == 64  # global_batch_size -1: 8 per data-parallel rank
    assert "optimizer.lr" in launch.ignored
    # A dense BF16 model: torchtitan's FP8 recipe and grouped expert GEMMs do not apply, so they
    # are not read into the layout (its summary showed 'fp8-current fused-experts').
    assert "fp8_recipe" not in v and "moe_grouped_gemm" not in v


def test_torchtitan_03_command_line(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("torchrun --nnodes 2 --nproc-per-node 8 -m torchtitan.train --module llama3 --config llama3_405b "
                      "--parallelism.pipeline_parallel_degree 2 --parallelism.data_parallel_shard_degree 1 "
                      "--training.global_batch_size 64 activation_checkpoint:selective\n")
    launch = read_launch(script)
    v = launch.values
    assert launch.model.name == "llama3-405b" and launch.gpus == 16
    # llama3_405b: float8 converter, compile + async TP, tp 8; shard 1 -> plain replication (ZeRO-0)
    assert (v["precision"], v["kernels"], v["tp"], v["tp_comm_overlap"], v["zero"]) == ("fp8", "fused", 8, True, 0)
    # 0.3's selective AC is per-op SAC: full recompute of half of each stage's layers (2 quarters)
    assert (v["recompute"], v["recompute_share"]) == ("full", 2) and v["vpp"] == 1 and v["gbs"] == 64


# ----------------------------------------------------------------------------------- DeepSpeed


def test_deepspeed_needs_a_model_and_reads_the_batch_identity():
    path = DATA / "deepspeed_zero2.json"
    with pytest.raises(PlannerInputError, match="--model"):
        resolve(read_launch(path), gpu="h100")
    launch = read_launch(path, model=get_model("llama3-8b"))
    v = launch.values
    assert (v["zero"], v["mbs"], v["gbs"], v["recompute"], v["dp_comm_overlap"]) == (2, 2, 256, "full", False)
    # bf16 without communication_data_type: DeepSpeed reduces in the model's dtype (runtime/engine.py)
    assert v["grad_dtype"] == "bf16"
    assert launch.dp == 256 // (2 * 4)
    assert any("offload_optimizer" in u.name for u in launch.unsupported)
    assert "zero_optimizatoin" in launch.unknown
    r = resolve(launch, gpu="h100")
    assert r.gpus == 32 and r.layout.dp == 32


# ----------------------------------------------------------------------------------- NeMo / Megatron-Bridge


def test_nemo2_yaml():
    launch = read_launch(DATA / "nemo2_llama3_8b.yaml")
    v = launch.values
    assert launch.model.name == "llama3-8b" and launch.gpus == 8
    assert (v["tp"], v["pp"], v["cp"], v["gbs"], v["mbs"], v["seq_len"], v["zero"]) == (1, 1, 2, 512, 1, 8192, 1)
    assert v["precision"] == "bf16" and v["dp_comm_overlap"] is True


def test_bridge_override_strings_name_gpus_and_type():
    launch = read_launch(DATA / "bridge_overrides.txt", "nemo")
    assert launch.model.name == "llama3-8b" and launch.gpus == 2 and launch.gpu == "h100"
    assert launch.values["cp"] == 2 and launch.values["zero"] == 1
    assert resolve(launch).setup.gpu.name == "h100-sxm"  # no --gpu needed: the recipe name says


def test_nemo2_override_strings():
    launch = read_launch(DATA / "nemo2_overrides.sh", "nemo")
    assert launch.gpus == 16 and launch.values["tp"] == 2 and launch.values["recompute"] == "full"


# ----------------------------------------------------------------------------------- CLI


def test_cli_evaluate_from_launch_lists_what_it_read():
    code, out, err = run("evaluate", "--from-launch", GPT3, "--gpu", "h100", "--gpus", "1024")
    assert code == 0, err
    assert "gpt3-175b" in out and "--step-batch-size-schedule" in out and "unknown" in out
    assert "--fp16" in out and "defaults" in out and "step time" in out


def test_cli_evaluate_from_launch_json_and_override_note():
    code, out, err = run("evaluate", "--from-launch", LLAMA, "--gpu", "h100", "--seq-len", "4096", "--json")
    assert code == 0, err
    rec = json.loads(out)
    assert rec["layout"]["seq_len"] == 4096 and rec["layout"]["gbs"] == 128
    assert any(o.startswith("--seq-len 4096") for o in rec["launch"]["overrides"])
    # --gpus over the file's own count (torchrun --nnodes 1 --nproc-per-node 8) is an override too.
    code, out, err = run("evaluate", "--from-launch", LLAMA, "--gpu", "h100", "--gpus", "16", "--json")
    rec = json.loads(out)
    assert rec["gpus"] == 16 and rec["launch"]["gpus"] == 8
    assert any(o.startswith("--gpus 16 (the file: 8,") for o in rec["launch"]["overrides"]), rec["launch"]["overrides"]


@pytest.mark.parametrize("args,needle", [
    (("--from-launch", LLAMA), "--gpu"),
    (("--from-launch", DATA / "nope.sh", "--gpu", "h100"), "nope.sh"),
    (("--from-launch", LLAMA, "--gpu", "h100", "--launch-format", "keras"), "--launch-format keras"),
    (("--from-launch", DATA / "deepspeed_zero2.json", "--gpu", "h100"), "--model"),
    (("--gpu", "h100"), "--from-launch"),
])
def test_cli_from_launch_errors_are_one_line(args, needle):
    code, out, err = run("evaluate", *args)
    assert code == 2 and "Traceback" not in err and err.strip().count("\n") == 0
    assert needle in err


def test_cli_search_from_launch_shows_the_reference_row():
    code, out, err = run("search", "--from-launch", LLAMA, "--gpu", "h100", "--gpus", "16", "--top", "3", "--keep", "tp")
    assert code == 0, err
    assert any(line.lstrip().startswith("ref ") for line in out.splitlines())
    assert "reference (the file's layout): #" in out and "kept from the file: tp" in out
    code, _, err = run("search", "--from-launch", LLAMA, "--gpu", "h100", "--keep", "bogus")
    assert code == 2 and "--keep bogus" in err
    # The ref row's headroom is against the same limit as the ranked rows' (79.2 GiB less 5%: 75.2),
    # not the GPU's capacity: the file's 77.2 GiB layout shows -2.0 GiB beside 'DOES NOT FIT'.
    code, out, err = run("search", "--from-launch", LLAMA, "--gpu", "h100", "--top", "2")
    ref = next(line for line in out.splitlines() if line.lstrip().startswith("ref "))
    assert "77.2/79 GiB  -2.0 GiB" in ref and "DOES NOT FIT the 75.2 GiB limit" in out, out


def test_cli_export_from_launch_converts_megatron_to_torchtitan(tmp_path):
    code, out, err = run("export", "--from-launch", LLAMA, "--gpu", "h100", "--gpus", "16", "--format", "torchtitan", "--out", tmp_path,
                         "--precision", "bf16", "--torchtitan-version", "0.2",
                         # what torchtitan runs, given in place of the Megatron file's (refused otherwise)
                         "--zero", "3", "--fsdp", "fsdp2", "--loss", "eager", "--attention", "flash", "--grad-dtype", "fp32",
                         "--grad-accum-pass", "autograd")
    assert code == 0, err
    assert "wrote" in out and (tmp_path / "torchtitan.toml").exists()
    back = read_launch(tmp_path / "torchtitan.toml")
    assert (back.values["tp"], back.values["mbs"], back.values["gbs"], back.values["seq_len"]) == (1, 1, 128, 8192)
    assert back.dp == 16


def test_cli_search_from_launch_when_the_reference_does_not_fit():
    code, out, err = run("search", "--from-launch", LLAMA, "--gpu", "h100", "--gpus", "1", "--top", "2")
    assert code == 3, err  # nothing fits: the answer, with plain search's exit code
    assert "not ranked: it does not fit" in out and "nothing fits" in out


def test_sbatch_directives_give_the_gpu_count_and_type(tmp_path):
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=4\n#SBATCH --gres=gpu:h100:8\n"
                      "srun torchrun --nnodes ${SLURM_NNODES} --nproc-per-node 8 pretrain_gpt.py \\\n"
                      "  --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 \\\n"
                      "  --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --bf16 --tokenizer-type NullTokenizer --vocab-size 50000\n")
    launch = read_launch(script)
    assert launch.gpus == 32 and launch.gpu == "h100"


def test_cli_evaluate_from_launch_that_does_not_fit_exits_3():
    """As plain evaluate: a layout over the GPU's memory is an answer (exit 3), not an error."""
    code, out, err = run("evaluate", "--from-launch", LLAMA, "--gpu", "h100", "--seq-len", "16384", "--json")
    assert code == 3, err
    assert json.loads(out)["fits"] is False


def test_cli_from_launch_honours_calibration(tmp_path):
    """--calibration prices the file's layout with the profile's constants (GEMMs at 0.6 and 0.5 of peak, not 0.86 and 0.66: slower)."""
    profile = tmp_path / "slow.toml"
    profile.write_text('[constants.gemm_efficiency_bf16]\nvalue = 0.6\n[constants.gemm_efficiency_fp8]\nvalue = 0.5\n')
    base = json.loads(run("evaluate", "--from-launch", LLAMA, "--gpu", "h100", "--json")[1])
    code, out, err = run("evaluate", "--from-launch", LLAMA, "--gpu", "h100", "--json", "--calibration", profile)
    assert code == 0, err
    assert json.loads(out)["step_time_s"] > base["step_time_s"] * 1.15


def test_cli_search_from_launch_ref_row_gets_run_figures_and_pareto_is_refused():
    """The file's row showed '-' for cost, run time, goodput and MWh beside ranked rows that had
    them; --pareto printed a front under the 'top N layouts' header and ranked the file's layout
    against the front's few rows (#12 of 2,582 where it is behind the 200 best)."""
    toml = DATA / "torchtitan_llama3_70b.toml"
    code, out, err = run("search", "--from-launch", toml, "--gpu", "h100", "--gpus", "64", "--top", "2",
                         "--price-per-gpu-hour", "2", "--train-tokens", "1T", "--json")
    assert code == 0, err
    ref = json.loads(out)["reference"]["record"]
    # 1T tokens at its own tokens/s over 64 GPUs, in wall time (goodput), at $2 per GPU-hour.
    assert ref["run_time_s"] == pytest.approx(1e12 / ref["tokens_per_s"] / ref["goodput"], rel=1e-6)
    assert ref["run_cost_usd"] == pytest.approx(64 * ref["run_time_s"] * 2 / 3600, rel=1e-9)
    code, out, err = run("search", "--from-launch", toml, "--gpu", "h100", "--gpus", "64", "--pareto")
    assert code == 2 and "--pareto shows a front" in err and out == ""
