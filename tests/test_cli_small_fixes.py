"""Small command-line fixes, one test per fix: each command printed or accepted something wrong
before (the comment says what), and each assertion can be checked by hand."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from test_hostile_inputs import cli, one_error_line


# 1. evaluate's "time per step" table: the compute label (47 characters) is longer than the
#    44-character column, so its seconds sat 3 columns right of every other row's.

def _number_ends(block: list[str], pattern: str) -> list[int]:
    """The column where each row's number ends."""
    return [m.end(1) for line in block if (m := re.match(r"^  \S.*?\s(" + pattern + r")(?:\s|$)", line))]


def test_time_and_memory_tables_align_their_numbers():
    res = cli("evaluate", "--model", "gpt3-175b", "--gpus", "1024", "--gpu", "a100", "--tp", "8", "--pp", "16",
              "--gbs", "1536", "--seq-len", "2048")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("time per step"))
    block = lines[top + 1: lines.index("", top)]
    ends = _number_ends(block, r"\d+\.\d{3}")
    # compute, recompute, bubble, TP comm, PP send/recv, DP comm, SM contention, optimizer, hidden DP comm
    assert len(ends) == 9, block
    assert block[0].startswith("  compute (fwd+bwd GEMMs, attention, elementwise)")
    assert set(ends) == {lines[top].index("seconds") + len("seconds")}, block
    top = next(i for i, line in enumerate(lines) if line.startswith("memory per GPU"))
    block = lines[top + 1: lines.index("", top) if "" in lines[top:] else len(lines)]
    ends = _number_ends(block, r"\d+\.\d{2}")
    assert len(ends) == 7 and set(ends) == {lines[top].index("GiB") + len("GiB")}, block  # 6 terms + peak


# 2. A count of one read "1 experts per rank" (search/envelope.py), "1 GPUs", "1 sequences x ...;
#    1 micro-batches of 1".

def test_counts_of_one_are_singular():
    from hardware_catalog import get_gpu, get_model
    from search.envelope import Job, flags

    cols = {k: np.array([v]) for k, v in dict(tp=2, pp=4, cp=1, ep=8, dp=8).items()}
    data = {"mechanisms": {"experts_per_rank": {"min": 2, "max": 32, "rows": 1},
                           "gpus": {"min": 4, "max": 6144, "rows": 117}}}
    mixtral = Job(get_model("mixtral-8x7b"), get_gpu("h100"), 1, 4096)  # 8 experts over EP 8
    assert [f["reason"] for f in flags(mixtral, cols, data=data)] == [
        "1 expert per rank: reference runs cover 2-32 (1 row)", "1 GPU: reference runs cover 4-6,144 (117 rows)"]
    res = cli("evaluate", "--model", "8b", "--gpus", "1", "--gpu", "h100", "--gbs", "1", "--recompute", "full")
    assert res.exit_code == 3, res.output  # 8B's Adam states do not fit one H100: the report, then exit 3
    assert "batch   1 sequence x 8,192 tokens = 8.19k tokens/step; 1 micro-batch of 1 per pipeline" in res.stdout
    assert not re.search(r"\b1 (experts|GPUs|sequences|micro-batches|rows)\b", res.stdout), res.stdout


# 3. A word for an integer flag got pydantic's wording: "--tp 'abc': Input should be a valid
#    integer, unable to parse string as an integer". planner.cli.options.unconverted_value words
#    it; planner/cli/errors.py (_usage_error) has to call it (the patch in this change's report).

def _pydantic_error(kind, text):
    from pydantic import TypeAdapter, ValidationError

    try:
        TypeAdapter(kind).validate_python(text)
    except ValidationError as err:
        return err
    raise AssertionError(text)


def test_unreadable_numbers_are_said_in_planners_words():
    from planner.cli.options import unconverted_value

    assert (unconverted_value("--tp", "abc", _pydantic_error(int, "abc"), "evaluate")
            == "--tp 'abc': not a whole number (allowed: an integer from 1 to 1,048,576)")
    assert (unconverted_value("--gpus", "4.5", _pydantic_error(int, "4.5"), "comm")
            == "--gpus '4.5': not a whole number (allowed: an integer from 2 to 1,048,576)")
    assert (unconverted_value("--mbs", "1e3", _pydantic_error(int, "1e3"), "evaluate")
            == "--mbs '1e3': give a whole number in digits, e.g. 1000 (allowed: an integer from 1 to 16,777,216)")
    assert (unconverted_value("--pue", "x", _pydantic_error(float, "x"), "evaluate")
            == "--pue 'x': not a number (allowed: a number from 1 to 5)")
    assert unconverted_value("--tp", "abc", ValueError("not pydantic")) is None


@pytest.mark.parametrize("flag, typed", [("--tp", "abc"), ("--gpus", "abc"), ("--gbs", "1.5"), ("--rank", "x")])
def test_every_integer_flag_says_what_it_takes(flag, typed):
    args = {"--model": "8b", "--gpus": "64", "--gpu": "h100", flag: typed}
    line = one_error_line(cli("evaluate", *[a for kv in args.items() for a in kv]), f"{flag} '{typed}'",
                          "not a whole number (allowed: an integer from 1 to ")
    assert "Input should" not in line and "--help" not in line


# 4. --tokens-per-batch 16M was refused ("Input should be a valid integer") although --train-tokens
#    15T is read: the same parser now, keeping a whole number of tokens.

def test_tokens_per_batch_takes_the_suffixes_of_train_tokens():
    res = cli("evaluate", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--tp", "8", "--seq-len", "4000",
              "--tokens-per-batch", "16M", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["layout"]["gbs"] == 4000  # 16,000,000 / 4,000
    job = ("evaluate", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--tokens-per-batch")
    one_error_line(cli(*job, "1.5"), "'1.5'", "not a whole number")
    one_error_line(cli(*job, "16P"), "'16P'", "from 1 to 68,719,476,736")
    one_error_line(cli(*job, "100B"), "'100B'", "100,000,000,000 tokens", "68,719,476,736")
    one_error_line(cli(*job, "0"), "'0'", "from 1 to")


# 5. comm --size 1e30 was priced ("9.095e+17 TiB").

def test_comm_size_is_bounded_at_one_pib():
    job = ("comm", "all-reduce", "--cluster", "dgx-h100", "--gpus", "64", "--size")
    one_error_line(cli(*job, "1e30"), "--size '1e30'", "1 PiB", "1,024 TiB")
    one_error_line(cli(*job, "1025TiB"), "--size '1025TiB'", "1 PiB")
    one_error_line(cli(*job, "0"), "--size '0'", "at least 1 byte")
    one_error_line(cli(*job, "-5"), "--size '-5'", "positive")
    one_error_line(cli("comm", "all-reduce", "--cluster", "dgx-h100", "--gpus", "64", "--sweep", "1KiB..2000TiB"),
                   "'2000TiB'", "1 PiB")
    assert cli(*job, "1024TiB").exit_code == 0


# 6. A cluster file with gpus_per_node = 100000 was priced ("domains of 100000").

def _cluster(tmp_path, per_node, domain):
    path = tmp_path / f"c{per_node}.toml"
    path.write_text(f'gpu = "b200"\ngpus_per_node = {per_node}\nscaleup_domain_size = {domain}\n'
                    'scaleup_latency_us = 2.0\nscaleup_efficiency = 0.8\nnic = "ib-ndr"\nnics_per_node = 4\n'
                    'network_efficiency = 0.9\n')
    return path


def test_nodes_and_scaleup_domains_are_bounded(tmp_path):
    job = ("comm", "all-reduce", "--size", "1GB", "--gpus", "64", "--cluster")
    line = one_error_line(cli(*job, _cluster(tmp_path, 100000, 8)), "field gpus_per_node", "at most 1,024 GPUs",
                          "NVL576", "(got 100000)")
    assert "scaleup_domain_size" not in line
    one_error_line(cli(*job, _cluster(tmp_path, 4, 4096)), "field scaleup_domain_size", "at most 1,024", "(got 4096)")
    assert cli(*job, _cluster(tmp_path, 4, 72)).exit_code == 0  # a GB200 NVL72 rack: 18 trays of 4
    hier = ("comm", "all-reduce", "--topology", "hierarchical", "--bandwidth", "400GB/s", "--latency", "2us",
            "--network-bandwidth", "50GB/s", "--network-latency", "5us", "--size", "1GB")
    one_error_line(cli(*hier, "--gpus", "4096", "--gpus-per-node", "2048"), "--gpus-per-node=2048", "1 to 1,024")


# 7. search --gpus 1 said "a layout fits from --gpus 2 (the fewest whole nodes that fit)" on
#    8-GPU nodes (fixed in search/nearest.py, commit 9fb7a4a).

def test_fewest_gpus_below_a_node_are_not_called_whole_nodes():
    res = cli("search", "--gpus", "1", "--model", "8b", "--gpu", "h100", "--no-progress")
    assert res.exit_code == 3, res.output
    assert "a layout fits from --gpus 2 (" in res.output and "whole nodes" not in res.output


@pytest.mark.parametrize("recompute, word", [("none", " none "), ("full", " full "), ("selective", " sel ")])
def test_validate_layout_label_spells_recompute(recompute, word):
    # The validate table printed recompute[:3]: "non" and "ful" read as typos.
    from costmodel import Layout
    from planner.validate import layout_label

    label = layout_label(Layout(tp=2, pp=1, dp=4, mbs=1, gbs=8, recompute=recompute))
    assert word in label
