"""Launch readers against shapes found in upstream launch scripts (bigscience tr11-176B-ml.slurm,
Megatron-LM examples). Each script is written by hand with the few lines that matter; the
expected values are what bash itself does with them."""

from planner.launch.megatron import find_arguments
from planner.launch.shell import read_script


def test_backslash_at_end_of_a_comment_does_not_continue_it():
    # bash: a comment runs to the end of its line; a trailing backslash in it is literal, so the
    # next line is a command of its own (bigscience train/tr11-176B-ml/tr11-176B-ml.slurm has
    # '#    --universal-checkpoint \' right above 'export CMD=" ...').
    text = '#    --universal-checkpoint \\\nexport CMD="pretrain_gpt.py --num-layers 70"\necho $CMD\n'
    script = read_script(text, "x.slurm", {})
    assert script.variables.get("CMD") == "pretrain_gpt.py --num-layers 70"
    assert script.commands == [["echo", "pretrain_gpt.py", "--num-layers", "70"]]


def test_line_continuations_still_join_outside_comments():
    text = 'python pretrain_gpt.py \\\n    --num-layers 2 \\\n    --hidden-size 64\n'
    assert read_script(text, "x.sh", {}).commands == [
        ["python", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "64"]]


def test_crlf_line_continuations_join_too():
    text = 'python pretrain_gpt.py --num-layers\\\r\n 2 --hidden-size 64\n'
    assert read_script(text, "x.sh", {}).commands == [
        ["python", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "64"]]


def test_a_file_descriptor_before_a_redirection_is_not_a_word():
    # 'cmd ... 2>&1 | tee log' (bigscience tr11-176B-ml.slurm, most Megatron-DeepSpeed examples):
    # the 2 belongs to the redirection (bash(1) REDIRECTION: [n]>&word).
    text = 'python pretrain_gpt.py --num-layers 2 2>&1 | tee log\npython x.py --a 1 2> err.txt\n'
    assert read_script(text, "x.sh", {}).commands == [
        ["python", "pretrain_gpt.py", "--num-layers", "2"], ["tee", "log"], ["python", "x.py", "--a", "1"]]


_TR11_SHAPE = """\
LOAD_RATIOS_SCRIPT=/repo/data/catalogue/load_ratios_meg_ds_format.py
python $LOAD_RATIOS_SCRIPT --dataset-ratios-path ratios.json --split train --output-meg-ds-ratio-file t.txt
export LAUNCHER="python -u -m torch.distributed.run --nproc_per_node 8 --nnodes 48"
export CMD=" `pwd`/pretrain_gpt.py --tensor-model-parallel-size 4 --pipeline-model-parallel-size 12 --num-layers 70"
srun --wait=60 --jobid $SLURM_JOB_ID bash -c "$LAUNCHER --node_rank \\$SLURM_PROCID $CMD" 2>&1 | tee -a main_log.txt
"""


def test_the_training_command_is_found_behind_a_data_helper_and_inside_bash_c():
    # bigscience train/tr11-176B-ml/tr11-176B-ml.slurm: a data-preparation 'python helper.py'
    # runs first; the training command is srun ... bash -c "$LAUNCHER ... $CMD".
    launcher, arguments, how = find_arguments(read_script(_TR11_SHAPE, "tr11.slurm", {"PWD": "."}))
    assert arguments == ["--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "12",
                         "--num-layers", "70"]
    assert "--nproc_per_node" in launcher and "--nnodes" in launcher
    assert how.endswith("pretrain_gpt.py")


def test_deepspeed_micro_batch_from_train_batch_size_splits_over_data_parallel_ranks(tmp_path):
    # DeepSpeed runtime/config.py _set_batch_related_parameters: with train_batch_size and
    # gradient_accumulation_steps but no train_micro_batch_size_per_gpu, micro = 512 // 8 // 1 = 64
    # (Megatron-DeepSpeed examples_deepspeed/curriculum_learning/ds_zero_stage_1_config_baseline.json).
    from planner.cli.from_launch.resolve import launch_job
    from planner.launch import read_launch

    path = tmp_path / "ds_config.json"
    path.write_text('{"train_batch_size": 512, "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 1},'
                    ' "bf16": {"enabled": true}}')
    problem, values, _, _ = launch_job(read_launch(str(path)), model="llama3-8b", gpus=8, gpu="h100")
    assert (problem.gbs, values["mbs"]) == (512, 64)


def test_eval_runs_the_command_its_words_spell():
    # Megatron-DeepSpeed examples_deepspeed/MoE/ds_pretrain_gpt_1.3B_MoE128.sh (and most of
    # examples_deepspeed/): run_cmd="deepspeed .../pretrain_gpt.py ${megatron_options} &> log"; eval ${run_cmd}
    text = ('opts=" --num-layers 24  --hidden-size 2048"\nD=`pwd`\n'
            'run_cmd="deepspeed ${D}/pretrain_gpt.py ${opts} &> ${D}/log.txt"\necho ${run_cmd}\neval ${run_cmd}\n')
    script = read_script(text, "x.sh", {})
    assert ["deepspeed", "<command-substitution>/pretrain_gpt.py", "--num-layers", "24", "--hidden-size",
            "2048"] in script.commands
    launcher, arguments, how = find_arguments(script)
    assert (launcher, arguments) == (["deepspeed"], ["--num-layers", "24", "--hidden-size", "2048"])


def test_bash_options_before_c_still_name_the_command_string():
    # Megatron-LM examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh: srun ... bash -x -c "${TRAINING_CMD}"
    for shell in ("bash -x -c", "bash -lc", "/bin/sh -c"):
        text = f'srun --mpi=pmix {shell} "torchrun --nproc-per-node 4 pretrain_gpt.py --num-layers 2"\n'
        launcher, arguments, _ = find_arguments(read_script(text, "x.sh", {}))
        assert arguments == ["--num-layers", "2"] and launcher[-2:] == ["--nproc-per-node", "4"], shell


def test_torchtitan_old_spellings_count_as_stated(tmp_path):
    # torchtitan 0.2.2 torchtitan/models/llama3/train_configs/llama3_405b.toml sets
    # parallelism.enable_async_tensor_parallel = true (0.3 moved it to compile.*); 0.1.0's
    # llama3_8b.toml sets training.compile = false (later compile.enable). Both are the file's
    # settings, not defaults (async TP's default is off: it cannot be listed as a default 'on').
    from planner.launch import read_launch

    path = tmp_path / "job.toml"
    path.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 1\nseq_len = 8192\n'
                    'compile = false\n[parallelism]\ntensor_parallel_degree = 8\nenable_async_tensor_parallel = true\n')
    launch = read_launch(str(path))
    assert {"tp_comm_overlap", "kernels"} <= launch.stated
    assert launch.values["tp_comm_overlap"] is True and launch.values["kernels"] == "eager"
    assert not {d.option for d in launch.defaults} & {"tp_comm_overlap", "kernels"}


def test_bridge_yaml_that_switches_a_setting_off_states_it(tmp_path):
    # Megatron-Bridge examples/models/qwen/qwen3_next/conf/qwen3_next_80b_a3b_finetune_override_example.yaml
    # sets model.cross_entropy_loss_fusion: False and ddp.grad_reduce_in_fp32: true: the file's own
    # settings (unfused loss, FP32 reduction), so they are read, not listed as defaults "not in the file".
    from hardware_catalog import get_model
    from planner.launch import read_launch

    path = tmp_path / "override.yaml"
    path.write_text("model:\n  cross_entropy_loss_fusion: False\ntrain:\n  global_batch_size: 64\n"
                    "ddp:\n  grad_reduce_in_fp32: true\n")
    launch = read_launch(str(path), model=get_model("llama3-8b"))
    assert (launch.values["loss"], launch.values["grad_dtype"]) == ("unfused", "fp32")
    assert {"loss", "grad_dtype"} <= launch.stated
    assert not {d.option for d in launch.defaults} & {"loss", "grad_dtype"}
    path.write_text("ddp:\n  grad_reduce_in_fp32: false\n")
    assert read_launch(str(path), model=get_model("llama3-8b")).values["grad_dtype"] == "bf16"


_CASE = """\
MODEL_SCALE="800M" # or "8B"
case "${MODEL_SCALE}" in
    "800M")
        TP=1
        HIDDEN_SIZE=1024
        ;;
    "8B"|8b)
        TP=4
        HIDDEN_SIZE=4096
        ;;
    *)
        echo "Invalid version specified"
        exit 1
        ;;
esac
torchrun --nproc_per_node 8 pretrain_hybrid.py --tensor-model-parallel-size ${TP} --hidden-size ${HIDDEN_SIZE}
"""


def test_case_runs_the_matching_clause():
    # Megatron-LM examples/mamba/train.sh (d98e8a6) picks its shape in a 'case' block; skipped, it
    # left --hidden-size and --tensor-model-parallel-size without values. bash runs the first
    # clause whose pattern matches (bash(1) Compound Commands: case).
    for scale, tp, hidden in (("800M", "1", "1024"), ("8B", "4", "4096"), ("8b", "4", "4096")):
        script = read_script(_CASE.replace('"800M" #', f'"{scale}" #'), "train.sh", {})
        assert script.commands[-1][-4:] == ["--tensor-model-parallel-size", tp, "--hidden-size", hidden], scale
    script = read_script(_CASE.replace('"800M" #', '"70B" #'), "train.sh", {})  # the *) clause exits
    assert script.commands == [["echo", "Invalid version specified"]]
    one_line = 'case $X in (a) Y=1 ;; b|c) Y=2 ;; esac; echo $Y\n'
    assert read_script(one_line, "x.sh", {"X": "c"}).commands == [["echo", "2"]]


def test_model_flag_that_replaces_a_stated_shape_says_so(tmp_path):
    # The README: flags next to --from-launch override the file. --model over a file that states
    # its own shape (Megatron-LM examples/llama/train_llama3_8b_h100_fp8.sh: 32 layers, hidden
    # 4096, 32 heads) used to print only the preset's name.
    from hardware_catalog import get_model
    from planner.launch import read_launch

    path = tmp_path / "args.txt"
    path.write_text("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 8192\n")
    note = read_launch(str(path), "megatron", model=get_model("llama3-70b")).model_note
    assert "--num-layers 32" in note and "--hidden-size 4096" in note and "--num-attention-heads 32" in note
    assert read_launch(str(path), "megatron", model=get_model("llama3-8b")).model_note == ""


def test_an_omegaconf_interpolation_is_refused_by_name(tmp_path):
    # NeMo examples/nlp/language_modeling/conf/megatron_gpt_config.yaml (8cfedd7):
    # max_position_embeddings: ${.encoder_seq_length}. It used to fail as "must be an integer"
    # without the file's name or the reason.
    import pytest

    from hardware_catalog.errors import PlannerInputError
    from planner.launch import read_launch

    path = tmp_path / "megatron_gpt_config.yaml"
    path.write_text("model:\n  encoder_seq_length: 2048\n  max_position_embeddings: ${.encoder_seq_length}\n"
                    "  num_layers: 12\n  hidden_size: 768\n  num_attention_heads: 12\n")
    with pytest.raises(PlannerInputError) as err:
        read_launch(str(path))
    message = str(err.value)
    assert str(path) in message and "model.max_position_embeddings" in message and "interpolation" in message


def test_a_megatron_deepspeed_launch_is_refused_not_priced_as_megatron_lm(tmp_path):
    # bigscience train/tr11-176B-ml/tr11-176B-ml.slurm and Megatron-DeepSpeed
    # examples_deepspeed/MoE/ds_pretrain_gpt_1.3B_MoE128.sh pass --deepspeed --deepspeed_config F
    # --zero-stage N --checkpoint-activations: read as Megatron-LM they were priced with ZeRO-0 and
    # no recompute (exit 0, or 3 'does not fit').
    import pytest

    from hardware_catalog.errors import PlannerInputError
    from planner.launch import read_launch

    path = tmp_path / "tr11.slurm"
    path.write_text("python -u -m torch.distributed.run --nproc_per_node 8 pretrain_gpt.py --num-layers 70 "
                    "--hidden-size 14336 --num-attention-heads 112 --checkpoint-activations --deepspeed "
                    "--deepspeed_config ds_config.json --zero-stage 0\n")
    with pytest.raises(PlannerInputError) as err:
        read_launch(str(path))
    assert str(err.value).startswith(f"{path}: --deepspeed: a Megatron-DeepSpeed launch")


def test_no_arguments_found_names_the_sourced_file(tmp_path):
    # Megatron-LM examples/academic_paper_scripts/sc21/run_table_1.sh (d98e8a6) sets its variables
    # and runs '. `pwd`/SBATCH.sh', where the training command lives.
    import pytest

    from hardware_catalog.errors import PlannerInputError
    from planner.launch import read_launch

    path = tmp_path / "run_table_1.sh"
    path.write_text("TP=1\nNLS=24\n. ./CONFIG.sh\n. ./SBATCH.sh\nexit 0\n")
    with pytest.raises(PlannerInputError, match=r"found no Megatron-LM arguments .*sources \. \./CONFIG\.sh, \. \./SBATCH\.sh"):
        read_launch(str(path))


def test_no_arguments_found_says_where_the_walk_stopped_or_what_it_skipped(tmp_path):
    # Megatron-Bridge examples/models/gpt_oss/slurm_pretrain.sh (067f987): CONTAINER_IMAGE="" then
    # 'if [ -z "$CONTAINER_IMAGE" ]; then ... exit 1; fi' before a 'for CONFIG in ...' loop that runs
    # the training command.
    import pytest

    from hardware_catalog.errors import PlannerInputError
    from planner.launch import read_launch

    body = ('for CONFIG in "${CONFIGS[@]}"; do\n  srun uv run python run_recipe.py --recipe r model.tp=$TP\ndone\n')
    path = tmp_path / "slurm_pretrain.sh"
    path.write_text('CONTAINER_IMAGE=""\nif [ -z "$CONTAINER_IMAGE" ]; then\n  echo need one\n  exit 1\nfi\n' + body)
    with pytest.raises(PlannerInputError, match=r"found no Megatron-LM arguments .*stops at 'exit 1'$"):
        read_launch(str(path), "megatron")
    path.write_text('CONTAINER_IMAGE="img"\n' + body)
    with pytest.raises(PlannerInputError, match=r"found no Megatron-LM arguments .*does not run its for loops$"):
        read_launch(str(path), "megatron")


def test_megatron_v2_recompute_flags_are_read(tmp_path):
    """Megatron-LM v2.x (tag v2.6 megatron/arguments.py): --checkpoint-activations set the uniform
    method with 1 layer per checkpoint (every layer recomputed); --activations-checkpoint-method
    block with --activations-checkpoint-num-layers N recomputes N layers per stage. They were listed
    as unknown and the run priced without recompute. The vocabulary note names --vocab-size."""
    from planner.launch import read_launch

    base = ("python pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2 --num-layers 32 "
            "--hidden-size 4096 --num-attention-heads 32 --seq-length 2048 --max-position-embeddings 2048 "
            "--micro-batch-size 4 --global-batch-size 256 --vocab-size 51200 ")
    path = tmp_path / "old.sh"
    path.write_text(base + "--checkpoint-activations\n")
    launch = read_launch(str(path))
    assert launch.values["recompute"] == "full" and "--checkpoint-activations" not in launch.unknown
    assert "(--vocab-size 51200)" in launch.model_note
    path.write_text(base + "--activations-checkpoint-method block --activations-checkpoint-num-layers 4\n")
    launch = read_launch(str(path))
    assert (launch.values["recompute"], launch.values["recompute_layers"]) == ("full", 4)


def _evaluate(*args):
    from typer.testing import CliRunner

    from planner.cli.main import app

    return CliRunner().invoke(app, ["evaluate", *map(str, args)])


def test_deepspeed_batch_keys_fix_dp_and_the_rest_of_the_gpus_must_be_stated(tmp_path):
    """DeepSpeed's batch identity train_batch_size = micro x GA x dp (runtime/config.py
    _batch_assertion): 512 = 1 x 4 x dp gives dp 128. On 512 GPUs the other 4x is model
    parallelism the JSON cannot state: it was priced as DP 512 with GA 1 (a layout DeepSpeed
    refuses, 21% faster than the one exported). Now refused unless --tp/--pp/--cp make up the 4;
    with --tp 4 sequence parallelism takes planner's default (on), as the export priced it."""
    import json

    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_batch_size": 512, "train_micro_batch_size_per_gpu": 1,
                               "gradient_accumulation_steps": 4, "bf16": {"enabled": True},
                               "zero_optimization": {"stage": 3}, "steps_per_print": 10}))
    job = ("--from-launch", cfg, "--model", "70b", "--gpus", "512", "--gpu", "h100")
    res = _evaluate(*job)
    assert res.exit_code == 2 and "batch keys give dp 128" in res.output and "tp x pp x cp = 4" in res.output, res.output
    res = _evaluate(*job, "--tp", "4")
    assert res.exit_code in (0, 3), res.output
    layout = next(line for line in res.output.splitlines() if line.startswith("layout"))
    assert "TP4" in layout and "DP128" in layout and "GA4" in layout and " SP" in layout and "no-SP" not in layout, layout
    # The batch keys were read, so they are not listed as 'not priced'.
    not_priced = res.output.split("not priced", 1)[1].split("\n  ")[0] + res.output.split("not priced", 1)[1].split("\n")[1]
    assert "train_batch_size" not in not_priced and "steps_per_print" in not_priced
