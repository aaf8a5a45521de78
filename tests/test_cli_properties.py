"""Every input answered: the command line driven with generated arguments and files.

Whatever hypothesis types (numbers out of range, inf and nan, garbage words, hostile names, files
of random fields or random bytes), planner must answer with exit 0, 2 (bad input: one line on
stderr) or 3 (nothing fits), never a traceback (an internal error exits 1 and fails here), and a
failed export leaves no file behind, not even a temporary one. In-process through typer's
CliRunner, so the examples stay fast.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from costmodel.options import AUTO_FLAG, CHOICE, FLAG, INT, MODULES, OPTIONAL_INT, options_for
from planner.cli.main import app

runner = CliRunner()
FAST = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))

WORDS = st.sampled_from(["", " ", "x", "8x", "0x10", "1e3", "-1", "0", "inf", "nan", "$(touch pwned)", "a,,b",
                         "\u0663", "9" * 30, "h100,", "..", "1..", "4..2", "8..64:0"])
INTS = st.one_of(st.integers(-3, 300), st.integers(-2**70, 2**70), st.sampled_from([2**20, 2**20 + 1, 2**24, 2**32]))
NUMBER_TEXT = st.one_of(INTS.map(str), WORDS, st.floats(allow_nan=True, allow_infinity=True).map(repr))
SANE_INT = {"zero": st.sampled_from(["0", "1", "2", "3"]), "vpp": st.sampled_from(["1", "2", "4"]),
            "recompute_layers": st.sampled_from(["1", "2", "4", "8"]), "mbs": st.sampled_from(["1", "2", "4"]),
            "pp_first_layers": st.sampled_from(["3", "7", "15"]), "pp_last_layers": st.sampled_from(["3", "7", "15"])}


def _sane(opt) -> st.SearchStrategy:
    """Values of one layout option a user would type."""
    if opt.kind in (INT, OPTIONAL_INT):
        return SANE_INT.get(opt.name, st.sampled_from(["1", "2", "4", "8"]))
    if opt.kind == CHOICE:
        return st.sampled_from(opt.choices)
    if opt.kind == MODULES:
        return st.lists(st.sampled_from(opt.choices), min_size=1, max_size=3).map(",".join)
    return st.none()  # a flag: no value


def _hostile(opt) -> st.SearchStrategy:
    return NUMBER_TEXT if opt.kind in (INT, OPTIONAL_INT) else WORDS


@st.composite
def command_args(draw, command: str, base: dict, hostile_values: dict) -> list[str]:
    """``command`` with sane values for ``base`` (flag -> strategy) and up to three layout options;
    in half the examples one flag (of those or any option) carries a hostile value instead."""
    opts = {o.flag: o for o in options_for(command)}
    chosen = draw(st.lists(st.sampled_from(sorted(opts)), max_size=3, unique=True))
    values = {flag: draw(strategy) for flag, strategy in base.items()}
    for flag in chosen:
        opt = opts[flag]
        if opt.kind in (FLAG, AUTO_FLAG):
            values[draw(st.sampled_from([flag, "--no-" + flag[2:]]))] = None
        else:
            values[flag] = draw(_sane(opt))
    if draw(st.booleans()):
        flag = draw(st.sampled_from(sorted(set(base) | set(opts))))
        if flag in opts and opts[flag].kind in (FLAG, AUTO_FLAG):
            values[flag] = None
        else:
            strategy = hostile_values[flag] if flag in hostile_values else _hostile(opts[flag]) if flag in opts else WORDS
            values[flag] = draw(strategy)
    return [command] + [a for flag, v in values.items() for a in ([flag] if v is None else [flag, v])]


def _answered(res, args) -> None:
    """Exit 0, 2 or 3, no traceback; a refusal is one error line on stderr."""
    assert res.exit_code in (0, 2, 3), (args, res.exit_code, res.output)
    assert "Traceback" not in res.output, args
    if res.exit_code == 2:
        errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, (args, res.stderr)


JOB = {"--model": st.sampled_from(["8b", "70b", "mixtral-8x7b", "deepseek-v3"]),
       "--gpus": st.sampled_from(["8", "16", "64", "256"]), "--gpu": st.sampled_from(["h100", "a100", "b200"])}
HOSTILE_JOB = {"--model": st.sampled_from(["nosuch", "", "$(touch pwned)"]), "--gpus": NUMBER_TEXT,
               "--gpu": st.sampled_from(["h1000", "h100,b200", ""]), "--tokens-per-batch": NUMBER_TEXT,
               "--gbs": NUMBER_TEXT, "--seq-len": NUMBER_TEXT}


@FAST
@given(args=command_args("evaluate", JOB, HOSTILE_JOB), as_json=st.booleans())
def test_evaluate_answers_every_input(args, as_json):
    args = args + (["--json"] if as_json else [])
    _answered(runner.invoke(app, args), args)


SEARCH_JOB = {"--model": st.sampled_from(["8b", "mixtral-8x7b"]), "--gpus": st.sampled_from(["8", "64", "8..64", "16,32"]),
              "--gpu": st.sampled_from(["h100", "a100"]), "--top": st.sampled_from(["1", "3"]),
              "--method": st.sampled_from(["auto", "auto", "optuna"]), "--trials": st.sampled_from(["10", "40"])}
HOSTILE_SEARCH = {**HOSTILE_JOB, "--method": st.sampled_from(["magic", ""]), "--sampler": WORDS,
                  "--gpus": st.one_of(NUMBER_TEXT, st.lists(st.integers(-1, 2**21), min_size=1, max_size=3).map(
                      lambda xs: ",".join(map(str, xs))), st.tuples(st.integers(-1, 256), st.integers(-1, 512)).map(
                      lambda t: f"{t[0]}..{t[1]}"))}
for _flag in ("--top", "--trials", "--seed", "--price-per-gpu-hour", "--train-tokens", "--memory-headroom"):
    HOSTILE_SEARCH[_flag] = NUMBER_TEXT


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(args=command_args("search", SEARCH_JOB, HOSTILE_SEARCH), pareto=st.booleans())
def test_search_answers_every_input(args, pareto):
    args = args + ["--no-progress"] + (["--pareto"] if pareto else [])
    _answered(runner.invoke(app, args), args)


def _files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


EXPORT_JOB = {"--model": st.sampled_from(["8b", "mixtral-8x7b"]), "--gpus": st.sampled_from(["8", "16", "64"]),
              "--gpu": st.just("h100"), "--format": st.sampled_from(["all", "megatron", "torchtitan", "deepspeed,slurm"]),
              "--entrypoint": st.sampled_from(["pretrain_gpt.py", "train.py"]), "--tp": st.sampled_from(["2", "4"]),
              "--recompute": st.just("full"), "--gbs": st.sampled_from(["64", "128"])}
HOSTILE_EXPORT = {**HOSTILE_JOB, "--format": WORDS, "--entrypoint": st.sampled_from(["-x.py", "a b$(touch pwned).py", ""]),
                  "--torchtitan-version": st.sampled_from(["0.2", "9.9", ""])}


@FAST
@given(args=command_args("export", EXPORT_JOB, HOSTILE_EXPORT))
def test_export_writes_all_files_or_none(args):
    with tempfile.TemporaryDirectory() as tmp:
        args = args + ["--out", str(Path(tmp) / "launch")]
        res = runner.invoke(app, args)
        _answered(res, args)
        written = _files_under(Path(tmp))
        assert not [p for p in written if p.name.endswith(".tmp")], args  # no temporary left behind
        if res.exit_code != 0:
            assert written == [], (args, written)  # nothing half-written
        else:
            said = {Path(line.split(" ", 1)[1]).name for line in res.stdout.splitlines() if line.startswith("wrote ")}
            assert {p.name for p in written} == said


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**70), st.floats(allow_nan=True), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8)
FIELD_VALUE = st.one_of(JSON_VALUES, st.integers(-2**40, 2**70), st.sampled_from([0, -1, 10**9, 2**18 + 1, 1.5, "8"]))
MODEL = {"num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_kv_heads": 8, "ffn_hidden_size": 14336,
         "vocab_size": 128256, "default_seq_len": 8192}
MOE = {"num_experts": 8, "top_k": 2, "expert_ffn_hidden_size": 14336}
HF = {"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
      "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "num_local_experts": 8,
      "num_experts_per_tok": 2, "max_position_embeddings": 32768}
CLUSTER = {"gpu": "h100", "gpus_per_node": 8, "scaleup_domain_size": 8, "scaleup_latency_us": 3, "scaleup_efficiency": 0.8,
           "nic": "ib-ndr", "nics_per_node": 8, "network_efficiency": 0.8, "network_topology": "switch"}


@st.composite
def damaged(draw, sane: dict, nested: dict | None = None, table: str = "moe"):
    """``sane`` (with ``nested`` as its ``table``, sometimes), then up to two fields (of it or of
    its table) changed to a hostile value, removed, or added."""
    rec = json.loads(json.dumps(sane))
    if nested and draw(st.booleans()):
        rec[table] = dict(nested)
    for _ in range(draw(st.integers(0, 2))):
        target = rec[table] if isinstance(rec.get(table), dict) and draw(st.booleans()) else rec
        key = draw(st.one_of(st.sampled_from(sorted(target) or ["x"]), st.text(max_size=6)))
        action = draw(st.sampled_from(["set", "set", "drop"]))
        if action == "drop":
            target.pop(key, None)
        else:
            target[key] = draw(FIELD_VALUE)
    return rec


def _write(tmp: str, name: str, content) -> Path:
    path = Path(tmp) / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(json.dumps(content))
    return path


@FAST
@given(content=st.one_of(damaged(MODEL, MOE), damaged(MODEL, MOE), damaged(HF), JSON_VALUES, st.binary(max_size=40)))
def test_model_files_are_answered(content):
    with tempfile.TemporaryDirectory() as tmp:
        args = ["evaluate", "--model", str(_write(tmp, "model.json", content)), "--gpus", "8", "--gpu", "h100"]
        _answered(runner.invoke(app, args), args)


@FAST
@given(content=st.one_of(damaged(CLUSTER), damaged(CLUSTER), JSON_VALUES, st.binary(max_size=40)),
       gpus=st.sampled_from(["8", "64", "1048576"]))
def test_cluster_files_are_answered(content, gpus):
    with tempfile.TemporaryDirectory() as tmp:
        args = ["evaluate", "--model", "8b", "--gpus", gpus, "--cluster", str(_write(tmp, "c.json", content))]
        _answered(runner.invoke(app, args), args)


def _sane_record() -> dict:
    import planner

    return planner.evaluate("8b", 16, "h100", tp=2, gbs=64)


RECORD = _sane_record()
RANKED = st.lists(damaged(RECORD, RECORD["layout"], "layout"), min_size=1, max_size=3).map(
    lambda recs: {"results": [{**r, "rank": i + 1} for i, r in enumerate(recs)], "stats": {}})


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(content=st.one_of(damaged(RECORD, RECORD["layout"], "layout"), RANKED, JSON_VALUES, st.binary(max_size=40)),
       rank=st.one_of(st.none(), st.sampled_from(["1", "2"]), NUMBER_TEXT), command=st.sampled_from(["evaluate", "export"]),
       extra=st.sampled_from([[], ["--tp", "4"], ["--gpus", "32"], ["--model", "70b"], ["--tp", "0"]]))
def test_from_files_are_answered(content, rank, command, extra):
    with tempfile.TemporaryDirectory() as tmp:
        args = [command, "--from", str(_write(tmp, "rec.json", content)), *extra] + (["--rank", rank] if rank else [])
        args += ["--out", str(Path(tmp) / "o")] if command == "export" else []
        _answered(runner.invoke(app, args), args)


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(content=st.one_of(JSON_VALUES, st.binary(max_size=40),
                         st.lists(st.fixed_dictionaries({}, optional={"id": st.text(max_size=4), "model": JSON_VALUES,
                                                                      "hardware": JSON_VALUES, "layout": JSON_VALUES,
                                                                      "measured": JSON_VALUES}), max_size=2)))
def test_runs_files_are_answered(content):
    with tempfile.TemporaryDirectory() as tmp:
        args = ["validate", "--runs", str(_write(tmp, "runs.json", content))]
        _answered(runner.invoke(app, args), args)


COMM_SANE = {"--size": st.sampled_from(["1GiB", "64MB", "4096"]), "--bandwidth": st.sampled_from(["400GB/s", "50Gb/s"]),
             "--latency": st.sampled_from(["2us", "500ns"]), "--gpus": st.sampled_from(["8", "64", "1024"]),
             "--topology": st.sampled_from(["ring", "switch", "tree", "torus2d", "mesh2d"])}
COMM_HOSTILE = {"--size": st.one_of(WORDS, st.sampled_from(["1e400B", "1e30TiB", "0B", "-1GB", "1Gb", "1e-300B"])),
                "--bandwidth": st.one_of(WORDS, st.sampled_from(["1e400GB/s", "1e-300GB/s", "0GB/s", "400GB", "1B/s",
                                                                 "1e30TB/s"])),
                "--latency": st.one_of(WORDS, st.sampled_from(["1e400s", "-1us", "1e30s", "1s", "0.9s", "2 parsecs"])),
                "--gpus": NUMBER_TEXT, "--dims": st.one_of(WORDS, st.sampled_from(["100000x100000", "0x8", "8x8"])),
                "--sweep": st.one_of(WORDS, st.sampled_from(["1B..1e30TiB:x1e6", "1KiB..1B", "1B..1GiB:x1", "1B..1TiB:x1.0001"])),
                "--topology": st.sampled_from(["hierarchical", "bogus", ""]), "--algorithm": WORDS,
                "--gpus-per-node": NUMBER_TEXT, "--cluster": st.sampled_from(["dgx-h100", "nope"])}


@st.composite
def comm_args(draw) -> list[str]:
    """A collective on a sane topology, in half the examples with one hostile value."""
    values = {flag: draw(strategy) for flag, strategy in COMM_SANE.items()}
    if draw(st.booleans()):
        flag = draw(st.sampled_from(sorted(COMM_HOSTILE)))
        values[flag] = draw(COMM_HOSTILE[flag])
        if flag == "--sweep":
            values.pop("--size")
    op = draw(st.sampled_from(["all-reduce", "all_to_all", "reduce-scatter", "p2p", "broadcast", "nope"]))
    return ["comm", op] + [a for flag, v in values.items() for a in (flag, v)]


@FAST
@given(argv=comm_args())
def test_comm_answers_every_input(argv):
    _answered(runner.invoke(app, argv), argv)
