"""What `planner search` says under its table when its best row runs on no framework planner
exports (planner.export.expressible), and the Megatron ZeRO-3 flavour a --framework search prices."""

from __future__ import annotations

from planner.export import FORMATS
from planner.export.expressible import launch_notes, refusals, rule_names
from planner.frameworks.releases import framework_settings
from test_export import DGX_H100, LLAMA3_8B, record


def _cases():
    # ZeRO-3 with flat (FSDP1-style) buffers beside TP 2 and Ulysses-style CP 2: Megatron has no
    # flat ZeRO-3 (Megatron-FSDP or FSDP2 only), Megatron-DeepSpeed's Ulysses refuses TP, and
    # torchtitan computes its loss eagerly (the record's loss is the fused default).
    unlaunchable = record(LLAMA3_8B, tp=2, cp=2, dp=2, zero=3, fsdp="flat", gbs=8, seq_len=8192, recompute="none")
    unlaunchable["rank"] = 1
    plain = record(LLAMA3_8B, tp=2, pp=2, dp=2, zero=1, gbs=8, seq_len=8192)  # Megatron's distributed optimizer
    plain["rank"] = 2
    return unlaunchable, plain


def test_refusals_name_each_framework_rule():
    unlaunchable, plain = _cases()
    refused = refusals(unlaunchable, LLAMA3_8B, DGX_H100)
    assert set(refused) == set(FORMATS)
    assert rule_names(refused["megatron"]) == "megatron_fsdp_flat"
    assert refusals(plain, LLAMA3_8B, DGX_H100).keys() < set(FORMATS)  # Megatron writes it


def test_note_only_when_the_best_row_exports_nowhere():
    unlaunchable, plain = _cases()
    specs = [(LLAMA3_8B, DGX_H100, None)] * 2
    lines = launch_notes([unlaunchable, plain], specs)
    assert lines[0].startswith("launch: no format planner exports runs #1 as priced")
    assert "megatron_fsdp_flat" in lines[0]
    assert "best row that exports is #2" in lines[1] and "megatron" in lines[1]
    assert "--framework" in lines[-1]
    assert launch_notes([plain, unlaunchable], specs) == []
    # With --framework only the formats that launch the release count, and the hint is left out.
    from planner.frameworks.releases import get_release

    lines = launch_notes([unlaunchable], specs[:1], get_release("megatron-core-0.8"))
    assert lines[0].startswith("launch: no format that launches megatron-core-0.8 (megatron, torchrun, slurm) runs #1")
    assert not any("--framework" in line for line in lines)
    # A release planner writes no files for says so whatever the row.
    assert launch_notes([plain], specs[:1], get_release("llm-foundry-0.10")) == [
        "launch: planner has no exporter for llm-foundry-0.10: it writes none of its files"]


def test_megatron_releases_price_zero3_as_megatron_fsdp():
    """Megatron-LM core_r0.13.0 has --use-custom-fsdp (Megatron-FSDP) and no flat ZeRO-3;
    Megatron-Bridge's performance configs use Megatron-FSDP. Core r0.8 has neither flavour, so
    nothing is pinned there (the launch note says so instead)."""
    for name in ("megatron-core-0.13", "megatron-bridge-25.09"):
        fw = framework_settings(name, LLAMA3_8B, "h100-sxm", "bf16", None, takes={"fsdp"})
        assert fw.pinned.get("fsdp") == "megatron", name
    fw = framework_settings("megatron-core-0.8", LLAMA3_8B, "h100-sxm", "bf16", None, takes={"fsdp"})
    assert "fsdp" not in fw.pinned
