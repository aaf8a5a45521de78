"""Many layouts as columns: what the cost model evaluates in one vectorized call.

``Layout`` (``costmodel.options``) is one layout as a user types it; ``LayoutBatch`` holds N of
them as numpy arrays, one column per option with the same name (choices as codes, flags as
bools, optional ints with 0 for None, module sets as bit masks; see ``Option.encode``).
"""

from __future__ import annotations

import numpy as np

from costmodel.options import (  # noqa: F401  (re-exported: the option vocabulary)
    ATTENTION,
    AUTO_FLAG,
    DEFAULT_RECOMPUTE_MODULES,
    DISPATCHERS,
    GRAD_ACCUMS,
    GRAD_DTYPES,
    IMPLEMENTATION_DEFAULTS,
    IMPLEMENTATION_OPTIONS,
    KERNELS,
    LOSSES,
    OPTIONS,
    OPTIONS_BY_NAME,
    OPTIMIZER_STATES,
    PRECISIONS,
    RECOMPUTE,
    RECOMPUTE_MODULES,
    ZERO3_GATHERS,
    Layout,
    check_implementation,
    parse_recompute_modules,
)

COLUMNS = tuple(o.name for o in OPTIONS)
_CHOICE_CODES = {o.name: {value: code for code, value in enumerate(o.choices)} for o in OPTIONS if o.kind == "choice"}
"""Option -> value -> its column code (CHOICE options: the index in ``choices``)."""
"""Column names of a LayoutBatch (= ``Layout`` field names)."""
_DTYPES = {o.name: {"bool": bool, "float64": np.float64}.get(o.column_dtype, np.int64) for o in OPTIONS}


def implementation_columns(impl: dict) -> dict:
    """LayoutBatch codes for implementation settings given as ``Layout`` values (defaults for
    the ones not given)."""
    full = {**IMPLEMENTATION_DEFAULTS, **{k: v for k, v in (impl or {}).items() if v is not None}}
    return {k: OPTIONS_BY_NAME[k].encode(v) for k, v in full.items()}


def recompute_modules_mask(modules) -> int:
    """Bit mask of recompute module names (None: Megatron's default, core_attn)."""
    return OPTIONS_BY_NAME["recompute_modules"].encode(parse_recompute_modules(modules))


def recompute_module_bit(masks, name: str) -> np.ndarray:
    """1 where the bit mask(s) include module ``name``, else 0 (vectorized over masks)."""
    return (np.asarray(masks, dtype=np.int64) >> RECOMPUTE_MODULES.index(name)) & 1


def recompute_modules_names(mask: int) -> tuple:
    """Module names of a bit mask, in ``RECOMPUTE_MODULES`` order."""
    return tuple(name for i, name in enumerate(RECOMPUTE_MODULES) if int(mask) >> i & 1)


class LayoutBatch:
    """N layouts as parallel numpy arrays, one per option (``COLUMNS``), all of length N.

    ``sequence_parallel`` holds what runs (off where tp == 1); ``recompute_layers`` 0 = every
    layer (unless ``recompute_share``, 0 = none, gives q quarters of each stage's chunk);
    ``recompute_modules`` a bit mask over
    ``RECOMPUTE_MODULES`` (1 = core_attn alone); ``pp_first_layers`` / ``pp_last_layers`` 0 =
    planner's split.
    """

    __slots__ = COLUMNS

    def __init__(self, **columns):
        missing = [name for name in COLUMNS if name not in columns]
        unknown = [name for name in columns if name not in _DTYPES]
        if missing or unknown:
            raise TypeError(f"LayoutBatch columns missing {missing}, unknown {unknown} (use from_arrays for defaults)")
        for name in COLUMNS:
            setattr(self, name, columns[name])

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    def columns(self) -> dict[str, np.ndarray]:
        """Column name -> array."""
        return {name: getattr(self, name) for name in COLUMNS}

    @classmethod
    def from_layouts(cls, layouts: list[Layout]) -> "LayoutBatch":
        cols = {o.name: [o.encode(getattr(lay, o.name)) for lay in layouts] for o in OPTIONS}
        cols["sequence_parallel"] = [lay.sp for lay in layouts]
        return cls(**{k: np.asarray(v, dtype=_DTYPES[k]) for k, v in cols.items()})

    @classmethod
    def from_arrays(cls, **arrays) -> "LayoutBatch":
        """Build from broadcastable arrays / scalars of codes; missing columns take their
        option's default (sequence parallelism: on, then forced off where tp == 1)."""
        unknown = [k for k in arrays if k not in _DTYPES]
        if unknown:
            raise TypeError(f"unknown LayoutBatch columns {unknown} (known: {', '.join(COLUMNS)})")
        full = {o.name: arrays[o.name] if o.name in arrays else o.default_code for o in OPTIONS}
        shaped = np.broadcast_arrays(*[np.asarray(v) for v in full.values()])
        out = {name: np.ascontiguousarray(arr, dtype=_DTYPES[name]).reshape(-1) for name, arr in zip(full, shaped)}
        out["sequence_parallel"] = out["sequence_parallel"] & (out["tp"] > 1)
        return cls(**out)

    @classmethod
    def concat(cls, batches: list["LayoutBatch"]) -> "LayoutBatch":
        """One batch holding the layouts of ``batches``, in order."""
        return cls(**{name: np.concatenate([getattr(b, name) for b in batches]) for name in COLUMNS})

    def is_(self, option: str, value: str) -> np.ndarray:
        """True where the CHOICE ``option`` is ``value``: the cost model compares settings by
        name (``batch.is_("attention", "flash3")``), never by code. A name that is not one of
        the option's choices raises KeyError."""
        return getattr(self, option) == _CHOICE_CODES[option][value]

    def take(self, index) -> "LayoutBatch":
        return LayoutBatch(**{name: getattr(self, name)[index] for name in COLUMNS})

    def layout(self, i: int) -> Layout:
        """The i-th layout as a ``Layout`` (options that do not apply to it left at None)."""
        kw = {o.name: o.decode(getattr(self, o.name)[i]) for o in OPTIONS}
        if kw["recompute"] != "full":
            kw["recompute_layers"] = kw["recompute_share"] = None
        if kw["recompute"] != "selective":
            kw["recompute_modules"] = None
        return Layout(**kw)
