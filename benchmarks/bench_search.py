"""Benchmark of the layout search.

1. ``planner search --model 405b --gpus 16384 --gpu h100`` end to end: a fresh process each
   time (``python -m planner``), wall clock, several repeats (target: < 2 s on a 2-core machine);
   the layouts evaluated and layouts/s come from one ``--json`` run.
2. In-process phases of the same search: enumeration (CP-SAT core + numpy expansion) and pricing.
3. ``evaluate_batch`` alone on 1e6 random valid layouts (drawn with replacement from the
   405B / 16,384-GPU space), target >= 1e6 layouts/s.

Run: ``python benchmarks/bench_search.py [--repeats 5] [--n 1000000]``.

``--base REV`` (default ``PINNED_BASE``; ``--base none`` skips it) also times the same command on
a temporary ``git worktree`` of REV, alternating the two checkouts run by run so that a machine
busy with other work slows both alike, and reports the ratio of the medians (this checkout / REV):
a change that makes the main job slower than REV shows as a ratio above 1.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).absolute().parents[1]
PINNED_BASE = "9bbb8e2"
"""The commit compared against by default: the main job before its table gained the 80% intervals
and the validated envelope (pinned, so that successive measurements share one reference)."""


def _cmd(args, extra=()):
    return [sys.executable, "-m", "planner", "search", "--model", args.model, "--gpus", str(args.gpus),
            "--gpu", args.gpu, "--no-progress", *extra]


def _env(root: Path = ROOT):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def bench_against(args, rev: str) -> dict:
    """Whole-process times of the main job here and on a worktree of ``rev``, alternated."""
    import resource
    import tempfile

    here, there = [], []
    cpu = {"here": [], "base": []}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), rev], cwd=ROOT, check=True, capture_output=True)
        try:
            for i in range(args.repeats * 2 + 2):  # the first pair warms the file cache, not counted
                root, times = (ROOT, here) if i % 2 == 0 else (base, there)
                t0 = time.perf_counter()
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                proc = subprocess.run(_cmd(args), capture_output=True, text=True, cwd=root, env=_env(root))
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                if proc.returncode != 0:
                    raise SystemExit(f"planner search at {root} failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
                if i >= 2:
                    times.append(time.perf_counter() - t0)
                    # CPU time (user + sys): what the process costs, whatever else the machine runs
                    cpu["here" if root == ROOT else "base"].append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, capture_output=True)
    return {"here": here, "base": there, "ratio": statistics.median(here) / statistics.median(there),
            "cpu_here": cpu["here"], "cpu_base": cpu["base"],
            "cpu_ratio": statistics.median(cpu["here"]) / statistics.median(cpu["base"])}


def bench_cli(args) -> dict:
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        proc = subprocess.run(_cmd(args), capture_output=True, text=True, cwd=ROOT, env=_env())
        times.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            raise SystemExit(f"planner search failed ({proc.returncode}): {proc.stderr.strip()}")
    proc = subprocess.run(_cmd(args, ["--json", "--top", "1"]), capture_output=True, text=True, cwd=ROOT, env=_env())
    stats = json.loads(proc.stdout)["stats"]
    return {"times": times, "stats": stats}


def bench_phases(args) -> dict:
    from search.api import _resolve_batch, _resolve_hardware, _resolve_model
    from search.space import Problem, build_space

    model = _resolve_model(args.model)
    (gpu, cluster), = _resolve_hardware(args.gpu, None)
    gbs, seq = _resolve_batch(model, None, None, None)
    p = Problem(model=model, cluster=cluster, gpu=gpu, gpus=args.gpus, gbs=gbs, seq_len=seq)
    out = {}
    t0 = time.perf_counter()
    importlib.import_module("ortools.sat.python.cp_model")  # its import cost, counted separately

    out["ortools_import_s"] = time.perf_counter() - t0
    for engine in ("cpsat", "numpy"):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            space = build_space(p, engine)
            best = min(best, time.perf_counter() - t0)
        out[f"enumerate_{engine}_s"] = best
    out["layouts"] = len(space)
    out["raw_candidates"] = space.raw_size
    from costmodel import evaluate_batch

    batch = space.batch()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        evaluate_batch(model, cluster, batch, gpu=gpu)
        best = min(best, time.perf_counter() - t0)
    out["evaluate_space_s"] = best
    out["_problem"] = (model, cluster, gpu, space)
    return out


def bench_evaluate(problem_bits, n: int) -> dict:
    import numpy as np

    from costmodel import evaluate_batch

    model, cluster, gpu, space = problem_bits
    rng = np.random.default_rng(0)
    batch = space.take(rng.integers(0, len(space), size=n))
    evaluate_batch(model, cluster, batch.take(np.arange(min(n, 1000))), gpu=gpu)  # warm-up
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        evaluate_batch(model, cluster, batch, gpu=gpu)
        times.append(time.perf_counter() - t0)
    return {"n": n, "times": times}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="405b")
    ap.add_argument("--gpus", type=int, default=16384)
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--n", type=int, default=1_000_000, help="layouts for the evaluate_batch benchmark")
    ap.add_argument("--base", default=PINNED_BASE, help="commit to compare the main job's whole-process time with "
                                                         "('none': skip)")
    ap.add_argument("--only-base", action="store_true", help="only the comparison with --base")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))

    print(f"machine: {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    if args.base != "none":
        cmp = bench_against(args, args.base)
        h, b = cmp["here"], cmp["base"]
        print(f"\nplanner search --model {args.model} --gpus {args.gpus} --gpu {args.gpu}: this checkout vs {args.base} "
              f"(fresh processes, alternated, {len(h)} runs each)")
        print(f"  this checkout  median {statistics.median(h):.3f} s  min {min(h):.3f} s")
        print(f"  {args.base:<13}  median {statistics.median(b):.3f} s  min {min(b):.3f} s")
        print(f"  ratio {cmp['ratio']:.3f} ({'slower' if cmp['ratio'] > 1 else 'not slower'} than {args.base})")
        print(f"  CPU time (user + sys) median {statistics.median(cmp['cpu_here']):.3f} s vs "
              f"{statistics.median(cmp['cpu_base']):.3f} s: ratio {cmp['cpu_ratio']:.3f} (steadier on a busy machine)")
        if args.only_base:
            return
    cli = bench_cli(args)
    t = cli["times"]
    st = cli["stats"]
    print(f"\nplanner search --model {args.model} --gpus {args.gpus} --gpu {args.gpu}  (fresh process, {len(t)} runs)")
    print(f"  wall clock   median {statistics.median(t):.3f} s   min {min(t):.3f} s   max {max(t):.3f} s   "
          f"(target < 2 s: {'OK' if statistics.median(t) < 2 else 'MISSED'})")
    print(f"  candidates {st['enumerated']:,}, valid layouts evaluated {st['evaluated']:,}, fitting {st['fits']:,}, "
          f"method {st['method']}")
    print(f"  in-command search time {st['seconds']:.3f} s -> {st['evaluated'] / st['seconds']:,.0f} layouts/s "
          f"(end to end: {st['evaluated'] / statistics.median(t):,.0f} layouts/s)")

    ph = bench_phases(args)
    print("\nin-process phases (best of 3)")
    print(f"  ortools import          {ph['ortools_import_s']:.3f} s (first import in this process)")
    print(f"  enumerate, CP-SAT core  {ph['enumerate_cpsat_s']:.3f} s")
    print(f"  enumerate, numpy core   {ph['enumerate_numpy_s']:.3f} s")
    print(f"  evaluate {ph['layouts']:,} layouts  {ph['evaluate_space_s']:.3f} s "
          f"({ph['layouts'] / ph['evaluate_space_s']:,.0f} layouts/s)")

    ev = bench_evaluate(ph["_problem"], args.n)
    best = min(ev["times"])
    rate = ev["n"] / best
    print(f"\nevaluate_batch on {ev['n']:,} random valid layouts: best {best:.3f} s, "
          f"median {statistics.median(ev['times']):.3f} s -> {rate:,.0f} layouts/s "
          f"(target >= 1,000,000: {'OK' if rate >= 1e6 else 'MISSED'})")


if __name__ == "__main__":
    main()
