"""Read a Megatron-LM launch: a script (torchrun / srun / python ... pretrain_gpt.py ARGS), a
bash array of arguments (planner's ``megatron_args.sh``) or a bare argument list.

The script is walked, never run (``planner.launch.shell``). The command that starts a ``*.py``
entrypoint gives the Megatron arguments (the words after it) and the GPU count (torchrun
``--nnodes`` x ``--nproc-per-node``, torch.distributed.run.get_args_parser; else ``#SBATCH`` /
``srun`` ``--nodes`` x ``--gpus-per-node`` / ``--ntasks-per-node``). A file without such a
command gives its arguments as the bash array holding the most Megatron flags, or as the file's
words when it is a bare argument list.

Each argument is checked against ``megatron_arguments.txt`` (every flag of arguments.py at the
commit planner's export is checked against) and classified: mapped onto planner
(``planner.launch.mcore``), not priced (data, optimizer, logging, checkpoint groups and the
flags in ``NOT_PRICED``), not expressible (listed with how it was priced instead), or unknown.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from hardware_catalog.errors import PlannerInputError
from planner.launch.mcore import Settings, to_launch
from planner.launch.spec import Launch, integer

_QUIET_GROUPS = frozenset({
    "_add_logging_args", "_add_checkpointing_args", "_add_learning_rate_args", "_add_regularization_args",
    "_add_validation_args", "_add_initialization_args", "_add_data_args", "_add_tokenizer_args",
    "_add_autoresume_args", "_add_one_logger_args", "_add_ft_package_args", "_add_config_logger_args",
    "_add_straggler_detector_args", "_add_workload_inspector_server_args", "_add_inprocess_restart_args",
    "_add_rerun_machine_args", "_add_msc_args", "_add_biencoder_args", "_add_vision_args", "_add_retro_args",
    "_add_inference_args", "_add_rl_args", "_add_sft_args",
})
"""arguments.py groups whose flags leave step time and memory alone in planner's cost model."""

MAPPED = frozenset("""
num_layers hidden_size num_attention_heads ffn_hidden_size swiglu vocab_size tokenizer_type
make_vocab_size_divisible_by multi_latent_attention q_lora_rank kv_lora_rank qk_head_dim qk_pos_emb_head_dim
v_head_dim group_query_attention num_query_groups kv_channels num_experts moe_ffn_hidden_size
moe_shared_expert_intermediate_size moe_router_topk moe_router_num_groups moe_router_group_topk moe_layer_freq
position_embedding_type seq_length normalization untie_embeddings_and_output_weights disable_bias_linear
add_qkv_bias attention_dropout hidden_dropout max_position_embeddings tensor_model_parallel_size
pipeline_model_parallel_size context_parallel_size expert_model_parallel_size expert_tensor_parallel_size
sequence_parallel pipeline_model_parallel_layout hierarchical_context_parallel_sizes cp_comm_type
account_for_embedding_in_pipeline_split account_for_loss_in_pipeline_split num_virtual_stages_per_pipeline_rank
num_layers_per_virtual_pipeline_stage decoder_first_pipeline_num_layers decoder_last_pipeline_num_layers
micro_batch_size global_batch_size recompute_granularity recompute_activations recompute_method
recompute_num_layers recompute_modules use_torch_fsdp2 use_megatron_fsdp data_parallel_sharding_strategy
use_distributed_optimizer overlap_grad_reduce num_distributed_optimizer_instances fp8_format fp8_recipe bf16 fp16
fp4_format fp8_param_gather grad_reduce_in_bf16 tp_comm_overlap overlap_moe_expert_parallel_comm
cross_entropy_loss_fusion moe_token_dispatcher_type moe_enable_deepep moe_flex_dispatcher_backend
attention_backend use_flash_attn
""".split())
"""Argument dests ``planner.launch.mcore`` maps onto planner's model and options."""

NOT_PRICED = frozenset("""
use_mcore_models transformer_impl apply_layernorm_1p rotary_base rotary_percent rotary_interleaved
rotary_seq_len_interpolation_factor use_rope_scaling rope_scaling_factor norm_epsilon init_method_std
moe_grouped_gemm moe_router_load_balancing_type moe_aux_loss_coeff moe_z_loss_coeff moe_router_pre_softmax
moe_router_score_function moe_router_enable_expert_bias moe_router_topk_scaling_factor moe_router_bias_update_rate
moe_router_dtype moe_permute_fusion moe_input_jitter_eps moe_token_drop_policy fp8_amax_history_len
fp8_amax_compute_algo fp8_margin fp8_interval no_gradient_accumulation_fusion calculate_per_token_loss
manual_gc manual_gc_interval manual_gc_eval exit_duration_in_mins exit_interval exit_signal_handler train_iters
train_samples distributed_timeout_minutes overlap_param_gather delay_wgrad_compute qk_layernorm
attention_softmax_in_fp32 accumulate_allreduce_grads_in_fp32 distributed_backend use_cpu_initialization
empty_unused_memory_level check_for_nan_in_loss_and_grad check_for_spiky_loss check_for_large_grads
cross_entropy_fusion_impl deterministic_mode use_te_rng_tracker enable_experimental kitchen_config_file
kitchen_recipe_number local_rank align_grad_reduce align_param_gather ddp_bucket_size ddp_average_in_collective
overlap_param_gather_with_optimizer_step gradient_accumulation_fusion use_legacy_models spec log_interval profile
profile_ranks profile_step_start profile_step_end tensorboard_dir use_pytorch_profiler record_memory_history
memory_snapshot_path result_rejected_tracker_filename dataloader_type iterations_to_skip train_sync_interval
check_weight_hash_across_dp_replicas_interval dump_param_to_param_group_map no_check_for_nan_in_loss_and_grad
no_manual_gc_eval tp_comm_bootstrap_backend nccl_communicator_config_path distributed_timeout_seconds_after_init
lazy_mpu_init disable_gloo_process_groups high_priority_stream_groups hysteresis initial_loss_scale loss_scale
loss_scale_window min_loss_scale apply_query_key_layer_scaling rope_type mscale mscale_all_dim rotary_scaling_factor
te_rng_tracker inference_rng_tracker moe_per_layer_logging moe_router_force_load_balancing moe_router_fusion
moe_deepep_num_sms moe_use_legacy_grouped_gemm disable_symmetric_registration openai_gelu onnx_safe squared_relu
use_te_activation_func no_async_tensor_model_parallel_allreduce no_clone_scatter_output_in_embedding no_pin_cpu_grads
no_pin_cpu_params model_parallel_size ddp_num_buckets ddp_pad_buckets_for_high_nccl_busbw
suggested_communication_unit_size no_gradient_reduce_div_fusion use_tp_pp_dp_mapping yaml_cfg no_rope_fusion
optimizer
""".split())
"""Known flags outside the quiet groups that planner's model does not price either way."""

LAUNCHERS = ("torchrun", "python", "python3", "deepspeed", "srun", "exec", "env", "mpirun", "numactl", "uv", "accelerate")
_STORE_FALSE = {"--disable-bias-linear": ("add_bias_linear", False)}


@lru_cache(maxsize=1)
def known_flags() -> dict[str, tuple[str, str]]:
    """flag -> (kind: switch | value | list, arguments.py group), from megatron_arguments.txt."""
    out = {}
    for line in Path(__file__).with_name("megatron_arguments.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("--"):
            flag, kind, group = line.split()[:3]
            out[flag] = (kind, group)
    return out


def _dest(flag: str) -> str:
    return flag[2:].replace("-", "_")


def parse_arguments(words: list[str], launch: Launch) -> Settings:
    """Megatron arguments -> ``Settings`` (the last occurrence of a flag wins, as with argparse);
    unknown and unmapped flags go to ``launch``'s lists."""
    known, s = known_flags(), Settings()
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--"):
            launch.unknown.append(f"{word} (a word with no flag before it)")
            continue
        flag, eq, inline = word.partition("=")
        kind = known.get(flag, ("unknown", ""))[0]
        values = [inline] if eq else []
        if not eq and kind in ("value", "list", "unknown"):
            while i < len(words) and not _is_flag(words[i]):
                values.append(words[i])
                i += 1
                if kind == "value":
                    break
        _record(flag, kind, values, s, launch)
    return s


def _is_flag(word: str) -> bool:
    return word.startswith("--") or (word.startswith("-") and not re.fullmatch(r"-[\d.]+(e-?\d+)?", word))


def _record(flag: str, kind: str, values: list[str], s: Settings, launch: Launch) -> None:
    known = known_flags()
    if kind == "unknown":
        launch.unknown.append(flag)
        return
    dest = _dest(flag)
    if flag in _STORE_FALSE:
        dest, value = _STORE_FALSE[flag]
    elif kind == "switch":
        value = True
    elif kind == "list":
        value = values
    elif not values:
        launch.notes.append(f"{flag} has no value (an unset variable in the script?): ignored")
        return
    else:
        value = values[0]
    if dest == "optimizer" and value != "adam":
        launch.cannot(f"{flag} {value}", "with Adam's two FP32 moments")
    elif dest in MAPPED or flag in _STORE_FALSE or dest == "torch_fsdp2_no_reshard_after_forward":
        s.values[dest] = value
        s.where[dest] = flag
    elif known[flag][1] in _QUIET_GROUPS or dest in NOT_PRICED:
        launch.ignored.append(flag)
    else:
        launch.cannot(flag, "without it (no planner option)")


# ----------------------------------------------------------------------------------- script


def _entry_index(words: list[str]) -> int | None:
    """Index of the ``*.py`` entrypoint in a launch command, or None."""
    if not words or words[0].rsplit("/", 1)[-1] not in LAUNCHERS:
        return None
    for k, word in enumerate(words):
        if word.endswith(".py") and not words[k - 1].startswith("--rdzv"):
            return k
    return None


def find_arguments(script) -> tuple[list[str], list[str], str]:
    """(launcher words, Megatron arguments, how the file launches)."""
    for words in script.commands:
        k = _entry_index(words)
        if k is not None:
            return words[:k], words[k + 1:], f"{words[0].rsplit('/', 1)[-1]} ... {words[k].rsplit('/', 1)[-1]}"
    flat = [w for words in script.commands for w in words]
    if flat and all(words[0].startswith("--") for words in script.commands):
        return [], flat, "a bare argument list"
    known = known_flags()
    best = max(script.array_order, key=lambda n: sum(w in known for w in script.arrays[n]), default=None)
    if best is not None and any(w in known for w in script.arrays[best]):
        return [], script.arrays[best], f"the bash array {best}"
    raise PlannerInputError(f"{script.path}: found no Megatron-LM arguments (no command running a *.py entrypoint, "
                            "no bash array of Megatron flags, no argument list)")


def _option(words: list[str], *names: str):
    """Value of the last ``--name V`` / ``--name=V`` / ``-N V`` among ``words``."""
    found = None
    for k, word in enumerate(words):
        for name in names:
            if word == name and k + 1 < len(words):
                found = words[k + 1]
            elif word.startswith(name + "="):
                found = word.split("=", 1)[1]
    return found


def _count(text, where: str):
    if text is None or text == "":
        return None
    text = str(text).split(":")[-1]  # torchrun --nnodes MIN:MAX
    if not re.fullmatch(r"\d+", text):
        return None
    return integer(text, where)


def gpu_count(launcher: list[str], script, launch: Launch) -> None:
    """GPUs = nodes x processes per node, from torchrun's words, else #SBATCH / srun."""
    sb = script.sbatch
    nodes = _count(_option(launcher, "--nnodes", "--num_nodes", "--num-nodes"), "torchrun --nnodes")
    per_node = _count(_option(launcher, "--nproc-per-node", "--nproc_per_node", "--num_gpus", "--num-gpus"),
                      "torchrun --nproc-per-node")
    nodes = nodes or _count(_option(launcher + sb, "--nodes", "-N"), "--nodes")
    per_node = per_node or _count(_option(sb + launcher, "--gpus-per-node", "--ntasks-per-node"), "--gpus-per-node")
    gres = _option(sb + launcher, "--gres")
    m = re.fullmatch(r"gpu:(?:([A-Za-z][\w-]*):)?(\d+)", gres or "")
    if m:
        per_node = per_node or int(m.group(2))
        launch.gpu = m.group(1) or launch.gpu
    if per_node:
        launch.gpus = (nodes or 1) * per_node
        launch.gpus_note = f"{nodes or 1} node(s) x {per_node} processes"


def _environment(text: str) -> dict:
    """Variables SLURM would set, from the #SBATCH directives (so ${SLURM_NNODES} resolves)."""
    from planner.launch.shell import read_script

    sb = read_script(text).sbatch
    env = {"PWD": "."}
    nodes = _option(sb, "--nodes", "-N")
    if nodes:
        env.update(SLURM_NNODES=nodes, SLURM_JOB_NUM_NODES=nodes)
    per = _option(sb, "--gpus-per-node")
    if per:
        env["SLURM_GPUS_PER_NODE"] = per
    return env


def read(text: str, path: str, model=None) -> Launch:
    """A Megatron-LM launch file -> ``Launch``."""
    from planner.launch.shell import read_script

    script = read_script(text, path, _environment(text))
    launcher, arguments, how = find_arguments(script)
    launch = Launch(format="megatron", path=path, launcher=how)
    gpu_count(launcher, script, launch)
    settings = parse_arguments(arguments, launch)
    launch.notes += script.notes
    return to_launch(settings, launch, model)
