"""The typer options ``--from-launch``, ``--launch-format`` and ``--keep`` (imported by planner.cli.main at
start-up: typer only, nothing heavy)."""

from __future__ import annotations

import typer

FromLaunchOpt = typer.Option(
    None, "--from-launch",
    help="Start from your own launch config: a Megatron-LM script or argument list, a torchtitan TOML or 0.3 "
         "command line, a DeepSpeed JSON (with --model) or a NeMo 2 / Megatron-Bridge config YAML or override "
         "strings. Its model, GPU count, batch and layout are read; flags given next to it override the file.")
LaunchFormatOpt = typer.Option(
    None, "--launch-format", help="Format of --from-launch: megatron | torchtitan | deepspeed | nemo (or an export "
    "format: megatron-bridge, torchrun, slurm). Default: detected.")
KeepOpt = typer.Option(
    None, "--keep",
    help="With --from-launch: knobs of the file's layout the search must not change, comma-separated "
         "(e.g. tp,pp).")
