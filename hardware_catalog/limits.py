"""The largest values planner accepts: far above anything trained so far, yet small enough that
every product the cost model and the search form (degrees multiplied to the GPU count,
micro-batch x sequence x hidden sizes) stays exact in int64 and inside CP-SAT's domains. The
layout options (``costmodel.options``) and the catalog schemas (``hardware_catalog.schema``)
declare their ranges with these."""

MAX_GPUS = 1 << 20
"""Most GPUs in a job (1,048,576), so also the largest parallel degree."""
MAX_LAYERS = 1 << 13
"""Most transformer layers (8,192): bounds vpp, stage layer counts and recompute layers."""
MAX_SEQ_LEN = 1 << 24
"""Longest sequence (16,777,216 tokens)."""
MAX_GBS = 1 << 24
"""Largest global batch and micro-batch (16,777,216 sequences)."""
MAX_TOKENS_PER_BATCH = 1 << 36
"""Largest global batch in tokens (gbs x seq_len <= 68,719,476,736)."""
MAX_HIDDEN = 1 << 18
"""Widest model dimension or head count a model file may give (262,144)."""
MAX_WIDTH = 1 << 20
"""Largest MLP intermediate size (1,048,576)."""
MAX_VOCAB = 1 << 24
"""Largest vocabulary (16,777,216 tokens)."""
