#!/usr/bin/env bash
# Distributed `planner sweep` on a real PostgreSQL server: WORKERS processes (default 4) join one
# Optuna study through its RDB storage, as workers on separate machines would. Reports the
# throughput (scenarios/s) of 1, 2 and WORKERS workers on the same server, and checks that every
# scenario was searched exactly once (summed over the workers, and as the study in the database
# has it).
#
# Needs: Debian's `postgresql` package (installed here with apt-get when missing and run as root)
# and the driver optuna's RDB storage uses, which planner does not depend on:
#     pip install psycopg2-binary          # SQLAlchemy comes with optuna
# Everything it starts (a throw-away cluster in a temp dir, on a free loopback port) is stopped
# and removed on exit.
#
# Usage: benchmarks/distributed_sweep.sh            (env: PYTHON, WORKERS)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
WORKERS=${WORKERS:-4}
# 3 models x 3 GPU types x 5 GPU counts x 2 sequence lengths = 90 scenarios.
AXES=(--model 8b,70b,mcore-gpt-1.7b --gpu h100,a100,b200 --gpus 64..1024 --seq-len 4096,8192)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

if ! "$PY" -c "import psycopg2" 2>/dev/null; then
    echo "error: the PostgreSQL driver is missing: pip install psycopg2-binary" >&2
    exit 1
fi

PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$PGBIN" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "error: PostgreSQL is not installed: sudo apt-get install -y postgresql" >&2
        exit 1
    fi
    echo "installing Debian's postgresql package..."
    apt-get install -y -q postgresql >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q postgresql >/dev/null; }
    PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
fi

TMP=$(mktemp -d /tmp/planner-pg.XXXXXX)
AS=()  # the server refuses to run as root: run it as the postgres user then
if [ "$(id -u)" = 0 ]; then
    chown postgres: "$TMP"
    AS=(runuser -u postgres --)
fi
cleanup() {
    "${AS[@]}" "$PGBIN/pg_ctl" -D "$TMP/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${AS[@]}" "$PGBIN/initdb" -D "$TMP/data" -U planner --auth=trust -E UTF8 >/dev/null
"${AS[@]}" "$PGBIN/pg_ctl" -D "$TMP/data" -l "$TMP/server.log" -w \
    -o "-p $PORT -k $TMP -c listen_addresses=127.0.0.1" start >/dev/null
"$PGBIN/createdb" -h 127.0.0.1 -p "$PORT" -U planner planner_sweep
URL="postgresql+psycopg2://planner@127.0.0.1:$PORT/planner_sweep"
echo "PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PORT; storage $URL"
echo "grid: ${AXES[*]}"

# 1, 2 and WORKERS workers started at once, each run on its own study; then the table of the last
# as the database holds it. Wall time counts from the start of the processes (each imports planner and
# optuna, about 1 s) to the end of the last one; CPU time is the workers' user + system time.
"$PY" - "$URL" "$WORKERS" "$TMP" "${AXES[@]}" <<'EOF_PY'
import json, os, resource, subprocess, sys, time
from collections import Counter

url, workers, tmp, axes = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]


def sweep(*args):
    return [sys.executable, "-m", "planner", "sweep", *args, "--storage", url, "--json"]


def run(study, n, grid=axes):
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    procs = [subprocess.Popen(sweep(*grid, "--study-name", study), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(n)]
    outs = []
    for p in procs:
        out, err = p.communicate()
        if p.returncode:
            sys.exit(f"a worker failed: {err}")
        outs.append(json.loads(out))
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime
    return wall, cpu, outs


def line(label, n_sc, wall, cpu):
    return (f"{label}: {n_sc} scenarios in {wall:6.2f} s = {n_sc / wall:5.2f} scenarios/s; "
            f"worker CPU {cpu:5.1f} s ({cpu / n_sc * 1e3:.0f} ms per scenario)")


# Warm-up, not timed: WORKERS workers start at once on the empty database (they race to create
# Optuna's tables, as machines starting together would) on a 4-scenario study.
_, _, warm = run("warm-up", workers, ["--model", "8b", "--gpus", "64,128", "--gpu", "h100,b200"])
warm_ok = sum(o["stats"]["worker"]["ran"] for o in warm) == 4 and all(o["stats"]["done"] == 4 for o in warm)
results = {k: run(f"bench-{k}", k) for k in sorted({1, 2, workers})}
wn, cn, outs = results[workers]
rep = subprocess.run(sweep("--study-name", f"bench-{workers}", "--report-only"), capture_output=True, text=True)
report = json.loads(rep.stdout)
st, n = report["stats"], report["stats"]["scenarios"]
w1 = results[1][0]
for k, (wall, cpu, _) in results.items():
    label = f"{k} worker{'s' if k > 1 else ' '}"
    print(line(label, n, wall, cpu) + (f"; x{w1 / wall:.2f} vs 1 worker" if k > 1 else ""))
print(f"(this machine: {os.cpu_count()} cores, shared with other work; each worker process spends ~1 s "
      f"of CPU importing planner and optuna)")
ran = {o["stats"]["worker"]["worker"]: o["stats"]["worker"]["ran"] for o in outs}
pruned = sum(o["stats"]["worker"]["skipped"] + o["stats"]["worker"]["overflow"] for o in outs)
print(f"searches per worker: {', '.join(str(k) for k in ran.values())} (sum {sum(ran.values())}); "
      f"trials pruned without a search (grid point done or held elsewhere): {pruned}")
per_scenario = Counter(json.dumps(r["scenario"], sort_keys=True) for r in report["scenarios"])
by_worker = Counter(r["worker"] for r in report["scenarios"])
fits = sum(1 for r in report["scenarios"] if r["best"])
print(f"study in PostgreSQL: {st['done']} of {n} scenarios complete, {st['duplicates']} done twice, "
      f"{st['trials']} trials; {fits} found a layout that fits")
ok = warm_ok and (sum(ran.values()) == n == st["done"] == len(per_scenario) and st["duplicates"] == 0
      and max(per_scenario.values()) == 1 and by_worker == Counter(ran))
print("each scenario searched exactly once: " + ("yes" if ok else "NO"))
sys.exit(0 if ok else 1)
EOF_PY
