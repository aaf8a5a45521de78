"""Pydantic schemas for the catalog: GPUs, network interconnects, clusters, transformer models.

Every numeric field that a data file sets must be cited in that entry's ``sources`` mapping
(field name -> citation). Units are in the field names: ``_tflops`` dense TFLOP/s (no
sparsity), ``_gbps`` gigabytes per second (1e9 bytes/s, *not* gigabits), ``_gib`` 2**30 bytes,
``_us`` microseconds.
"""

from __future__ import annotations

from typing import Literal, Optional, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hardware_catalog.limits import (MAX_BANDWIDTH_GBPS, MAX_DOMAIN_GPUS, MAX_GPUS, MAX_LATENCY_US, MAX_LAYERS,
                                     MAX_MEMORY_GIB, MAX_OVERSUBSCRIPTION, MAX_SEQ_LEN, MAX_TFLOPS, MAX_TOKENS_PER_BATCH, MAX_WATTS,
                                     MIN_BANDWIDTH_GBPS, MIN_EFFICIENCY, MIN_LATENCY_US, MIN_MEMORY_GIB, MIN_TFLOPS,
                                     MIN_WATTS)
from hardware_catalog.limits import MAX_HIDDEN as _MAX_HIDDEN
from hardware_catalog.limits import MAX_VOCAB as _MAX_VOCAB
from hardware_catalog.limits import MAX_WIDTH as _MAX_WIDTH

ScaleUpTopology = Literal["switch", "ring", "mesh2d", "torus2d", "fully_connected"]
NetworkTopology = Literal["switch", "ring", "tree", "mesh2d", "torus2d"]


def _numeric(annotation) -> bool:
    """The annotation takes a number and not a bool: int, float, Optional[...] of them, tuple[int, int]."""
    if annotation in (int, float):
        return True
    args = get_args(annotation)
    return bool(args) and bool not in args and any(_numeric(a) for a in args if a is not type(None))


class _NoBoolNumbers(BaseModel):
    """Refuses true/false for a number. pydantic reads True as 1, so 'gpus_per_node = true' was
    a cluster of 1-GPU nodes and 'num_layers = true' a 1-layer model, without a word."""

    @model_validator(mode="before")
    @classmethod
    def _refuse_bools(cls, data):
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                value = data.get(name)
                if isinstance(value, bool) and _numeric(field.annotation):
                    raise ValueError(f"field {name}: give a number, not {str(value).lower()}")
        return data


class _Cited(_NoBoolNumbers):
    """Base for catalog entries: every set numeric field must carry a source."""

    # allow_inf_nan=False: inf and NaN are refused by name (and every bound below is finite).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str
    """Canonical lower-case name, e.g. ``h100-sxm``."""
    aliases: list[str] = Field(default_factory=list)
    """Other names accepted on the command line, e.g. ``h100``."""
    sources: dict[str, str] = Field(default_factory=dict)
    """Field name -> citation (datasheet, paper and table, NCCL docs). ``*`` covers all fields."""

    @model_validator(mode="after")
    def _every_number_cited(self):
        if "*" in self.sources:
            return self
        missing = []
        for field_name, value in self:
            if field_name in ("sources", "aliases", "name"):
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if field_name not in self.sources:
                    missing.append(field_name)
        if missing:
            raise ValueError(f"{self.name}: no source for field(s) {', '.join(sorted(missing))}")
        return self


class GPUSpec(_Cited):
    """One accelerator model. Peak numbers are dense (no 2:4 sparsity)."""

    vendor: Literal["nvidia", "amd"]
    architecture: Literal["volta", "ampere", "hopper", "blackwell", "cdna3", "other"] = "other"
    """GPU generation; decides which kernels exist (e.g. FlashAttention-3 / cuDNN's
    warp-specialized attention needs Hopper's wgmma and TMA)."""
    bf16_tflops: float = Field(ge=MIN_TFLOPS, le=MAX_TFLOPS)
    """Dense BF16 tensor-core peak, TFLOP/s."""
    fp16_tflops: float = Field(ge=MIN_TFLOPS, le=MAX_TFLOPS)
    """Dense FP16 tensor-core peak, TFLOP/s."""
    fp8_tflops: Optional[float] = Field(default=None, ge=MIN_TFLOPS, le=MAX_TFLOPS)
    """Dense FP8 tensor-core peak, TFLOP/s; None where the GPU has no FP8 tensor cores."""
    fp4_tflops: Optional[float] = Field(default=None, ge=MIN_TFLOPS, le=MAX_TFLOPS)
    """Dense FP4 (NVFP4 / MXFP4) tensor-core peak, TFLOP/s; None where absent (before Blackwell)."""
    tf32_tflops: Optional[float] = Field(default=None, ge=MIN_TFLOPS, le=MAX_TFLOPS)
    """Dense TF32 tensor-core peak, TFLOP/s; None where absent (V100)."""
    fp32_tflops: float = Field(ge=MIN_TFLOPS, le=MAX_TFLOPS)
    """Non-tensor FP32 peak, TFLOP/s."""

    @property
    def bf16_caveat(self) -> str:
        """One line where BF16 runs far below the GPU's FP16 tensor cores (V100: BF16 on CUDA cores
        at the FP32 rate), so a user reads the prediction for what it is; '' elsewhere."""
        if self.bf16_tflops * 2.0 > self.fp16_tflops:
            return ""
        return (f"{self.name} has no BF16 tensor cores: BF16 is priced at {self.bf16_tflops:g} TFLOP/s, not the "
                f"{self.fp16_tflops:g} TFLOP/s of its FP16 tensor cores (planner prices no FP16 mixed precision)")
    memory_gib: float = Field(ge=MIN_MEMORY_GIB, le=MAX_MEMORY_GIB)
    """HBM capacity in GiB as the driver reports it (usable by the framework)."""
    memory_bandwidth_gbps: float = Field(ge=MIN_BANDWIDTH_GBPS, le=MAX_BANDWIDTH_GBPS)
    """HBM bandwidth, GB/s."""
    scaleup_bandwidth_gbps: float = Field(ge=MIN_BANDWIDTH_GBPS, le=MAX_BANDWIDTH_GBPS)
    """Scale-up link (NVLink / xGMI / PCIe) bandwidth per GPU per direction, GB/s."""
    scaleup_link: str
    """Name of the scale-up link, e.g. ``NVLink 4``."""
    tdp_watts: Optional[float] = Field(default=None, ge=MIN_WATTS, le=MAX_WATTS)
    """Board power, W (power-capped clusters scale clocks against it)."""
    host_bandwidth_gbps: Optional[float] = Field(default=None, ge=MIN_BANDWIDTH_GBPS, le=MAX_BANDWIDTH_GBPS)
    """GPU <-> host memory bandwidth per direction, GB/s (PCIe, or NVLink-C2C to a Grace CPU,
    capped by the CPU memory's share per GPU): what CPU activation offload moves over."""
    gemm_efficiency_bf16: Optional[float] = Field(default=None, ge=MIN_EFFICIENCY, le=1)
    """Achievable fraction of the dense BF16 peak for transformer-shaped GEMMs, where measured
    (benchmarks/device_kernels.py); None = the calibration's global value."""


class InterconnectSpec(_Cited):
    """A scale-out network adapter / link type (one port)."""

    kind: Literal["infiniband", "roce", "ethernet", "efa"]
    """Fabric: InfiniBand, RoCE, plain Ethernet, or AWS Elastic Fabric Adapter (SRD over Ethernet)."""
    bandwidth_gbps: float = Field(ge=MIN_BANDWIDTH_GBPS, le=MAX_BANDWIDTH_GBPS)
    """Per-port bandwidth per direction, GB/s (400 Gb/s NDR = 50 GB/s)."""
    latency_us: float = Field(ge=MIN_LATENCY_US, le=MAX_LATENCY_US)
    """One-hop small-message latency through the fabric, microseconds."""


class ClusterSpec(_Cited):
    """A homogeneous GPU cluster: nodes of ``gpus_per_node`` GPUs joined by a network."""

    gpu: str
    """GPU catalog name (or alias) of every GPU in the cluster."""
    gpus_per_node: int = Field(gt=0)
    """GPUs per server (and per NIC rail set); at most ``MAX_DOMAIN_GPUS`` (``_at_most_a_domain``)."""
    scaleup_domain_size: int = Field(gt=0)
    """GPUs that share the scale-up fabric (8 for HGX/DGX, 72 for GB200 NVL72); at most ``MAX_DOMAIN_GPUS``."""
    scaleup_topology: ScaleUpTopology = "switch"
    """How GPUs inside a scale-up domain connect: NVSwitch (switch), xGMI full mesh, ring..."""
    scaleup_latency_us: float = Field(ge=MIN_LATENCY_US, le=MAX_LATENCY_US)
    """Per-step latency of a collective inside the scale-up domain, microseconds."""
    scaleup_efficiency: float = Field(ge=MIN_EFFICIENCY, le=1)
    """Achievable fraction of the scale-up link bandwidth for large collectives (nccl-tests busbw / link)."""
    nic: str
    """Interconnect catalog name of each NIC."""
    nics_per_node: int = Field(gt=0, le=1024)
    """Scale-out NICs per node (8 for rail-optimized DGX)."""
    network_topology: NetworkTopology = "switch"
    """Inter-node topology: fat-tree/full-bisection switch, ring, tree, 2D mesh, 2D torus."""
    network_dims: Optional[tuple[int, int]] = None
    """Node grid (X, Y) for mesh2d/torus2d; None means the most square grid for the node count."""
    network_oversubscription: float = Field(default=1.0, ge=1, le=MAX_OVERSUBSCRIPTION)
    """Fat-tree oversubscription ratio above the leaf (1 = full bisection)."""
    network_efficiency: float = Field(ge=MIN_EFFICIENCY, le=1)
    """Achievable fraction of NIC bandwidth for large collectives (nccl-tests busbw / line rate)."""
    power_limit_watts: Optional[float] = Field(default=None, ge=MIN_WATTS, le=MAX_WATTS)
    """GPU power cap set on this cluster (nvidia-smi -pl), W; None = the board's TDP. A cap
    below TDP lowers sustained tensor-core clocks (see costmodel.compute.power_limited)."""
    node_power_watts: Optional[float] = Field(default=None, gt=0, le=1e6)
    """One node's maximum system power (GPUs, CPUs, NICs, fans), W, from the vendor's
    datasheet; None = estimated from the GPUs' power (``costmodel.goodput.Hardware``)."""

    @field_validator("gpus_per_node", "scaleup_domain_size")
    @classmethod
    def _at_most_a_domain(cls, value: int) -> int:
        """The largest node or NVLink domain planner takes (``hardware_catalog.limits.MAX_DOMAIN_GPUS``),
        in planner's words: pydantic's "Input should be less than or equal to 1024" names no reason."""
        if value > MAX_DOMAIN_GPUS:
            raise ValueError(f"at most {MAX_DOMAIN_GPUS:,} GPUs (the largest NVLink domain announced, "
                             f"NVL576, has 576)")
        return value

    @model_validator(mode="after")
    def _domain_vs_node(self):
        if self.network_dims is not None and not all(0 < d <= MAX_GPUS for d in self.network_dims):
            raise ValueError(f"network_dims={self.network_dims}: each side from 1 to {MAX_GPUS:,} nodes")
        if self.network_dims is not None and self.network_topology not in ("mesh2d", "torus2d"):
            # A node grid means nothing to a switch, ring or tree (costmodel.collectives reads it
            # only for mesh2d/torus2d): refused rather than silently dropped.
            raise ValueError(f"network_dims={list(self.network_dims)} is a node grid for network_topology mesh2d or "
                             f"torus2d; this cluster's is {self.network_topology}")
        if self.scaleup_domain_size % self.gpus_per_node and self.gpus_per_node % self.scaleup_domain_size:
            raise ValueError(
                f"scaleup_domain_size={self.scaleup_domain_size} must divide or be a multiple of "
                f"gpus_per_node={self.gpus_per_node}"
            )
        return self


class MoESpec(_NoBoolNumbers):
    """Mixture-of-experts part of a model (absent for dense models)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    num_experts: int = Field(gt=0, le=1 << 16)
    """Routed experts per MoE layer."""
    top_k: int = Field(gt=0, le=1 << 16)
    """Routed experts each token visits."""
    expert_ffn_hidden_size: int = Field(gt=0, le=_MAX_WIDTH)
    """Intermediate size of one routed expert."""
    num_shared_experts: int = Field(default=0, ge=0, le=1 << 16)
    """Always-active shared experts per MoE layer."""
    shared_expert_ffn_hidden_size: Optional[int] = Field(default=None, gt=0, le=_MAX_WIDTH)
    """Intermediate size of one shared expert; None = expert_ffn_hidden_size."""
    num_dense_layers: int = Field(default=0, ge=0, le=MAX_LAYERS)
    """Leading layers that use the dense MLP (``ffn_hidden_size``) instead of experts (DeepSeek first_k_dense_replace)."""
    moe_layer_frequency: int = Field(default=1, gt=0, le=MAX_LAYERS)
    """Every n-th layer (after the dense ones) is MoE; others are dense."""
    router_groups: Optional[int] = Field(default=None, gt=0)
    """Group-limited routing: experts split into this many groups (DeepSeek n_group; Megatron
    --moe-router-num-groups); None = unrestricted routing."""
    router_group_topk: Optional[int] = Field(default=None, gt=0)
    """Groups one token may use under group-limited routing (DeepSeek topk_group; Megatron
    --moe-router-group-topk): with groups laid out one per node, the nodes a token reaches."""


    @model_validator(mode="after")
    def _routing(self):
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k={self.top_k} (num_experts_per_tok) exceeds num_experts={self.num_experts}: "
                             "a token visits at most every expert")
        if self.router_groups is not None and self.num_experts % self.router_groups:
            raise ValueError(f"router_groups={self.router_groups} must divide num_experts={self.num_experts}")
        if self.router_group_topk is not None and self.router_group_topk > (self.router_groups or 1):
            raise ValueError(f"router_group_topk={self.router_group_topk} exceeds router_groups={self.router_groups}")
        return self


class MLASpec(_NoBoolNumbers):
    """Multi-head latent attention (DeepSeek-V2/V3). Parameter and FLOP shapes only."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    q_lora_rank: Optional[int] = Field(default=None, gt=0, le=_MAX_HIDDEN)
    """Low-rank query projection; None = full-rank queries."""
    kv_lora_rank: int = Field(gt=0, le=_MAX_HIDDEN)
    """Compressed KV latent size."""
    qk_nope_head_dim: int = Field(gt=0, le=_MAX_HIDDEN)
    """Per-head query/key dims without rotary embedding."""
    qk_rope_head_dim: int = Field(gt=0, le=_MAX_HIDDEN)
    """Per-head query/key dims with rotary embedding (key part shared across heads)."""
    v_head_dim: int = Field(gt=0, le=_MAX_HIDDEN)
    """Per-head value dims."""


HYBRID_SYMBOLS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
"""Megatron-Core hybrid_override_pattern symbols, one per layer (megatron/core/ssm/
mamba_hybrid_layer_allocation.py Symbols: MAMBA 'M', ATTENTION '*', MLP '-', MOE 'E');
'|' marks pipeline-stage boundaries in newer releases and is not a layer."""


class MambaSpec(_NoBoolNumbers):
    """The Mamba-2 mixer of a hybrid model's 'M' layers (Dao & Gu 2024, 'Transformers are SSMs',
    Sec. 7; Megatron-Core megatron/core/ssm/mamba_mixer.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state_dim: int = Field(gt=0, le=_MAX_HIDDEN)
    """SSM state size N (HF ssm_state_size, Megatron --mamba-state-dim)."""
    head_dim: int = Field(default=64, gt=0, le=_MAX_HIDDEN)
    """Head dim P (HF mamba_head_dim, Megatron --mamba-head-dim)."""
    num_heads: int = Field(gt=0, le=_MAX_HIDDEN)
    """SSM heads H; d_inner = H·P (HF mamba_num_heads, Megatron --mamba-num-heads)."""
    num_groups: int = Field(default=8, gt=0, le=_MAX_HIDDEN)
    """B/C groups G (HF n_groups, Megatron --mamba-num-groups)."""
    conv_kernel: int = Field(default=4, gt=0, le=64)
    """Depthwise causal conv1d width (HF conv_kernel, Megatron d_conv)."""
    chunk_size: int = Field(default=128, gt=0, le=1 << 16)
    """SSD chunk length Q (HF chunk_size; mamba_ssm's chunked scan)."""

    @property
    def d_inner(self) -> int:
        return self.num_heads * self.head_dim


def windowed_layer_count(num_layers: int, full_attention_every: Optional[int]) -> int:
    """Layers attending the sliding window when layers N, 2N, ... (1-based, N = ``full_attention_every``;
    None: none) attend the whole prefix: Megatron-Core transformer/utils.py is_layer_window_attention."""
    return num_layers - (num_layers // full_attention_every if full_attention_every else 0)


class ModelSpec(_NoBoolNumbers):
    """A decoder-only transformer, enough to count parameters, FLOPs and activations."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str
    """Canonical name, e.g. ``llama3-405b``."""
    aliases: list[str] = Field(default_factory=list)
    """Other accepted names, e.g. ``405b``."""
    family: str = "custom"
    """Architecture family (llama, gpt, mixtral, deepseek, ...), informational."""
    num_layers: int = Field(gt=0, le=MAX_LAYERS)
    """Transformer blocks."""
    hidden_size: int = Field(gt=0, le=_MAX_HIDDEN)
    """Model width h."""
    num_attention_heads: int = Field(gt=0, le=_MAX_HIDDEN)
    """Query heads a."""
    num_kv_heads: Optional[int] = Field(default=None, gt=0, le=_MAX_HIDDEN)
    """Key/value heads g (GQA); None = num_attention_heads (MHA)."""
    head_dim: Optional[int] = Field(default=None, gt=0, le=_MAX_HIDDEN)
    """Per-head dim; None = hidden_size / num_attention_heads."""
    ffn_hidden_size: int = Field(gt=0, le=_MAX_WIDTH)
    """Dense MLP intermediate size."""
    gated_mlp: bool = True
    """SwiGLU/GeGLU (three weight matrices) vs plain GeLU MLP (two)."""
    vocab_size: int = Field(gt=0, le=_MAX_VOCAB)
    """Vocabulary size (padded as trained)."""
    tied_embeddings: bool = False
    """Input embedding and LM head share one matrix."""
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    """Normalization type (layernorm has a bias)."""
    position_embedding: Literal["rope", "learned", "alibi", "none"] = "rope"
    """Learned absolute positions add max_position_embeddings x hidden parameters."""
    max_position_embeddings: int = Field(default=4096, gt=0, le=1 << 30)
    """Longest trained context (also the learned position table size)."""
    linear_bias: bool = False
    """Linear layers carry biases (GPT-2/3, BLOOM, OPT)."""
    qkv_bias: bool = False
    """Only the QKV projection carries a bias (Qwen2)."""
    glu_clamp: Optional[float] = Field(default=None, gt=0)
    """Clamp on the gated MLP's two halves before the activation (gpt-oss: HF ``swiglu_limit`` 7.0;
    Megatron-Core ``activation_func_clamp_value``); None = no clamp."""
    dropout: bool = False
    """Dropout on attention and residual paths (adds 1-byte masks to stored activations)."""
    moe: Optional[MoESpec] = None
    """Mixture-of-experts settings; None = dense."""
    mla: Optional[MLASpec] = None
    """Multi-head latent attention; None = standard (GQA) attention."""
    sliding_window: Optional[int] = Field(default=None, gt=0, le=MAX_SEQ_LEN)
    """Keys a query attends in a sliding-window layer, itself included (Beltagy et al. 2020,
    Longformer Sec. 3.1; Mistral 7B Sec. 2): HF ``sliding_window`` (4096 Mistral 7B v0.1 and
    Gemma 2, 1024 Gemma 3, 128 gpt-oss), Megatron ``--window-size w-1,0``. None = every layer
    attends its whole causal prefix."""
    full_attention_every: Optional[int] = Field(default=None, ge=2, le=MAX_LAYERS)
    """With ``sliding_window``: layers N, 2N, ... (1-based) attend the whole prefix and the others
    the window (Megatron ``--window-attn-skip-freq N``, megatron/core/transformer/utils.py
    is_layer_window_attention; HF ``layer_types``): gpt-oss 2, Gemma 2 2, Gemma 3 6. None = every
    layer windowed (Mistral 7B v0.1)."""
    mtp_layers: int = Field(default=0, ge=0, le=8)
    """Multi-token-prediction modules trained beside the main model (DeepSeek-V3 report Sec.
    2.2; HF config num_nextn_predict_layers; Megatron-Core --mtp-num-layers): each one more
    transformer block, a 2h -> h projection and another pass through the shared LM head and
    loss, on the last pipeline stage (costmodel.mtp). Not in the parameter counts."""
    hybrid_pattern: Optional[str] = Field(default=None, max_length=MAX_LAYERS * 2)
    """Megatron hybrid_override_pattern, one symbol per layer (M Mamba-2, * attention, - MLP,
    E MoE; '|' stage marks ignored); None = every layer is attention + MLP."""
    mamba: Optional[MambaSpec] = None
    """The Mamba-2 mixer of the pattern's 'M' layers."""
    default_seq_len: int = Field(default=4096, gt=0, le=MAX_SEQ_LEN)
    """Sequence length used when --seq-len is not given."""
    default_tokens_per_batch: int = Field(default=4 * 1024 * 1024, gt=0, le=MAX_TOKENS_PER_BATCH)
    """Global batch in tokens used when neither --gbs nor --tokens-per-batch is given."""
    params_published: Optional[float] = Field(default=None, gt=0, le=1e16)
    """Total parameter count the authors published, for tests."""
    source: str = ""
    """Where the shape comes from (paper table, HF config URL)."""

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def hybrid_layers(self) -> Optional[str]:
        """The hybrid pattern without stage marks: one symbol per layer, or None."""
        return self.hybrid_pattern.replace("|", "") if self.hybrid_pattern else None

    @model_validator(mode="after")
    def _hybrid(self):
        layers = self.hybrid_layers
        if layers is None:
            if self.mamba is not None:
                raise ValueError("mamba is set but hybrid_pattern is not: give the layer pattern (e.g. 'M-M*-')")
            return self
        bad = sorted(set(layers) - set(HYBRID_SYMBOLS))
        if bad:
            raise ValueError(f"hybrid_pattern has {''.join(bad)!r}: allowed M (Mamba), * (attention), - (MLP), E (MoE), |")
        if len(layers) != self.num_layers:
            raise ValueError(f"hybrid_pattern has {len(layers)} layers but num_layers={self.num_layers}")
        if "M" in layers and self.mamba is None:
            raise ValueError("hybrid_pattern has Mamba layers (M): give mamba (state_dim, num_heads, ...)")
        if "E" in layers and self.moe is None:
            raise ValueError("hybrid_pattern has MoE layers (E): give moe")
        return self

    @property
    def windowed_layers(self) -> int:
        """Layers that attend a sliding window (0 without one)."""
        return 0 if self.sliding_window is None else windowed_layer_count(self.num_layers, self.full_attention_every)

    @model_validator(mode="after")
    def _window(self):
        if self.full_attention_every is not None and self.sliding_window is None:
            raise ValueError(f"full_attention_every={self.full_attention_every} needs sliding_window "
                             "(the window the other layers attend)")
        if self.sliding_window is not None and self.hybrid_pattern is not None:
            raise ValueError("sliding_window with hybrid_pattern is not modelled: give one or the other")
        return self

    @model_validator(mode="after")
    def _clamp(self):
        # Megatron-Core transformer_config.py __post_init__: "activation_func_clamp_value for SwiGLU
        # is only supported with MoE"; it clamps a gated (GLU) activation's two halves.
        if self.glu_clamp is not None and (self.moe is None or not self.gated_mlp):
            raise ValueError(f"glu_clamp={self.glu_clamp} needs a gated MLP with experts (gated_mlp and moe): "
                             "Megatron-Core clamps MoE GLU activations only")
        return self

    @model_validator(mode="after")
    def _shapes(self):
        if self.num_attention_heads % self.kv_heads:
            raise ValueError(
                f"num_kv_heads={self.kv_heads} must divide num_attention_heads={self.num_attention_heads}"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not divisible by num_attention_heads="
                f"{self.num_attention_heads}; give head_dim"
            )
        return self
