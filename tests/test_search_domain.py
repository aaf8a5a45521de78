"""``planner search --framework R`` ranks only what R's launch formats write (planner.export.domain)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from costmodel.layout import LayoutBatch
from costmodel.options import OPTIONS_BY_NAME
from planner.export.domain import launch_domain
from planner.export.expressible import refusals
from planner.frameworks.releases import RELEASES, get_release
from test_export import DGX_H100, LLAMA3_8B

# Llama 3 70B on 64 H100s: without --framework its best layout is ZeRO-3 with flat (FSDP1-style)
# buffers (README, "planner search checks its best row"), which Megatron does not have.
SEARCH = ("search", "--model", "70b", "--gpus", "64", "--gpu", "h100")


def run(*args):
    proc = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def _codes(option: str, values) -> np.ndarray:
    return np.array([OPTIONS_BY_NAME[option].encode(v) for v in values])


def test_megatron_domain_leaves_out_flat_zero3_only():
    """By hand from planner/frameworks/megatron.py: Refusal megatron_fsdp_flat holds for fsdp flat
    with zero 3 only; Megatron-FSDP's ZeRO-3 (r0.13: --use-custom-fsdp) and the distributed optimizer
    (ZeRO-1) have rows. r0.8 has no Megatron-FSDP (arguments.py@core_r0.8.0): its ZeRO-3 is out too."""
    # Megatron-FSDP's ZeRO-3 with the pass it runs (main_grad_copy: megatron_fsdp.py _grad_acc), as the
    # search prices it (search.rules.sharded_grad_accum_pass); the others keep fused.
    batch = LayoutBatch.from_arrays(tp=2, dp=4, zero=np.array([3, 3, 1, 0]),
                                    fsdp=_codes("fsdp", ["flat", "megatron", "flat", "flat"]),
                                    grad_accum_pass=_codes("grad_accum_pass",
                                                           ["fused", "main_grad_copy", "fused", "fused"]))
    out = launch_domain(get_release("megatron-core-0.13")).outside(batch, LLAMA3_8B, DGX_H100)
    assert out.mask.tolist() == [True, False, False, False]
    assert out.rules == {"megatron_fsdp_flat": 1}
    assert set(out.reads["megatron_fsdp_flat"]) == {"fsdp", "zero"}
    out = launch_domain(get_release("megatron-core-0.8")).outside(batch, LLAMA3_8B, DGX_H100)
    assert out.mask.tolist() == [True, True, False, False]


def test_deepspeed_domain_reads_the_refusals_when():
    """Megatron-DeepSpeed's Ulysses refuses TP or PP beside it (deepspeed_ulysses_tp_pp): cp 2 with
    tp 2 is out, cp 2 alone and tp 2 alone are in."""
    batch = LayoutBatch.from_arrays(tp=np.array([2, 1, 2]), cp=np.array([2, 2, 1]), dp=2, zero=1,
                                    cp_comm_type=OPTIONS_BY_NAME["cp_comm_type"].encode("a2a"),
                                    grad_accum_pass=OPTIONS_BY_NAME["grad_accum_pass"].encode("cast_add"),
                                    grad_reduce=OPTIONS_BY_NAME["grad_reduce"].encode("all_reduce"))
    # deepspeed-0.5 writes no files (its 2021 keys are not the exporter's): the domain of a release the
    # DeepSpeed format launches, with that profile.
    launched = dataclasses.replace(get_release("deepspeed-0.5"), formats=("deepspeed",))
    out = launch_domain(launched).outside(batch, LLAMA3_8B, DGX_H100)
    assert out.mask.tolist() == [True, False, False]
    assert list(out.rules) == ["deepspeed_ulysses_tp_pp"]


def test_release_without_formats_has_no_domain():
    # llm-foundry: planner writes none of its files, so there is nothing to derive a domain from.
    assert launch_domain(get_release("llm-foundry-0.10")) is None


def test_what_the_domain_leaves_out_every_format_refuses():
    """Soundness: a layout the vectorized domain leaves out is one every format launching the
    release refuses when asked through the exporters themselves."""
    from costmodel import evaluate_batch
    from costmodel.record import result_record
    from hardware_catalog import default_cluster_for_gpu, get_gpu
    from search.space import Problem, build_space

    gpu, cluster = get_gpu("h100"), default_cluster_for_gpu("h100")
    space = build_space(Problem(model=LLAMA3_8B, cluster=cluster, gpu=gpu, gpus=16, gbs=64, seq_len=8192), "numpy")
    batch = space.batch(0, len(space))
    rng = np.random.default_rng(0)
    checked = 0
    for release in (r for r in RELEASES if r.formats):
        domain = launch_domain(release)
        out = domain.outside(batch, LLAMA3_8B, cluster)
        rows = np.flatnonzero(out.mask)
        if not len(rows):
            continue
        pick = rng.choice(rows, size=min(6, len(rows)), replace=False)
        result = evaluate_batch(LLAMA3_8B, cluster, batch.take(pick), gpu=gpu)
        for i in range(len(pick)):
            rec = {**result_record(LLAMA3_8B, cluster, gpu, result, i), "fits": True,
                   "framework": {"name": release.name}}
            refused = refusals(rec, LLAMA3_8B, cluster)
            assert all(f in refused for f in release.formats), (release.name, rec["layout"])
            checked += 1
    assert checked >= 6


def _cluster_of(rec):
    from hardware_catalog import get_cluster, get_model

    return get_model(rec["model"]), get_cluster(rec["cluster"])


def test_framework_search_ranks_nothing_the_megatron_exporter_refuses():
    rc, out, err = run(*SEARCH, "--framework", "megatron-core-0.8", "--top", "5", "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert data["results"]
    for rec in data["results"]:
        model, cluster = _cluster_of(rec)
        assert "megatron" not in refusals(rec, model, cluster, formats=("megatron",)), rec["layout"]
    domain = data["stats"]["domain"]
    assert domain["left_out"] > 0 and "megatron_fsdp_flat" in domain["rules"]
    rc, out, _ = run(*SEARCH, "--framework", "megatron-core-0.8", "--top", "3")
    assert rc == 0
    assert "launch: no format" not in out
    footer = [line for line in out.splitlines() if line.startswith("left out ")]
    assert len(footer) == 1 and "megatron-core-0.8" in footer[0] and "megatron_fsdp_flat" in footer[0]


def test_without_framework_the_ranking_keeps_flat_zero3(tmp_path):
    rc, out, err = run(*SEARCH, "--top", "3", "--json")
    assert rc == 0, err
    data = json.loads(out)
    best = data["results"][0]["layout"]
    assert (best["zero"], best["fsdp"]) == (3, "flat")
    assert "domain" not in data["stats"]
    rc, out, _ = run(*SEARCH, "--top", "3")
    assert "launch: no format planner exports runs #1 as priced" in out
    assert not any(line.startswith("left out ") for line in out.splitlines())


def test_pinned_value_the_release_cannot_launch_is_bad_input(tmp_path):
    csv = tmp_path / "out.csv"
    rc, out, err = run(*SEARCH, "--framework", "megatron-core-0.8", "--zero", "3", "--csv", str(csv))
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert "--zero 3" in lines[0] and "megatron-core-0.8" in lines[0] and "megatron_fsdp_flat" in lines[0]
    assert not csv.exists()


def test_nothing_the_release_launches_fits_says_the_domain_is_why():
    # TP 1 PP 1: on 64 GPUs only ZeRO-3 fits 70B, and Megatron has no flat ZeRO-3; the pins
    # (tp, pp) are not what the rule reads, so it is no answer (exit 3), not bad input. The
    # layouts fit in memory: the answer says the release is why, not "nothing fits".
    rc, out, err = run(*SEARCH, "--framework", "megatron-core-0.8", "--tp", "1", "--pp", "1")
    assert rc == 3, err
    first = out.splitlines()[0]
    assert first.startswith("nothing to launch: ") and "nothing fits" not in out
    assert "layouts fit in memory, but megatron-core-0.8 can launch none of them" in first
    assert "megatron_fsdp_flat" in out


class _RefusesZero3:
    """A domain whose tables refuse nothing and whose exporters refuse ZeRO-3 (or every layout):
    the rows about to be shown are checked and a refused one gives its place to the next."""

    release, formats, typed = "test-release", ("megatron",), ()

    def __init__(self, everything=False):
        self.everything = everything

    def outside(self, batch, model, cluster):
        from planner.export.domain import Refused

        return Refused(np.zeros(len(batch), bool))

    def refused(self, record, model, cluster):
        if self.everything or record["layout"]["zero"] == 3:
            return "test_rule", "refused (rule test_rule)"
        return None


def _search(domain):
    from search.api import search
    from search.request import SearchRequest

    return search(SearchRequest.of("70b", 64, "h100", top=3, domain=domain))


def test_shown_rows_a_format_refuses_give_their_place_to_the_next():
    plain = _search(None)
    assert plain.results[0]["layout"]["zero"] == 3  # the README's flat ZeRO-3 first
    kept = _search(_RefusesZero3())
    assert kept.results and all(r["layout"]["zero"] != 3 for r in kept.results)
    assert kept.stats["domain"]["rows_dropped"]["test_rule"] >= 1
    # the rows kept are the best of the rest, in the order the plain search ranks them
    rest = [r["step_time_s"] for r in kept.results]
    assert rest == sorted(rest)


def test_every_shown_row_refused_is_nothing_the_release_launches():
    res = _search(_RefusesZero3(everything=True))
    assert res.results == []
    assert res.headline == "nothing to launch"  # they fit in memory: the release is why
    assert res.message.startswith("layouts fit in memory, but none of the") and "test-release" in res.message
    assert "test_rule" in res.message


def test_deepspeed_release_prices_pipeline_sends_as_its_engine_sends_them():
    """DeepSpeed's pipeline engine partitions every send over the TP ranks when TP is on without
    sequence parallelism (runtime/pipe/engine.py is_pipe_partitioned), which is why its exporter
    refuses p2p_scatter_gather off (deepspeed_p2p_scatter_gather). The deepspeed-0.5 profile sets it
    on, so a TP x PP layout priced for that release is one the DeepSpeed format writes."""
    code, out, err = run("search", "--model", "70b", "--gpus", "256", "--gpu", "a100", "--framework", "deepspeed-0.5",
                         "--tp", "8", "--pp", "8", "--top", "1", "--json")
    assert code == 0, err
    best = json.loads(out)["results"][0]
    assert best["layout"]["tp"] == 8 and best["layout"]["pp"] == 8
    assert best["layout"]["p2p_scatter_gather"] is True


def test_the_releases_own_files_write_what_its_profile_pins():
    """megatron-core-0.8 runs Mixtral's experts as GroupedMLP (its profile: moe_grouped_gemm fused),
    which r0.8's files state as --moe-grouped-gemm alone (arguments.py@core_r0.8.0; main's
    --moe-use-legacy-grouped-gemm is not r0.8's): the rows shown are launchable, no launch note."""
    code, out, err = run("search", "--model", "mixtral-8x7b", "--gpus", "64", "--gpu", "h100",
                         "--framework", "megatron-core-0.8", "--top", "2")
    assert code == 0, err
    assert "launch: no format" not in out and "megatron_release_moe_grouped_gemm" not in out


def test_refused_names_the_rule_of_the_file_the_release_reads():
    """torchtitan 0.2 reads torchtitan.toml only; its 0.3 command-line file is refused for the
    release (torchtitan_cli_release), which is no reason the layout cannot run. Llama 2 70B's
    shape (80 layers, hidden 8192, FFN 28672, vocab 32000) matches no torchtitan llama3 flavor
    (torchtitan/models/llama3/__init__.py: 8B, 70B and 405B have vocab 128256), so the domain
    must name torchtitan_flavor."""
    from hardware_catalog import get_model
    from test_export import record

    model = get_model("llama2-70b")
    rec = record(model, tp=8, pp=1, dp=2, zero=3, fsdp="fsdp2", gbs=16, recompute="full", loss="eager")
    rule, _ = launch_domain(get_release("torchtitan-0.2")).refused(rec, model, DGX_H100)
    assert rule == "torchtitan_flavor"


@pytest.fixture(scope="module")
def megatron_within_envelope():
    """Llama 3 8B on 64 H100s with --framework megatron-core-0.8 --within-envelope: JSON and text."""
    args = ("search", "--model", "llama3-8b", "--gpus", "64", "--gpu", "h100", "--top", "2",
            "--framework", "megatron-core-0.8", "--within-envelope")
    code, out, err = run(*args, "--json")
    assert code == 0, err
    code, text, err = run(*args)
    assert code == 0, err
    return json.loads(out), text


def test_a_recipe_the_release_cannot_launch_is_not_ranked(megatron_within_envelope):
    """Megatron has no flat (FSDP1-style) ZeRO-3 (planner/frameworks/megatron.py Refusal
    megatron_fsdp_flat), so a published recipe priced as one is not ranked among the layouts
    megatron-core-0.8 launches, and says why."""
    data, text = megatron_within_envelope
    flat = [e for e in data["reference_recipes"]
            if e.get("record") and e["record"]["layout"]["zero"] == 3 and e["record"]["layout"]["fsdp"] == "flat"]
    assert flat, "the Megatron-Bridge 25.09 Llama 3 8B recipe (flat ZeRO-3) matches this search"
    for e in flat:
        assert e["rank"] is None and not e["ties_best"]
        assert e["reason"] == "megatron-core-0.8 cannot launch it (rule megatron_fsdp_flat)"
    assert "not ranked: megatron-core-0.8 cannot launch it (rule megatron_fsdp_flat)" in text


def test_within_envelope_counts_the_layouts_the_domain_kept(megatron_within_envelope):
    """The envelope filters what the domain kept: outside + inside = fitting - left out by the domain."""
    data, text = megatron_within_envelope
    stats = data["stats"]
    launched = stats["fits"] - stats["domain"]["left_out"]
    assert stats["domain"]["left_out"] > 0 and stats["outside_envelope"] > 0
    line = next(l for l in text.splitlines() if l.startswith("--within-envelope:"))
    assert line == (f"--within-envelope: {stats['outside_envelope']:,} of {launched:,} fitting layouts "
                    f"megatron-core-0.8 launches lie outside it and are left out")
    ranked = [e for e in data["reference_recipes"] if e.get("rank")]
    for e in ranked:  # a ranked recipe's denominator: the layouts left inside
        assert e["fitting"] + stats["outside_envelope"] == launched


def test_pareto_front_shows_only_rows_a_format_writes():
    """--pareto with --framework: the front's rows pass the same shown-row check as a ranking.
    Without a domain the 70B / 64 H100 front holds ZeRO-3 rows (its fastest layout is flat ZeRO-3,
    test above, and the fastest layout is always a point of the time-memory front); with a domain
    refusing ZeRO-3 none is shown and the refused ones are counted."""
    from search.api import search
    from search.request import SearchRequest

    def front(domain):
        return search(SearchRequest.of("70b", 64, "h100", top=8, pareto=True, domain=domain))

    plain = front(None)
    assert any(r["layout"]["zero"] == 3 for r in plain.results)
    kept = front(_RefusesZero3())
    assert kept.results and all(r["layout"]["zero"] != 3 for r in kept.results)
    refused = kept.stats["domain"]["rows_dropped"]["test_rule"]
    assert refused >= 1
    # the front's size counts the points the rows are drawn from: the refused ones are not
    assert kept.stats["pareto_front_size"] == plain.stats["pareto_front_size"] - refused


def test_domain_groups_float_columns_by_value():
    """A float column is grouped by its exact values: 1.0, 1.5, 1.0 are two groups (int() made them
    one), 0.0 and 1.5 two (bincount refused floats), one value none."""
    from planner.export.domain import _codes as column_codes

    codes, n = column_codes(np.array([1.0, 1.5, 1.0]))
    assert n == 2 and codes.tolist() == [0, 1, 0]
    codes, n = column_codes(np.array([0.0, 1.5]))
    assert n == 2 and codes.tolist() == [0, 1]
    assert column_codes(np.array([0.25, 0.25])) == (None, 1)
    codes, n = column_codes(np.array([2, 0, 2]))  # integer codes as before: dense, in order
    assert n == 2 and codes.tolist() == [1, 0, 1]
