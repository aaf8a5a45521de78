"""Check that a change leaves planner's outputs unchanged (for refactors that claim "no
behaviour change").

    python benchmarks/same_outputs.py --base REV     # outputs of REV vs the working tree
    python benchmarks/same_outputs.py --list         # the commands compared

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


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not _TIMING_KEYS.search(k)}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _normalize(text: str) -> str:
    try:
        return json.dumps(_strip(json.loads(text)), indent=1, sort_keys=True)
    except (json.JSONDecodeError, ValueError):
        return _SUMMARY_SECONDS.sub("<t> s, method", text)


def run_one(tree: Path, command: str) -> str:
    """Everything one command shows, normalised: exit code, stdout, stderr, files written."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        args = command.format(out=out).split()
        env = dict(os.environ, PYTHONPATH=str(tree), COLUMNS="200", NO_COLOR="1")
        proc = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, cwd=tree,
                              env=env, timeout=600)
        parts = [f"exit {proc.returncode}", _normalize(proc.stdout.replace(str(out), "<out>")), proc.stderr.replace(str(out), "<out>")]
        if out.is_dir():
            for f in sorted(out.iterdir()):
                parts.append(f"--- {f.name}\n" + f.read_text().replace(str(out), "<out>"))
        return "\n".join(parts).replace(str(tree), "<tree>")


def run_all(tree: Path, jobs: int) -> list[str]:
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda c: run_one(tree, c), COMMANDS))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="HEAD", help="git revision to compare against (default HEAD)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--list", action="store_true", help="print the commands and exit")
    args = ap.parse_args()
    if args.list:
        print("\n".join(f"planner {c}" for c in COMMANDS))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.base], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            before = run_all(base, args.jobs)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, capture_output=True)
    after = run_all(ROOT, args.jobs)
    differ = 0
    for command, a, b in zip(COMMANDS, before, after):
        if a == b:
            continue
        differ += 1
        print(f"DIFFERS: planner {command}")
        diff = difflib.unified_diff(a.splitlines(), b.splitlines(), args.base, "working tree", lineterm="", n=1)
        print("\n".join(list(diff)[:40]))
    print(f"{len(COMMANDS) - differ} of {len(COMMANDS)} commands print the same at {args.base} and in the working tree")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
