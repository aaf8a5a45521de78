"""Framework profiles: what a framework release fixes about how a layout runs, as data.

A runs file says which framework produced a number in free text (``layout.framework``, e.g.
"NeMo 24.07 (Megatron-Core)"). A ``Profile`` is matched from that text by a pattern and lists
``Entry``s: option (a ``costmodel.options.Layout`` field) -> a pinned value, or a list of values
to search, under an optional condition on the row, with the assumption line ``planner validate``
reports and the source it rests on.

A row gets the first named profile whose pattern matches, then ``GENERIC`` (what holds for any
framework); an unknown framework gets ``GENERIC`` alone. Entries apply in order and the first
entry to set an option wins, so a later entry is a fallback (e.g. TP overlap searched unless the
text states it). Settings a row states outright (``layout.<option>``) override all of this
(``planner.validate.runs``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from planner.frameworks.torchtitan import PER_OP_SAC_SHARE


@dataclass(frozen=True)
class RowFacts:
    """What the conditions read about one row."""

    framework: str = ""
    """``layout.framework``, lowercased."""
    year: int = 0
    """``source.year`` (0: unknown)."""
    source: str = ""
    """``source.key``."""
    precision: str = ""
    """``layout.precision``, lowercased."""
    recompute: Optional[str] = None
    """Recompute mode the row states (none, selective, full), or None."""
    gpu: str = ""
    """Catalog GPU name (e.g. "h100-sxm")."""
    model_parts: frozenset = frozenset()
    """Parts the model has: "moe", "mla"."""
    model_name: str = ""
    """Catalog model name (e.g. "qwen3-235b-a22b"; "" when unknown)."""
    stated: frozenset = frozenset()
    """Options the row states itself (its ``settings`` and ``layout.sequence_parallel``): an entry
    setting only those is passed over, with no assumption line and no fallback entry after it."""


def model_parts(model) -> frozenset:
    """The parts a model has that profile conditions test (``When.model``): "moe", "mla"."""
    return frozenset(name for name, part in (("moe", model.moe), ("mla", model.mla)) if part is not None)


@dataclass(frozen=True)
class When:
    """A condition: every test given holds (a test left at its default is not made)."""

    year_max: Optional[int] = None
    """The source year is known and <= this."""
    year_min: Optional[int] = None
    """The source year is >= this."""
    source: str = ""
    """The source key is this."""
    text: str = ""
    """The framework text mentions this."""
    text_lacks: str = ""
    """The framework text does not mention this."""
    precision: str = ""
    """The precision text mentions this."""
    recompute: str = ""
    """The row states this recompute mode."""
    gpu: str = ""
    """The GPU's catalog name starts with this."""
    model: tuple = ()
    """The model has all these parts ("moe", "mla")."""
    model_lacks: tuple = ()
    """The model has none of these parts."""
    model_name: str = ""
    """The model's catalog name starts with this (a performance recipe written for one model)."""

    def holds(self, f: RowFacts) -> bool:
        return all((
            self.year_max is None or (f.year and f.year <= self.year_max),
            self.year_min is None or f.year >= self.year_min,
            not self.source or f.source == self.source,
            not self.text or self.text in f.framework,
            not self.text_lacks or self.text_lacks not in f.framework,
            not self.precision or self.precision in f.precision,
            not self.recompute or f.recompute == self.recompute,
            not self.gpu or f.gpu.startswith(self.gpu),
            set(self.model) <= f.model_parts,
            not set(self.model_lacks) & f.model_parts,
            not self.model_name or f.model_name.startswith(self.model_name),
        ))


@dataclass(frozen=True)
class Entry:
    """Options a framework fixes (value) or leaves to search (list of values)."""

    values: dict
    """Option name -> pinned ``Layout`` value, or a list of values to search."""
    assumption: str = ""
    """The line ``planner validate`` lists when the entry applies ("" = none)."""
    source: str = ""
    """Where this comes from."""
    when: tuple = ()
    """Conditions (``When``); the entry applies if any holds (none given: always)."""
    benchmark_only: bool = False
    """A setting a release's performance scripts apply that changes what the model computes (token
    dropping), not only how fast: a published benchmark row ran it (``planner validate``), but a
    plan for a training run does not get it unless its flags say so (``apply_profiles``)."""

    def applies(self, facts: RowFacts) -> bool:
        return not self.when or any(w.holds(facts) for w in self.when)


@dataclass(frozen=True)
class Profile:
    name: str
    """Framework and release."""
    pattern: str
    """Regular expression searched in the lowercased framework text ("" matches any)."""
    entries: tuple = field(default_factory=tuple)


# ------------------------------------------------------------------------- entries shared by profiles

_BEFORE_FLASH = Entry(
    {"attention": "unfused"}, "unfused attention (the run predates FlashAttention)",
    source="Dao et al. 2022 (FlashAttention, May 2022) postdates these runs: Megatron materialised the "
           "scores and ran a fused scale-mask-softmax; Korthikanti et al. 2022 Sec. 4.1 counts the 5as^2b "
           "bytes storing them costs",
    when=(When(year_max=2021), When(source="korthikanti2022")))
_BEFORE_FLASH_ADOPTED = Entry(
    {"attention": "unfused"}, "unfused attention (a 2022 run: before training frameworks took FlashAttention)",
    source="FlashAttention (Dao et al., arXiv 2205.14135) appeared in May 2022; Megatron-LM took it on "
           "2023-01-11 (285068c810, 'Merge branch tridao-flashattn') and PyTorch's scaled_dot_product_attention "
           "in 2.0 (March 2023). A 2022 run whose framework text names flash keeps FlashAttention",
    when=(When(year_max=2022, text_lacks="flash"),))
_BEFORE_SEQUENCE_PARALLEL = Entry(
    {"sequence_parallel": False}, "no sequence parallelism (the run predates it)",
    source="Korthikanti et al. 2022 (arXiv 2205.05198, May 2022) introduced sequence parallelism, in "
           "Megatron-LM from 2022-04-28 (Korthikanti's commit) as the opt-in --sequence-parallel; before it the "
           "norms and dropout ran replicated on every TP rank. Frameworks took it later (Megatron-DeepSpeed on "
           "2023-07-04), so a 2022 run that does not state it is priced without it; a row that states it keeps it",
    when=(When(year_max=2022),))
_EAGER_STATED = Entry(
    {"kernels": "eager"}, "eager PyTorch kernels (no torch.compile: unfused norms, rotary, SwiGLU)",
    source="a run without torch.compile (e.g. torchtitan eager) calls plain PyTorch operators: unfused norms, "
           "rotary, activation and loss (costmodel.compute)",
    when=(When(text="eager"),))
_TE_ATTENTION = Entry(
    {"attention": "flash3"}, "TransformerEngine cuDNN attention (flash3 on Hopper)",
    source="TransformerEngine runs attention through cuDNN's fused kernels (FlashAttention-3 class on "
           "Hopper); torchtitan and llm-foundry call SDPA / flash-attn 2")
_CUDNN_2024 = Entry(
    {"cudnn": "2024"}, "cuDNN of a 2024 container (fused attention at 0.86 of today's)",
    source="cuDNN-frontend's H200 attention benchmark: cuDNN 9.1.0 (2024-05) at 0.86 of cuDNN 9.19 (2026) forward + "
           "backward at 8K-32K tokens (costmodel.compute.CUDNN_2024_ATTENTION_FRACTION). A release of 2024 (NeMo 24.x "
           "containers, whose long-sequence tables are dated later, and Megatron-Core r0.8) ran the cuDNN 9 of its "
           "year; which later release closed the gap is not published, so 2025 releases run today's",
    when=(When(year_max=2024), When(text="nemo 24.")))
_FUSED_LOSS = Entry(
    {"loss": "fused"}, "fused cross entropy (framework default)",
    source="NeMo 2 / Megatron-Bridge model configs default cross_entropy_loss_fusion=True (TransformerEngine); "
           "llm-foundry's MPT default loss is flash-attn's fused CrossEntropyLoss; Megatron-LM's flag "
           "defaults off")
_TPO_STATED = Entry(
    {"tp_comm_overlap": True}, "TP comm overlap (--tp-comm-overlap stated)",
    source="Megatron-LM --tp-comm-overlap (TransformerEngine userbuffers), listed in the framework text",
    when=(When(text="--tp-comm-overlap"),))
_TPO_SEARCHED = Entry(
    {"tp_comm_overlap": [False, True]},
    source="TransformerEngine userbuffers overlap is available to these frameworks and their performance "
           "recipes set it per model and GPU (Megatron-Bridge COMM_OVERLAP_CONFIG_MAP, e.g. "
           "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192): unstated, so searched")
_DEEPEP = Entry(
    {"moe_dispatcher": "deepep"}, "DeepEP dispatcher (NeMo performance script for DeepSeek-V3 on H100)",
    source="NeMo 2025 performance scripts run DeepSeek-V3 on H100 with the flex dispatcher and DeepEP "
           "(scripts/performance/llm/pretrain_deepseek_v3.py: \"For H100 we use deepEP\"); their Qwen3 "
           "scripts keep the recipes' alltoall",
    when=(When(model=("moe", "mla"), year_min=2025, gpu="h100"),))

_MEGATRON_FSDP = Entry(
    {"fsdp": "megatron"}, "",  # no line: moot below ZeRO-3, and these releases name no other flavour
    source="Megatron has no flat-parameter (FSDP1-style) ZeRO-3: its ZeRO-3 is Megatron-FSDP, first in "
           "Megatron-LM core_r0.13.0 (arguments.py --use-custom-fsdp, --data-parallel-sharding-strategy "
           "optim_grads_params; --use-megatron-fsdp later), or PyTorch FSDP2 (--use-torch-fsdp2, refused with "
           "pipeline or expert parallelism and with tied embeddings in the same file). Megatron-Bridge's "
           "performance configs shard with use_megatron_fsdp (llama3_llm_pretrain.py). Planner prices "
           "Megatron-FSDP as flat buffers (costmodel.options fsdp), so this changes no price; it keeps a "
           "--framework search to the ZeRO-3 these releases launch",
    when=(When(text="megatron-core r0.13"), When(text="megatron-bridge")))

_DS_PIPE_SCATTER = Entry(
    {"p2p_scatter_gather": True}, "pipeline sends partitioned over the TP ranks, all-gathered at the receiver",
    source="DeepSpeed runtime/pipe/engine.py: is_pipe_partitioned = is_model_parallel; _exec_send_activations "
           "sends a PartitionedTensor slice, the receiver rebuilds it with .full() (an all-gather over the "
           "model-parallel group); gradients likewise (is_grad_partitioned)")
_DS_BF16_CAST_ADD = Entry(
    {"grad_accum_pass": "cast_add"}, "each micro-batch's BF16 gradients cast and added into FP32 (DeepSpeed "
    "BF16_Optimizer)",
    source="DeepSpeed runtime/bf16_optimizer.py update_hp_grads: hp_grad.add_(lp.grad.to(hp_grad.dtype)), called "
           "after every micro-batch's backward (runtime/pipe/engine.py _exec_backward_pass: 'manually call because "
           "we don't call optimizer.backward()'; BF16_Optimizer.backward otherwise); costmodel.grad_accumulation",
    when=(When(precision="bf16_optimizer"),))
_DS_BF16_ALL_REDUCE = Entry(
    {"grad_reduce": "all_reduce"}, "the whole FP32 gradient all-reduced, then each rank steps its shard (DeepSpeed "
    "BF16_Optimizer)",
    source="DeepSpeed v0.6.5 runtime/pipe/engine.py _exec_reduce_grads: with bf16 below ZeRO stage 2 it calls "
           "_bf16_reduce_grads, buffered_allreduce_fallback over BF16_Optimizer.get_grads_for_reduction() (the "
           "FP32 gradients); BF16_Optimizer.step then updates its partition and all-gathers the BF16 weights "
           "(runtime/bf16_optimizer.py)",
    when=(When(precision="bf16_optimizer"),))
_DS_AUTOGRAD_ACCUM = Entry(
    {"grad_accum_pass": "autograd"}, "micro-batch gradients accumulated by autograd in the model dtype (DeepSpeed "
    "fp16 / ZeRO)",
    source="DeepSpeed's fp16 engine and ZeRO stage 1 leave accumulation to autograd's AccumulateGrad on the 16-bit "
           "param.grad (runtime/zero/stage_1_and_2.py creates no per-parameter reduce hooks for stage 1 without "
           "overlap_comm); ZeRO 2-3 add each micro-batch's reduced partition into the accumulated one "
           "(costmodel.grad_accumulation)")
_DS_NO_INTERLEAVING = Entry(
    {"vpp": 1}, "",
    source="DeepSpeed runtime/pipe/schedule.py: TrainSchedule is 1F1B over one stage per rank (no "
           "interleaved chunks); planner's DeepSpeed exporter refuses vpp > 1 for the same reason "
           "(deepspeed_no_interleaving)")
_DS_PIPE_GRADS_AFTER = Entry(
    {"dp_comm_overlap": False}, "data-parallel gradient reduction after the last micro-batch (DeepSpeed pipeline engine)",
    source="DeepSpeed runtime/pipe/schedule.py TrainSchedule: ReduceTiedGrads and ReduceGrads are issued after the "
           "last micro-batch's BackwardPass; engine._exec_reduce_grads then all-reduces (no overlap with backward)")
_BIGSCIENCE_LAUNCH_BLOCKING = Entry(
    {"launch_blocking": True}, "blocking kernel launches (CUDA_LAUNCH_BLOCKING=1, BigScience on Jean Zay)",
    source="bigscience train/tr11-176B-ml/tr11-176B-ml.slurm: 'export CUDA_LAUNCH_BLOCKING=1' ('do not remove or the "
           "training will hang'); chronicles-prequel.md adopts it before the topology search ('dealing with JZ "
           "hanging on the large model': 320 GPUs without it 'always hangs')",
    when=(When(text="bigscience"), When(source="bloom_tr11")))
_RELEASES_WITH_HYBRIDEP = (When(model=("moe",), text="25.11"), When(model=("moe",), text="26."))
"""Megatron-Bridge / NeMo releases from 25.11 on: Megatron-Core v0.15 and later."""
_HYBRIDEP_SEARCHED = Entry(
    {"moe_dispatcher": ["alltoall", "hybridep"]},
    source="Megatron-Core MoE README: HybridEP joined the flex dispatcher in v0.15 (2025/11; GB200, B200, H100); "
           "Megatron-Bridge scripts/performance/configs/qwen/qwen3_workload_base_configs.py sets "
           "moe_flex_dispatcher_backend='hybridep' for some models and GPUs (Qwen3-30B-A3B on H100, B200, GB200) "
           "and the alltoall dispatcher for others (Qwen3-235B-A22B on H100, B200): unstated, so searched",
    when=_RELEASES_WITH_HYBRIDEP)
_BRIDGE_TE_GROUPED_LINEAR_LOOP = Entry(
    {"moe_grouped_gemm": "loop"},
    "expert GEMMs as TransformerEngine GroupedLinear's per-expert cuBLAS loop (NeMo 25.11-26.04, TE 2.9-2.14)",
    source="Megatron-Bridge docs/releases/software-versions.md (26.04-alpha): NeMo 25.11 ships TE 2.9 / Megatron "
           "Core dev 0.15, 26.02 TE 2.12 / 0.16, 26.04 TE 2.14+71bbefb / 0.17 (uv.lock: release_v2.9 70f53666, "
           "5671fd36, 71bbefbf). Megatron-Core TEGroupedMLP wraps te.pytorch.GroupedLinear, whose forward and "
           "backward call general_grouped_gemm -> tex.te_general_grouped_gemm -> nvte_multi_tensor_gemm "
           "(TE 2.9-2.14 common/gemm/cublaslt_gemm.cu): one cuBLASLt GEMM per expert over the compute streams, the "
           "CUTLASS grouped kernel only on SM90 with NVTE_USE_CUTLASS_GROUPED_GEMM=1 (default off) and BF16/FP16 "
           "operands, so never for FP8 nor on Blackwell; no Bridge performance script sets that variable. The "
           "single-launch path of Megatron-Core 0.17 (use_transformer_engine_op_fuser: te.pytorch.ops "
           "GroupedLinear, TE >= 2.14) is switched off by scripts/performance/utils/overrides.py "
           "_set_common_perf_overrides (v0.3.0, v0.4.0, 26.04-alpha)",
    when=_RELEASES_WITH_HYBRIDEP)
"""Megatron-Bridge's performance configs of 25.11-26.04 set cuda_graph_impl='transformer_engine'
with cuda_graph_scope ['moe_router', 'moe_preprocess'] or ['attn', 'moe_router', 'moe_preprocess']
(Nemotron 3 adds 'mamba') for MoE models, never 'moe' nor 'full_iteration' (deepseek, qwen, gpt_oss,
kimi and nemotron_3 *_workload_base_configs.py), so the expert GEMMs and the token dispatch run
eagerly. The ``cuda_graphs`` option models a whole captured layer (CUDA_GRAPH_SAVING_US on every
kernel, no host issue in the MoE host timeline), which would overstate those partial scopes, so no
Bridge profile pins it."""
_CUTLASS_GROUPED_GEMM = Entry(
    {"moe_grouped_gemm": "fused"}, "expert GEMMs as one grouped kernel (legacy GroupedMLP, grouped_gemm package)",
    source="Megatron-Core r0.8 --moe-grouped-gemm runs GroupedMLP (megatron/core/transformer/moe/experts.py: "
           "grouped_gemm.ops.gmm, one CUTLASS grouped launch); TEGroupedMLP (TransformerEngine's per-expert "
           "loop) became the default in r0.9, the old path kept behind --moe-use-legacy-grouped-gemm: so r0.8 "
           "only (a later Megatron-Core prices TE's loop, the option's default)",
    when=(When(model=("moe",), text="0.8"),))
_TORCH_GROUPED_MM = Entry(
    {"moe_grouped_gemm": "fused"}, "expert GEMMs as torch._grouped_mm (one launch)",
    source="torchtitan models/moe GroupedExperts: torch._grouped_mm over the experts with device-side offsets",
    when=(When(model=("moe",)),))
_TT_EP_ALLTOALL = Entry(
    {"moe_dispatcher": "alltoall", "ep_comm_overlap": False},
    "EP tokens exchanged by blocking all_to_all_single (torchtitan ExpertParallel)",
    source="torchtitan 0.2.x torchtitan/distributed/expert_parallel.py ExpertParallel._token_dispatch / _token_combine: "
           "all_to_all_single of the per-expert counts (then .tolist(), a host sync) and all_to_all_single_autograd of "
           "the permuted tokens, one copy per routed (token, expert) pair, waited on inside the MoE layer; DeepEP "
           "(expert_parallel_comm_backend 'deepep', 0.2.1+) and the DualPipeV EP overlap are opt-in",
    when=(When(model=("moe",)),))
_FP8_RECIPES_STATED = tuple(
    Entry({"fp8_recipe": recipe}, f"FP8 {recipe} scaling (stated)",
          source="TransformerEngine recipes (transformer_engine/common/recipe): the row's precision text names it "
                 "(costmodel.quantize)",
          when=(When(precision=word),))
    for recipe, word in (("current", "current scaling"), ("current", "tensorwise"), ("blockwise", "blockwise"),
                         ("mxfp8", "mxfp8"), ("nvfp4", "nvfp4"), ("delayed", "delayed scaling")))

PP_STAGES_MICROBATCHES = "one micro-batch per pipeline stage"
"""An ``mbs`` entry value: the framework splits each data-parallel rank's batch into as many
micro-batches as there are pipeline stages, so mbs = gbs / (dp x pp) where the row states them
(``planner.validate.runs``)."""
LOOPED_TWO_CHUNKS = "two chunks per stage when interleaved"
"""A ``vpp`` entry value: a row whose schedule is interleaved (looped) and whose chunk count is
unstated runs two model chunks per pipeline rank (``planner.validate.runs``)."""
LAYOUT_SLOTS = "embedding, loss and MTP layers as pipeline-layout slots"
"""A ``pp_first_layers`` / ``pp_last_layers`` entry value: the framework's pipeline layout gives
the embedding, the loss and each multi-token-prediction layer a layer's slot (Megatron-Core
pipeline_model_parallel_layout, e.g. "Et|(tt|)*30mL": E embedding, t a decoder layer, m an MTP
layer, L the loss). Over pp stages of L + 2 + mtp slots (where pp divides them) the first stage
holds one decoder layer fewer than a middle one and the last 1 + mtp fewer
(``planner.validate.runs``)."""
LAYOUT_HEAD_SLOTS = "MTP layers and loss as three layer slots of the last stage"
"""A ``pp_first_layers`` / ``pp_last_layers`` entry value: the pipeline layout of Megatron-Bridge's
DeepSeek-V3 recipe table (recipes/deepseek/deepseek_v3.py map_pp_vp_to_layout, e.g. 16 chunks
[E t t t t | (t t t t |) x 14 | t m L], "Et*4|(t*4|)*14tmL"): the embedding rides along with a
full chunk and the MTP layer and the loss take the place of three decoder layers in the last.
Over pp stages of L + 3 slots (where pp divides them) the first stage holds as many decoder
layers as a middle one and the last three fewer (``planner.validate.runs``)."""
_POLICIES = (PP_STAGES_MICROBATCHES, LOOPED_TWO_CHUNKS, LAYOUT_SLOTS, LAYOUT_HEAD_SLOTS)

_TT_TWO_CHUNKS = Entry(
    {"vpp": LOOPED_TWO_CHUNKS}, "",
    source="torchtitan (2024) parallelisms/pipelining_utils.py generate_split_points: without split points a "
           "multi-stage (looped) schedule gets num_stages_per_rank = 2, a single-stage one 1")
_TT_STAGE_MICROBATCHES = Entry(
    {"mbs": PP_STAGES_MICROBATCHES}, "as many pipeline micro-batches as stages (torchtitan's default then)",
    source="torchtitan (2024) parallelisms/pipelining_utils.py build_pipeline_schedule: n_microbatches = "
           "experimental.pipeline_parallel_microbatches, None -> pipeline_parallel_degree (its help: 'The default value "
           "will be the number of pipeline stages'); torchtitan 0.1.0 replaced it by pipeline_parallel_microbatch_size "
           "(default 1, config_manager.py)")

_CORE_ATTN_ONLY = Entry(
    {"recompute_modules": ("core_attn",)}, "",  # no line: it holds for every row before 2025
    source="Megatron-LM added --recompute-modules (mlp, moe_act, layernorm, ...) on 2025-04-05 (ADLR/megatron-lm!2207, "
           "commit 3b141a2); core_r0.11.0 (Feb 2025) has no such argument, core_v0.12.0 (May 2025) has it. "
           "Before, selective recompute was core attention (Korthikanti et al. 2022 Sec. 4.2)",
    when=(When(year_max=2024),))

_RUN_SCRIPT_2509 = ("Megatron-Bridge 25.09 (commit 6307e8a37, 2025-10-10) scripts/performance/run_script.py, "
                    "DeepSeek-V3 branch")
_BRIDGE_2509_DEEPSEEK_V3 = (
    Entry({"pp_first_layers": LAYOUT_SLOTS, "pp_last_layers": LAYOUT_SLOTS},
          "pipeline layout Et|(tt|)*30mL: embedding, loss and the MTP layer take layer slots",
          source=_RUN_SCRIPT_2509 + ": deepseek_v3_pretrain_config(..., layout=\"Et|(tt|)*30mL\") for every GPU; "
                 "the recipe keeps mtp_num_layers=1 (recipes/deepseek/deepseek_v3.py)",
          when=(When(text="25.09", model_name="deepseek-v3"),)),
    Entry({"recompute": "selective", "recompute_modules": ("mla_up_proj", "mlp")},
          "selective recompute of mla_up_proj and mlp (Megatron-Bridge 25.09 DeepSeek-V3 on H100)",
          source=_RUN_SCRIPT_2509 + ": recipe.model.recompute_modules = ['mla_up_proj', 'mlp'] for h100",
          when=(When(text="25.09", model_name="deepseek-v3", gpu="h100"),)),
    Entry({"recompute": "selective", "recompute_modules": ("mla_up_proj", "mlp", "moe_act")},
          "selective recompute of mla_up_proj, mlp and moe_act (Megatron-Bridge 25.09 DeepSeek-V3 on GB200)",
          source=_RUN_SCRIPT_2509 + ": recipe.model.recompute_modules = ['mla_up_proj', 'mlp', 'moe_act'] for gb200",
          when=(When(text="25.09", model_name="deepseek-v3", gpu="gb200"),)),
    Entry({"recompute": "selective", "recompute_modules": ("core_attn",)},
          "selective recompute of core attention (Megatron-Bridge 25.09 DeepSeek-V3 on B200)",
          source=_RUN_SCRIPT_2509 + ": no module override for b200, so the recipe's recompute_granularity "
                 "'selective' (configs/deepseek/deepseek_v3_llm_pretrain.yaml) with Megatron-Core's default "
                 "recompute_modules ['core_attn']",
          when=(When(text="25.09", model_name="deepseek-v3", gpu="b200"),)),
)
"""What Megatron-Bridge 25.09's performance script fixes for DeepSeek-V3 beyond the table."""

_TOKEN_DROP_2509 = ("Megatron-Bridge 25.09 (commits 6307e8a37 and 47ff48829) scripts/performance/run_script.py: "
                    "apply_moe_token_drop (src/megatron/bridge/training/utils/moe_token_drop.py: "
                    "moe_expert_capacity_factor 1.0, moe_pad_expert_input_to_capacity True)")
_BRIDGE_2509_TOKEN_DROP = Entry(
    {"moe_capacity_factor": 1.0, "moe_pad_to_capacity": True, "moe_dispatcher": "alltoall"},
    "token drop at capacity factor 1.0, padded to capacity (Megatron-Bridge 25.09 MoE performance scripts)",
    source=_TOKEN_DROP_2509 + " for every Qwen3 MoE run and for DeepSeek-V3 on B200 / GB200 (use_tokendrop = gpu in "
           "['b200', 'gb200'], which also leaves DeepEP off: the helper asserts the alltoall dispatcher). Benchmark "
           "only: the helper's docstring says token drop 'may affect convergence', and the recipes "
           "(recipes/qwen/qwen3_moe.py, recipes/deepseek/deepseek_v3.py) stay dropless; only run_script.py applies it",
    benchmark_only=True,
    when=(When(text="25.09", model_name="qwen3-30b"), When(text="25.09", model_name="qwen3-235b"),
          When(text="25.09", model_name="deepseek-v3", gpu="b200"), When(text="25.09", model_name="deepseek-v3", gpu="gb200")))
_BRIDGE_2509_MOE_FP8_CURRENT = Entry(
    {"fp8_recipe": "current"}, "FP8 current scaling (Megatron-Bridge 25.09 DeepSeek-V3 / Qwen3 MoE presets)",
    source="Megatron-Bridge 25.09 (6307e8a37) scripts/performance/configs/deepseek/deepseek_v3_llm_pretrain.yaml and "
           "qwen3/qwen3_{30b_a3b,235b_a22b}_llm_pretrain.yaml: the FP8 perf_matrix entries are fp8_cs with fp8_ss "
           "(H100) or fp8_mx (B200, GB200), never fp8_ds (the Llama files have fp8_ds); docs/performance-summary.md: "
           "the numbers in parentheses use the other granularities (128x128 blocks on H100, 32-value blocks on "
           "Blackwell), so the plain ones are per-tensor current scaling (utils/helpers.py get_precision_config 'cs': "
           "bf16_with_fp8_current_scaling_mixed, first_last_layers_bf16 False). Delayed scaling would also refuse "
           "the GB200 preset's moe_act recompute (Megatron-Core TransformerConfig.__post_init__)",
    when=tuple(When(text="25.09", precision="fp8", model_name=m) for m in ("deepseek-v3", "qwen3-30b", "qwen3-235b")))
_BRIDGE_2509_QWEN3_30B_GRAPHS = Entry(
    {"cuda_graphs": True}, "whole-layer CUDA graphs (Megatron-Bridge 25.09 Qwen3-30B-A3B on B200 / GB200)",
    source="Megatron-Bridge 25.09 scripts/performance/configs/qwen3/qwen3_30b_a3b_llm_pretrain.yaml: cuda_graphs true "
           "for b200 and gb200 (commits 6307e8a37 and 47ff48829); utils/helpers.py set_cuda_graph_overrides: "
           "enable_cuda_graph, cuda_graph_scope left at Megatron-Core's 'full' (the whole layer)",
    when=(When(text="25.09", model_name="qwen3-30b", gpu="b200"), When(text="25.09", model_name="qwen3-30b", gpu="gb200")))
_BRIDGE_LATER_DEEPSEEK_V3 = (
    Entry({"pp_first_layers": LAYOUT_SLOTS, "pp_last_layers": LAYOUT_SLOTS},
          "pipeline layout Et|(tt|)*30mL: embedding, loss and the MTP layer take layer slots",
          source="Megatron-Bridge v0.2.0 (25.11) scripts/performance/configs/deepseek/deepseek_llm_pretrain.py "
                 "deepseek_v3_h100_config: layout=\"Et|(tt|)*30mL\"; 26.04-alpha deepseek_workload_base_configs.py "
                 "DEEPSEEK_V3_PRETRAIN_CONFIG_H100_V1/V2: pp_layout=\"Et|(tt|)*30mL\"",
          when=(When(text="25.11", gpu="h100", model_name="deepseek-v3"),
                When(text="26.", gpu="h100", model_name="deepseek-v3"))),
    Entry({"pp_first_layers": LAYOUT_HEAD_SLOTS, "pp_last_layers": LAYOUT_HEAD_SLOTS},
          "pipeline layout of the DeepSeek-V3 recipe table: MTP layer and loss in the last chunk's place of three layers",
          source="Megatron-Bridge v0.2.0 (25.11) deepseek_llm_pretrain.py: layout=None on GB300, GB200 and B200, so "
                 "recipes/deepseek/deepseek_v3.py map_pp_vp_to_layout (e.g. (4, 4) and (16, 1): [E + 4 t], 14 x [4 t], "
                 "[t, mtp, loss]); 26.04-alpha deepseek_workload_base_configs.py: pp_layout \"Et*4|(t*4|)*14tmL\" "
                 "or the same table (set_deepseek_v3_pipeline_model_parallel_layout)",
          when=(When(text="25.11", gpu="b", model_name="deepseek-v3"), When(text="25.11", gpu="gb", model_name="deepseek-v3"),
                When(text="26.", gpu="b", model_name="deepseek-v3"), When(text="26.", gpu="gb", model_name="deepseek-v3"))),
)
"""The pipeline layouts Megatron-Bridge 25.11 and 26.x give DeepSeek-V3 (its MTP layer on the last stage)."""

_BRIDGE_2511_DSV3 = ("Megatron-Bridge v0.2.0 (25.11) scripts/performance/configs/deepseek/workload_base_configs.py "
                     "DEEPSEEK_V3_{GPU}_BASE_CONFIG (every precision)")
_BRIDGE_2511_DEEPSEEK_V3_BLACKWELL = (
    Entry({"moe_dispatcher": "hybridep", "recompute": "selective", "recompute_modules": ("moe_act",)},
          "HybridEP dispatcher, selective recompute of moe_act (Megatron-Bridge 25.11 DeepSeek-V3 on GB300)",
          source=_BRIDGE_2511_DSV3.replace("{GPU}", "GB300") + ": moe_flex_dispatcher_backend='hybridep', "
                 "recompute_modules=['moe_act'], moe_a2a_overlap=False",
          when=(When(text="25.11", gpu="gb300", model_name="deepseek-v3"),)),
    Entry({"moe_dispatcher": "hybridep", "recompute": "selective", "recompute_modules": ("mla_up_proj",)},
          "HybridEP dispatcher, selective recompute of mla_up_proj (Megatron-Bridge 25.11 DeepSeek-V3 on GB200)",
          source=_BRIDGE_2511_DSV3.replace("{GPU}", "GB200") + ": moe_flex_dispatcher_backend='hybridep', "
                 "recompute_modules=['mla_up_proj'], moe_a2a_overlap=False",
          when=(When(text="25.11", gpu="gb200", model_name="deepseek-v3"),)),
    Entry({"moe_dispatcher": "alltoall", "recompute": "selective", "recompute_modules": ("mla_up_proj",)},
          "alltoall dispatcher, selective recompute of mla_up_proj (Megatron-Bridge 25.11 DeepSeek-V3 on B200)",
          source=_BRIDGE_2511_DSV3.replace("{GPU}", "B200") + ": no moe_flex_dispatcher_backend (the recipe's "
                 "alltoall), recompute_modules=['mla_up_proj'], moe_a2a_overlap=False",
          when=(When(text="25.11", gpu="b200", model_name="deepseek-v3"),)),
)
"""What Megatron-Bridge 25.11's presets fix for DeepSeek-V3 on Blackwell beyond its tables."""

_BRIDGE_2511 = "Megatron-Bridge v0.2.0 (25.11, 2025-11-26) scripts/performance/configs/"
_BRIDGE_2604 = "Megatron-Bridge 26.04-alpha branch (406d3be77) scripts/performance/configs/"
_BRIDGE_H100_MOE = (
    Entry({"moe_dispatcher": "alltoall", "ep_comm_overlap": True},
          "alltoall dispatcher, EP all-to-alls overlapped (Megatron-Bridge H100 Qwen3-235B-A22B recipe)",
          source=_BRIDGE_2511 + "qwen3/workload_base_configs.py QWEN3_235B_A22B_H100_*_BASE_CONFIG and " + _BRIDGE_2604
                 + "qwen/qwen3_workload_base_configs.py QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_*: moe_a2a_overlap=True "
                 "(overlap_moe_expert_parallel_comm), no moe_flex_dispatcher_backend (the recipe's alltoall)",
          when=(When(text="25.11", gpu="h100", model_name="qwen3-235b"), When(text="26.", gpu="h100", model_name="qwen3-235b"))),
    Entry({"moe_dispatcher": "alltoall", "ep_comm_overlap": True},
          "alltoall dispatcher, EP all-to-alls overlapped (Megatron-Bridge 25.11 H100 Qwen3-30B-A3B recipe)",
          source=_BRIDGE_2511 + "qwen3/workload_base_configs.py QWEN3_30B_A3B_H100_*_BASE_CONFIG: moe_a2a_overlap=True, "
                 "no moe_flex_dispatcher_backend",
          when=(When(text="25.11", gpu="h100", model_name="qwen3-30b"),)),
    Entry({"moe_dispatcher": "hybridep", "ep_comm_overlap": False},
          "HybridEP dispatcher (Megatron-Bridge 26.x H100 Qwen3-30B-A3B recipe)",
          source=_BRIDGE_2604 + "qwen/qwen3_workload_base_configs.py QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_*_V1: "
                 "moe_flex_dispatcher_backend='hybridep', moe_a2a_overlap=False",
          when=(When(text="26.", gpu="h100", model_name="qwen3-30b"),)),
    Entry({"recompute": "selective", "recompute_modules": ("layernorm", "moe_act"), "vpp": 1},
          "selective recompute of layernorm and moe_act, no interleaving (Megatron-Bridge 26.x H100 GPT-OSS-120B recipe)",
          source=_BRIDGE_2604 + "gpt_oss/gpt_oss_workload_base_configs.py GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V1/V2: "
                 "pipeline_model_parallel_size=4, no virtual pipeline, recompute_modules=['layernorm', 'moe_act'], "
                 "micro_batch_size=1, GBS 1280 (V2). 25.11's preset (v0.2.0) differs from its table's MBS 4, so "
                 "only 26.x is pinned",
          when=(When(text="26.", gpu="h100", model_name="gpt-oss-120b"),)),
)
"""What Megatron-Bridge 25.11 and 26.x performance configs fix for MoE models on H100 beyond the table."""
_BRIDGE_2511_QWEN3_BLACKWELL = (
    Entry({"moe_dispatcher": "alltoall", "ep_comm_overlap": True},
          "alltoall dispatcher, EP all-to-alls overlapped (Megatron-Bridge 25.11 B200 Qwen3-235B-A22B preset)",
          source=_BRIDGE_2511 + "qwen3/workload_base_configs.py QWEN3_235B_A22B_B200_*_BASE_CONFIG: moe_a2a_overlap=True, "
                 "no moe_flex_dispatcher_backend",
          when=(When(text="25.11", gpu="b200", model_name="qwen3-235b"),)),
    Entry({"moe_dispatcher": "alltoall"}, "alltoall dispatcher (Megatron-Bridge 25.11 B200 Qwen3-30B-A3B preset)",
          source=_BRIDGE_2511 + "qwen3/workload_base_configs.py QWEN3_30B_A3B_B200_*_BASE_CONFIG: no "
                 "moe_flex_dispatcher_backend (the recipe's alltoall)",
          when=(When(text="25.11", gpu="b200", model_name="qwen3-30b"),)),
    Entry({"moe_dispatcher": "hybridep"}, "HybridEP dispatcher (Megatron-Bridge 25.11 GB200 / GB300 Qwen3 presets)",
          source=_BRIDGE_2511 + "qwen3/workload_base_configs.py QWEN3_{235B_A22B,30B_A3B}_{GB200,GB300}_*_BASE_CONFIG: "
                 "moe_flex_dispatcher_backend='hybridep'",
          when=(When(text="25.11", gpu="gb", model_name="qwen3-235b"), When(text="25.11", gpu="gb", model_name="qwen3-30b"))),
)
"""What Megatron-Bridge 25.11's Blackwell presets fix for Qwen3 MoE models beyond its tables."""
_BRIDGE_GPT_OSS_B200_GB200 = Entry(
    {"recompute": "selective", "recompute_modules": ("layernorm", "moe_act")},
    "selective recompute of layernorm and moe_act (Megatron-Bridge GPT-OSS-120B recipe on B200 / GB200)",
    source=_BRIDGE_2511 + "gpt_oss/workload_base_configs.py GPT_OSS_120B_{GB200,B200}_BF16_BASE_CONFIG and "
           + _BRIDGE_2604 + "gpt_oss/gpt_oss_workload_base_configs.py GPT_OSS_120B_PRETRAIN_CONFIG_{GB200,B200}_BF16_V1: "
           "recompute_modules=['layernorm', 'moe_act'] (their GB300 / B300 presets recompute nothing)",
    when=tuple(When(text=t, gpu=g, model_name="gpt-oss-120b") for t in ("25.11", "26.") for g in ("b200", "gb200")))
_BRIDGE_GPT_OSS_BF16_GRADS = Entry(
    {"grad_dtype": "bf16"}, "BF16 gradient reduction (Megatron-Bridge GPT-OSS performance configs)",
    source=_BRIDGE_2511 + "gpt_oss/gpt_oss_llm_pretrain.py and " + _BRIDGE_2604 + "gpt_oss/gpt_oss_llm_pretrain.py "
           "set_gpt_oss_common_configs: mixed_precision.grad_reduce_in_fp32 = False, ddp.grad_reduce_in_fp32 = False "
           "(every GPU)",
    when=tuple(When(text=t, model_name="gpt-oss-120b") for t in ("25.11", "26.")))
_BRIDGE_H100_FP8_CURRENT = Entry(
    {"fp8_recipe": "current"}, "FP8 current scaling (Megatron-Bridge's only H100 FP8 preset)",
    source=_BRIDGE_2511 + "*/workload_base_configs.py and " + _BRIDGE_2604 + "*_workload_base_configs.py: every H100 "
           "FP8 preset is *_H100_FP8_CS_* (per-tensor current scaling); there is no delayed-scaling preset",
    when=(When(text="25.11", gpu="h100", precision="fp8"), When(text="26.", gpu="h100", precision="fp8")))
_NEMO2_FP8_PARAMS = Entry(
    {"fp8_param_gather": True}, "FP8 parameters (the NeMo 2 / Megatron-Bridge FP8 presets: fp8_param_gather)",
    source="NeMo 2 nemo/collections/llm/recipes/precision/mixed_precision.py bf16_with_fp8_mixed, "
           "bf16_with_fp8_current_scaling_mixed, bf16_with_mxfp8_mixed: fp8_param_gather = True, chosen by "
           "scripts/performance/helpers.py set_precision_configs (ds / cs / mxfp8); Megatron-Bridge v0.2.0 "
           "training/mixed_precision.py: the delayed, current-scaling and MXFP8 presets set it too "
           "(planner.frameworks.bridge.FP8_PRESET_PARAMS). NeMo 1 (24.x) defaults model.fp8_params to False",
    when=(When(text="25.", precision="fp8"), When(text="26.", precision="fp8")))
_NEMO1_LAUNCHER = "NVIDIA/NeMo-Framework-Launcher 24.07 (8325688) launcher_scripts/conf/training/"
_NEMO1_OPTIMIZER = ("NeMo r2.0.0rc1 (579983f, the 24.07 container's) and v1.23.0 (24.03) "
                    "nemo/collections/nlp/models/language_modeling/megatron_base_model.py setup_optimization")
_NEMO1_NEMOTRON_340B_BF16_ADAM = Entry(
    {"optimizer_states": ["fp32", "bf16"]},
    "BF16 Adam moments without an FP32 master searched (NeMo 24.07 Nemotron-4 340B recipe: optim.dtype bf16)",
    source=_NEMO1_LAUNCHER + "nemotron/nemotron_340b.yaml optim: distributed_fused_adam, dtype: bf16 (every other "
           "24.07 GPT / Llama / Nemotron recipe leaves the FP32 default); " + _NEMO1_OPTIMIZER + ": the optimizer "
           "dtype equal to the BF16 O2 weights' sets store_params=False (no master copy). Searched, not pinned: "
           "the launch formats nemo-24.07 writes (Megatron-LM, Megatron-Bridge) keep a master in any case "
           "(rule megatron_optimizer_states), so evaluate and search offer it by flag",
    when=(When(text="nemo 24.07", model_name="nemotron-4-340b"), When(text="nemo 24.07", model_name="nemotron-340b")))
_NEMO1_ADAM_REMAINDERS = Entry(
    {"optimizer_states": ["fp32", "remainders"]},
    "FP32 Adam moments with 16-bit master remainders searched (NeMo 1 distributed_fused_adam)",
    source=_NEMO1_LAUNCHER + "{gpt3,llama,nemotron}/*.yaml (24.03.01 5c7e280 alike): optim.name "
           "distributed_fused_adam, megatron_amp_O2 true, the optimizer dtype left FP32; " + _NEMO1_OPTIMIZER + ": "
           "an FP32 optimizer over BF16 O2 weights sets store_params=False, store_param_remainders=True (Apex "
           "810ffae distributed_fused_adam.py). Searched, not pinned, for the reason the Nemotron-4 340B entry gives",
    when=(When(text="nemo 24."),))
_BRIDGE_2511_H100_LLAMA3_8B_RECOMPUTE = Entry(
    {"recompute": "full", "recompute_layers": 5}, "full recompute of 5 of the 32 layers (Megatron-Bridge 25.11 H100 Llama 3 8B FP8 preset)",
    source=_BRIDGE_2511 + "llama3/workload_base_configs.py LLAMA3_8B_H100_FP8_CS_BASE_CONFIG: recompute_num_layers=5; "
           "utils/helpers.py set_recompute_overrides: recompute_granularity 'full', recompute_method 'block'",
    when=(When(text="25.11", gpu="h100", model_name="llama3-8b", precision="fp8"),))
_BRIDGE_H100_LLAMA3_8B_NCCL_UB = Entry(
    {"nccl_ub": True}, "NCCL user buffers for the Megatron-FSDP collectives (Megatron-Bridge H100 Llama 3 8B FP8 preset)",
    source="Megatron-Bridge 25.09 (6307e8a37) scripts/performance/configs/llama3/llama3_8b_llm_pretrain.yaml "
           "perf_matrix.h100.num_gpus_8.fp8_ds / fp8_cs: use_megatron_fsdp true, nccl_ub true; " + _BRIDGE_2511 +
           "llama3/llama3_llm_pretrain.py llama3_8b_h100_config: 'if cfg.ddp.use_megatron_fsdp: cfg.ddp.nccl_ub = True'",
    when=(When(text="25.09", gpu="h100", model_name="llama3-8b", precision="fp8"),
          When(text="25.11", gpu="h100", model_name="llama3-8b", precision="fp8")))

_BRIDGE_H100_FP8_RS_RING = Entry(
    {"tp_overlap_rs_ring": True},
    "TP-overlap reduce-scatters as ring exchange on 1 SM (Megatron-Bridge H100 FP8 Llama 3 userbuffers config)",
    source="Megatron-Bridge src/megatron/bridge/training/comm_overlap.py userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192 "
           "and userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192 (25.09 6307e8a37, v0.2.0, 26.04-alpha 406d3be77): "
           "proj_fprop / fc2_fprop = RingExchangeOverlapCfg(num_sm=1, set_sm_margin=True), where the BF16 configs and "
           "NeMo 24.07's ub_cfg_h100_fp8_h8192_tp4_mbs1_seqlen8192 run them pipelined on 24 / 16 (or 24 / 8) SMs; "
           "scripts/performance utils/helpers.py COMM_OVERLAP_CONFIG_MAP (25.09) and llama3/llama3_llm_pretrain.py "
           "llama3_70b_h100_config, llama31/llama31_llm_pretrain.py (v0.2.0, 26.04) give them to the H100 FP8 "
           "Llama 3 70B and Llama 3.1 405B runs",
    when=tuple(When(text=t, gpu="h100", precision="fp8", model_name=m)
               for t in ("25.09", "25.11", "26.") for m in ("llama3-70b", "llama3-405b", "llama3.1-405b")))

# ------------------------------------------------------------------------------------- the table

# Order matters where texts overlap: NeMo / Megatron-Bridge texts also name "(Megatron-Core)".
PROFILES: tuple[Profile, ...] = (
    Profile("Megatron-LM January 2023 (before DP overlap)", r"megatron-lm commit 285068c8", (
        Entry({"dp_comm_overlap": False}, "Megatron-LM before --overlap-grad-reduce: data-parallel collectives exposed",
              source="Megatron-LM gained --overlap-grad-reduce / --overlap-param-gather for the distributed "
                     "optimizer at the end of September 2023 (NVIDIA/Megatron-LM issue #391, 2023-06-29: "
                     "'not yet', answered 2023-09-30: 'now supported'); MegaScale (Jiang et al. 2024, Sec. 3.2, "
                     "6.1) compares against commit 285068c8 on its Sept 2023 cluster and lists DP overlap among "
                     "what it adds"),
        Entry({"tp_comm_overlap": False}, "",
              source="TransformerEngine userbuffers TP overlap reached Megatron-LM with --tp-comm-overlap later; "
                     "MegaScale Sec. 3.2 lists TP/SP overlap among what it adds over this baseline"),
        Entry({"p2p_comm_overlap": False}, "interleaved pipeline sends blocking (no P2P overlap in this baseline)",
              source="Megatron-LM 285068c8 (2023-01-11) megatron/p2p_communication.py _communicate: "
                     "batch_isend_irecv, req.wait() and torch.cuda.synchronize() after every send/receive; "
                     "overlap_p2p_comm came from Apex later (PR #331, May 2023), opt-in then "
                     "(--overlap-p2p-communication); MegaScale Sec. 3.2 lists pipeline send/receive overlap among "
                     "what it adds over this baseline"),
    )),
    Profile("Megatron-LM 2021-22 (PTD-P)", r"megatron-lm", (
        _BEFORE_FLASH,
        Entry({"p2p_comm_overlap": False}, "interleaved pipeline sends blocking (Megatron-LM before the P2P overlap)",
              source="Megatron-LM had no pipeline-send overlap before commit f9283c5a8a (2023-05-31, "
                     "--overlap-p2p-communication, opt-in) and made it the default only at 4eeff55d1f "
                     "(2023-10-12); until then p2p_communication.py _communicate posts batch_isend_irecv, waits on "
                     "every request and calls torch.cuda.synchronize() (batch_p2p_sync, default True)",
              when=(When(year_max=2022),)),
        Entry({"cp": 1}, "",
              source="Megatron-LM 292543d342 and df7f8d5215 (2023-10-12) add --context-parallel-size and count it "
                     "in the data-parallel size; before them a sequence is never split across ranks",
              when=(When(year_max=2022),)),
        Entry({"p2p_comm_overlap": False}, "interleaved pipeline sends blocking (2023 Megatron-LM fork, before the "
                                           "P2P overlap became the default)",
              source="assumed from the dates: the zero-bubble paper's 1F1B-I baseline is Megatron-LM's interleaved "
                     "schedule in the authors' 2023 fork, and the paper went to ICLR 2024 (deadline 2023-09-28) "
                     "before Megatron-LM 4eeff55d1f (2023-10-12) turned overlap_p2p_comm on by default; before it, "
                     "each chunk step waits on batch_isend_irecv and torch.cuda.synchronize() (batch_p2p_sync). "
                     "The fork's history was rewritten in 2024, so its paper-era base commit cannot be read",
              when=(When(text="zero-bubble-pipeline-parallelism"),)),
    )),
    Profile("NeMo 24.x / Megatron-Bridge 25.09", r"nemo|megatron-bridge", (
        _TE_ATTENTION,
        _CUDNN_2024,
        _FUSED_LOSS,
        Entry({"grad_dtype": "bf16"}, "BF16 gradient reduction (NeMo FP8 recipes)",
              source="NeMo 1 launcher optim.grad_sync_dtype: bf16 (conf/training/nemotron/nemotron_340b.yaml); "
                     "NeMo 2 / Megatron-Bridge scripts/performance/helpers.py set_precision_configs: "
                     "grad_reduce_in_fp32 = False for FP8",
              when=(When(precision="fp8"),)),
        _TPO_STATED,
        _TPO_SEARCHED,
        *_BRIDGE_2509_DEEPSEEK_V3,
        _BRIDGE_2509_TOKEN_DROP,
        _BRIDGE_2509_MOE_FP8_CURRENT,
        _BRIDGE_2509_QWEN3_30B_GRAPHS,
        *_BRIDGE_LATER_DEEPSEEK_V3,
        *_BRIDGE_2511_DEEPSEEK_V3_BLACKWELL,
        *_BRIDGE_H100_MOE,
        _BRIDGE_GPT_OSS_B200_GB200,
        _BRIDGE_GPT_OSS_BF16_GRADS,
        *_BRIDGE_2511_QWEN3_BLACKWELL,
        _BRIDGE_H100_FP8_CURRENT,
        _NEMO2_FP8_PARAMS,
        _NEMO1_NEMOTRON_340B_BF16_ADAM,
        _NEMO1_ADAM_REMAINDERS,
        _BRIDGE_H100_LLAMA3_8B_NCCL_UB,
        _BRIDGE_H100_FP8_RS_RING,
        _BRIDGE_2511_H100_LLAMA3_8B_RECOMPUTE,
        _DEEPEP,
        _HYBRIDEP_SEARCHED,
        _BRIDGE_TE_GROUPED_LINEAR_LOOP,
        _MEGATRON_FSDP,
    )),
    Profile("Megatron-Core r0.8+", r"megatron-core", (_TE_ATTENTION, _CUDNN_2024, _TPO_STATED, _TPO_SEARCHED, _DEEPEP,
                                                     _CUTLASS_GROUPED_GEMM, _MEGATRON_FSDP)),
    Profile("torchtitan (Dec 2024)", r"torchtitan", (
        _TT_STAGE_MICROBATCHES,
        _TT_TWO_CHUNKS,
        Entry({"recompute": "full", "recompute_share": PER_OP_SAC_SHARE},
              "torchtitan selective (per-op SAC) priced as full recompute of half the layers",
              source="torchtitan distributed/activation_checkpoint.py _custom_policy: per-op SAC saves the outputs "
                     "of SDPA and of every other matmul and recomputes the rest, about half of each layer's forward "
                     "in time and memory; the torchtitan reader and exporter price it the same way "
                     "(planner.frameworks.torchtitan.PER_OP_SAC_SHARE); not on MoE, whose grouped GEMMs and all-to-alls the "
                     "save list leaves out (its exporter refuses per-op SAC there, torchtitan_moe_sac)",
              when=(When(recompute="selective", model_lacks=("moe",)),)),
        _EAGER_STATED,
        Entry({"loss": "eager"}, "eager F.cross_entropy on FP32 logits",
              source="torchtitan train.py: F.cross_entropy(pred.flatten(0, 1).float(), ...) outside the compiled "
                     "blocks (compiling the loss is disabled there)"),
        _TORCH_GROUPED_MM,
        _TT_EP_ALLTOALL,
        Entry({"fp8_recipe": "current"}, "torchao Float8 with dynamic scaling, torchtitan's default, priced as current "
              "tensorwise scaling (rowwise is not modelled)",
              source="torchtitan config_manager.py (Dec 2024, 9dec370): --float8.scaling_type_input / _weight / "
                     "_grad_output default 'dynamic' (delayed opt-in); 2025: float8.recipe_name None = tensorwise "
                     "(torchao Float8Linear scales from the tensor's own amax); the torchtitan framework table prices "
                     "the same (planner.frameworks.torchtitan: fp8_recipe current)",
              when=(When(precision="fp8"), When(precision="float8"))),
        Entry({"tp_overlap_kind": "asynctp"}, "",
              source="torchtitan parallelism.enable_async_tensor_parallel: torch.compile's micro-pipeline TP "
                     "(torch/_inductor/fx_passes/micro_pipeline_tp.py), not TransformerEngine userbuffers"),
        Entry({"grad_accum_pass": "autograd"}, "",  # no line: on FSDP2's shards it costs next to nothing
              source="FSDP2 adds each micro-batch's reduce-scattered gradient into the sharded one "
                     "(torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce: "
                     "'fsdp_param.sharded_param.grad._local_tensor += new_sharded_grad'), and replicated parameters "
                     "accumulate through autograd's AccumulateGrad (costmodel.grad_accumulation)"),
        Entry({"fsdp": "fsdp2"}, "",  # no line: it holds for every torchtitan row
              source="torchtitan parallelize_llama.py apply_fsdp: torch.distributed fully_shard (FSDP2, per-parameter "
                     "DTensor sharding) since 2024; planner's torchtitan framework table prices the same"),
        Entry({"zero": 3}, "",  # no line: the runs state their sharding
              source="torchtitan's default shards everything with FSDP2 (config data_parallel_shard_degree = -1: all "
                     "the data-parallel ranks left over; torchtitan/config/job_config.py Parallelism); it has no "
                     "optimizer-only sharding (planner's torchtitan table refuses zero 1, torchtitan_no_zero1), and "
                     "--zero 0 (replicate) or 2 (reshard_after_forward never) are the user's to type"),
    )),
    Profile("Aleph Alpha scaling codebase (2023)", r"aleph alpha", (
        Entry({"sequence_parallel": False}, "no sequence parallelism (the codebase default)",
              source="Aleph-Alpha/scaling src/scaling/core/topology/topology_config.py: TopologyConfig."
                     "sequence_parallel defaults to False; Hagemann et al. 2023 turn it on only in the sweeps "
                     "that vary it (their seqpara sheets)"),
        Entry({"dp_comm_overlap": False}, "data-parallel gradient all-reduce in the optimizer step, after the last "
              "micro-batch",
              source="Aleph-Alpha/scaling src/scaling/core/optimizer/optimizer.py: Optimizer.step calls "
                     "allreduce_gradients once every micro-batch's backward has run; allreduce.py "
                     "allreduce_no_retain then reduces the flattened gradients bucket by bucket"),
        Entry({"grad_dtype": "bf16"}, "gradients kept in BF16 on the parameters",
              source="Aleph-Alpha/scaling src/scaling/core/optimizer/parameter_group.py: gradients accumulate in the "
                     "parameters' own dtype and only the rank's ZeRO slice is copied to FP32 in step_prequel "
                     "('each data-parallel worker will still have all original-precision weights as well as "
                     "gradients'); they are reduced in FP32 (grad_reduce all_reduce_fp32, the next entry)"),
        Entry({"grad_reduce": "all_reduce_fp32"}, "the whole gradient all-reduced in FP32, bucket by bucket",
              source="Aleph-Alpha/scaling src/scaling/core/optimizer/allreduce.py: allreduce_no_retain reduces the "
                     "flattened gradients bucket by bucket, allreduce_tensor_in_float32 casting each to FP32 for the "
                     "all-reduce; every rank then steps its ZeRO slice (parameter_group.py step_prequel)"),
        Entry({"grad_accum_pass": "autograd"}, "micro-batch gradients accumulated by autograd in BF16",
              source="Aleph-Alpha/scaling src/scaling/core/optimizer/parameter_group.py: gradients accumulate in the "
                     "parameters' own (BF16) .grad across micro-batches, PyTorch's AccumulateGrad; the FP32 copy is "
                     "made once per step in step_prequel (costmodel.grad_accumulation)"),
    )),
    Profile("Composer/llm-foundry (2024)", r"composer|llm-foundry", (
        Entry({"grad_accum_pass": "autograd"}, "",  # no line: on FSDP's shards it costs next to nothing
              source="PyTorch FSDP1 without no_sync adds each micro-batch's reduce-scattered gradient into the saved "
                     "shard (torch/distributed/fsdp/_runtime_utils.py _accumulate_sharded_grad: "
                     "'_saved_grad_shard += sharded_grad'; costmodel.grad_accumulation)"),
        Entry({"kernels": "eager"}, _EAGER_STATED.assumption,
              source="llm-foundry/Composer MPT without torch.compile runs plain PyTorch operators",
              when=(When(text="eager"), When(text_lacks="compile"))),
        _FUSED_LOSS,
        Entry({"grad_dtype": "bf16"}, "BF16 gradient reduction (FSDP mixed_precision PURE)",
              source="Composer FSDP mixed_precision PURE: parameters, gradient reduction and buffers in BF16",
              when=(When(precision="pure"),)),
        Entry({"zero3_gather": "post"}, "FSDP backward gathers after each unit's gradients (Composer's "
              "BACKWARD_POST default)",
              source="Composer composer/utils/parallelism.py FSDPConfig backward_prefetch = 'BACKWARD_POST' (and "
                     "dist_strategy.py before it); llm-foundry's benchmark script (scripts/train/benchmarking/"
                     "submit_benchmarks.py, 061f2c7) leaves fsdp_config.backward_prefetch unset"),
        Entry({"pp": 1, "cp": 1}, "",
              source="llm-foundry trains with Composer's FSDP (and TP since ee456002a, 2024-09-27, 'Tensor "
                     "Parallelism #1521'); no release up to main at 8c8dd48f7 (2025-07) has a pipeline- or "
                     "context-parallel training path"),
        Entry({"tp": 1}, "",
              source="llm-foundry v0.10.0 has no tensor parallelism: tp_config came with ee456002a (2024-09-27, "
                     "'Tensor Parallelism #1521')",
              when=(When(text="llm-foundry 0.10"),)),
    )),
    Profile("Megatron-DeepSpeed (DeepSpeed pipeline engine)", r"megatron-deepspeed|deepspeed pipeline|gpt-neox", (
        _BEFORE_FLASH,
        Entry({"attention": "unfused"}, "unfused attention (2022 Megatron-DeepSpeed / GPT-NeoX: fused softmax over "
              "stored scores)",
              source="BigScience tr11-176B-ml slurm: --position-embedding-type alibi, an additive bias FlashAttention "
                     "took only from FlashAttention-2 v2.4 (Dec 2023), so Megatron-DeepSpeed's ParallelAttention "
                     "(megatron/model/transformer.py) materialised the scores for its FusedScaleMaskSoftmax; GPT-NeoX "
                     "20B's configs/20B.yml: scaled-upper-triang-masked-softmax-fusion (Black et al. 2022), before "
                     "GPT-NeoX took FlashAttention in 2023",
              when=(When(year_max=2022),)),
        Entry({"sequence_parallel": False}, "no sequence parallelism (Megatron-DeepSpeed before mid-2023)",
              source="microsoft/Megatron-DeepSpeed: --sequence-parallel reaches main only with 9e72d571 (2023-07-04, "
                     "a merge of Megatron-LM upstream); GPT-NeoX 20B's configs/20B.yml has no such setting",
              when=(When(year_max=2022),)),
        _DS_PIPE_SCATTER,
        _DS_PIPE_GRADS_AFTER,
        _DS_NO_INTERLEAVING,
        _BIGSCIENCE_LAUNCH_BLOCKING,
        Entry({"grad_dtype": "fp32"}, "FP32 gradient reduction (DeepSpeed BF16_Optimizer)",
              source="DeepSpeed v0.6.5 runtime/pipe/engine.py _exec_reduce_grads: with bf16 and ZeRO stage 0 (the "
                     "BF16_Optimizer's own stage 1, bigscience train/tr11-176B-ml/README.md 'Deepspeed config') it "
                     "calls _bf16_reduce_grads, which all-reduces BF16_Optimizer.get_grads_for_reduction(), the "
                     "fp32_groups_gradients_flat (runtime/bf16_optimizer.py: 'accumulates grads in fp32'); "
                     "the all-reduce itself is grad_reduce (_DS_BF16_ALL_REDUCE)",
              when=(When(precision="bf16_optimizer"),)),
        _DS_BF16_ALL_REDUCE,
        Entry({"grad_dtype": "bf16"}, "16-bit gradient reduction (DeepSpeed fp16 / bf16)",
              source="DeepSpeed docs/_pages/config-json.md: communication_data_type defaults to the training "
                     "dtype; the fp16 and bf16 engines keep and reduce 16-bit gradients"),
        _DS_BF16_CAST_ADD,
        _DS_AUTOGRAD_ACCUM,
    )),
    Profile("DeepSpeed ZeRO-3 (2021)", r"deepspeed", (
        _BEFORE_FLASH,
        _DS_PIPE_SCATTER,
        _DS_NO_INTERLEAVING,
        Entry({"zero3_gather": "blocking"},
              "blocking per-tensor ZeRO-3 gathers and reduce-scatters (DeepSpeed 2021)",
              source="DeepSpeed v0.3.13-0.5 runtime/zero/partition_parameters.py: one all-gather per weight "
                     "tensor after torch.cuda.synchronize(), one reduce-scatter per gradient tensor "
                     "(costmodel.zero3_blocking)",
              when=(When(year_max=2021),)),
        Entry({"cp": 1}, "",
              source="DeepSpeed a855405e0 (2023-08-23, v0.10.2, 'DeepSpeed Ulysses release') adds "
                     "deepspeed/sequence/layer.py DistributedAttention; before it a sequence is never split across ranks",
              when=(When(year_max=2021),)),
        Entry({"grad_dtype": "bf16"}, "16-bit gradient reduction (DeepSpeed fp16)",
              source="DeepSpeed docs/_pages/config-json.md: communication_data_type defaults to the training "
                     "dtype; the fp16 engine keeps and reduces 16-bit gradients (DeepSpeed 0.5 has no FP32 "
                     "accumulation: the BF16_Optimizer came with 0.6.x for BLOOM)"),
        _DS_AUTOGRAD_ACCUM,
    )),
)
"""Named framework profiles; a row gets the first whose pattern matches its framework text."""

GENERIC = Profile("generic", "", (_BEFORE_FLASH, _BEFORE_FLASH_ADOPTED, _BEFORE_SEQUENCE_PARALLEL, _EAGER_STATED,
                                  _TPO_STATED, _CORE_ATTN_ONLY, *_FP8_RECIPES_STATED))
"""Applied to every row after its framework's profile: what holds whatever the framework."""

ROW_LABELS: tuple[tuple[str, Any, str], ...] = (("tp_comm_overlap", True, "tpo"), ("kernels", "eager", "eager"))
"""How a validate row's layout line marks implementation settings: (option, value, label)."""


def profiles_for(framework: str) -> list[Profile]:
    """The profiles a framework text gets: the first matching named one, then ``GENERIC``."""
    text = (framework or "").lower()
    named = [p for p in PROFILES if re.search(p.pattern, text)][:1]
    return named + [GENERIC]


def apply_profiles(facts: RowFacts, policies: bool = False, benchmark: bool = False) -> tuple[dict, list[str]]:
    """Option -> value (pinned) or list (searched) from the row's profiles, and the assumption
    lines, in entry order; an entry is skipped when an earlier one set any of its options or
    its condition fails. ``policies``: also the entries whose value is a rule the runs mapping
    resolves from a row's stated degrees (``PP_STAGES_MICROBATCHES``, ``LOOPED_TWO_CHUNKS``,
    ``LAYOUT_SLOTS``);
    a command's flags choose those knobs themselves. ``benchmark``: also the ``benchmark_only``
    entries (a published benchmark row ran them; a plan does not, see ``benchmark_only_entries``)."""
    settings: dict = {}
    assumptions: list[str] = []
    stated = object()  # marks an option the row states: no entry sets it, none falls back to it
    for profile in profiles_for(facts.framework):
        for entry in profile.entries:
            if any(k in settings for k in entry.values) or not entry.applies(facts):
                continue
            if entry.benchmark_only and not benchmark:
                continue
            if facts.stated and all(k in facts.stated for k in entry.values):
                settings.update(dict.fromkeys(entry.values, stated))
                continue
            if not policies and any(isinstance(v, str) and v in _POLICIES for v in entry.values.values()):
                continue
            settings.update(entry.values)
            if entry.assumption:
                assumptions.append(entry.assumption)
    return {k: v for k, v in settings.items() if v is not stated}, assumptions


def row_label_suffix(layout) -> str:
    """' tpo', ' eager', ... for the settings in ``ROW_LABELS`` that ``layout`` uses."""
    return "".join(f" {label}" for name, value, label in ROW_LABELS if getattr(layout, name) == value)


def benchmark_only_entries(facts: RowFacts) -> list[Entry]:
    """The ``benchmark_only`` entries that hold for ``facts`` and that a plan therefore leaves out
    (``apply_profiles`` without ``benchmark``): what a search or evaluate says it did not apply."""
    return [e for p in profiles_for(facts.framework) for e in p.entries if e.benchmark_only and e.applies(facts)]


def benchmark_only_lines(release, model, gpu_name: str, precision: str, given) -> list[str]:
    """What ``release`` (a ``planner.frameworks.releases.Release``) runs in its performance scripts
    only, changing what the model computes (``benchmark_only_entries``), for a job on ``model`` and
    ``gpu_name`` that does not get it: one line each with the flags that price it, unless the job's
    flags (``given``) set them all."""
    facts = RowFacts(framework=release.text.lower(), year=release.year, precision=str(precision).lower(),
                     gpu=gpu_name or "", model_parts=model_parts(model), model_name=getattr(model, "name", "") or "")
    lines = []
    for entry in benchmark_only_entries(facts):
        if all(k in given for k in entry.values):
            continue
        flags = " ".join(f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}") for k, v in entry.values.items())
        lines.append(f"{entry.assumption}: benchmark only, not applied (it changes what the model computes); "
                     f"price it with {flags}")
    return lines
