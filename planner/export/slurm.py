"""``launch.sbatch``: a SLURM batch script, one task per node, each running torchrun (c10d).

The rendezvous host is the first node of the allocation
(``scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1``) and the rendezvous id is the SLURM
job id, so every task runs the identical torchrun command.
"""

from __future__ import annotations

from planner.export import megatron, torchrun
from planner.export.common import Plan, comment_block, safe_name
from planner.export.registry import EXECUTABLE, Exporter, one_file
from planner.frameworks.torchrun import SLURM

FILE_NAME = "launch.sbatch"


def render(plan: Plan, entrypoint: str) -> str:
    torchrun.check(plan)
    megatron.validate_flags(plan)
    job = safe_name(f"planner-{plan.model.name}")
    sbatch = [
        f"#SBATCH --job-name={job}",
        f"#SBATCH {SLURM['nodes'][0]}={plan.nnodes}",
        "#SBATCH --ntasks-per-node=1",  # one torchrun per node, which starts the GPUs' processes
        f"#SBATCH {SLURM['gpus_per_node'][0]}={plan.nproc_per_node}",
        "#SBATCH --exclusive",
        "#SBATCH --output=%x-%j.out",
    ]
    head = comment_block(list(plan.header) + [""] + megatron.notes(plan) + [
        "",
        "Submit with: sbatch launch.sbatch. One srun task per node runs torchrun, which starts",
        f"{plan.nproc_per_node} processes; node ranks come from the c10d rendezvous on the first node.",
        "Environment, with defaults: MASTER_PORT (29500), TRAIN_ITERS (100), DATA_ARGS (mock data).",
    ])
    words = torchrun.torchrun_words(plan, entrypoint, '"${SLURM_JOB_ID}"')
    env = "\n".join(megatron.env_lines(plan))
    return (
        "#!/bin/bash\n"
        + "\n".join(sbatch) + "\n"
        + head
        + "set -euo pipefail\n\n"
        + "# First node of the allocation hosts the rendezvous (head may close the pipe early: ignore SIGPIPE).\n"
        + 'MASTER_ADDR="$(scontrol show hostnames "${SLURM_JOB_NODELIST}" | head -n1 || true)"\n'
        + 'if [[ -z "${MASTER_ADDR}" ]]; then echo "launch.sbatch: no host in SLURM_JOB_NODELIST" >&2; exit 1; fi\n'
        + 'MASTER_PORT="${MASTER_PORT:-29500}"\n'
        + "export MASTER_ADDR MASTER_PORT\n"
        + (env + "\n" if env else "")
        + "\n"
        + megatron.args_block(plan)
        + "\n"
        + "srun --ntasks-per-node=1 --kill-on-bad-exit=1 \\\n  "
        + " \\\n  ".join(torchrun._pairs(words)) + ' "$@"\n'
    )


EXPORTER = Exporter(
    name="slurm",
    files={FILE_NAME: EXECUTABLE},
    render=one_file(FILE_NAME, render),
    table=megatron.TABLE,
    description="sbatch script: srun one torchrun per node",
)
