"""Read a Megatron-LM launch: a script (torchrun / srun / python ... pretrain_gpt.py ARGS), a
bash array of arguments (planner's ``megatron_args.sh``) or a bare argument list.

The script is walked, never run (``planner.launch.shell``). The command that starts a ``*.py``
entrypoint gives the Megatron arguments (the words after it) and the GPU count (torchrun
``--nnodes`` x ``--nproc-per-node``, torch.distributed.run.get_args_parser; else ``#SBATCH`` /
``srun`` ``--nodes`` x ``--gpus-per-node`` / ``--ntasks-per-node``). A file without such a
command gives its arguments as the bash array holding the most Megatron flags, or as the file's
words when it is a bare argument list.

Each argument is checked against ``planner/frameworks/megatron_arguments.txt`` (every flag of arguments.py at the
commit planner's export is checked against) and classified: mapped onto planner
(``planner.launch.mcore``), not priced (data, optimizer, logging, checkpoint groups and the
flags in ``NOT_PRICED``), not expressible (listed with how it was priced instead), or unknown.
"""

from __future__ import annotations

import re

from hardware_catalog.errors import PlannerInputError
from planner.frameworks.megatron import MAPPED, NOT_PRICED, known_flags
from planner.frameworks.megatron import QUIET_GROUPS as _QUIET_GROUPS
from planner.frameworks.torchrun import SLURM, TORCHRUN
from planner.launch.mcore import Settings, to_launch
from planner.launch.spec import Launch, integer

LAUNCHERS = ("torchrun", "python", "python3", "deepspeed", "srun", "exec", "env", "mpirun", "numactl", "uv", "accelerate")
_STORE_FALSE = {"--disable-bias-linear": ("add_bias_linear", False)}


def _dest(flag: str) -> str:
    return flag[2:].replace("-", "_")


LEGACY_RECOMPUTE = {
    "--checkpoint-activations": ("--recompute-granularity", "full", "--recompute-method", "uniform"),
    "--activations-checkpoint-method": ("--recompute-granularity", "full", "--recompute-method"),
    "--activations-checkpoint-num-layers": ("--recompute-num-layers",),
}
"""Megatron-LM v2.x recompute flags (tag v2.6 megatron/arguments.py: --checkpoint-activations sets
activations_checkpoint_method 'uniform' with --activations-checkpoint-num-layers 1, every layer
recomputed; --activations-checkpoint-method uniform|block; --activations-checkpoint-num-layers N),
read as the --recompute-* flags that replaced them, the flag's own value (if any) appended."""


def _legacy_recompute(words: list[str], launch: Launch) -> list[str]:
    """``words`` with Megatron-LM v2.x recompute flags spelled as today's (``LEGACY_RECOMPUTE``)."""
    out, i = [], 0
    while i < len(words):
        flag, eq, inline = words[i].partition("=")
        i += 1
        if flag not in LEGACY_RECOMPUTE:
            out.append(words[i - 1])
            continue
        new = list(LEGACY_RECOMPUTE[flag])
        if flag != "--checkpoint-activations":  # takes a value
            if eq:
                new.append(inline)
            elif i < len(words) and not _is_flag(words[i]):
                new.append(words[i])
                i += 1
        launch.notes.append(f"{flag} (Megatron-LM v2.x) read as {' '.join(new)}")
        out += new
    return out


def parse_arguments(words: list[str], launch: Launch) -> Settings:
    """Megatron arguments -> ``Settings`` (the last occurrence of a flag wins, as with argparse);
    unknown and unmapped flags go to ``launch``'s lists."""
    known, s = known_flags(), Settings()
    words = _legacy_recompute(words, launch)
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
    elif dest in MAPPED or flag in _STORE_FALSE:
        s.values[dest] = value
        s.where[dest] = flag
    elif known[flag][1] in _QUIET_GROUPS or dest in NOT_PRICED:
        launch.ignored.append(flag)
        s.unpriced[dest] = value
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


def _inline_shell(words: list[str]) -> list[str]:
    """``srun ... bash -c "torchrun ... pretrain_gpt.py ..."``: the string's words spliced in place
    of ``bash -c STRING`` (the outer shell has already expanded it)."""
    for k, word in enumerate(words):
        if word.rsplit("/", 1)[-1] not in ("bash", "sh"):
            continue
        j = k + 1
        while j < len(words) and re.fullmatch(r"-[a-z]+", words[j]):  # bash -x -c, bash -lc
            j += 1
        if j < len(words) and any("c" in opt for opt in words[k + 1:j]):
            return words[:k] + words[j].split() + words[j + 1:]
    return words


def find_arguments(script) -> tuple[list[str], list[str], str]:
    """(launcher words, Megatron arguments, how the file launches). Of the commands that start a
    ``*.py`` entrypoint, the one passing the most Megatron flags: a script may run data helpers
    (``python load_ratios.py --split train``) before training."""
    known, best = known_flags(), None
    for words in map(_inline_shell, script.commands):
        k = _entry_index(words)
        if k is not None:
            score = sum(w.partition("=")[0] in known for w in words[k + 1:])
            if best is None or score > best[0]:
                best = (score, words, k)
    if best is not None:
        _, words, k = best
        return words[:k], words[k + 1:], f"{words[0].rsplit('/', 1)[-1]} ... {words[k].rsplit('/', 1)[-1]}"
    flat = [w for words in script.commands for w in words]
    if flat and all(words[0].startswith("--") for words in script.commands):
        return [], flat, "a bare argument list"
    known = known_flags()
    best = max(script.array_order, key=lambda n: sum(w in known for w in script.arrays[n]), default=None)
    if best is not None and any(w in known for w in script.arrays[best]):
        return [], script.arrays[best], f"the bash array {best}"
    sourced = [note.split("'")[1] for note in script.notes if note.endswith("not followed (its variables are unknown here)")]
    why = f"; it sources {', '.join(sourced)}, which planner does not follow: give that file" if sourced else ""
    skipped = [note.split("'")[1] for note in script.notes if note.endswith("block not evaluated")]
    why += f"; planner does not run its {', '.join(dict.fromkeys(skipped))} loops" if skipped else ""
    if script.exited and script.exited != "exit 0":
        why += f"; with its variables as set in the file, it stops at '{script.exited}'"
    raise PlannerInputError(f"{script.path}: found no Megatron-LM arguments (no command running a *.py entrypoint, "
                            f"no bash array of Megatron flags, no argument list){why}")


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
    nodes = _count(_option(launcher, *TORCHRUN["nodes"]), "torchrun --nnodes")
    per_node = _count(_option(launcher, *TORCHRUN["gpus_per_node"]), "torchrun --nproc-per-node")
    nodes = nodes or _count(_option(launcher + sb, *SLURM["nodes"]), "--nodes")
    per_node = per_node or _count(_option(sb + launcher, *SLURM["gpus_per_node"]), "--gpus-per-node")
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
    if "--deepspeed" in arguments:  # Megatron-DeepSpeed's switch (megatron/arguments.py there); not Megatron-LM's
        raise PlannerInputError(f"{path}: --deepspeed: a Megatron-DeepSpeed launch, where --zero-stage, "
                                "--checkpoint-activations (full recompute) and the ds_config JSON set what Megatron-LM's "
                                "arguments planner reads do not: price its DeepSpeed config (--from-launch ds_config.json "
                                "--model NAME --tp N --pp N)")
    launch = Launch(format="megatron", path=path, launcher=how)
    gpu_count(launcher, script, launch)
    settings = parse_arguments(arguments, launch)
    launch.notes += script.notes
    return to_launch(settings, launch, model)
