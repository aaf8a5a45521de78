"""A user's own cluster and model files, as people write them (catalog review): a byte-order
mark from a Windows editor, NIC names with their line rate in the wrong unit or at a rate the
catalog lacks, and the wording of unknown-name errors."""

from __future__ import annotations

import json

import pytest

from hardware_catalog.errors import PlannerInputError
from hardware_catalog.hardware import get_cluster, get_gpu, get_interconnect
from hardware_catalog.models import get_model

BOM = b"\xef\xbb\xbf"
"""UTF-8 byte-order mark: what Notepad and PowerShell's Out-File put at the start of a file."""

LLAMA31_8B = {  # meta-llama/Llama-3.1-8B config.json, the shape fields
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
}


@pytest.mark.parametrize("suffix, body", [
    (".toml", b'gpu = "h100"\nnic = "ib-ndr"\nnics_per_node = 4\n'),
    (".json", b'{"gpu": "h100", "nic": "ib-ndr", "nics_per_node": 4}'),
])
def test_a_cluster_file_with_a_byte_order_mark_is_read(tmp_path, suffix, body):
    """Used to be refused: 'invalid TOML: Invalid statement (at line 1, column 1)' and 'invalid
    JSON: Unexpected UTF-8 BOM'. A BOM is no error (RFC 8259 Sec. 8.1 lets a parser ignore it;
    the runs file and the calibration profile already read one)."""
    path = tmp_path / f"ours{suffix}"
    path.write_bytes(BOM + body)
    cluster = get_cluster(str(path))
    assert (cluster.gpu, cluster.nic, cluster.nics_per_node) == ("h100-sxm", "ib-ndr", 4)


@pytest.mark.parametrize("name, text", [
    ("config.json", json.dumps(LLAMA31_8B)),
    ("llama.toml", 'num_layers = 32\nhidden_size = 4096\nnum_attention_heads = 32\n'
                   'ffn_hidden_size = 14336\nvocab_size = 128256\n'),
])
def test_a_model_file_with_a_byte_order_mark_is_read(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(BOM + text.encode())
    model = get_model(str(path))
    assert (model.num_layers, model.hidden_size, model.vocab_size) == (32, 4096, 128256)


@pytest.mark.parametrize("text, gbytes_per_s", [
    ("RoCE 100 GB/s", 100.0),  # 800 Gb/s; used to be read as 100 Gb/s = 12.5 GB/s
    ("InfiniBand 100 GB/s", 100.0),  # XDR; used to be EDR
    ("IB 50 GB/s", 50.0),  # NDR 400 Gb/s; used to be refused
    ("RoCE 400 Gb/s", 50.0),
    ("ndr-200", 25.0),  # an NDR200 port runs at 200 Gb/s; used to be the 400 Gb/s NDR entry
])
def test_a_nic_rate_in_gigabytes_per_second_is_read_as_bytes(text, gbytes_per_s):
    """The catalog states NIC speed in GB/s (its `GB/s/dir` column, the schema's _gbps fields)
    and `planner comm --bandwidth 400GB/s` reads bytes: a NIC named by its GB/s is not 8x slower."""
    assert get_interconnect(text).bandwidth_gbps == pytest.approx(gbytes_per_s)


@pytest.mark.parametrize("text, stated", [
    ("RoCE 25G", "25 Gb/s"), ("roce-50", "50 Gb/s"), ("roce 1600g", "1600 Gb/s"),
    ("RoCE 400 GB/s", "3200 Gb/s"),
])
def test_a_nic_rate_the_catalog_lacks_is_refused_not_read_as_400g(text, stated):
    """These used to resolve silently to roce-400g (50 GB/s): a 25 GbE cluster priced with a
    NIC 16x faster than it has."""
    with pytest.raises(PlannerInputError) as err:
        get_interconnect(text)
    message = str(err.value)
    assert text in message and stated in message and "400 Gb/s" in message and "\n" not in message


def test_a_cluster_file_nic_in_gigabytes_per_second(tmp_path):
    path = tmp_path / "ours.toml"
    path.write_text('gpu = "h100"\nnic = "RoCE 100 GB/s"\nnics_per_node = 4\n')
    cluster = get_cluster(str(path))
    assert get_interconnect(cluster.nic).bandwidth_gbps == pytest.approx(100.0)


@pytest.mark.parametrize("lookup, text", [(get_gpu, "/tmp/our-gpu.toml"), (get_interconnect, "/tmp/our-nic.toml"),
                                          (get_gpu, "Gaudi3")])
def test_an_unknown_gpu_or_nic_is_not_told_to_give_a_file(lookup, text):
    """A GPU or NIC is a catalog name only (a cluster file's gpu and nic fields too); the error
    used to end '(known: ...; or give a file path)', and the file it then got was refused again."""
    with pytest.raises(PlannerInputError) as err:
        lookup(text)
    assert "file" not in str(err.value)


def test_an_unknown_model_or_cluster_still_offers_a_file():
    for lookup in (get_model, get_cluster):
        with pytest.raises(PlannerInputError, match="or give a file path"):
            lookup("zzqx-not-a-name")


@pytest.mark.parametrize("value", ["abc", {"p": 0.1}, [0.1], True, 1.5])
def test_a_bad_dropout_value_names_the_field(tmp_path, value):
    """Used to end 'could not convert string to float: 'abc'' or 'float() argument must be a
    string or a real number, not 'dict'', naming no field (True and 1.5 passed silently)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA31_8B, "attention_dropout": value}))
    with pytest.raises(PlannerInputError, match=r"'attention_dropout' must be a probability from 0 to 1 \(got "):
        get_model(str(path))


def test_a_dropout_probability_turns_dropout_on(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA31_8B, "attention_dropout": 0.1, "hidden_dropout": None}))
    assert get_model(str(path)).dropout
    path.write_text(json.dumps({**LLAMA31_8B, "attention_dropout": 0}))
    assert not get_model(str(path)).dropout


@pytest.mark.parametrize("body, needles", [
    ('gpu_type = "h100"\nnic = "ib-ndr"\n', ["unknown field 'gpu_type'; did you mean gpu?", "missing required field 'gpu'"]),
    ('GPU = "h100"\nNIC = "ib-ndr"\n', ["unknown field 'GPU'; did you mean gpu?", "unknown field 'NIC'; did you mean nic?"]),
    ('[Cluster]\ngpu = "h100"\nnic = "ib-ndr"\n', ["unknown table [Cluster]; did you mean [cluster]?"]),
    ('[cluster]\ngpu = "h100"\nnic = "ib-ndr"\n[extra]\nx = 1\n', ["table [cluster] is read only as the file's one", "[extra]"]),
])
def test_a_misspelt_gpu_or_nic_field_is_named(tmp_path, body, needles):
    """A typo in gpu or nic (or the [cluster] table's name) used to give only 'missing required
    field 'gpu'', never naming the field the file does have, while a typo in any other field
    was named with a suggestion."""
    path = tmp_path / "ours.toml"
    path.write_text(body)
    with pytest.raises(PlannerInputError) as err:
        get_cluster(str(path))
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    for needle in needles:
        assert needle in message


def test_a_node_grid_on_a_switched_network_is_refused(tmp_path):
    """network_dims with network_topology left at 'switch' was silently ignored: the user's
    torus was priced as a full-bisection fat tree."""
    path = tmp_path / "ours.toml"
    path.write_text('gpu = "h100"\nnic = "ib-ndr"\nnetwork_dims = [4, 4]\n')
    with pytest.raises(PlannerInputError, match=r"network_dims=\[4, 4\] is a node grid for network_topology mesh2d "
                                                 r"or torus2d; this cluster's is switch"):
        get_cluster(str(path))
    path.write_text('gpu = "h100"\nnic = "ib-ndr"\nnetwork_topology = "torus2d"\nnetwork_dims = [4, 4]\n')
    assert get_cluster(str(path)).network_dims == (4, 4)


def test_node_power_in_kilowatts_is_refused(tmp_path):
    """node_power_watts = 10.2 (a DGX H100's 10.2 kW) used to be taken as 10.2 W: evaluate's
    energy line read '0 MWh at 0.00 MW IT (0.01 MW GPUs at 700 W)', the node below its own GPUs."""
    path = tmp_path / "ours.toml"
    path.write_text('gpu = "h100"\nnic = "ib-ndr"\nnode_power_watts = 10.2\n')
    with pytest.raises(PlannerInputError, match=r"node_power_watts: 10.2 W is below the node's 8 GPUs alone "
                                                 r"\(8 x 700 W = 5,600 W\)"):
        get_cluster(str(path))
    path.write_text('gpu = "h100"\nnic = "ib-ndr"\nnode_power_watts = 10200\n')
    assert get_cluster(str(path)).node_power_watts == 10200


def test_every_preset_node_draws_at_least_its_gpus():
    """The same floor holds for the catalog's datasheet figures (a property, not a copied number)."""
    from hardware_catalog.hardware import list_clusters

    for cluster in list_clusters():
        gpu = get_gpu(cluster.gpu)
        if cluster.node_power_watts is not None:
            assert cluster.node_power_watts >= cluster.gpus_per_node * (cluster.power_limit_watts or gpu.tdp_watts)


@pytest.mark.parametrize("body, needles", [
    ("num_kv_head = 8\n", ["unknown field 'num_kv_head' (did you mean 'num_kv_heads'?)", "(allowed: ", "tied_embeddings"]),
    ("[moe]\nnum_experts = 8\ntop_k = 2\nexpert_ffn = 14336\n",
     ["unknown field 'moe.expert_ffn' (did you mean 'moe.expert_ffn_hidden_size'?)", "(allowed in moe: ", "router_groups"]),
])
def test_a_misspelt_optional_model_field_is_named_with_what_is_allowed(tmp_path, body, needles):
    """'num_kv_head' (for num_kv_heads) used to get only "unknown field 'num_kv_head'": the
    suggestion looked among missing required fields alone, and nothing said what is allowed."""
    path = tmp_path / "ours.toml"
    path.write_text("num_layers = 32\nhidden_size = 4096\nnum_attention_heads = 32\nffn_hidden_size = 14336\n"
                    "vocab_size = 128256\n" + body)
    with pytest.raises(PlannerInputError) as err:
        get_model(str(path))
    for needle in needles:
        assert needle in str(err.value)


def test_the_allowed_fields_are_listed_once(tmp_path):
    path = tmp_path / "ours.toml"
    path.write_text("num_layers = 32\nhidden_size = 4096\nnum_attention_heads = 32\nffn_hidden_size = 14336\n"
                    "vocab_size = 128256\nnum_kv_head = 8\ntie_embeddings = true\n")
    with pytest.raises(PlannerInputError) as err:
        get_model(str(path))
    message = str(err.value)
    assert message.count("(allowed: ") == 1 and "'tie_embeddings' (did you mean 'tied_embeddings'?)" in message


def test_a_hf_config_without_model_type_is_told_so(tmp_path):
    """A config.json stripped of model_type and architectures used to be read as a planner model
    file: eighteen 'unknown field' items ('attention_bias' (did you mean 'num_attention_heads'?)...)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in LLAMA31_8B.items() if k not in ("model_type", "architectures")}))
    with pytest.raises(PlannerInputError) as err:
        get_model(str(path))
    message = str(err.value)
    assert "reads as a Hugging Face config.json" in message and 'add "model_type"' in message
    assert "llama" in message and "unknown field" not in message


@pytest.mark.parametrize("name, body, needle", [
    ("ours.toml", 'gpu = "h100"\nnic = "ib-ndr"\ngpus_per_node = true\n', "field gpus_per_node: give a number, not true"),
    ("ours.toml", 'gpu = "h100"\nnic = "ib-ndr"\nnetwork_efficiency = true\n', "field network_efficiency: give a number"),
])
def test_true_for_a_cluster_count_is_refused(tmp_path, name, body, needle):
    """'gpus_per_node = true' used to price a cluster of 1-GPU nodes in scale-up domains of 8
    (pydantic reads True as 1)."""
    path = tmp_path / name
    path.write_text(body)
    with pytest.raises(PlannerInputError, match=needle):
        get_cluster(str(path))


@pytest.mark.parametrize("extra, needle", [
    ("num_kv_heads = true\n", "field num_kv_heads: give a number, not true"),
    ("[moe]\nnum_experts = 8\ntop_k = true\nexpert_ffn_hidden_size = 14336\n", "field top_k: give a number, not true"),
])
def test_true_for_a_model_size_is_refused(tmp_path, extra, needle):
    path = tmp_path / "ours.toml"
    path.write_text("num_layers = 32\nhidden_size = 4096\nnum_attention_heads = 32\nffn_hidden_size = 14336\n"
                    "vocab_size = 128256\n" + extra)
    with pytest.raises(PlannerInputError, match=needle):
        get_model(str(path))


def test_a_gpu_that_is_not_text_is_named_alone(tmp_path):
    """'gpu = 5' used to add eight "missing required field" items (gpus_per_node, scaleup_*,
    network_*: the preset defaults were never read) to the one real problem."""
    path = tmp_path / "ours.toml"
    path.write_text('gpu = 5\nnic = "ib-ndr"\n')
    with pytest.raises(PlannerInputError) as err:
        get_cluster(str(path))
    message = str(err.value)
    assert "field gpu: give a catalog GPU name as text (planner catalog gpus), got 5" in message
    assert "missing" not in message


@pytest.mark.parametrize("text, one", [("RoCE 2x100G", "roce-100g"), ("ConnectX-6 Dx 2x100GbE Ethernet", "roce-100g"),
                                       ("IB 2 x 200G", "ib-hdr")])
def test_a_multi_port_nic_is_refused_with_how_to_count_ports(text, one):
    """'RoCE 2x100G' (200 Gb/s in all) used to resolve silently to roce-400g, twice its speed."""
    with pytest.raises(PlannerInputError) as err:
        get_interconnect(text)
    assert f"name one port (e.g. {one}) and give the port count in nics_per_node" in str(err.value)


def test_utf16_files_from_windows_powershell_are_read(tmp_path):
    """Windows PowerShell 5's '>' writes UTF-16LE with a byte-order mark: a cluster file was
    refused as 'not UTF-8 text', a config.json as 'cannot read (UnicodeDecodeError)'."""
    cluster = tmp_path / "ours.toml"
    cluster.write_bytes('gpu = "h100"\nnic = "ib-ndr"\n'.encode("utf-16"))
    assert get_cluster(str(cluster)).nic == "ib-ndr"
    model = tmp_path / "config.json"
    model.write_bytes(json.dumps(LLAMA31_8B).encode("utf-16"))
    assert get_model(str(model)).num_kv_heads == 8


def test_a_model_file_that_is_not_text_says_so(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b'{"model_type": "llama", "x": "\xff\xfe"}')
    with pytest.raises(PlannerInputError, match=r"not UTF-8 text \(byte 30\); save it as UTF-8"):
        get_model(str(path))


@pytest.mark.parametrize("gpu, nic, preset", [("h100", "efa", "aws-p5"), ("a100-40gb", "efa-100g", "aws-p4d"),
                                              ("h100", "ib-ndr", "dgx-h100"), ("h100", "roce-400g", "dgx-h100")])
def test_unstated_network_facts_come_from_a_preset_on_the_same_kind_of_network(tmp_path, gpu, nic, preset):
    """An H100 file on EFA used to take dgx-h100's InfiniBand efficiency (0.92) though aws-p5's
    is measured on EFA (0.75): 1.2x too fast between nodes (1.5x on p4d's 0.6). With no preset
    of that GPU on that network (RoCE H100) the GPU's default preset still applies."""
    path = tmp_path / "ours.toml"
    path.write_text(f'gpu = "{gpu}"\nnic = "{nic}"\n')
    ours, theirs = get_cluster(str(path)), get_cluster(preset)
    for field in ("network_efficiency", "scaleup_efficiency", "nics_per_node", "scaleup_latency_us"):
        assert getattr(ours, field) == getattr(theirs, field), field


def test_hf_config_errors_name_the_config_keys():
    """'num_kv_heads=5 must divide ...' for a config.json whose key is num_key_value_heads, and
    'field max_position_embeddings ...; field default_seq_len ...' where the file has one key."""
    from hardware_catalog.errors import PlannerInputError
    from hardware_catalog.hf_config import model_from_hf_config

    base = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
            "num_key_value_heads": 8, "intermediate_size": 1024, "vocab_size": 32000, "max_position_embeddings": 4096}
    with pytest.raises(PlannerInputError) as err:
        model_from_hf_config({**base, "num_key_value_heads": 5}, "t")
    assert "num_key_value_heads=5 must divide num_attention_heads=8" in str(err.value)
    with pytest.raises(PlannerInputError) as err:
        model_from_hf_config({**base, "max_position_embeddings": 0}, "t")
    msg = str(err.value)
    assert "default_seq_len" not in msg and msg.count("max_position_embeddings") == 1, msg
