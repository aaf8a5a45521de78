"""``launch_torchrun.sh``: run on every node; torchrun with c10d rendezvous starts the Megatron job.

Options match ``torch.distributed.run.get_args_parser()`` (``--nnodes``, ``--nproc-per-node``,
``--rdzv-backend``, ``--rdzv-endpoint``, ``--rdzv-id``); node ranks come from the c10d
rendezvous, so every node runs the identical command.
"""

from __future__ import annotations

from planner.export import megatron
from planner.export.common import CannotExpress, Plan, comment_block, q, safe_name
from planner.export.registry import EXECUTABLE, Exporter, one_file
from planner.frameworks.torchrun import TORCHRUN

FILE_NAME = "launch_torchrun.sh"
TORCHRUN_SOURCE = "torch.distributed.run.get_args_parser (PyTorch)"


def check_nodes(plan: Plan) -> None:
    gpn = plan.cluster.gpus_per_node
    if plan.gpus > gpn and plan.gpus % gpn:
        raise CannotExpress("launch_whole_nodes", f"{plan.gpus} GPUs is not a whole number of {gpn}-GPU nodes; "
                            "torchrun starts the same --nproc-per-node on every node", TORCHRUN_SOURCE)


def check(plan: Plan) -> None:
    check_nodes(plan)
    try:
        megatron.check_megatron(plan)
        megatron.check_gpt_entrypoint(plan)
    except CannotExpress as err:
        raise CannotExpress(err.rule, f"it launches Megatron-LM, which cannot run this layout: {err.detail}", err.source)


def torchrun_words(plan: Plan, entrypoint: str, rdzv_id: str) -> list[str]:
    """The torchrun command line (shell words; ``$VARS`` left for the shell to expand)."""
    return [
        "torchrun",
        TORCHRUN["nodes"][0], str(plan.nnodes),
        TORCHRUN["gpus_per_node"][0], str(plan.nproc_per_node),
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", '"${MASTER_ADDR}:${MASTER_PORT}"',
        "--rdzv-id", rdzv_id,
        q(entrypoint),
        '"${MEGATRON_ARGS[@]}"',
    ]


def render(plan: Plan, entrypoint: str) -> str:
    check(plan)
    megatron.validate_flags(plan)
    job = safe_name(f"planner-{plan.model.name}")
    head = comment_block(list(plan.header) + [""] + megatron.notes(plan) + [
        "",
        f"Run this same script on each of the {plan.nnodes} node(s); torchrun starts {plan.nproc_per_node} processes per node",
        "and the c10d rendezvous assigns node ranks (no NODE_RANK needed). Environment, with defaults:",
        "  MASTER_ADDR  host that serves the rendezvous; the same on every node (default: localhost, one node only)",
        "  MASTER_PORT  rendezvous port (default: 29500)",
        f"  JOB_ID       rendezvous id shared by all nodes of this job (default: {job})",
        "  TRAIN_ITERS  training iterations (default: 100)   DATA_ARGS  real data/tokenizer flags (default: mock data)",
        "Extra arguments to this script are appended to the Megatron arguments.",
    ])
    words = torchrun_words(plan, entrypoint, '"${JOB_ID}"')
    env = "\n".join(megatron.env_lines(plan))
    return (
        "#!/usr/bin/env bash\n"
        + head
        + "set -euo pipefail\n\n"
        + 'MASTER_ADDR="${MASTER_ADDR:-localhost}"\n'
        + 'MASTER_PORT="${MASTER_PORT:-29500}"\n'
        + f"PLANNER_DEFAULT_JOB_ID={q(job)}\n"
        + 'JOB_ID="${JOB_ID:-${PLANNER_DEFAULT_JOB_ID}}"\n'
        + (env + "\n" if env else "")
        + "\n"
        + megatron.args_block(plan)
        + "\n"
        + "exec " + " \\\n  ".join(_pairs(words)) + ' "$@"\n'
    )


def _pairs(words: list[str]) -> list[str]:
    """Group ``--flag value`` (and ``-m module``) pairs on one line for readability."""
    out, i = [words[0]], 1
    while i < len(words):
        if words[i].startswith("-") and i + 1 < len(words):
            out.append(f"{words[i]} {words[i + 1]}")
            i += 2
        else:
            out.append(words[i])
            i += 1
    return out


EXPORTER = Exporter(
    name="torchrun",
    files={FILE_NAME: EXECUTABLE},
    render=one_file(FILE_NAME, render),
    table=megatron.TABLE,
    description="run on every node; torchrun c10d + Megatron args",
)
