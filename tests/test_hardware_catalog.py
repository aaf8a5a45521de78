"""Tests for the hardware part of hardware_catalog: data files, lookups, user cluster files."""

from __future__ import annotations

import importlib
import json
import pathlib
import sys
import types

import pytest

try:
    import hardware_catalog  # noqa: F401
except ImportError:
    # A sibling module (models.py, hf_config.py) may not exist yet; load hardware.py without
    # running the package __init__ so these tests do not depend on it.
    for _mod in [m for m in sys.modules if m == "hardware_catalog" or m.startswith("hardware_catalog.")]:
        del sys.modules[_mod]
    _pkg = types.ModuleType("hardware_catalog")
    _pkg.__path__ = [str(pathlib.Path(__file__).resolve().parents[1] / "hardware_catalog")]
    sys.modules["hardware_catalog"] = _pkg

hw = importlib.import_module("hardware_catalog.hardware")
from hardware_catalog.errors import PlannerInputError  # noqa: E402
from hardware_catalog.schema import ClusterSpec, GPUSpec, InterconnectSpec  # noqa: E402

REQUIRED_GPUS = {
    "v100", "a100-40gb", "a100-80gb", "h100-sxm", "h100-sxm-96gb", "h100-pcie",
    "h800", "h200", "b200", "gb200", "b300", "gb300", "mi300x",
}
REQUIRED_INTERCONNECTS = {
    "ib-edr", "ib-hdr", "ib-ndr", "ib-xdr", "roce-100g", "roce-200g", "roce-400g", "roce-800g",
}
REQUIRED_CLUSTERS = {
    "dgx-h100", "dgx-a100", "dgx-a100-40gb", "dgx-v100", "hgx-h100-pcie", "dgx-h800",
    "dgx-h200", "dgx-b200", "gb200-nvl72", "gb300-nvl72", "dgx-b300", "mi300x-8", "h100-96gb-500w",
}

GOOD_FIELDS = {
    "gpu": "H100",
    "gpus_per_node": 8,
    "scaleup_domain_size": 8,
    "scaleup_latency_us": 2.0,
    "scaleup_efficiency": 0.8,
    "nic": "ndr",
    "nics_per_node": 8,
    "network_efficiency": 0.9,
}


def _all_specs():
    return [*hw.list_gpus(), *hw.list_interconnects(), *hw.list_clusters()]


def _toml_value(v) -> str:
    return json.dumps(v)  # JSON scalars/strings/lists are valid TOML values here


def _write_toml(path: pathlib.Path, fields: dict) -> pathlib.Path:
    path.write_text("".join(f"{k} = {_toml_value(v)}\n" for k, v in fields.items()))
    return path


# ---------------------------------------------------------------------------------------
# Presets load and validate.


def test_presets_load_and_validate():
    gpus, nics, clusters = hw.list_gpus(), hw.list_interconnects(), hw.list_clusters()
    assert REQUIRED_GPUS <= {g.name for g in gpus}
    assert REQUIRED_INTERCONNECTS <= {n.name for n in nics}
    assert REQUIRED_CLUSTERS <= {c.name for c in clusters}
    assert all(isinstance(g, GPUSpec) for g in gpus)
    assert all(isinstance(n, InterconnectSpec) for n in nics)
    for c in clusters:
        assert isinstance(c, ClusterSpec)
        # Presets use canonical names, and they exist.
        assert hw.get_gpu(c.gpu).name == c.gpu
        assert hw.get_interconnect(c.nic).name == c.nic
        # Round-trip through the schema (catches post-construction drift).
        ClusterSpec.model_validate(c.model_dump())


def test_names_are_lowercase_and_unique():
    for specs in (hw.list_gpus(), hw.list_interconnects(), hw.list_clusters()):
        seen = set()
        for s in specs:
            for n in (s.name, *s.aliases):
                assert n == n.lower().strip(), n
                assert n not in seen, f"duplicate name {n}"
                seen.add(n)


def test_data_loaded_once():
    assert hw.list_gpus()[0] is hw.list_gpus()[0]
    assert hw.get_cluster("dgx-h100") is hw.get_cluster("DGX-H100")


@pytest.mark.parametrize(
    "getter, alias, canonical",
    [
        (hw.get_gpu, "h100", "h100-sxm"),
        (hw.get_gpu, "H100", "h100-sxm"),
        (hw.get_gpu, "  h100-SXM-80GB ", "h100-sxm"),
        (hw.get_gpu, "a100", "a100-80gb"),
        (hw.get_gpu, "a100-sxm-80gb", "a100-80gb"),
        (hw.get_gpu, "A100-40GB", "a100-40gb"),
        (hw.get_gpu, "h100-96gb", "h100-sxm-96gb"),
        (hw.get_interconnect, "ndr", "ib-ndr"),
        (hw.get_interconnect, "IB-HDR", "ib-hdr"),
        (hw.get_cluster, "selene", "dgx-a100"),
        (hw.get_cluster, "NVL72", "gb200-nvl72"),
        (hw.get_cluster, "dgx-2", "dgx-v100"),
    ],
)
def test_aliases_resolve(getter, alias, canonical):
    assert getter(alias).name == canonical


# ---------------------------------------------------------------------------------------
# Datasheet values and consistency.


def test_datasheet_sample():
    h100 = hw.get_gpu("h100")
    assert h100.bf16_tflops == pytest.approx(989.4)
    assert h100.fp8_tflops == pytest.approx(1978.9)
    assert h100.tf32_tflops == pytest.approx(494.7)
    assert h100.memory_bandwidth_gbps == pytest.approx(3350)
    assert h100.scaleup_bandwidth_gbps == pytest.approx(450)  # 900 GB/s bidirectional
    a100 = hw.get_gpu("a100")
    assert a100.bf16_tflops == pytest.approx(312)
    assert a100.tf32_tflops == pytest.approx(156)
    assert a100.memory_bandwidth_gbps == pytest.approx(2039)
    assert hw.get_gpu("a100-40gb").memory_bandwidth_gbps == pytest.approx(1555)
    assert hw.get_gpu("h800").scaleup_bandwidth_gbps == pytest.approx(200)
    assert hw.get_gpu("h200").memory_bandwidth_gbps == pytest.approx(4800)
    assert hw.get_gpu("b200").bf16_tflops == pytest.approx(2250)
    assert hw.get_gpu("gb200").bf16_tflops == pytest.approx(2500)
    # Blackwell Ultra: dense BF16/FP8 as B200/GB200, dense FP4 1.5x (HGX page: HGX B300 FP4 108 PF dense / 8;
    # GB300 NVL72 datasheet: 1,080 PF dense / 72), 288 GB HBM3e, GB300 at 576 TB/s / 72 = 8 TB/s.
    assert hw.get_gpu("b300").bf16_tflops == pytest.approx(2250)
    assert hw.get_gpu("b300").fp4_tflops == pytest.approx(108_000 / 8)
    assert hw.get_gpu("gb300").fp8_tflops == pytest.approx(720_000 / 72 / 2)
    assert hw.get_gpu("gb300").fp4_tflops == pytest.approx(1_080_000 / 72)
    assert hw.get_gpu("gb300").memory_bandwidth_gbps == pytest.approx(576_000 / 72)
    assert hw.get_gpu("gb300").scaleup_bandwidth_gbps == pytest.approx(1800 / 2)
    assert hw.get_gpu("mi300x").bf16_tflops == pytest.approx(1307.4)
    assert hw.get_gpu("mi300x").fp8_tflops == pytest.approx(2614.9)
    assert hw.get_gpu("v100").tf32_tflops is None
    assert hw.get_gpu("v100").fp8_tflops is None
    assert hw.get_interconnect("ib-ndr").bandwidth_gbps == pytest.approx(50)  # 400 Gb/s
    assert hw.get_interconnect("ib-hdr").bandwidth_gbps == pytest.approx(25)
    assert hw.get_interconnect("ib-xdr").bandwidth_gbps == pytest.approx(100)
    assert hw.get_interconnect("roce-400g").kind == "roce"


def test_driver_reported_memory_is_below_marketing_size():
    assert hw.get_gpu("h100").memory_gib == pytest.approx(79.2, abs=0.5)
    assert hw.get_gpu("a100").memory_gib == pytest.approx(79.2, abs=0.1)
    assert hw.get_gpu("a100-40gb").memory_gib == pytest.approx(39.4, abs=0.1)
    for g in hw.list_gpus():
        marketing_gb = {"v100": 32, "a100-40gb": 40, "a100-80gb": 80, "h100-sxm": 80,
                        "h100-sxm-96gb": 96, "h100-pcie": 80, "h800": 80, "h200": 141,
                        "b200": 180, "gb200": 186, "b300": 288, "gb300": 288, "mi300x": 192}.get(g.name)
        if marketing_gb:
            assert 0.9 * marketing_gb * 1e9 / 2**30 < g.memory_gib <= marketing_gb, g.name


def test_peaks_are_dense():
    """Sparse figures are 2x dense; catch a sparse number slipping in via the dtype ratios."""
    for g in hw.list_gpus():
        if g.fp8_tflops is not None:
            assert g.fp8_tflops == pytest.approx(2 * g.bf16_tflops, rel=0.01), g.name
        if g.tf32_tflops is not None:
            assert g.tf32_tflops == pytest.approx(g.bf16_tflops / 2, rel=0.05), g.name
        if g.fp4_tflops is not None:  # NVFP4 runs at 2x (Blackwell) to 3x (Blackwell Ultra) the FP8 rate
            assert 2 * g.fp8_tflops <= g.fp4_tflops <= 3 * g.fp8_tflops, g.name
        if g.name == "v100":  # no bf16 tensor cores: bf16 capped at the FP32 rate
            assert g.bf16_tflops == g.fp32_tflops < g.fp16_tflops
        else:
            assert g.fp16_tflops == g.bf16_tflops, g.name
            assert g.fp32_tflops < g.bf16_tflops, g.name


def test_every_numeric_field_has_a_source():
    for spec in _all_specs():
        assert "*" not in spec.sources, f"{spec.name}: built-in data must cite each field"
        fields = type(spec).model_fields
        for key in spec.sources:
            assert key in fields, f"{spec.name}: source for unknown field {key}"
        for field_name, value in spec:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                src = spec.sources.get(field_name, "")
                assert isinstance(src, str) and len(src) > 10, f"{spec.name}.{field_name}"


def test_efficiencies_plausible():
    for c in hw.list_clusters():
        assert 0.5 <= c.scaleup_efficiency <= 0.95, c.name
        # Below half the line rate only where the cluster's own benchmark measured it (Jean Zay's
        # Omni-Path: ~135 of 400 Gb/s per node in BigScience's all-reduce benchmark).
        low = 0.3 if c.sources.get("network_efficiency", "").startswith("measured") else 0.5
        assert low <= c.network_efficiency <= 0.97, c.name
        assert 0 < c.scaleup_latency_us < 10, c.name


def test_default_cluster_for_every_gpu():
    for g in hw.list_gpus():
        assert hw.default_cluster_for_gpu(g.name).gpu == g.name
    assert hw.default_cluster_for_gpu("h100").name == "dgx-h100"
    assert hw.default_cluster_for_gpu("A100").name == "dgx-a100"
    assert hw.default_cluster_for_gpu("a100-40gb").name == "dgx-a100-40gb"
    assert hw.default_cluster_for_gpu("h100-sxm-96gb").name == "h100-96gb-500w"
    with pytest.raises(PlannerInputError):
        hw.default_cluster_for_gpu("h10O")


def test_cluster_shapes():
    nvl72 = hw.get_cluster("gb200-nvl72")
    assert (nvl72.gpus_per_node, nvl72.scaleup_domain_size, nvl72.nics_per_node) == (4, 72, 4)
    gb300 = hw.get_cluster("gb300-nvl72")  # one ConnectX-8 800G per GPU (GB300 NVL72 datasheet)
    assert (gb300.gpus_per_node, gb300.scaleup_domain_size, gb300.nics_per_node, gb300.nic) == (4, 72, 4, "ib-xdr")
    b300 = hw.get_cluster("hgx-b300")
    assert (b300.gpu, b300.gpus_per_node, b300.scaleup_domain_size, b300.nics_per_node, b300.nic) == ("b300", 8, 8, 8, "ib-xdr")
    assert hw.default_cluster_for_gpu("GB300").name == "gb300-nvl72"
    assert hw.default_cluster_for_gpu("B300").name == "dgx-b300"
    assert hw.get_cluster("mi300x-8").scaleup_topology == "fully_connected"
    dgx = hw.get_cluster("dgx-h100")
    assert (dgx.gpus_per_node, dgx.nic, dgx.nics_per_node, dgx.network_topology) == (8, "ib-ndr", 8, "switch")
    assert hw.get_cluster("dgx-v100").gpus_per_node == 16


def test_aws_efa_clusters():
    # AWS P4d page: 4 x 100 Gb/s EFA per 8-GPU instance; NVIDIA/nccl #527 measured 0.59-0.64 of it.
    # Per GPU: 4 x 12.5 GB/s / 8 x 0.6 = 3.75 GB/s; P5: 32 x 12.5 / 8 x 0.75 = 37.5 GB/s.
    from costmodel.collectives import fabric_from_cluster

    def per_gpu(cluster):
        return fabric_from_cluster(cluster, hw.get_gpu(cluster.gpu), hw.get_interconnect(cluster.nic)).inter.bandwidth

    p4d, p5 = hw.get_cluster("p4d.24xlarge"), hw.get_cluster("p5")
    assert (p4d.gpu, p4d.nic, p4d.nics_per_node) == ("a100-40gb", "efa-100g", 4)
    assert hw.get_interconnect("efa").kind == "efa"
    assert per_gpu(p4d) == pytest.approx(3.75e9)
    assert per_gpu(p5) == pytest.approx(37.5e9)
    # The GPUs' default clusters stay the DGX ones.
    assert hw.default_cluster_for_gpu("h100").name == "dgx-h100"


# ---------------------------------------------------------------------------------------
# User cluster files.


def test_user_toml_file(tmp_path):
    path = _write_toml(tmp_path / "mine.toml", GOOD_FIELDS)
    c = hw.get_cluster(str(path))
    assert c.name == "mine"
    assert c.gpu == "h100-sxm" and c.nic == "ib-ndr"  # aliases canonicalized
    assert c.sources == {"*": f"user file {path}"}
    assert hw.get_cluster(path) == c  # pathlib.Path accepted too


def test_user_yaml_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(
        "name: my-cluster\n"
        "gpu: mi300x\n"
        "gpus_per_node: 8\n"
        "scaleup_domain_size: 8\n"
        "scaleup_topology: fully_connected\n"
        "scaleup_latency_us: 2.5\n"
        "scaleup_efficiency: 0.7\n"
        "nic: roce-400g\n"
        "nics_per_node: 8\n"
        "network_topology: torus2d\n"
        "network_dims: [4, 8]\n"
        "network_efficiency: 0.85\n"
    )
    c = hw.get_cluster(str(path))
    assert c.name == "my-cluster"
    assert c.network_dims == (4, 8)
    assert c.scaleup_topology == "fully_connected"


def test_user_json_file_with_cluster_table_and_partial_sources(tmp_path):
    path = tmp_path / "mine.json"
    fields = dict(GOOD_FIELDS, sources={"gpus_per_node": "our rack"})
    path.write_text(json.dumps({"cluster": fields}))
    c = hw.get_cluster(str(path))
    assert c.sources["gpus_per_node"] == "our rack"
    assert "*" in c.sources


def test_preset_name_wins_over_same_named_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dgx-h100").write_text("not a cluster file")
    assert hw.get_cluster("dgx-h100").name == "dgx-h100"


def _assert_one_line(err: pytest.ExceptionInfo, *needles: str):
    msg = str(err.value)
    assert "\n" not in msg and "Traceback" not in msg, msg
    assert len(msg) < 2000
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"


@pytest.mark.parametrize(
    "filename, content, needles",
    [
        ("neg.toml", {**GOOD_FIELDS, "gpus_per_node": -1},
         ["neg.toml", "field gpus_per_node", "greater than 0", "(got -1)"]),
        ("eff.toml", {**GOOD_FIELDS, "network_efficiency": 1.5},
         ["field network_efficiency", "(got 1.5)"]),
        ("type.toml", {**GOOD_FIELDS, "nics_per_node": "eight"},
         ["field nics_per_node", "'eight'"]),
        ("topo.toml", {**GOOD_FIELDS, "scaleup_topology": "hypercube"},
         ["field scaleup_topology", "'hypercube'"]),
        ("extra.toml", {**GOOD_FIELDS, "gpus_per_nod": 8},
         ["unknown field 'gpus_per_nod'", "did you mean gpus_per_node"]),
        ("missing.toml", {k: v for k, v in GOOD_FIELDS.items() if k != "nic"},
         ["missing required field 'nic'"]),
        ("domain.toml", {**GOOD_FIELDS, "scaleup_domain_size": 3},
         ["scaleup_domain_size=3", "gpus_per_node=8"]),
        ("gpu.toml", {**GOOD_FIELDS, "gpu": "h10O"},
         ["field gpu", "unknown gpu 'h10O'", "did you mean h100"]),
        ("nic.toml", {**GOOD_FIELDS, "nic": "ib-ndx"},
         ["field nic", "unknown interconnect 'ib-ndx'"]),
    ],
)
def test_malformed_user_values(tmp_path, filename, content, needles):
    path = _write_toml(tmp_path / filename, content)
    with pytest.raises(PlannerInputError) as err:
        hw.get_cluster(str(path))
    _assert_one_line(err, f"cluster file {path}", *needles)


@pytest.mark.parametrize(
    "filename, text, needles",
    [
        ("bad.toml", "gpu = \n", ["invalid TOML", "line 1"]),
        ("bad.yaml", "gpu: h100\ngpus_per_node: [8\n", ["invalid YAML", "line"]),
        ("bad.json", '{"gpu": "h100",}', ["invalid JSON", "line 1"]),
        ("list.yaml", "- gpu: h100\n", ["expected a mapping", "list"]),
        ("empty.yaml", "", ["expected a mapping", "NoneType"]),
    ],
)
def test_malformed_user_syntax(tmp_path, filename, text, needles):
    path = tmp_path / filename
    path.write_text(text)
    with pytest.raises(PlannerInputError) as err:
        hw.get_cluster(str(path))
    _assert_one_line(err, filename, *needles)


def test_missing_user_file(tmp_path):
    with pytest.raises(PlannerInputError) as err:
        hw.get_cluster(str(tmp_path / "nope.toml"))
    _assert_one_line(err, "nope.toml", "file not found")


def test_unsupported_extension(tmp_path):
    path = tmp_path / "cluster.ini"
    path.write_text("x")
    with pytest.raises(PlannerInputError) as err:
        hw.get_cluster(str(path))
    _assert_one_line(err, "cluster.ini", "unsupported extension")


# ---------------------------------------------------------------------------------------
# Unknown names.


@pytest.mark.parametrize(
    "getter, name, kind, suggestion",
    [
        (hw.get_gpu, "h10O", "gpu", "h100"),
        (hw.get_interconnect, "ib-ndx", "interconnect", "ib-ndr"),
        (hw.get_cluster, "dgx-h1000", "cluster", "dgx-h100"),
    ],
)
def test_unknown_names(getter, name, kind, suggestion):
    with pytest.raises(PlannerInputError) as err:
        getter(name)
    _assert_one_line(err, f"unknown {kind} '{name}'", "did you mean", suggestion)
    assert isinstance(err.value, ValueError)


def test_non_string_name():
    with pytest.raises(PlannerInputError):
        hw.get_gpu(None)  # type: ignore[arg-type]
    with pytest.raises(PlannerInputError):
        hw.get_cluster(42)  # type: ignore[arg-type]


def test_a_gpu_text_naming_two_parts_is_refused_not_resolved_by_chance():
    """'h100,b200' given to evaluate matched whichever base a set's order put first (the hash seed
    decided: H100 80.4 s or B200 42.4 s for one command). Two parts with nothing in common are
    refused; a vendor word beside a part still names that part."""
    from hardware_catalog import get_gpu
    from hardware_catalog.errors import PlannerInputError

    with pytest.raises(PlannerInputError, match=r"names more than one GPU \(b200, h100\)"):
        get_gpu("h100,b200")
    assert get_gpu("AMD Instinct MI300X").name == "mi300x"
    assert get_gpu("NVIDIA H100-SXM5-80GB").name == "h100-sxm"


def test_bf16_caveat_where_bf16_has_no_tensor_cores():
    # V100 datasheet: 125 TFLOP/s FP16 tensor cores, no BF16 ones (BF16 at the 15.7 TFLOP/s FP32 rate);
    # A100 / H100 run BF16 at their FP16 tensor-core rate.
    from hardware_catalog import get_gpu

    caveat = get_gpu("v100").bf16_caveat
    assert "no BF16 tensor cores" in caveat and "15.7" in caveat and "125" in caveat
    assert get_gpu("a100").bf16_caveat == "" and get_gpu("h100").bf16_caveat == ""


def test_gb200_nvl72_rack_draws_the_reported_120_kw():
    # 18 compute trays of 4 GPUs (DGX GB200 user guide) and about 120 kW a rack (GTC 2024, as
    # reported); without a figure the GPU-TDP rule gave 1,200 W x 1.82 x 72 = 157 kW.
    from hardware_catalog import get_cluster

    c = get_cluster("gb200-nvl72")
    assert c.scaleup_domain_size // c.gpus_per_node == 18
    assert 18 * c.node_power_watts == pytest.approx(120e3, rel=1e-3)
