"""The largest values planner accepts: far above anything trained so far, yet small enough that
every product the cost model and the search form (degrees multiplied to the GPU count,
micro-batch x sequence x hidden sizes) stays exact in int64 and inside CP-SAT's domains. The
layout options (``costmodel.options``) and the catalog schemas (``hardware_catalog.schema``)
declare their ranges with these."""

MAX_GPUS = 1 << 20
"""Most GPUs in a job (1,048,576), so also the largest parallel degree."""
MAX_DOMAIN_GPUS = 1 << 10
"""Most GPUs in one node or one scale-up domain (1,024): the largest NVLink domain shipped is 72
GPUs (GB200/GB300 NVL72) and the largest announced 576 (Vera Rubin Ultra NVL576, NVIDIA GTC 2025
keynote); 1,024 is the next power of two above it, so a cluster file's 100,000 is a typo."""
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


# Hardware figures a cluster or GPU file may give: generous around today's parts (orders of
# magnitude both ways), so a typo or a hostile 1e308 / 1e-300 / inf is one line naming the field
# instead of a NaN, an overflow or a 1e99 s step downstream.
MAX_TFLOPS = 1e5
"""Dense tensor peak per GPU, TFLOP/s (a B200 gives 2,250 BF16: 100 PFLOP/s is 40x that)."""
MIN_TFLOPS = 1e-3
MAX_MEMORY_GIB = 1 << 16
"""HBM per GPU, GiB (64 TiB; a B200 has 180 GiB)."""
MIN_MEMORY_GIB = 1e-3
MAX_BANDWIDTH_GBPS = 1e6
"""Any bandwidth per GPU or port, GB/s (1 PB/s; HBM3e is 8,000)."""
MIN_BANDWIDTH_GBPS = 1e-3
"""1 MB/s: below this nothing trains."""
MAX_LATENCY_US = 1e6
"""Per-step latency, microseconds (one second; fabrics give 1-10)."""
MIN_LATENCY_US = 1e-3
"""One nanosecond: a latency below it is a unit mistake."""
MIN_EFFICIENCY = 1e-3
"""Achievable fraction of a peak (the upper bound is 1)."""
MAX_OVERSUBSCRIPTION = 1e3
"""Fat-tree oversubscription ratio (1 = full bisection; real fabrics 1-8)."""
MAX_WATTS = 1e5
"""Board power or power cap, W (a GB200 superchip draws about 2,700 W)."""
MIN_WATTS = 1.0
