"""Names as people write them -> catalog entries, by what the name says rather than by alias.

A GPU name is read as (base part, memory, form factor): "NVIDIA H100 80GB HBM3" (nvidia-smi),
"H100 80GB SXM5", "A100-SXM4-40GB", "Tesla V100-SXM2-32GB", "GB200 NVL72" and "H100 (96GB
HBM2e, 500W)" all name one catalog GPU. A network adapter is read as (kind, line rate): "400G
NDR InfiniBand", "RoCE 400 Gb/s", "HDR". Only names the exact alias index does not know reach
these matchers, so every existing name resolves as before; a name that matches no entry, or
several equally, is refused with the candidates listed.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

from hardware_catalog.errors import PlannerInputError

_SEP = re.compile(r"[^a-z0-9]+")
_MEMORY = re.compile(r"(\d+(?:\.\d+)?)\s*(?:gb|gib|g)(?![a-z0-9/])")
"""'80GB', '80 GB', '96GiB' (not '400G/s' or '500W')."""
_FORMS = {"pcie": re.compile(r"pcie"), "sxm": re.compile(r"sxm"), "nvl": re.compile(r"nvl")}
MEMORY_TOLERANCE = 0.10
"""A stated size matches a catalog GPU whose driver-reported GiB is within 10% of it: an "80GB"
card reports 79.2 GiB, a "96GB" one 95.1, a "141GB" one 139.8 (hardware_catalog/data/gpus.toml)."""


def _base_pattern(base: str) -> re.Pattern:
    # A base part stands alone: 'h100' in 'NVIDIA H100-SXM5', not in 'h1000' or 'gh100'.
    return re.compile(rf"(?<![a-z0-9]){re.escape(base)}(?![0-9])")


def _form(text: str) -> Optional[str]:
    """'pcie', 'sxm' or 'nvl' when the text names exactly one of them."""
    found = [name for name, pattern in _FORMS.items() if pattern.search(text)]
    return found[0] if len(found) == 1 else None


def _entry_form(names: Sequence[str]) -> set[str]:
    text = " ".join(names)
    if "pcie" in text:
        return {"pcie"}
    return {"sxm", "nvl"} if "nvl" in text else {"sxm"}


def _describe(spec) -> str:
    return f"{spec.name} ({', '.join(sorted(_entry_form([spec.name, *spec.aliases]))).upper()}, {spec.memory_gib:g} GiB)"


def match_gpu(text: str, specs: Sequence, index: dict):
    """The catalog GPU ``text`` names, or None when it names no known base part (e.g. 'TPU v5').
    Raises ``PlannerInputError`` when the base part is known but the memory or form factor
    matches none of its entries."""
    low = text.strip().lower()
    # Longest first, then by name: the same text always finds the same part.
    bases = sorted({_SEP.split(n)[0] for s in specs for n in (s.name, *s.aliases)}, key=lambda b: (-len(b), b))
    found = [b for b in bases if _base_pattern(b).search(low)]
    # Two names of parts with nothing in common ('h100,b200') are two GPUs; a vendor word beside a
    # part ('AMD Instinct MI300X') names that part.
    families = {b: {s.name for s in specs if any(_SEP.split(n)[0] == b for n in (s.name, *s.aliases))} for b in found}
    apart = sorted({b for b in found for o in found if not families[b] & families[o]})
    if apart:
        raise PlannerInputError(f"gpu '{text.strip()}' names more than one GPU ({', '.join(apart)}): give one "
                                "(planner search --model ... takes several as --gpu A,B)")
    base = found[0] if found else None
    if base is None:
        return None
    family = [s for s in specs if any(_SEP.split(n)[0] == base for n in (s.name, *s.aliases))]
    memory = _MEMORY.search(low)
    form = _form(low)
    fits = [s for s in family
            if (memory is None or abs(s.memory_gib - float(memory.group(1))) <= MEMORY_TOLERANCE * float(memory.group(1)))
            and (form is None or form in _entry_form([s.name, *s.aliases]))]
    if len(fits) == 1:
        return fits[0]
    default = index.get(base)
    if default is not None and default in fits:
        return default  # 'H100' -> h100-sxm, as the alias says
    if fits:  # several, none the base's default: the SXM part, if one
        sxm = [s for s in fits if "sxm" in _entry_form([s.name, *s.aliases]) and "pcie" not in s.name]
        if len(sxm) == 1:
            return sxm[0]
    stated = ", ".join(x for x in (memory and f"{memory.group(1)} GB", form and form.upper()) if x)
    raise PlannerInputError(
        f"unknown gpu '{text.strip()}': no catalog {base} has {stated or 'that name'} "
        f"(catalog {base} parts: {'; '.join(_describe(s) for s in family)})")


_IB_GENERATIONS = {"edr": 100, "hdr": 200, "ndr": 400, "xdr": 800}
"""InfiniBand generation -> line rate per port, Gb/s (InfiniBand Trade Association roadmap)."""
_IB_BY_RATE = {v: k for k, v in _IB_GENERATIONS.items()}
"""Line rate per port, Gb/s -> InfiniBand generation."""
_ROCE_WORDS = {"roce", "rocev2", "ethernet", "eth", "spectrum"}
"""Words that name an Ethernet (RoCE) NIC."""
_RATE = re.compile(
    r"(?<![0-9a-z.])(\d+(?:\.\d+)?)\s*"
    r"(gbe|gbps|gbits?(?:/s)?|gb/s|g/s|gb|g|tbps|tbits?(?:/s)?|tb/s|t/s|tb|t)?(?![a-z0-9])")
"""A stated line rate: '400G', '200 Gb/s', '100GbE', '3.2T', or a bare '400' (read as Gb/s).
Not a model number glued to letters ('ConnectX-7' has no unit and is under 10; 'QM9700', '2x200G')."""
_BYTES_PER_S = re.compile(r"\d\s*(?:GB/s|GBps|GB/sec|GByte)")
"""Gigabytes per second, as the catalog's own columns state NIC speed: '50 GB/s' is a 400 Gb/s
port. Only the capital-B spelling with a 'per second' reads as bytes (a bare '400GB' stays the
Ethernet-style 400 Gb)."""


_PORTS = re.compile(r"(?<![0-9a-z])(\d+)\s*x\s*(\d+)\s*g")
"""'2x200G', '2 x 100 GbE': a multi-port adapter."""


def _stated_gbit(text: str) -> Optional[float]:
    """The line rate ``text`` states, in Gb/s, or None when it states none."""
    for m in _RATE.finditer(text.lower()):
        value, unit = float(m.group(1)), m.group(2) or ""
        if not unit and value < 10:
            continue  # 'ConnectX-7', 'CX-8': a product generation, not a rate
        return value * (1000 if unit.startswith("t") else 1) * (8 if _BYTES_PER_S.search(text) else 1)
    return None


def match_interconnect(text: str, index: dict):
    """The catalog NIC ``text`` names ('400G NDR InfiniBand', 'RoCE 200Gb/s', 'HDR', 'RoCE 50
    GB/s'), or None. A name that states a line rate the catalog has no NIC of that kind for
    ('RoCE 25G', 'RoCE 400 GB/s' = 3.2 Tb/s) is refused, not read as the kind's default."""
    low = text.strip().lower()
    words = set(_SEP.split(low))
    generation = next((g for g in _IB_GENERATIONS if g in words), None)
    ports = _PORTS.search(low)
    if ports and (generation or words & (_ROCE_WORDS | {"ib", "infiniband"})):
        # '2x100G' is two ports: one catalog NIC is one port, and nics_per_node counts them.
        rate = int(ports.group(2))
        one = (f"ib-{_IB_BY_RATE[rate]}" if rate in _IB_BY_RATE else "ib-ndr") if generation or words & {"ib", "infiniband"} \
            else f"roce-{rate}g"
        raise PlannerInputError(
            f"unknown interconnect '{text.strip()}': {ports.group(0)} is {ports.group(1)} ports; name one port "
            f"(e.g. {one}) and give the port count in nics_per_node")
    stated = _stated_gbit(text)
    gbps = stated if stated is not None else (_IB_GENERATIONS[generation] if generation else None)
    if words & _ROCE_WORDS:
        kind, key = "roce", (f"roce-{gbps:g}g" if gbps else "roce")
    elif generation or words & {"ib", "infiniband", "quantum"}:
        kind, key = "ib", (f"ib-{_IB_BY_RATE[gbps]}" if gbps in _IB_BY_RATE else None)
    else:
        return None
    spec = index.get(key) if key else None
    if spec is None and stated is not None:
        rates = sorted({round(s.bandwidth_gbps * 8) for n, s in index.items() if n.startswith(f"{kind}-")})
        bytes_note = " (GB/s is gigabytes per second: 8 Gb/s each)" if _BYTES_PER_S.search(text) else ""
        raise PlannerInputError(
            f"unknown interconnect '{text.strip()}': it states {stated:g} Gb/s{bytes_note}; catalog {kind} NICs run at "
            f"{', '.join(f'{r} Gb/s' for r in rates)} (planner catalog interconnects)")
    return spec


def compact(name: str) -> str:
    """A name without case or separators: 'Llama 3.1 70B' and 'llama3.1-70b' -> 'llama3.170b'."""
    return _SEP.sub("", name.lower().replace(".", "p"))


_MODEL_NOISE = re.compile(
    r"\(.*?\)|\b(instruct|chat|base|hf|it|pretrain(ed)?|v0\.\d|fp8|bf16)\b", re.IGNORECASE)
_ORG = re.compile(r"^[a-z0-9_.-]+/", re.IGNORECASE)
_SIZE = re.compile(r"(?<![0-9.])(\d+(?:\.\d+)?)b(?![a-z0-9])")


def model_name_variants(text: str) -> list[str]:
    """Cleaned spellings of a model name to look up, most literal first: without the hub
    organisation ('meta-llama/'), a leading 'meta-', parenthetical notes and variant words
    (instruct, chat, base, hf, fp8, ...)."""
    low = text.strip().lower()
    stripped = _ORG.sub("", low)
    cleaned = _MODEL_NOISE.sub(" ", stripped).strip(" -_")
    out = [low, stripped, cleaned, re.sub(r"^meta[- _]", "", cleaned)]
    return list(dict.fromkeys(v for v in out if v))


def match_model_by_size(text: str, specs: Sequence) -> list:
    """Presets whose name has ``text``'s family word (with its major version, when stated) and
    parameter size: 'Llama 405B' -> llama3-405b, 'Llama 3.3 70B' -> llama3-70b (same shapes as
    3.1), 'Llama 70B' -> llama2-70b and llama3-70b (the caller refuses the ambiguity)."""
    low = model_name_variants(text)[-1]
    head = re.match(r"([a-z]+)[\s_-]*(\d+)?(?:\.\d+)?(?![\d.]*b(?![a-z0-9]))", low)
    size = _SIZE.search(low)
    if size is None or head is None:
        return []
    prefix = head.group(1) + (head.group(2) or "")
    token = size.group(1) + "b"
    return [s for s in specs if any(
        compact(n).startswith(prefix) and re.search(rf"(?<![0-9.]){re.escape(token)}(?![a-z0-9])", n.lower())
        for n in (s.name, *s.aliases))]
