"""What the cost model returns for a batch of layouts."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from costmodel.layout import LayoutBatch

TIME_TERMS = (
    "compute",
    "recompute",
    "bubble",
    "tp_comm",
    "cp_comm",
    "ep_comm",
    "pp_p2p",
    "dp_comm",
    "zero3_comm",
    "comm_contention",
    "optimizer",
)
"""Exposed (critical-path) time terms per step, seconds; they add up to the step time."""

MEMORY_TERMS = ("weights", "gradients", "optimizer", "activations", "logits", "workspace")
"""Per-GPU memory components on the most loaded pipeline stage, GiB; they add up to ``peak``."""


@dataclass
class BatchResult:
    """Predictions for N layouts (arrays of length N)."""

    batch: LayoutBatch
    """The layouts evaluated."""
    step_time_s: np.ndarray
    """Seconds per optimizer step."""
    tokens_per_s: np.ndarray
    """Training tokens per second, whole job."""
    tokens_per_s_per_gpu: np.ndarray
    """Training tokens per second per GPU."""
    mfu: np.ndarray
    """Model FLOPs utilization (PaLM, App. B): model FLOPs per step (6·N active + causal
    attention, costmodel.flops) / (step time x GPUs x dense BF16 peak). FP8 runs are also
    measured against the BF16 peak, so their MFU is comparable with BF16 runs."""
    hfu: np.ndarray
    """Hardware FLOPs utilization: as MFU but counting recomputed FLOPs."""
    time_terms: dict[str, np.ndarray]
    """Exposed seconds per step for each of ``TIME_TERMS``; they sum to ``step_time_s``."""
    overlapped_terms: dict[str, np.ndarray]
    """Communication seconds per step hidden behind compute, per term (informational)."""
    memory_gib: dict[str, np.ndarray]
    """Per-GPU memory for each of ``MEMORY_TERMS`` plus ``peak`` (their sum), GiB."""
    memory_capacity_gib: float
    """GPU HBM capacity, GiB."""
    fits: np.ndarray
    """peak <= capacity."""
    notes: dict[str, np.ndarray] = field(default_factory=dict)
    """Extra per-layout facts (stage layer split, chosen collective algorithms...)."""

    def __len__(self) -> int:
        return len(self.step_time_s)

    def largest_term(self) -> np.ndarray:
        """Name of the largest exposed time term per layout."""
        names = np.array(TIME_TERMS)
        stacked = np.stack([self.time_terms[t] for t in TIME_TERMS])
        return names[np.argmax(stacked, axis=0)]

    def take(self, index) -> "BatchResult":
        sub = lambda d: {k: v[index] for k, v in d.items()}
        return BatchResult(
            batch=self.batch.take(index),
            step_time_s=self.step_time_s[index],
            tokens_per_s=self.tokens_per_s[index],
            tokens_per_s_per_gpu=self.tokens_per_s_per_gpu[index],
            mfu=self.mfu[index],
            hfu=self.hfu[index],
            time_terms=sub(self.time_terms),
            overlapped_terms=sub(self.overlapped_terms),
            memory_gib=sub(self.memory_gib),
            memory_capacity_gib=self.memory_capacity_gib,
            fits=self.fits[index],
            notes=sub(self.notes),
        )
