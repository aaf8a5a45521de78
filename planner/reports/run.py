"""The "run" block in words: failures, checkpoints, restarts, goodput, days, energy and cost
(``costmodel.goodput.run_block``), as evaluate prints it under the step-time report."""

from __future__ import annotations

from planner.reports import counted


def _duration(s: float) -> str:
    if s >= 86400:
        return f"{s / 86400:.1f} days"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 120:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"


def _usd(v: float) -> str:
    return f"${v / 1e6:,.1f}M" if v >= 1e6 else f"${three_figures(v)}"


def three_figures(v: float) -> str:
    """Three significant figures with thousands separators (``costmodel.goodput``'s inputs hold
    no more): 3,553 -> '3,550', 28.4e6 -> '28.4M', 0.0123 -> '0.0123'."""
    if v >= 1e6:
        return f"{v / 1e6:,.{max(0, 2 - len(str(int(v // 1e6))) + 1)}f}M"
    if v >= 100:
        return f"{float(f'{v:.3g}'):,.0f}"
    return f"{v:.3g}"


def format_run(run: dict) -> str:
    """A few aligned lines; the JSON's ``run`` carries every number and input."""
    i, f, ck, rs = run["inputs"], run["failures"], run["checkpoint"], run["restart"]
    lines = ["run (failures, checkpoints, restarts: costmodel/goodput.py)"]
    node = f" + 1 per {i['mtbf_node_hours']:,.0f} node-hours" if i.get("mtbf_node_hours") else ""
    expected = f"; {three_figures(f['expected'])} expected over the run" if "expected" in f else ""
    lines.append(f"  failures    one every {three_figures(f['job_mtbf_h'])} h ({three_figures(f['per_day'])}/day; {counted(i['gpus'], 'GPU')} at "
                 f"{i['mtbf_gpu_hours']:,.0f} h MTBF each{node}){expected}")
    lines.append(f"  checkpoint  {ck['total_tb']:.2f} TB (BF16 weights + FP32 master + Adam m, v); each GPU holds "
                 f"{ck['held_per_gpu_gib']:.2f} GiB, writes {ck['written_per_gpu_gib']:.2f} GiB")
    bw = (f"{i['checkpoint_write_gbps']:,.0f} GB/s aggregate, {i['checkpoint_node_gbps']:g} GB/s per node")
    if ck["mode"] == "async":
        took = (f"async: blocks {ck['blocking_s']:.2f} s (copy to host), writes {ck['write_s']:.1f} s behind "
                f"training ({bw})")
    else:
        took = f"sync: blocks {ck['blocking_s']:.1f} s ({bw})"
    lines.append(f"              every {ck['interval_min']:.1f} min ({counted(ck['interval_steps'], 'step')}); {took}")
    lines.append(f"              interval: {ck['interval_source']}; Young sqrt(2CM) {ck['young_interval_min']:.1f} min, "
                 f"Daly {ck['daly_interval_min']:.1f} min (C = the time a save blocks, M = the job's MTBF)")
    lines.append(f"  restart     {rs['total_s']:.0f} s = relaunch {rs['relaunch_s']:g} s + NCCL init "
                 f"{rs['nccl_init_s']:g} s + load {rs['load_s']:.1f} s")
    other = "sync" if ck["mode"] == "async" else "async"
    lines.append(f"  goodput     {run['goodput'] * 100:.1f}% of wall time is training (Daly 2006); "
                 f"{other} save: {ck['goodput_' + other] * 100:.1f}%")
    p = run["power"]
    power = f"{three_figures(p['it_mw'])} MW IT ({three_figures(p['gpu_mw'])} MW GPUs at {i['gpu_watts']:g} W), PUE {p['pue']:g}"
    if "days" in run:
        from planner.reports.evaluate import human_count

        lines.append(f"  time        {run['days']:.1f} days for {human_count(run['train_tokens'])} tokens "
                     f"({run['useful_days']:.1f} days of training); {three_figures(run['gpu_hours'])} GPU-hours")
        cost = f"; {_usd(run['cost_usd'])} at ${i['price_per_gpu_hour']:g}/GPU-hour" if "cost_usd" in run else ""
        lines.append(f"  energy      {three_figures(run['energy_mwh'])} MWh at {power}{cost}")
    else:
        lines.append(f"  power       {power} (give --train-tokens for days, MWh and $)")
    if "cost_per_step_usd" in run and "cost_usd" not in run:
        lines.append(f"  cost        {_usd(run['cost_per_step_usd'])} per step at ${i['price_per_gpu_hour']:g}/GPU-hour "
                     f"(steady state; give --train-tokens for the run's)")
    return "\n".join(lines)
