"""Fold the released ablation groups (reference/ablations/ablations.json, 2026-11-27) into
planner/data/ablations.json, in that file's format, with their provenance.

    python benchmarks/import_ablations.py ../shared/reference/ablations/ablations.json

Groups already in the file (same source, same setting) are left out; so is the Llama 3 group
(a cross-workload pair, 8K vs 128K tokens, and the Llama 3 paper's throughput figures stay
reserved, GUIDE.md). Every measured figure is converted to tokens/s/GPU with the formula
written beside it; the source's own figure and quote are kept.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[1] / "planner" / "data" / "ablations.json"

DUPLICATES = {
    # released id -> the group planner/data/ablations.json already holds (same table, GPUs, batch)
    **{f"korthikanti_t5_{k}_full_vs_selective_sp": f"korthikanti2022_t5_{k}" for k in ("22b", "175b", "530b", "1t")},
    **{f"narayanan_t2_{k}": f"narayanan2021_t2_{v}" for k, v in (
        ("175b_384gpu_zero3_vs_ptdp", "174p6b_384gpu"), ("175b_768gpu_zero3_vs_ptdp", "174p6b_768gpu"),
        ("175b_1536gpu_zero3_vs_ptdp", "174p6b_1536gpu"), ("530b_1120gpu_zero3_vs_ptdp", "529p6b_1120gpu"),
        ("530b_2240gpu_zero3_vs_ptdp", "529p6b_2240gpu"))},
    "torchtitan_405b_512gpu_1f1b_vs_interleaved": "torchtitan2024_405b_pp_schedule_512gpu",
    "torchtitan_70b_256gpu_asynctp": "torchtitan2024_70b_asynctp_256gpu",
}
LEFT_OUT = {"llama3_405b_16k_cp1_8k_vs_cp16_128k": "cross-workload (8K vs 128K tokens); Llama 3 paper figures reserved"}
CLUSTERS = {"clusters/jean-zay-a100.toml": "jean-zay-a100"}
FAMILY = {"bloom": "bloom", "zb": "gpt", "korthikanti": "gpt"}
YEAR = {"bloom": 2022, "zb": 2024, "korthikanti": 2022}


def tokens_per_gpu(group: dict, lay: dict) -> tuple[float, str]:
    """tokens/s/GPU and the conversion, from the group's metric."""
    metric, value = group["metric"]["name"], lay["measured"]
    gbs, seq, gpus = lay["gbs"], lay["seq_len"], group["hardware"]["num_gpus"]
    if metric == "step_time_s":
        return gbs * seq / (value * gpus), f"gbs*seq/(step time*GPUs) = {gbs}*{seq}/({value} s*{gpus})"
    if metric == "samples_per_gpu_per_s":
        return value * seq, f"samples/GPU/s * seq = {value}*{seq}"
    if metric == "layer_time_ms":
        layers = group["model"]["num_layers"]
        return (gbs * seq / (value / 1e3 * layers * gpus),
                f"proxy for ordering only: gbs*seq/(layer time*layers*GPUs) = {gbs}*{seq}/({value} ms*{layers}*{gpus})")
    raise ValueError(f"{group['id']}: metric {metric}")


def convert(group: dict) -> dict:
    kind = group["id"].split("_")[0]
    src = group["source"]
    source = {"title": src["citation"], "url": src.get("url"), "table": src.get("location"), "year": YEAR[kind]}
    source.update({k: src[k] for k in ("repo", "path") if src.get(k)})
    if src.get("commit_read"):
        source["commit"] = src["commit_read"]
    m = group["model"]
    model = {k: m[k] for k in ("name", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads",
                                "ffn_hidden_size", "vocab_size")}
    model["family"] = FAMILY[kind]
    hw = group["hardware"]
    hardware = {"gpu": hw["gpu"], "num_gpus": hw["num_gpus"], "gpus_per_node": hw["gpus_per_node"]}
    if hw.get("planner_cluster") in CLUSTERS:
        hardware["cluster"] = CLUSTERS[hw["planner_cluster"]]
    if hw.get("system"):
        hardware["system"] = hw["system"]
    layouts = []
    for lay in group["layouts"]:
        flags = {**group.get("impl", {}), **lay.get("implementation_flags", {}), **lay.get("impl", {})}
        layout = {"tp": lay["tp"], "pp": lay["pp"], "dp": lay["dp"], "cp": lay["cp"], "ep": lay["ep"], "vp": lay["vpp"],
                  "micro_batch_size": lay["mbs"], "activation_recompute": lay["recompute"], "zero_stage": lay["zero"]}
        if "sequence_parallel" in lay:
            layout["sequence_parallel"] = lay["sequence_parallel"]
        for key in ("pp_first_layers", "pp_last_layers", "recompute_layers"):
            if lay.get(key) is not None:
                layout[key] = lay[key]
        layout.update({k: v for k, v in flags.items() if k in ("attention", "grad_dtype")})
        tps, how = tokens_per_gpu(group, lay)
        layouts.append({"label": lay["label"], "layout": layout,
                        "measured": {"tokens_per_s_per_gpu": round(tps, 2), "conversion": how,
                                     "source_metric": f"{lay['measured']} {group['metric']['unit']}"},
                        "quote": lay.get("quote") or lay["label"]})
    notes = list(group.get("notes", [])) + [f"assumed (released with the group): {a}" for a in group.get("assumptions", [])]
    notes.append("released 2026-11-27 (reference/ablations/ablations.json, id " + group["id"] + ")")
    out = {"id": group["id"], "source": source, "model": model, "hardware": hardware, "seq_length": group["seq_len"],
           "global_batch_size": group["global_batch"], "framework": group["framework"],
           "precision": group["defaults"].get("precision", "bf16"), "confidence": group["confidence"], "notes": notes,
           "layouts": layouts}
    if group.get("oom_layouts"):
        out["oom_layouts"] = [{k: o[k] for k in ("tp", "pp", "dp", "mbs", "quote")} for o in group["oom_layouts"]]
    if group.get("date"):
        out["date"] = group["date"]
    return out


def main(path: str) -> None:
    shipped = json.loads(SHIPPED.read_text())
    have = {g["id"] for g in shipped}
    released = json.loads(Path(path).read_text())
    added = [convert(g) for g in released
             if g["id"] not in DUPLICATES and g["id"] not in LEFT_OUT and g["id"] not in have]
    for g in released:
        assert g["id"] not in DUPLICATES or DUPLICATES[g["id"]] in have, g["id"]
    SHIPPED.write_text(json.dumps(shipped + added, indent=1, ensure_ascii=False) + "\n")
    print(f"added {len(added)} groups; {len(DUPLICATES)} already held; left out: {', '.join(LEFT_OUT)}")


if __name__ == "__main__":
    main(sys.argv[1])
