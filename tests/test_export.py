"""planner.export: launch files for torchrun, Megatron-LM, DeepSpeed, torchtitan and SLURM.

Models and clusters are built here (no presets), so these tests only depend on the schema.
Scripts are checked with ``bash -n`` and run with stand-ins (PATH shims) for torchrun, srun and
scontrol that record their argv; torch's own torchrun parser and DeepSpeed's config parser are
used when those packages are importable.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from hardware_catalog.errors import PlannerInputError
from hardware_catalog.schema import ClusterSpec, MLASpec, ModelSpec, MoESpec
from planner.export import FILES, FORMATS, export_layout
from planner.export import megatron, torchtitan
from planner.export.common import build_plan

BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="bash not available")

# ----------------------------------------------------------------------------------- fixtures

LLAMA3_405B = ModelSpec(
    name="llama3-405b", family="llama", num_layers=126, hidden_size=16384, num_attention_heads=128,
    num_kv_heads=8, ffn_hidden_size=53248, vocab_size=128256, max_position_embeddings=131072, default_seq_len=8192,
)
LLAMA3_8B = ModelSpec(
    name="llama3-8b", family="llama", num_layers=32, hidden_size=4096, num_attention_heads=32,
    num_kv_heads=8, ffn_hidden_size=14336, vocab_size=128256, max_position_embeddings=131072,
)
MIXTRAL = ModelSpec(
    name="mixtral-8x7b", family="mixtral", num_layers=32, hidden_size=4096, num_attention_heads=32,
    num_kv_heads=8, ffn_hidden_size=14336, vocab_size=32000, max_position_embeddings=32768,
    moe=MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=14336),
)
DEEPSEEK_LIKE = ModelSpec(
    name="deepseek-like", family="deepseek", num_layers=61, hidden_size=7168, num_attention_heads=128,
    ffn_hidden_size=18432, vocab_size=129280, max_position_embeddings=4096,
    moe=MoESpec(num_experts=256, top_k=8, expert_ffn_hidden_size=2048, num_shared_experts=1, num_dense_layers=3),
    mla=MLASpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
)
DGX_H100 = ClusterSpec(
    name="dgx-h100", gpu="h100-sxm", gpus_per_node=8, scaleup_domain_size=8, scaleup_latency_us=2.0,
    scaleup_efficiency=0.8, nic="ib-ndr400", nics_per_node=8, network_efficiency=0.8, sources={"*": "test"},
)


def record(model: ModelSpec, **layout) -> dict:
    """A ``planner evaluate --json`` shaped record (numbers made up; the export copies them)."""
    lay = dict(tp=1, pp=1, dp=1, cp=1, ep=1, etp=1, vpp=1, zero=1, mbs=1, gbs=8, seq_len=4096,
               recompute="selective", sequence_parallel=None, precision="bf16",
               pp_first_layers=None, pp_last_layers=None)
    lay.update(layout)
    if lay["sequence_parallel"] is None:
        lay["sequence_parallel"] = lay["tp"] > 1
    lay["grad_accum"] = lay["gbs"] // (lay["dp"] * lay["mbs"])
    gpus = lay["tp"] * lay["cp"] * lay["pp"] * lay["dp"]
    lay["gpus"] = gpus
    return {
        "model": model.name, "gpu": "h100-sxm", "cluster": "dgx-h100", "gpus": gpus, "layout": lay,
        "step_time_s": 10.5, "tokens_per_s": 1.6e6, "tokens_per_s_per_gpu": 812.5, "mfu": 0.41, "hfu": 0.44,
        "memory_gib": {"weights": 10.0, "gradients": 5.0, "optimizer": 20.0, "activations": 20.0, "logits": 1.0,
                       "workspace": 2.0, "peak": 61.2, "capacity": 79.6},
        "fits": True, "breakdown": {"compute": 8.0}, "planner_version": "0.1.0",
        "command": "planner evaluate --model x --gpus 8",
    }


def titan(model: ModelSpec, **layout) -> dict:
    """A record torchtitan runs as priced (what it fixes, planner.frameworks.torchtitan.TABLE: eager loss,
    FSDP2 rather than ZeRO-1, full or no recompute, tensorwise FP8 scaling, autograd's gradient accumulation)."""
    return record(model, **{"zero": 3, "recompute": "full", "loss": "eager", "fsdp": "fsdp2", "fp8_recipe": "current",
                            "grad_accum_pass": "autograd", **layout})


def dense_405b() -> dict:
    """Llama 3 405B as trained: TP8 PP16 with 7-layer first/last stages, DP128 (16384 GPUs)."""
    return record(LLAMA3_405B, tp=8, pp=16, dp=128, gbs=2048, seq_len=8192, pp_first_layers=7, pp_last_layers=7)


def moe_mixtral() -> dict:
    """Mixtral 8x7B on 64 GPUs: TP2 PP4 (interleaved, VPP2) DP8 with EP8."""
    return record(MIXTRAL, tp=2, pp=4, dp=8, ep=8, etp=2, vpp=2, gbs=256, seq_len=4096)


def even_dense() -> dict:
    """An even pipeline: Llama 3 8B shape, TP4 PP2 DP4, ZeRO-1."""
    return record(LLAMA3_8B, tp=4, pp=2, dp=4, mbs=2, gbs=64, seq_len=8192)


def ds_dense() -> dict:
    """``even_dense`` priced as DeepSpeed runs it: FP32 gradient accumulation is the BF16_Optimizer, which
    adds each micro-batch's gradients in a pass of its own (grad_accum_pass cast_add)."""
    return record(LLAMA3_8B, tp=4, pp=2, dp=4, mbs=2, gbs=64, seq_len=8192, grad_accum_pass="cast_add",
                  grad_reduce="all_reduce")


def export(rec, model, out, formats="all", **kw):
    kw.setdefault("command", "planner export --out test")
    return export_layout(rec, model, DGX_H100, formats, out, **kw)


# ----------------------------------------------------------------------------------- helpers


def run_bash(script: Path, env_extra: dict | None = None, args: list[str] | None = None, cwd: Path | None = None):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    env.update(env_extra or {})
    return subprocess.run([BASH, str(script), *(args or [])], env=env, capture_output=True, text=True,
                          timeout=60, cwd=cwd)


def make_shims(bin_dir: Path, argv_file: Path, nodes=("node-a", "node-b")) -> dict:
    """PATH shims: torchrun records its argv as JSON (and runs nothing); srun drops its own
    options and execs the rest; scontrol prints host names."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    (bin_dir / "torchrun").write_text(textwrap.dedent(f"""\
        #!{py}
        import json, os, sys
        with open(os.environ["SHIM_ARGV"], "w") as fh:
            json.dump({{"argv": sys.argv[1:], "env": {{k: os.environ.get(k) for k in
                      ("MASTER_ADDR", "MASTER_PORT", "CUDA_DEVICE_MAX_CONNECTIONS")}}}}, fh)
        """))
    (bin_dir / "srun").write_text("#!/usr/bin/env bash\nwhile [[ \"$1\" == --* ]]; do shift; done\nexec \"$@\"\n")
    (bin_dir / "scontrol").write_text("#!/usr/bin/env bash\nprintf '%s\\n' " + " ".join(nodes) + "\n")
    for name in ("torchrun", "srun", "scontrol"):
        (bin_dir / name).chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}", "SHIM_ARGV": str(argv_file)}


def shell_flags(text: str) -> list[str]:
    """Flags inside the bash arrays of a generated script."""
    flags = []
    in_array = False
    for line in text.splitlines():
        s = line.strip()
        if re.match(r"^[A-Z_]+\+?=\($", s):
            in_array = True
            continue
        if in_array and s == ")":
            in_array = False
            continue
        if in_array and s.startswith("--"):
            flags.append(s.split()[0])
    return flags


def megatron_arg_list(script: Path) -> list[str]:
    proc = run_bash(script)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


# ----------------------------------------------------------------------------------- formats


def test_formats_list():
    assert FORMATS == ("torchrun", "megatron", "deepspeed", "torchtitan", "slurm", "megatron-bridge")
    assert set(FILES) == set(FORMATS)


def test_dense_405b_all_formats(tmp_path):
    report = export(dense_405b(), LLAMA3_405B, tmp_path)
    names = sorted(p.name for p in report.written)
    assert names == sorted(["launch_torchrun.sh", "megatron_args.sh", "launch.sbatch", "megatron_bridge_overrides.yaml"])
    assert set(report.skipped) == {"deepspeed", "torchtitan"}
    assert "deepspeed_uneven_stages" in report.skipped["deepspeed"]
    assert "torchtitan_no_zero1" in report.skipped["torchtitan"]  # ZeRO-1: torchtitan has FSDP2 or replication

    meg = (tmp_path / "megatron_args.sh").read_text()
    for needle in ("--tensor-model-parallel-size 8", "--pipeline-model-parallel-size 16",
                   "--decoder-first-pipeline-num-layers 7", "--decoder-last-pipeline-num-layers 7",
                   "--num-query-groups 8", "--use-distributed-optimizer", "--sequence-parallel",
                   "--micro-batch-size 1", "--global-batch-size 2048", "--seq-length 8192",
                   "--recompute-granularity selective", "export CUDA_DEVICE_MAX_CONNECTIONS=1"):
        assert needle in meg, needle
    assert "--num-virtual-stages-per-pipeline-rank" not in meg
    # Header: layout, prediction, memory, version, command.
    head = [line for line in meg.splitlines() if line.startswith("#")]
    joined = "\n".join(head)
    for needle in ("planner 0.1.0", "TP8 PP16 (layers/stage 7/8x14/7) DP128", "step 10.500 s",
                   "812 tokens/s/GPU", "61.2 GiB of 79.6 GiB", "Command: planner export --out test",
                   "Evaluated by: planner evaluate --model x --gpus 8"):
        assert needle in joined, needle

    sb = (tmp_path / "launch.sbatch").read_text()
    assert "#SBATCH --nodes=2048" in sb and "#SBATCH --gpus-per-node=8" in sb
    assert "#SBATCH --ntasks-per-node=1" in sb and "#SBATCH --exclusive" in sb
    assert 'scontrol show hostnames "${SLURM_JOB_NODELIST}" | head -n1' in sb

    report = export(titan(LLAMA3_405B, tp=8, pp=16, dp=128, gbs=2048, seq_len=8192, pp_first_layers=7, pp_last_layers=7,
                          zero=2), LLAMA3_405B, tmp_path / "titan", formats="torchtitan")
    # torchtitan 0.3.0's llama3_405b config always trains in float8; this plan is bf16.
    assert "torchtitan_config_precision" in report.skipped["torchtitan:torchtitan_overrides.sh"]
    toml = tomllib.loads((tmp_path / "titan" / "torchtitan.toml").read_text())
    assert toml["model"] == {"name": "llama3", "flavor": "405B"}
    par = toml["parallelism"]
    assert par["tensor_parallel_degree"] == 8 and par["pipeline_parallel_degree"] == 16
    assert par["data_parallel_shard_degree"] == 128 and par["data_parallel_replicate_degree"] == 1
    assert par["pipeline_parallel_schedule"] == "1F1B"
    assert (par["pipeline_parallel_first_stage_less_layers"], par["pipeline_parallel_last_stage_less_layers"]) == (1, 1)
    assert toml["training"]["local_batch_size"] * par["data_parallel_shard_degree"] == toml["training"]["global_batch_size"] == 2048


def test_moe_mixtral_all_formats(tmp_path):
    report = export(moe_mixtral(), MIXTRAL, tmp_path)
    assert sorted(p.name for p in report.written) == ["launch.sbatch", "launch_torchrun.sh", "megatron_args.sh",
                                                      "megatron_bridge_overrides.yaml"]
    assert "deepspeed_no_interleaving" in report.skipped["deepspeed"]
    assert "torchtitan_flavor" in report.skipped["torchtitan"]
    meg = (tmp_path / "megatron_args.sh").read_text()
    for needle in ("--num-experts 8", "--moe-router-topk 2", "--moe-ffn-hidden-size 14336",
                   "--expert-model-parallel-size 8", "--expert-tensor-parallel-size 2",
                   "--num-virtual-stages-per-pipeline-rank 2", "--moe-token-dispatcher-type alltoall",
                   "--moe-grouped-gemm", "--sequence-parallel"):
        assert needle in meg, needle
    assert "--moe-layer-freq" not in meg  # every layer is MoE: Megatron's default 1


def test_token_drop_written_and_read_back(tmp_path):
    """Capacity-factor token drop padded to capacity: Megatron-LM --moe-expert-capacity-factor 1.25
    --moe-pad-expert-input-to-capacity, Megatron-Bridge model.moe_expert_capacity_factor /
    model.moe_pad_expert_input_to_capacity; each reads back as the same two options."""
    from planner.launch import read_launch

    rec = record(MIXTRAL, tp=2, pp=4, dp=8, ep=8, etp=2, vpp=2, gbs=256, seq_len=4096, moe_capacity_factor=1.25,
                 moe_pad_to_capacity=True)
    export(rec, MIXTRAL, tmp_path, formats="megatron,megatron-bridge")
    meg = (tmp_path / "megatron_args.sh").read_text()
    assert "--moe-expert-capacity-factor 1.25" in meg and "--moe-pad-expert-input-to-capacity" in meg
    bridge = (tmp_path / "megatron_bridge_overrides.yaml").read_text()
    assert "moe_expert_capacity_factor: 1.25" in bridge and "moe_pad_expert_input_to_capacity: true" in bridge
    for name in ("megatron_args.sh", "megatron_bridge_overrides.yaml"):
        launch = read_launch(tmp_path / name, model=MIXTRAL)
        assert (launch.values["moe_capacity_factor"], launch.values["moe_pad_to_capacity"]) == (1.25, True), name
    # Dropless (the default) writes neither.
    export(moe_mixtral(), MIXTRAL, tmp_path / "dropless", formats="megatron")
    assert "capacity" not in (tmp_path / "dropless" / "megatron_args.sh").read_text()


def test_single_named_format_that_cannot_express_raises(tmp_path):
    with pytest.raises(PlannerInputError) as err:
        export(dense_405b(), LLAMA3_405B, tmp_path, formats="deepspeed")
    msg = str(err.value)
    assert "\n" not in msg and "deepspeed" in msg and "deepspeed_uneven_stages" in msg
    assert not any(tmp_path.iterdir())


def test_nothing_written_when_one_named_format_fails(tmp_path):
    with pytest.raises(PlannerInputError):
        export(dense_405b(), LLAMA3_405B, tmp_path, formats=["megatron", "deepspeed"])
    assert not any(tmp_path.iterdir()), "megatron_args.sh must not be written when deepspeed refuses"


def test_unknown_format(tmp_path):
    with pytest.raises(PlannerInputError, match="unknown export format 'horovod'"):
        export(dense_405b(), LLAMA3_405B, tmp_path, formats="horovod")


def test_comma_separated_formats(tmp_path):
    report = export(even_dense(), LLAMA3_8B, tmp_path, formats="megatron,torchrun")
    assert sorted(p.name for p in report.written) == ["launch_torchrun.sh", "megatron_args.sh"]


# ----------------------------------------------------------------------------------- megatron


def _layouts_for_flag_check():
    return [
        (dense_405b(), LLAMA3_405B),
        (moe_mixtral(), MIXTRAL),
        (record(DEEPSEEK_LIKE, tp=2, pp=1, dp=32, ep=32, etp=1, gbs=256, precision="fp8", recompute="full"), DEEPSEEK_LIKE),
        # Megatron-FSDP ZeRO-2/3: written without the fusion, each micro-batch's gradient copied (_grad_acc)
        (record(LLAMA3_8B, tp=1, dp=64, zero=3, fsdp="megatron", gbs=128, recompute="none",
                grad_accum_pass="main_grad_copy"), LLAMA3_8B),
        (record(LLAMA3_8B, tp=2, cp=4, dp=2, zero=2, gbs=16, seq_len=32768, grad_accum_pass="main_grad_copy"), LLAMA3_8B),
        (record(LLAMA3_8B, tp=1, dp=8, zero=0, gbs=64), LLAMA3_8B),
    ]


def test_flag_list_names_the_checked_commit():
    text = (Path(megatron.__file__).parents[1] / "frameworks" / "megatron_arguments.txt").read_text()
    assert megatron.MEGATRON_COMMIT in text and "megatron/training/arguments.py" in text
    assert len(megatron.megatron_flags()) > 60


def test_flag_list_has_the_moe_dispatcher_choices():
    """Megatron-LM d98e8a64ddf3 transformer_config.py: moe_token_dispatcher_type: Literal['allgather',
    'alltoall', 'flex'] (line 891), moe_flex_dispatcher_backend: Literal['deepep', 'hybridep', 'ncclep']
    (line 898), flags made by ArgumentGroupFactory; attention_backend: AttnBackend, read by name."""
    from planner.frameworks.megatron import flag_choices, known_flags, removed_flags

    choices = flag_choices()
    assert choices["--moe-token-dispatcher-type"] == ("allgather", "alltoall", "flex")
    assert choices["--moe-flex-dispatcher-backend"] == ("deepep", "hybridep", "ncclep")
    assert set(choices["--attention-backend"]) == {"flash", "fused", "unfused", "local", "auto"}
    assert known_flags()["--moe-flex-dispatcher-backend"][0] == "value"
    # GroupedMLP's flag left in 2caa681a1d: still known to the reader, never written.
    assert "--moe-use-legacy-grouped-gemm" in removed_flags() and "--moe-use-legacy-grouped-gemm" in known_flags()
    assert "--moe-use-legacy-grouped-gemm" not in megatron.megatron_flags()


def test_a_value_outside_the_argparse_choices_is_never_written(tmp_path, monkeypatch):
    monkeypatch.setattr(megatron, "flag_choices", lambda: {"--moe-token-dispatcher-type": ("allgather", "flex")})
    with pytest.raises(RuntimeError, match="--moe-token-dispatcher-type alltoall"):
        export(moe_mixtral(), MIXTRAL, tmp_path, formats="megatron")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("index", range(6))
def test_every_emitted_megatron_flag_is_checked(tmp_path, index):
    rec, model = _layouts_for_flag_check()[index]
    export(rec, model, tmp_path, formats="megatron")
    known = megatron.megatron_flags()
    script = tmp_path / "megatron_args.sh"
    from_text = shell_flags(script.read_text())
    assert from_text and set(from_text) <= known, sorted(set(from_text) - known)
    if BASH:
        args = megatron_arg_list(script)
        emitted = [a for a in args if a.startswith("--")]
        assert set(emitted) <= known, sorted(set(emitted) - known)
        assert "--mock-data" in emitted  # the runnable default data


@needs_bash
def test_megatron_special_layouts(tmp_path):
    rec, model = _layouts_for_flag_check()[2]
    export(rec, model, tmp_path / "mla", formats="megatron")
    args = megatron_arg_list(tmp_path / "mla" / "megatron_args.sh")
    pairs = dict(zip(args, args[1:]))
    assert pairs["--moe-layer-freq"] == "([0]*3+[1]*58)"
    assert not re.search(r"[^,\d\[\]\(\)\+\*]", pairs["--moe-layer-freq"])  # Megatron's _eval_pattern charset
    assert pairs["--moe-shared-expert-intermediate-size"] == "2048"
    assert "--multi-latent-attention" in args and pairs["--kv-lora-rank"] == "512" and pairs["--q-lora-rank"] == "1536"
    assert pairs["--qk-head-dim"] == "128" and pairs["--qk-pos-emb-head-dim"] == "64" and pairs["--v-head-dim"] == "128"
    assert "--group-query-attention" not in args
    assert pairs["--recompute-granularity"] == "full" and pairs["--recompute-method"] == "uniform"
    assert pairs["--recompute-num-layers"] == "1"
    assert pairs["--fp8-format"] == "hybrid" and pairs["--fp8-recipe"] == "delayed" and "--bf16" in args

    rec, model = _layouts_for_flag_check()[3]
    export(rec, model, tmp_path / "fsdp", formats="megatron")
    text = (tmp_path / "fsdp" / "megatron_args.sh").read_text()
    args = megatron_arg_list(tmp_path / "fsdp" / "megatron_args.sh")
    pairs = dict(zip(args, args[1:]))
    assert "--use-megatron-fsdp" in args and pairs["--data-parallel-sharding-strategy"] == "optim_grads_params"
    assert pairs["--ckpt-format"] == "fsdp_dtensor" and "--no-gradient-accumulation-fusion" in args
    assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in text and "export CUDA_DEVICE_MAX_CONNECTIONS" not in text
    assert "--recompute-granularity" not in args

    rec, model = _layouts_for_flag_check()[4]
    export(rec, model, tmp_path / "cp", formats="megatron")
    args = megatron_arg_list(tmp_path / "cp" / "megatron_args.sh")
    pairs = dict(zip(args, args[1:]))
    assert pairs["--context-parallel-size"] == "4" and pairs["--data-parallel-sharding-strategy"] == "optim_grads"

    rec, model = _layouts_for_flag_check()[5]
    export(rec, model, tmp_path / "ddp", formats="megatron")
    args = megatron_arg_list(tmp_path / "ddp" / "megatron_args.sh")
    assert "--use-distributed-optimizer" not in args and "--overlap-grad-reduce" in args
    assert "--overlap-param-gather" not in args and "--sequence-parallel" not in args


def test_vocab_is_not_padded_by_megatron():
    for vocab, tp in ((128256, 8), (32000, 2), (129280, 2), (50257, 1)):
        d = megatron._vocab_divisor(vocab, tp)
        assert 1 <= d <= 128 and vocab % (d * tp) == 0
    assert megatron._vocab_divisor(50257, 2) == 1  # TP does not divide it: Megatron must pad


@pytest.mark.parametrize("model,layout,rule", [
    (LLAMA3_405B, dict(tp=16, pp=8, dp=128, gbs=2048), "megatron_query_groups_divisible_by_tp"),
    (LLAMA3_405B, dict(tp=8, pp=16, dp=128, vpp=4, gbs=2048, pp_first_layers=6, pp_last_layers=8), "megatron_uneven_vpp"),
    (LLAMA3_8B, dict(tp=1, pp=2, dp=4, zero=3, gbs=64), "megatron_fsdp_no_pp"),
])
def test_megatron_refusals(tmp_path, model, layout, rule):
    rec = record(model, **layout)
    with pytest.raises(PlannerInputError) as err:
        export(rec, model, tmp_path, formats="megatron")
    assert rule in str(err.value) and "\n" not in str(err.value)
    report = export(rec, model, tmp_path, formats="all")
    for fmt in ("megatron", "torchrun", "slurm"):
        assert rule in report.skipped[fmt], fmt


def test_alibi_refused(tmp_path):
    model = LLAMA3_8B.model_copy(update={"name": "alibi-8b", "position_embedding": "alibi"})
    with pytest.raises(PlannerInputError, match="megatron_position_embedding"):
        export(record(model, tp=2, dp=4, gbs=8), model, tmp_path, formats="megatron")


# ----------------------------------------------------------------------------------- launchers


@needs_bash
def test_torchrun_script_arguments_parse_with_torch(tmp_path):
    run_mod = pytest.importorskip("torch.distributed.run")
    export(dense_405b(), LLAMA3_405B, tmp_path, formats="torchrun,megatron")
    argv_file = tmp_path / "argv.json"
    env = make_shims(tmp_path / "bin", argv_file)
    env.update({"MASTER_ADDR": "head-node", "MASTER_PORT": "29400", "JOB_ID": "job42"})
    proc = run_bash(tmp_path / "launch_torchrun.sh", env, args=["--seed", "7"])
    assert proc.returncode == 0, proc.stderr
    got = json.loads(argv_file.read_text())
    args = run_mod.get_args_parser().parse_args(got["argv"])
    assert (args.nnodes, args.nproc_per_node) == ("2048", "8")
    assert args.rdzv_backend == "c10d" and args.rdzv_endpoint == "head-node:29400" and args.rdzv_id == "job42"
    assert args.training_script == "pretrain_gpt.py"
    assert args.training_script_args == megatron_arg_list(tmp_path / "megatron_args.sh") + ["--seed", "7"]
    assert got["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


@needs_bash
def test_torchrun_defaults_single_node(tmp_path):
    rec = record(LLAMA3_8B, tp=2, dp=4, gbs=8)
    export(rec, LLAMA3_8B, tmp_path, formats="torchrun")
    argv_file = tmp_path / "argv.json"
    proc = run_bash(tmp_path / "launch_torchrun.sh", make_shims(tmp_path / "bin", argv_file))
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(argv_file.read_text())["argv"]
    assert argv[:10] == ["--nnodes", "1", "--nproc-per-node", "8", "--rdzv-backend", "c10d",
                         "--rdzv-endpoint", "localhost:29500", "--rdzv-id", "planner-llama3-8b"]


@needs_bash
def test_slurm_script_runs_with_shims(tmp_path):
    export(moe_mixtral(), MIXTRAL, tmp_path, formats=["slurm", "megatron"])
    text = (tmp_path / "launch.sbatch").read_text()
    assert "#SBATCH --nodes=8" in text and "#SBATCH --gpus-per-node=8" in text
    argv_file = tmp_path / "argv.json"
    env = make_shims(tmp_path / "bin", argv_file, nodes=("gpu-017", "gpu-018"))
    env.update({"SLURM_JOB_NODELIST": "gpu-[017-024]", "SLURM_JOB_ID": "98765"})
    proc = run_bash(tmp_path / "launch.sbatch", env)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(argv_file.read_text())
    argv = got["argv"]
    assert got["env"]["MASTER_ADDR"] == "gpu-017"
    i = argv.index("--rdzv-endpoint")
    assert argv[i + 1] == "gpu-017:29500" and argv[argv.index("--rdzv-id") + 1] == "98765"
    assert argv[argv.index("--nnodes") + 1] == "8"
    script_at = argv.index("pretrain_gpt.py")
    assert argv[script_at + 1:] == megatron_arg_list(tmp_path / "megatron_args.sh")
    try:
        from torch.distributed.run import get_args_parser
    except ImportError:  # torch is optional: the shim check above already ran
        return
    parsed = get_args_parser().parse_args(argv)
    assert parsed.training_script == "pretrain_gpt.py" and parsed.nnodes == "8"


def test_partial_nodes_refused_for_launchers(tmp_path):
    rec = record(LLAMA3_8B, tp=4, dp=3, gbs=12)  # 12 GPUs on 8-GPU nodes
    report = export(rec, LLAMA3_8B, tmp_path)
    for fmt in ("torchrun", "slurm", "torchtitan"):
        assert "launch_whole_nodes" in report.skipped[fmt]
    assert (tmp_path / "megatron_args.sh").exists()


# ----------------------------------------------------------------------------------- shell safety

EVIL_ENTRY = "my train $(touch PWNED_1) `touch PWNED_2`; touch PWNED_3 'q\" &>/dev/null $HOME.py"


@needs_bash
def test_shell_quoting_survives_hostile_values(tmp_path):
    evil_model = LLAMA3_8B.model_copy(update={"name": "llama3-8b\n$(touch PWNED_4)\ntouch PWNED_5 #`x`"})
    rec = record(evil_model, tp=2, pp=2, dp=2, gbs=16)
    rec["command"] = "planner evaluate\ntouch PWNED_6\n"
    out = tmp_path / "out dir $(touch PWNED_7) 'x'"
    report = export(rec, evil_model, out, entrypoint=EVIL_ENTRY)
    written = {p.name for p in report.written}
    assert {"launch_torchrun.sh", "launch.sbatch", "megatron_args.sh"} <= written
    titan_rec = titan(evil_model, tp=2, pp=2, dp=2, gbs=16)
    titan_rec["command"] = rec["command"]
    titan_report = export(titan_rec, evil_model, tmp_path / "titan $(touch PWNED_8)", formats="torchtitan")
    assert "torchtitan_overrides.sh" in {p.name for p in titan_report.written}
    for path in titan_report.written:
        assert not any(line.lstrip().startswith("touch") for line in path.read_text().splitlines()), path.name

    for path in report.written:
        text = path.read_text()
        for line in text.splitlines():
            assert not line.lstrip().startswith("touch"), (path.name, line)
        if path.suffix in (".sh", ".sbatch"):
            check = subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True)
            assert check.returncode == 0, (path.name, check.stderr)

    argv_file = tmp_path / "argv.json"
    env = make_shims(tmp_path / "bin", argv_file)
    env.update({"SLURM_JOB_NODELIST": "n1", "SLURM_JOB_ID": "1"})
    work = tmp_path / "cwd"
    work.mkdir()
    for name in ("launch_torchrun.sh", "launch.sbatch", "megatron_args.sh"):
        proc = run_bash(out / name, env, cwd=work)
        assert proc.returncode == 0, (name, proc.stderr)
        if name != "megatron_args.sh":
            argv = json.loads(argv_file.read_text())["argv"]
            assert EVIL_ENTRY in argv, name  # passed through as one literal word
    proc = run_bash(tmp_path / "titan $(touch PWNED_8)" / "torchtitan_overrides.sh", env, cwd=work)
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(argv_file.read_text())["argv"]
    assert argv[argv.index("-m") + 1] == "torchtitan.train"
    assert argv[-3:] == ["--training.steps", "100", "activation_checkpoint:full"]

    leftovers = [p for p in list(work.iterdir()) + list(tmp_path.iterdir()) + list(out.iterdir()) if p.name.startswith("PWNED")]
    assert not leftovers, leftovers


def test_entrypoint_that_looks_like_an_option_is_refused(tmp_path):
    with pytest.raises(PlannerInputError, match="starts with '-'"):
        export(dense_405b(), LLAMA3_405B, tmp_path, entrypoint="--help")


def test_header_cannot_break_out_of_comments(tmp_path):
    rec = dense_405b()
    report = export(rec, LLAMA3_405B, tmp_path, formats="megatron", command="planner export\nrm -rf /tmp/x\r")
    text = report.written[0].read_text()
    assert "Command: planner export\\nrm -rf /tmp/x\\r" in text
    assert not any(line.startswith("rm ") for line in text.splitlines())


# ----------------------------------------------------------------------------------- deepspeed


def test_deepspeed_batch_identity(tmp_path):
    report = export(ds_dense(), LLAMA3_8B, tmp_path, formats="deepspeed")
    cfg = json.loads(report.written[0].read_text())
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * 4
    assert (cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]) == (64, 2, 8)
    assert cfg["zero_optimization"] == {"stage": 1, "overlap_comm": True}  # DP overlap on, as priced
    assert cfg["bf16"] == {"enabled": True} and cfg["fp16"] == {"enabled": False}
    assert cfg["gradient_clipping"] == 1.0 and cfg["steps_per_print"] == 10
    assert cfg["pipeline"]["stages"] == 2 and cfg["pipeline"]["pipe_partitioned"] is True
    assert any("planner 0.1.0" in line for line in cfg["_comment"])


def test_deepspeed_bf16_gradients(tmp_path):
    # Priced with BF16 gradient reduction -> DeepSpeed is told to reduce and accumulate in BF16.
    rec = even_dense()
    rec["layout"]["grad_dtype"] = "bf16"
    rec["layout"]["grad_accum_pass"] = "autograd"  # 16-bit accumulation: autograd's in-place add
    cfg = json.loads(export(rec, LLAMA3_8B, tmp_path, formats="deepspeed").written[0].read_text())
    assert cfg["communication_data_type"] == "bf16" and cfg["data_types"] == {"grad_accum_dtype": "bf16"}
    # Priced with FP32 gradients (the default): written out too, since DeepSpeed would otherwise reduce
    # a bf16 model's gradients in bf16 (deepspeed runtime/engine.py communication_data_type, get_data_types).
    plain = json.loads(export(ds_dense(), LLAMA3_8B, tmp_path / "p", formats="deepspeed").written[0].read_text())
    assert plain["communication_data_type"] == "fp32" and plain["data_types"] == {"grad_accum_dtype": "fp32"}


def test_deepspeed_accepts_the_file(tmp_path, monkeypatch):
    """DeepSpeed's own parser: unknown '_comment' key ignored, batch identity asserted."""
    ds_config = pytest.importorskip("deepspeed.runtime.config")
    report = export(ds_dense(), LLAMA3_8B, tmp_path, formats="deepspeed")
    cfg = json.loads(report.written[0].read_text())

    class MPU:  # data-parallel world of the plan
        def get_data_parallel_world_size(self):
            return 4

        def get_model_parallel_world_size(self):
            return 8

    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    parsed = ds_config.DeepSpeedConfig(cfg, mpu=MPU())
    assert parsed.world_size == 4 and parsed.train_batch_size == 64 and parsed.zero_optimization_stage == 1
    cfg["train_batch_size"] = 63
    with pytest.raises(AssertionError):
        ds_config.DeepSpeedConfig(cfg, mpu=MPU())


@pytest.mark.parametrize("model,layout,rule,extra", [
    (LLAMA3_8B, dict(tp=4, pp=2, dp=4, zero=2, gbs=64), "deepspeed_zero_pp", "ZeRO-2 and ZeRO-3"),
    # Ulysses is DeepSpeed's only CP (all-to-all), and Megatron-DeepSpeed runs it without TP or PP.
    (LLAMA3_8B, dict(tp=1, cp=2, dp=4, gbs=16, seq_len=8192), "deepspeed_cp_comm_type", "--cp-comm-type a2a"),
    (LLAMA3_8B, dict(tp=2, cp=2, dp=2, gbs=16, seq_len=8192, cp_comm_type="a2a"), "deepspeed_ulysses_tp_pp",
     "incompatible with Megatron-LM's tensor or pipeline parallelism"),
    (LLAMA3_8B, dict(pp=2, cp=2, dp=2, gbs=16, seq_len=8192, cp_comm_type="a2a", zero=1), "deepspeed_ulysses_tp_pp",
     "examples_deepspeed/sequence_parallel/README.md"),
    (MIXTRAL, dict(tp=1, dp=8, ep=8, zero=3, gbs=64), "deepspeed_moe_zero3", "Stage 3"),
    (LLAMA3_8B, dict(tp=2, dp=4, gbs=16, precision="fp8"), "deepspeed_no_fp8", "fp8"),
    (LLAMA3_8B, dict(tp=2, pp=4, dp=1, vpp=2, gbs=8), "deepspeed_no_interleaving", "vpp=2"),
])
def test_deepspeed_refusals(tmp_path, model, layout, rule, extra):
    with pytest.raises(PlannerInputError) as err:
        export(record(model, **layout), model, tmp_path, formats="deepspeed")
    assert rule in str(err.value) and extra in str(err.value)


# ----------------------------------------------------------------------------------- torchtitan


def _titan_cli_words(path: Path) -> list[str]:
    """Every word of the overrides arrays (run the script in 'source' mode)."""
    proc = subprocess.run([BASH, "-c", 'source "$1" && printf "%s\\n" "${TORCHTITAN_OVERRIDES[@]}" "${TORCHTITAN_AC[@]}"',
                           "x", str(path)], capture_output=True, text=True, env={"PATH": os.environ.get("PATH", "")})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


TITAN_LAYOUTS = [
    (titan(LLAMA3_8B, tp=2, pp=4, dp=2, vpp=2, gbs=32, zero=2), LLAMA3_8B),
    (titan(LLAMA3_8B, tp=1, dp=16, zero=3, gbs=64), LLAMA3_8B),
    (titan(LLAMA3_8B, tp=4, dp=4, zero=0, gbs=64, recompute="none", sequence_parallel=False), LLAMA3_8B),
    (titan(LLAMA3_405B, tp=8, pp=16, dp=128, gbs=2048, seq_len=8192, precision="fp8", zero=2,
           pp_first_layers=7, pp_last_layers=7), LLAMA3_405B),
]


@needs_bash
@pytest.mark.parametrize("index", range(len(TITAN_LAYOUTS)))
def test_torchtitan_settings_are_checked(tmp_path, index):
    rec, model = TITAN_LAYOUTS[index]
    for version, release in torchtitan.RELEASES.items():
        text = (Path(torchtitan.__file__).parents[1] / "frameworks" / f"torchtitan_fields_{release.family}.txt").read_text()
        assert f"torchtitan {version}" in text
    report = export(rec, model, tmp_path, formats="torchtitan")
    written = {p.name for p in report.written}
    if "torchtitan_overrides.sh" in written:
        fields = {torchtitan.cli_field(w) for w in _titan_cli_words(tmp_path / "torchtitan_overrides.sh")} - {None}
        known = torchtitan.torchtitan_fields("0.3", "cli")
        assert fields and fields <= known, sorted(fields - known)
    if "torchtitan.toml" in written:
        toml = tomllib.loads((tmp_path / "torchtitan.toml").read_text())
        keys = {".".join(path) for path in _toml_paths(toml)}
        known = torchtitan.torchtitan_fields("0.2", "toml")
        assert keys <= known, sorted(keys - known)
    assert written, report.skipped


def _toml_paths(table: dict, prefix: tuple = ()):
    for key, value in table.items():
        if isinstance(value, dict):
            yield from _toml_paths(value, prefix + (key,))
        else:
            yield prefix + (key,)


# torchtitan's own ConfigManager (each release) and pipeline split: tests/test_export_torchtitan_releases.py.


def test_torchtitan_interleaved_and_zero_mapping(tmp_path):
    rec, model = TITAN_LAYOUTS[0]
    export(rec, model, tmp_path / "a", formats="torchtitan")
    toml = tomllib.loads((tmp_path / "a" / "torchtitan.toml").read_text())
    par = toml["parallelism"]
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"
    # torchtitan's split must put the plan's 8 layers on each of the 4 ranks (2 stages each).
    counts = torchtitan.stage_split(32, 8, par["pipeline_parallel_first_stage_less_layers"],
                                    par["pipeline_parallel_last_stage_less_layers"])
    assert [sum(counts[r::4]) for r in range(4)] == [8, 8, 8, 8]
    eff = 32 + par["pipeline_parallel_first_stage_less_layers"] + par["pipeline_parallel_last_stage_less_layers"]
    assert -(-eff // par["pipeline_parallel_layers_per_stage"]) == 8
    assert toml["activation_checkpoint"]["mode"] == "full" and par["fsdp_reshard_after_forward"] == "never"
    overrides = (tmp_path / "a" / "torchtitan_overrides.sh").read_text()
    assert "--parallelism.pipeline_parallel_schedule Interleaved1F1B" in overrides
    assert "TORCHTITAN_AC=(activation_checkpoint:full)" in overrides and "--config llama3_8b" in overrides

    export(TITAN_LAYOUTS[1][0], LLAMA3_8B, tmp_path / "b", formats="torchtitan")
    par = tomllib.loads((tmp_path / "b" / "torchtitan.toml").read_text())["parallelism"]
    assert par["data_parallel_shard_degree"] == 16 and par["fsdp_reshard_after_forward"] == "always"

    # zero 0 with TP: the 0.3.0 command line replicates; job-config DDP refuses a 2-D mesh.
    report = export(TITAN_LAYOUTS[2][0], LLAMA3_8B, tmp_path / "c", formats="torchtitan")
    assert [p.name for p in report.written] == ["torchtitan_overrides.sh"]
    assert "torchtitan_ddp_1d" in report.skipped["torchtitan:torchtitan.toml"]
    text = (tmp_path / "c" / "torchtitan_overrides.sh").read_text()
    assert "--parallelism.data_parallel_replicate_degree 4" in text and "--parallelism.data_parallel_shard_degree 1" in text
    assert "--parallelism.no_enable_sequence_parallel" in text

    # fp8 405B: the 0.3.0 llama3_405b config (float8), and the TOML with the float8 converter.
    report = export(TITAN_LAYOUTS[3][0], LLAMA3_405B, tmp_path / "d", formats="torchtitan")
    assert sorted(p.name for p in report.written) == ["torchtitan.toml", "torchtitan_overrides.sh"]
    assert "--config llama3_405b" in (tmp_path / "d" / "torchtitan_overrides.sh").read_text()
    toml = tomllib.loads((tmp_path / "d" / "torchtitan.toml").read_text())
    assert toml["model"]["converters"] == ["quantize.linear.float8"] and toml["compile"]["enable"] is True
    assert toml["quantize"]["linear"]["float8"] == {"enable_fsdp_float8_all_gather": True,
                                                    "precompute_float8_dynamic_scale_for_fsdp": True}


def test_torchtitan_split_matches_405b():
    assert torchtitan.stage_split(126, 16, 1, 1) == [7] + [8] * 14 + [7]
    plan = build_plan(dense_405b(), LLAMA3_405B, DGX_H100)
    assert torchtitan.pipeline_settings(plan) == {"first_less": 1, "last_less": 1, "layers_per_stage": None}


@pytest.mark.parametrize("model,layout,rule", [
    (MIXTRAL, dict(tp=2, pp=4, dp=8, ep=8, etp=2, vpp=2, gbs=256), "torchtitan_flavor"),
    (LLAMA3_8B, dict(tp=2, pp=4, dp=1, gbs=2), "torchtitan_1f1b_microbatches"),
    (LLAMA3_8B, dict(tp=2, dp=4, gbs=16, precision="fp8", zero=0), "torchtitan_ddp_1d"),
])
def test_torchtitan_refusals(tmp_path, model, layout, rule):
    with pytest.raises(PlannerInputError) as err:
        export(titan(model, **layout), model, tmp_path, formats="torchtitan")
    assert rule in str(err.value)
    assert not any(tmp_path.iterdir())


# ----------------------------------------------------------------------------------- input checks


def test_no_overwrite_without_force(tmp_path):
    export(dense_405b(), LLAMA3_405B, tmp_path, formats="megatron")
    target = tmp_path / "megatron_args.sh"
    target.write_text("# mine\n")
    with pytest.raises(PlannerInputError) as err:
        export(dense_405b(), LLAMA3_405B, tmp_path, formats="megatron")
    assert str(target) in str(err.value) and "force" in str(err.value)
    assert target.read_text() == "# mine\n"
    export(dense_405b(), LLAMA3_405B, tmp_path, formats="megatron", force=True)
    assert target.read_text().startswith("#!/usr/bin/env bash")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_scripts_are_executable(tmp_path):
    report = export(dense_405b(), LLAMA3_405B, tmp_path)
    for path in report.written:
        mode = path.stat().st_mode
        assert bool(mode & stat.S_IXUSR) == (path.suffix in (".sh", ".sbatch")), path.name


def test_sequence_parallel_needs_tp(tmp_path):
    with pytest.raises(PlannerInputError, match="sequence_parallel_needs_tp"):
        export(record(LLAMA3_8B, dp=8, gbs=8, sequence_parallel=True), LLAMA3_8B, tmp_path)


def test_inconsistent_record_refused(tmp_path):
    rec = dense_405b()
    rec["layout"]["grad_accum"] = 3
    with pytest.raises(PlannerInputError, match="grad_accum"):
        export(rec, LLAMA3_405B, tmp_path)
    with pytest.raises(PlannerInputError, match="evaluated for"):
        export(dense_405b(), LLAMA3_8B, tmp_path)


def test_unfit_layout_refused_unless_allowed(tmp_path):
    rec = dense_405b()
    rec["fits"] = False
    rec["memory_gib"]["peak"] = 92.0
    with pytest.raises(PlannerInputError, match="does not fit"):
        export(rec, LLAMA3_405B, tmp_path)
    report = export(rec, LLAMA3_405B, tmp_path, formats="megatron", allow_unfit=True)
    assert "DOES NOT FIT" in report.written[0].read_text()


def test_missing_split_is_filled_in(tmp_path):
    rec = dense_405b()
    rec["layout"]["pp_first_layers"] = rec["layout"]["pp_last_layers"] = None
    plan = build_plan(rec, LLAMA3_405B, DGX_H100)
    assert plan.stage_layers[0] + sum(plan.stage_layers[1:-1]) + plan.stage_layers[-1] == 126
    assert len(set(plan.stage_layers[1:-1])) == 1


def test_megatron_uneven_interleaved_uses_embedding_and_loss_accounting(tmp_path):
    # 126 layers on PP16 x VPP2: first/last stages hold 7, middle 8; (126 + 2) % (16 * 2) == 0,
    # so Megatron expresses it by counting the embedding and the loss as layers.
    rec = record(LLAMA3_405B, tp=8, pp=16, dp=128, vpp=2, gbs=2048, pp_first_layers=7, pp_last_layers=7)
    export(rec, LLAMA3_405B, tmp_path, formats="megatron")
    text = (tmp_path / "megatron_args.sh").read_text()
    assert "--account-for-embedding-in-pipeline-split" in text
    assert "--account-for-loss-in-pipeline-split" in text
    assert "--decoder-first-pipeline-num-layers" not in text


def test_megatron_partial_recompute_uses_block_method(tmp_path):
    rec = record(LLAMA3_405B, tp=8, pp=16, dp=128, vpp=4, gbs=2048, pp_first_layers=7, pp_last_layers=7,
                 recompute="full")
    rec["layout"]["recompute_layers"] = 4  # half of each 8-layer stage: 1 of the 2 layers per chunk
    export(rec, LLAMA3_405B, tmp_path, formats="megatron")
    text = (tmp_path / "megatron_args.sh").read_text()
    assert "--recompute-method block" in text and "--recompute-num-layers 1" in text


@needs_bash
def test_megatron_implementation_flags(tmp_path):
    # What the plan was priced with is what the launch file asks for.
    grouped = DEEPSEEK_LIKE.model_copy(update={"moe": DEEPSEEK_LIKE.moe.model_copy(update={"router_groups": 8, "router_group_topk": 4})})
    rec = record(grouped, tp=2, pp=1, dp=8, ep=16, gbs=64, precision="fp8", tp_comm_overlap=True,
                 loss="fused", ep_comm_overlap=True, moe_dispatcher="deepep", attention="flash3",
                 grad_dtype="bf16")
    export(rec, grouped, tmp_path, formats="megatron")
    args = megatron_arg_list(tmp_path / "megatron_args.sh")
    pairs = dict(zip(args, args[1:]))
    for flag in ("--tp-comm-overlap", "--cross-entropy-loss-fusion", "--overlap-moe-expert-parallel-comm",
                 "--delay-wgrad-compute", "--grad-reduce-in-bf16"):
        assert flag in args, flag
    assert pairs["--moe-token-dispatcher-type"] == "flex" and pairs["--moe-flex-dispatcher-backend"] == "deepep"
    assert pairs["--moe-router-num-groups"] == "8" and pairs["--moe-router-group-topk"] == "4"
    assert set(a for a in args if a.startswith("--")) <= megatron.megatron_flags()
    # Defaults: none of them.
    plain = record(MIXTRAL, tp=2, pp=4, vpp=2, dp=8, ep=8, gbs=64)
    export(plain, MIXTRAL, tmp_path / "plain", formats="megatron")
    args = megatron_arg_list(tmp_path / "plain" / "megatron_args.sh")
    assert "--tp-comm-overlap" not in args and "--cross-entropy-loss-fusion" not in args
    assert "--grad-reduce-in-bf16" not in args
    assert dict(zip(args, args[1:]))["--moe-token-dispatcher-type"] == "alltoall"


def test_moe_under_tp_without_sp_is_refused_for_every_format(tmp_path):
    # Megatron's exporter refused it (megatron_ep_tp_needs_sp); it is now a layout rule
    # (search.rules moe_tp_needs_sequence_parallel), so no format writes it and search never ranks it.
    rec = record(MIXTRAL, tp=2, dp=4, ep=4, gbs=64, sequence_parallel=False)
    with pytest.raises(PlannerInputError, match="moe_tp_needs_sequence_parallel"):
        export(rec, MIXTRAL, tmp_path, formats="all")
    assert not any(tmp_path.iterdir())
