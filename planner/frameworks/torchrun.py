"""torchrun and SLURM: what the launchers carry (the GPU count as nodes x GPUs per node).

The first spelling of each is the one the exporters write (``planner/export/torchrun.py``,
``slurm.py``); the reader (``planner/launch/megatron.py``) accepts them all.
"""

from __future__ import annotations

TORCHRUN_SOURCE = "torch torch/distributed/run.py get_args_parser"
SLURM_SOURCE = "SLURM sbatch / srun options"

TORCHRUN = {
    "nodes": ("--nnodes", "--num_nodes", "--num-nodes"),
    "gpus_per_node": ("--nproc-per-node", "--nproc_per_node", "--num_gpus", "--num-gpus"),
}
"""torchrun's words for the node count and processes (GPUs) per node; later spellings: older
torchrun (underscores) and the deepspeed launcher."""

SLURM = {
    "nodes": ("--nodes", "-N"),
    "gpus_per_node": ("--gpus-per-node", "--ntasks-per-node"),
}
"""sbatch / srun words for the node count and GPUs per node (one task per GPU where no GPU count is given)."""
