"""Issue 28: inputs no ordinary test uses. Each answered with one line (exit 2), in time, with
nothing lost or replaced: special files, long names, shell arithmetic bombs, numbers at and
beyond float's range."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from planner.cli.main import app

runner = CliRunner()
FAST = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def one_error_line(res, *needles) -> str:
    assert res.exit_code == 2, (res.exit_code, res.output)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in res.output, res.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# ------------------------------------------------------------------------------ special files


def _special(kind: str, tmp: Path) -> Path:
    """A FIFO, a directory, or one of the character devices every Unix has."""
    if kind == "fifo":
        path = tmp / "pipe"
        if not path.exists():
            os.mkfifo(path)
        return path
    if kind == "dir":
        path = tmp / "folder"
        path.mkdir(exist_ok=True)
        return path
    return Path(kind)


def _type(path: Path) -> int:
    return stat.S_IFMT(os.stat(path).st_mode)


SEARCH = ("search", "--model", "8b", "--gpus", "8", "--gpu", "h100")
OUTPUTS = [SEARCH + ("--csv",), SEARCH + ("--plot",), ("evaluate", "--model", "8b", "--gpus", "8", "--gpu", "h100",
           "--plot")]
INPUTS = [("search", "--gpus", "8", "--gpu", "h100", "--model"),
          ("search", "--model", "8b", "--gpus", "8", "--cluster"),
          ("export", "--out", "{tmp}/out", "--from-launch"),
          ("validate", "--runs"),
          ("evaluate", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--calibration")]
KINDS = ["fifo", "dir", "/dev/null", "/dev/zero", "/dev/full"]


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(), reason="needs FIFOs and /dev")
@FAST
@given(kind=st.sampled_from(KINDS), command=st.sampled_from(OUTPUTS), force=st.booleans())
def test_special_output_files_are_refused_and_never_replaced(tmp_path, kind, command, force):
    target = _special(kind, tmp_path)
    before = _type(target)
    res = cli(*command, target, *(["--force"] if force else []))
    line = one_error_line(res)
    assert str(target) in line
    assert _type(target) == before  # still a FIFO, a device, a directory


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(), reason="needs FIFOs and /dev")
@FAST
@given(kind=st.sampled_from(KINDS), command=st.sampled_from(INPUTS))
def test_special_input_files_are_refused_before_reading(tmp_path, kind, command):
    # A FIFO with no writer would block a reader forever and /dev/zero never ends: the answer
    # comes from the file's type, before it is opened.
    target = _special(kind, tmp_path)
    line = one_error_line(cli(*[a.format(tmp=tmp_path) for a in command], target))
    assert "regular file" in line or "folder" in line or "directory" in line


def test_an_oversized_input_file_is_refused_with_the_limit(tmp_path):
    from hardware_catalog.files import MAX_INPUT_BYTES

    big = tmp_path / "model.json"
    with open(big, "wb") as fh:
        fh.truncate(MAX_INPUT_BYTES + 1)  # sparse: costs no disk
    one_error_line(cli("search", "--gpus", "8", "--gpu", "h100", "--model", big), f"{MAX_INPUT_BYTES:,} bytes")


@FAST
@given(n=st.integers(min_value=1_000, max_value=100_000), flag=st.sampled_from(["--model", "--gpu", "--csv"]))
def test_a_huge_name_gives_a_short_line(n, flag):
    args = {"--model": "8b", "--gpu": "h100", "--csv": None}
    args[flag] = "x" * n
    command = ["search", "--gpus", "8"] + [a for k, v in args.items() if v for a in (k, v)]
    line = one_error_line(cli(*command))
    assert len(line) < 1500 and "x" * 200 not in line  # the line does not grow with the name


def test_csv_and_plot_on_one_path_are_refused(tmp_path):
    out = tmp_path / "same.png"
    one_error_line(cli(*SEARCH, "--csv", out, "--plot", out), "--csv", "--plot", "same file")
    assert not out.exists()


# ------------------------------------------------------------------------------ shell arithmetic

_OPS = ["+", "-", "*", "/", "%", "**", "<<", ">>", "<", "==", "&", "|", "^", "&&", "||"]
_exprs = st.recursive(
    st.integers(min_value=0, max_value=2**40).map(str),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(_OPS), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["-", "!", "~"]), inner).map(lambda t: f"{t[0]}({t[1]})"),
    ),
    max_leaves=8,
)


@pytest.mark.skipif(not Path("/bin/bash").exists(), reason="bash is the oracle")
@settings(max_examples=40, deadline=None)
@given(expr=_exprs)
def test_arithmetic_matches_bash_or_refuses_what_bash_wraps(expr):
    import subprocess
    import time

    from planner.launch.arith import ArithmeticLimit, evaluate

    t0 = time.perf_counter()
    try:
        ours = evaluate(expr)
    except ArithmeticLimit:
        ours = None
    # Bounded work: every intermediate is 64-bit. Unbounded, (2**40)**(2**40) would not finish; the
    # bound leaves room for a garbage collection on a loaded CI runner (microseconds when idle).
    assert time.perf_counter() - t0 < 1.0
    bash = subprocess.run(["/bin/bash", "-c", f"echo $(({expr}))"], capture_output=True, text=True)
    if ours is not None:  # bash agrees wherever nothing overflowed
        assert bash.returncode == 0 and int(bash.stdout) == ours, (expr, bash.stdout, bash.stderr)


@FAST
@given(base=st.integers(2, 10**6), exp=st.integers(64, 10**9), stack=st.integers(1, 4))
def test_an_arithmetic_bomb_is_one_line_in_milliseconds(tmp_path, base, exp, stack):
    import time

    bomb = "**".join([str(base)] * stack + [str(exp)])
    script = tmp_path / "launch.sh"
    script.write_text(f"TP=$(({bomb}))\ntorchrun pretrain_gpt.py --tensor-model-parallel-size $TP\n")
    t0 = time.perf_counter()
    line = one_error_line(cli("evaluate", "--gpus", "8", "--gpu", "h100", "--from-launch", script), "64-bit")
    assert time.perf_counter() - t0 < 2.0
    assert "=0" not in line


def test_a_self_doubling_variable_is_bounded(tmp_path):
    script = tmp_path / "launch.sh"
    script.write_text("A=x\n" + "A=$A$A\n" * 40 + "torchrun pretrain_gpt.py --tensor-model-parallel-size 1\n")
    one_error_line(cli("evaluate", "--gpus", "8", "--gpu", "h100", "--from-launch", script), "expands to more than")


# ---------------------------------------------------------------------- numbers from files

CLUSTER_FLOATS = ["scaleup_latency_us", "scaleup_efficiency", "network_efficiency", "network_oversubscription",
                  "power_limit_watts"]
_BASE_CLUSTER = {"name": "mine", "gpu": "h100", "gpus_per_node": 8, "scaleup_domain_size": 8,
                 "scaleup_latency_us": 2.0, "scaleup_efficiency": 0.8, "nic": "ib-ndr", "nics_per_node": 8,
                 "network_efficiency": 0.9}
_extremes = st.one_of(st.sampled_from([float("inf"), float("-inf"), float("nan"), 1e308, 1e-300, 0.0, -1.0, 5e-324]),
                      st.floats(allow_nan=True, allow_infinity=True))


@FAST
@given(field=st.sampled_from(CLUSTER_FLOATS), value=_extremes)
def test_any_number_in_a_cluster_file_is_refused_by_name_or_gives_finite_results(tmp_path, field, value):
    import json
    import math
    import warnings

    path = tmp_path / "cluster.toml"
    fields = {**_BASE_CLUSTER, field: value}
    path.write_text("".join(f"{k} = {json.dumps(v) if isinstance(v, str) else repr(float(v)) if isinstance(v, float) else v}\n"
                            for k, v in fields.items()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy RuntimeWarning (overflow, invalid value) fails the test
        res = cli("evaluate", "--model", "8b", "--gpus", "16", "--cluster", path, "--json")
    if res.exit_code == 2:
        one_error_line(res, field)
        return
    assert res.exit_code in (0, 3), res.output
    record = json.loads(res.stdout)
    numbers = [v for v in record.values() if isinstance(v, float)]
    assert numbers and all(math.isfinite(v) for v in numbers)
    assert record["step_time_s"] < 1e6  # a bounded figure gives a bounded step


def test_gpus_per_node_must_divide_the_gpu_count(tmp_path):
    path = tmp_path / "cluster.toml"
    fields = {**_BASE_CLUSTER, "gpus_per_node": 3, "scaleup_domain_size": 3}
    path.write_text("".join(f'{k} = "{v}"\n' if isinstance(v, str) else f"{k} = {v}\n" for k, v in fields.items()))
    for command in ("search", "evaluate"):
        one_error_line(cli(command, "--model", "8b", "--gpus", "64", "--cluster", path), "--gpus=64", "3 GPUs per node")


# ------------------------------------------------------------------------------ trust


def test_export_from_a_hand_edited_record_states_planner_s_prediction(tmp_path):
    import json

    res = cli("evaluate", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--tp", "2", "--json")
    record = json.loads(res.stdout)
    true_step = record["step_time_s"]
    record.update(step_time_s=0.001, tokens_per_s_per_gpu=1e9)
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(record))
    res = cli("export", "--from", edited, "--out", tmp_path / "out", "--format", "torchrun")
    assert res.exit_code == 0, res.output
    assert "states other numbers" in res.stderr and "step time 0.001" in res.stderr
    header = (tmp_path / "out" / "launch_torchrun.sh").read_text()
    assert f"step {true_step:.3f} s" in header and "0.001 s" not in header


def test_from_launch_says_the_gpu_count_came_from_the_script(tmp_path):
    script = tmp_path / "one_node.sh"
    script.write_text("GPUS_PER_NODE=8\nNUM_NODES=1\ntorchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES "
                      "pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2 "
                      "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
                      "--max-position-embeddings 4096 --ffn-hidden-size 14336 --vocab-size 128256 "
                      "--micro-batch-size 1 --global-batch-size 512 --bf16\n")
    line = one_error_line(cli("evaluate", "--from-launch", script, "--gpu", "h100"),
                          "GPUs 8 from the file (1 node(s) x 8 processes)", "pass --gpus")
    assert "--gpus=8" not in line


def test_version():
    from planner.common import planner_version

    res = cli("--version")
    assert res.exit_code == 0 and res.stdout.strip() == f"planner {planner_version()}"
