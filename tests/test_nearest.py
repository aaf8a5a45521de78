"""search.nearest: when the rules leave no layout, the nearest batch sizes and GPU counts that have one."""

from __future__ import annotations

import subprocess
import sys

from hardware_catalog import get_model
from hardware_catalog.schema import ClusterSpec, GPUSpec
from search.nearest import format_nearest, has_layouts, nearest_jobs
from search.space import Problem

CITED = {"*": "test fixture"}
GPU = GPUSpec(name="test-a100", vendor="nvidia", bf16_tflops=312.0, fp16_tflops=312.0, tf32_tflops=156.0,
              fp32_tflops=19.5, memory_gib=79.15, memory_bandwidth_gbps=2039, scaleup_bandwidth_gbps=300,
              scaleup_link="NVLink 3", sources=CITED)
CLUSTER = ClusterSpec(name="test-cluster", gpu=GPU.name, gpus_per_node=8, scaleup_domain_size=8, scaleup_latency_us=3.0,
                      scaleup_efficiency=0.8, nic="ib-hdr", nics_per_node=8, network_efficiency=0.8, sources=CITED)
GPT3 = get_model("gpt3-175b")  # 96 layers, 96 heads, seq 2048


def job(gpus: int, gbs: int, **pins) -> Problem:
    return Problem(model=GPT3, cluster=CLUSTER, gpu=GPU, gpus=gpus, gbs=gbs, seq_len=2048, pins=pins)


def test_1000_gpus_at_1536_sequences_hand_derived():
    # 1,000 = 2^3 * 5^3: tp (a power of two <= 8), cp (a power of two) and pp (a divisor of 96 =
    # 2^5 * 3) can only take the 2^3, so dp is 125, 250, 500 or 1,000, and none divides 1,536.
    # Batches: 1,500 = 12 x 125 below, 1,625 = 13 x 125 above. GPU counts at 1,536 = 2^9 * 3
    # sequences need n = tp*cp*pp*dp with no prime but 2 and 3, at most 3^2 (one 3 from pp, one
    # from dp), whole nodes of 8: every multiple of 8 from 776 to 1,016 has a prime factor 5, 7,
    # 11, 13, 17, ... or 3^3 (864); 768 = 2^8 * 3 and 1,024 = 2^10 qualify.
    p = job(1000, 1536)
    assert not has_layouts(p)
    found = nearest_jobs(p)
    assert found == {"gbs": (1500, 1625), "gpus": (768, 1024)}
    assert format_nearest(found, 1000, 1536) == ("nearest jobs with valid layouts: --gbs 1500 or 1625 at 1,000 GPUs; "
                                                 "--gpus 768 or 1024 at gbs 1,536")


def test_every_suggested_job_has_layouts_and_the_pins_are_kept():
    # tp 8, pp 5 pinned on 96 GPUs: 40 does not divide 96. At gbs 512 the GPU count must be
    # 40 x a divisor of 512: 80 (dp 2) below; 120 (dp 3) does not divide 512, 160 (dp 4) does.
    p = job(96, 512, tp=8, pp=5)
    assert not has_layouts(p)
    found = nearest_jobs(p)
    assert found["gpus"] == (80, 160)
    for n in found["gpus"]:
        assert has_layouts(job(n, 512, tp=8, pp=5))
    for g in found["gbs"]:
        assert g is None or has_layouts(job(96, g, tp=8, pp=5))


def test_a_job_with_layouts_needs_no_hint():
    assert has_layouts(job(1024, 1536))
    assert format_nearest({"gbs": (None, None), "gpus": (None, None)}, 1024, 1536) == ""


def test_search_prints_the_nearest_jobs_when_the_rules_leave_none():
    out = subprocess.run([sys.executable, "-m", "planner", "search", "--model", "175b", "--gpus", "1000", "--gpu", "a100",
                          "--no-progress"], capture_output=True, text=True)
    assert out.returncode == 3, out.stderr
    assert "nearest jobs with valid layouts: --gbs 1500 or 1625 at 1,000 GPUs; --gpus 768 or 1024 at gbs 1,536" in out.stdout


def refused(*args) -> str:
    """stderr of a 70B evaluate on H100 that must be refused (exit 2)."""
    out = subprocess.run([sys.executable, "-m", "planner", "evaluate", "--model", "70b", "--gpu", "h100", *args],
                         capture_output=True, text=True)
    assert out.returncode == 2, out.stdout
    return out.stderr


def test_batch_rule_messages_name_the_nearest_batches():
    # gbs 100 over dp 3 x mbs 1: the multiples of 3 either side are 99 and 102. With vpp 2 and
    # pp 4 the micro-batch count must also divide by 4: gbs 20 over dp 2 x mbs 1 x pp 4 = 8 ->
    # 16 or 24. A batch below the step has only the one above (gbs 1 over dp 2 -> 2).
    assert "gbs=100 must be divisible by dp*mbs = 3*1 = 3 (nearest: --gbs 99 or 102)" in refused(
        "--gpus", "96", "--tp", "8", "--pp", "4", "--gbs", "100")
    assert "must be divisible by pp=4 (nearest: --gbs 16 or 24)" in refused(
        "--gpus", "64", "--tp", "8", "--pp", "4", "--vpp", "2", "--gbs", "20")
    assert "(nearest: --gbs 2)" in refused("--gpus", "64", "--tp", "8", "--pp", "4", "--gbs", "1")


def test_degree_rule_message_names_the_nearest_whole_node_counts():
    # tp*cp*pp = 40 on 96 GPUs: multiples of 40 are 80 below and 120 above, both whole nodes of 8.
    # tp 4 x pp 3 = 12 on 64: a multiple of 12 that is whole nodes of 8 is a multiple of 24 -> 48, 72.
    assert "(nearest: --gpus 80 or 120)" in refused("--gpus", "96", "--tp", "8", "--pp", "5")
    assert "(nearest: --gpus 48 or 72)" in refused("--gpus", "64", "--tp", "4", "--pp", "3")


def test_gpu_count_off_whole_nodes_names_the_nearest_whole_node_counts():
    # 100 GPUs on 8-GPU nodes: 12 nodes (96) or 13 (104).
    out = subprocess.run([sys.executable, "-m", "planner", "search", "--model", "8b", "--gpus", "100", "--gpu", "h100"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and out.stdout == ""
    assert "give a multiple of 8 (or at most 8; nearest: 96 or 104)" in out.stderr


def test_fewest_fitting_gpus_is_the_first_whole_node_count_that_fits():
    # Property, not a copied number: at the count returned some layout fits in memory, and at the
    # whole-node count just below it (still above the asked 64) none does.
    from hardware_catalog import get_cluster, get_gpu
    from search.exhaustive import run_exhaustive
    from search.nearest import fewest_fitting_gpus

    gpu, cluster = get_gpu("h100"), get_cluster("dgx-h100")
    job405 = Problem(model=get_model("405b"), cluster=cluster, gpu=gpu, gpus=64, gbs=2048, seq_len=8192)

    def fits(n):
        return run_exhaustive([Problem(**{**job405.__dict__, "gpus": n})], top=1, memory_headroom=0.05)[1]["fits"] > 0

    assert not fits(64)
    n, fewest = fewest_fitting_gpus(job405, 0.05, budget_s=60.0)
    assert fewest and n % 8 == 0 and n > 64
    assert fits(n) and (n - 8 == 64 or not fits(n - 8))
