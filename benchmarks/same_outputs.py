"""Check that a change leaves planner's outputs unchanged (for refactors that claim "no
behaviour change").

    python benchmarks/same_outputs.py --base REV     # outputs of REV vs the working tree
    python benchmarks/same_outputs.py --list         # the commands compared
    python benchmarks/same_outputs.py --base 679e002 --known   # issue 12: only the deliberate changes

For each command in ``COMMANDS`` (the README's commands, every implementation setting on
evaluate, dense / MoE / MLA searches, optuna, Pareto, export) it runs ``python -m planner`` once
on a temporary ``git worktree`` of REV and once on this checkout, and compares what they print
(stdout, stderr and the exit code; for export, the files written). JSON is compared after
dropping wall-clock fields; text after masking the search summary's seconds. Exits 1 and shows
the first differing lines where anything differs. About a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).absolute().parents[1]
OOS = "benchmarks/out_of_sample"

COMMANDS: list[str] = [
    # README
    "search --model 405b --gpus 16384 --gpu h100 --json",
    "search --model 405b --gpus 16384 --gpu h100 --top 5",
    "evaluate --model gpt3-175b --gpus 1024 --gpu a100 --tp 8 --pp 16 --gbs 1536 --seq-len 2048",
    "evaluate --model gpt3-175b --gpus 1024 --gpu a100 --tp 8 --pp 16 --gbs 1536 --seq-len 2048 --json",
    "validate --json",
    "validate",
    f"validate --runs {OOS}/torchtitan_large.json --json",
    f"validate --runs {OOS}/llmfoundry_h100_small.json --json",
    "search --model 405b --gpus 16384 --gpu h100 --tp 8 --pp 16 --cp 1 --json",
    "search --model 405b --gpus 4096..16384 --gpu h100 --method optuna --trials 60 --seed 0 --json",
    "search --model 70b --gpus 512 --gpu h100 --pareto --price-per-gpu-hour 2.5 --train-tokens 15e12 --json",
    "search --model 70b --gpus 256 --gpu h100 --stage-splits --top 5",
    "search --model mixtral-8x7b --gpus 512 --gpu h100 --json --top 5",
    "search --model deepseek-v3 --gpus 1024 --gpu h100 --precision fp8 --moe-dispatcher deepep --ep-comm-overlap --json --top 3",
    "search --model 8b --gpus 64 --gpu a100 --recompute-modules mlp,layernorm --json --top 3",
    "search --model 8b --gpus 8 --gpu h100 --gbs 1 --seq-len 8192 --json",
    # evaluate: every implementation setting
    "evaluate --model 405b --gpus 16384 --gpu h100 --tp 8 --pp 16 --vpp 4 --recompute full --recompute-layers 4 --json",
    "evaluate --model 405b --gpus 512 --gpu h100 --tp 8 --pp 8 --zero 3 --mbs 4 --gbs 256 --seq-len 8192 --recompute full --json",
    "evaluate --model 70b --gpus 256 --gpu h100 --tp 4 --pp 4 --vpp 5 --attention flash3 --tp-comm-overlap --loss fused --precision fp8 --grad-dtype bf16 --json",
    "evaluate --model 8b --gpus 64 --gpu h100 --tp 1 --zero 3 --kernels eager --loss eager --mbs 2 --gbs 128 --json",
    "evaluate --model 8b --gpus 64 --gpu h100 --tp 2 --cp 4 --seq-len 65536 --gbs 8 --recompute full",
    "evaluate --model gpt3-175b --gpus 768 --gpu a100 --tp 8 --pp 1 --zero 3 --zero3-gather blocking --recompute full --gbs 1536 --seq-len 2048 --attention unfused --json",
    "evaluate --model deepseek-v3 --gpus 1024 --gpu h100 --tp 2 --pp 8 --vpp 4 --ep 64 --precision fp8 --moe-dispatcher deepep --ep-comm-overlap --recompute selective --recompute-modules mla_up_proj,moe_act,layernorm --gbs 8192 --seq-len 4096 --json",
    "evaluate --model mixtral-8x7b --gpus 64 --gpu h100 --tp 2 --ep 8 --etp 2 --zero 0 --recompute none --no-sequence-parallel --gbs 256 --json",
    "evaluate --model qwen3-235b-a22b --gpus 256 --gpu h100 --tp 4 --pp 8 --ep 8 --pp-first-layers 11 --pp-last-layers 11 --recompute selective --recompute-modules moe --json",
    "evaluate --model 405b --gpus 16384 --gpu h100 --tp 8 --pp 16 --zero 2 --json",
    # framework profiles (a share of layers: torchtitan per-op SAC), launch files, the release table
    "evaluate --model 70b --gpus 64 --gpu h100 --tp 8 --zero 3 --mbs 8 --gbs 64 --seq-len 8192 --recompute selective --framework torchtitan-0.2 --json",
    "evaluate --model 70b --gpus 64 --gpu h100 --tp 8 --zero 3 --mbs 8 --gbs 64 --seq-len 8192 --recompute selective --framework torchtitan-0.2",
    "search --model 8b --gpus 64 --gpu h100 --recompute selective --framework torchtitan-0.2 --top 3",
    "catalog frameworks",
    "evaluate --from-launch tests/data/launch/torchtitan_llama3_70b.toml --gpus 64 --gpu h100",
    "evaluate --from-launch tests/data/launch/train_llama3_8b_h100_fp8.sh --gpu h100 --json",
    "search --model 70b --gpus 256 --gpu h100 --from-launch tests/data/launch/torchtitan_llama3_70b.toml --top 3 --json",
    "export --from-launch tests/data/launch/deepspeed_zero2.json --model 8b --gpus 16 --gpu h100 --format megatron --out {out}",
    "search --model 70b --gpus 128 --gpu h100 --gbs 64 --seq-len 8192 --top 8 --json",
    # bad input (one line, exit 2)
    "evaluate --model 405b --gpus 16384 --gpu h100 --tp 3",
    "evaluate --model 8b --gpus 64 --gpu h100 --recompute-modules nope",
    "evaluate --model 8b --gpus 64 --gpu h100 --tp 1 --tp-comm-overlap",
    "search --model 405b --gpus 64 --gpu a100 --gbs 64 --seq-len 131072 --top 3",
    # export
    "export --model 405b --gpus 16384 --gpu h100 --tp 8 --pp 16 --recompute full --out {out}",
    "export --model deepseek-v3 --gpus 1024 --gpu h100 --tp 2 --pp 8 --vpp 4 --ep 64 --precision fp8 --moe-dispatcher deepep --ep-comm-overlap --gbs 8192 --seq-len 4096 --recompute full --out {out}",
    "export --model 8b --gpus 16 --gpu h100 --tp 2 --zero 3 --mbs 1 --gbs 64 --seq-len 8192 --recompute full --grad-dtype bf16 --out {out}",
]

_TIMING_KEYS = re.compile(r"seconds")
_SUMMARY_SECONDS = re.compile(r"\b\d+\.\d+ s, method")

KNOWN_CHANGES = {
    # Deliberate changes since 679e002 (issue 12), applied to both sides with --known:
    "tp_overlap": "validate's `chosen` key is the option's own name, tp_comm_overlap (one set of names)",
    "zero3_gather term": "the time term zero3_gather is zero3_comm (the option zero3_gather had the same name)",
    "dp_comm_overlap": "a new option (default on, prices as before) appears in every layout record",
}
KNOWN_DIFFERENT = {
    # Commands whose output changed on purpose since 679e002:
    "--tp 3": "errors name the rule that refuses the layout, and its source",
    "--tp-comm-overlap": "errors name the rule that refuses the layout, and its source",
    "--grad-dtype bf16 --out": "deepspeed_config.json states zero_optimization.overlap_comm, as priced; "
                               "torchtitan.toml targets torchtitan 0.2.2's field names (issue 18)",
    "--pp 16 --recompute full --out": "torchtitan.toml targets torchtitan 0.2.2's field names (issue 18)",
}


def _known(value, parent: str = ""):
    """What 679e002 printed, in today's names (KNOWN_CHANGES)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "dp_comm_overlap":
                continue
            k = "tp_comm_overlap" if k == "tp_overlap" else k
            k = "zero3_comm" if (k == "zero3_gather" and parent == "breakdown") else k
            v = "zero3_comm" if (k == "largest_term" and v == "zero3_gather") else v
            out[k] = _known(v, k)
        return out
    if isinstance(value, list):
        return [_known(v, parent) for v in value]
    return value


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not _TIMING_KEYS.search(k)}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _normalize(text: str, known: bool = False) -> str:
    try:
        value = _strip(json.loads(text))
        return json.dumps(_known(value) if known else value, indent=1, sort_keys=True)
    except (json.JSONDecodeError, ValueError):
        return _SUMMARY_SECONDS.sub("<t> s, method", text)


def run_one(tree: Path, command: str, known: bool = False) -> str:
    """Everything one command shows, normalised: exit code, stdout, stderr, files written."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        args = command.format(out=out).split()
        env = dict(os.environ, PYTHONPATH=str(tree), COLUMNS="200", NO_COLOR="1")
        proc = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, cwd=tree,
                              env=env, timeout=600)
        parts = [f"exit {proc.returncode}", _normalize(proc.stdout.replace(str(out), "<out>"), known), proc.stderr.replace(str(out), "<out>")]
        if out.is_dir():
            for f in sorted(out.iterdir()):
                parts.append(f"--- {f.name}\n" + f.read_text().replace(str(out), "<out>"))
        return "\n".join(parts).replace(str(tree), "<tree>")


def run_all(tree: Path, jobs: int, known: bool = False) -> list[str]:
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda c: run_one(tree, c, known), COMMANDS))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="HEAD", help="git revision to compare against (default HEAD)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--list", action="store_true", help="print the commands and exit")
    ap.add_argument("--known", action="store_true",
                    help="map the deliberate changes since 679e002 (KNOWN_CHANGES) before comparing, and say which "
                         "commands differ on purpose (KNOWN_DIFFERENT)")
    args = ap.parse_args()
    if args.list:
        print("\n".join(f"planner {c}" for c in COMMANDS))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.base], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            before = run_all(base, args.jobs, args.known)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, capture_output=True)
    after = run_all(ROOT, args.jobs, args.known)
    differ = 0
    for command, a, b in zip(COMMANDS, before, after):
        if a == b:
            continue
        why = [reason for key, reason in KNOWN_DIFFERENT.items() if key in command] if args.known else []
        if why:
            print(f"differs on purpose: planner {command}: {why[0]}")
            continue
        differ += 1
        print(f"DIFFERS: planner {command}")
        diff = difflib.unified_diff(a.splitlines(), b.splitlines(), args.base, "working tree", lineterm="", n=1)
        print("\n".join(list(diff)[:40]))
    print(f"{len(COMMANDS) - differ} of {len(COMMANDS)} commands print the same at {args.base} and in the working tree"
          + (" (or differ on purpose, as listed)" if args.known else ""))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
