"""A variant of the optimization matrix as plain data: a name and its switches (no torch import).

The workflow reads variants from the config (`variants: {name: {switch: value}}`) when it builds the DAG, so this
module stays importable without PyTorch; ``medddpm.variants`` applies the switches to backends and models.
Every switch is optional except the paper's three, and its default is the faithful upstream behaviour.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

AUTOCAST_DTYPES = ("bfloat16", "float16")
# torch.compile modes; the two marked True capture CUDA graphs themselves (inductor's cudagraph trees).
COMPILE_MODES = {"default": False, "reduce-overhead": True, "max-autotune-no-cudagraphs": False, "max-autotune": True}
CHECKPOINTING = ("attention", "none", "all")


@dataclass(frozen=True)
class Variant:
    """Switches that change precision, layout, fusion, scheduling or memory strategy, never the function."""

    name: str
    cudnn_tf32: bool
    matmul_tf32: bool
    channels_last: bool
    cudnn_benchmark: bool = False
    autocast: str | None = None
    compile: str | None = None
    fused_norm_act: bool = False
    checkpointing: str = "attention"
    fused_adam: bool = False
    foreach_ema: bool = False
    cuda_graphs: bool = False
    # Upstream's trilinear x2 upsampling written as separable shifted sums (unet.upsample_trilinear_x2): the same
    # function, whose backward is slicing instead of F.interpolate's atomic scatter (deterministic on CUDA).
    gather_upsampling: bool = False
    # Channels-last end to end by the project's own code: GroupNorm + SiLU through Triton kernels for NDHWC
    # activations (medddpm.ndhwc_norm; a custom op that torch.compile keeps), and the gather upsampling computed in
    # the activation's memory order; the same function, no activation converted to NCDHW between convolutions.
    ndhwc: bool = False
    # The training job's optimizer step (every micro-batch's forward and backward, and Adam) replayed from one CUDA
    # graph captured after the first warm-up step (training.StepGraph); the losses are read once per step after it.
    cuda_graph_training: bool = False
    # The training job's processes, one GPU each, on one node (medddpm.data_parallel): each runs
    # train.gradient_accumulation / data_parallel micro-batches of batch 1 per optimizer step, and the gradients are
    # averaged across them, so the step is the accumulated one-process step. 1 = one process (upstream).
    data_parallel: int = 1
    # The optimizer step's micro-batches stacked into one batch: one forward and backward of
    # train.gradient_accumulation samples instead of one per sample, their batches and random numbers those of the
    # micro-batches in upstream's order. The same gradient to rounding: GroupNorm and attention act per sample, and
    # the mean of the stack's loss is the mean of the micro-batches' (each one sample). More activation memory.
    stacked_micro_batches: bool = False
    # cuDNN's autotuning times every engine configuration its heuristics list for a convolution, not the first 10
    # that PyTorch tries by default (torch.backends.cudnn.benchmark_limit 0 instead of 10). The same function; a
    # longer warm-up. With cuDNN 9.19 on an H200 it bought nothing measurable (docs/optimization-ladder.md).
    cudnn_benchmark_all_engines: bool = False
    # The NDHWC path's edges in NDHWC too (unet.set_ndhwc_edges): the output convolution's one filter padded with zero
    # filters to 8 at each call, its output sliced back, and the inputs of the first and the stride-2 convolutions
    # pinned to NDHWC under inductor. The same function; without it the compiled U-Net ran those six convolutions on
    # NCDHW operands with cuDNN's transposes around them (inductor lays a 3-D convolution's operands out in the order
    # of the output their layouts give: a one-channel output reads as NCDHW, and so does a buffer not yet laid out).
    ndhwc_edges: bool = False
    # The first and the output convolutions as matrix products (unet.set_edge_gemms, medddpm.conv_gemm): the first (3
    # input channels) as im2col and one product, the output (one filter) as one product to 27 per-tap partial sums
    # and their shifted sum. The same function; cuDNN runs both with pre-Hopper kernels far from their floors. For
    # torch.compile, which fuses each gather and sum into one kernel (eager runs tens of kernels for them).
    edge_gemms: bool = False
    # The gradients of the decoder's concatenations handed to the activation and the skip as dense NDHWC tensors
    # (unet.set_dense_skip_gradients): autograd hands on channel slices of the concatenation's gradient, which in
    # NDHWC are not dense, and cuDNN copies each before its gradient convolution. The same function.
    dense_skip_gradients: bool = False
    # Each ResBlock's time embedding and its first convolution's bias added inside its second norm, an (N, C) offset
    # of the NDHWC kernels' input (unet.set_time_embedding_in_norm), not to the convolution's output: the same function.
    # Inductor cannot fuse that add into the norm's custom op, so the compiled U-Net wrote it as one more pass over the
    # activation per ResBlock, and its gradient as one more reduction.
    time_embedding_in_norm: bool = False
    # The first convolution's im2col columns recomputed in backward (unet.set_edge_columns_recomputed) instead of kept
    # from the forward for the weight's gradient: 0.34 GiB less through a 128^3 training step in bfloat16 for one more
    # gather per micro-batch. The same function.
    recompute_edge_columns: bool = False

    def __post_init__(self):
        problems = []
        if self.autocast is not None and self.autocast not in AUTOCAST_DTYPES:
            problems.append(f"autocast {self.autocast!r} is not one of {list(AUTOCAST_DTYPES)} or null")
        if self.compile is not None and self.compile not in COMPILE_MODES:
            problems.append(f"compile {self.compile!r} is not one of {list(COMPILE_MODES)} or null")
        if self.checkpointing not in CHECKPOINTING:
            problems.append(f"checkpointing {self.checkpointing!r} is not one of {list(CHECKPOINTING)}")
        if self.cudnn_benchmark_all_engines and not self.cudnn_benchmark:
            problems.append("cudnn_benchmark_all_engines needs cudnn_benchmark: true (without autotuning cuDNN's "
                            "heuristics pick one engine and the switch would do nothing)")
        if self.ndhwc and not self.channels_last:
            problems.append("ndhwc needs channels_last: true (its kernels read channels-last activations; "
                            "contiguous ones would take the plain function, and the switch would do nothing)")
        if self.ndhwc_edges and not self.ndhwc:
            problems.append("ndhwc_edges needs ndhwc: true (it extends the NDHWC path to the output "
                            "convolution; the paper's channels-last variants measure upstream's code)")
        if self.edge_gemms and not (self.ndhwc_edges and self.compiles):
            problems.append("edge_gemms needs ndhwc_edges: true and compile (its gathers and sums are one kernel each "
                            "only under torch.compile, and it replaces the NDHWC edges' convolutions)")
        if self.dense_skip_gradients and not self.ndhwc:
            problems.append("dense_skip_gradients needs ndhwc: true (in NCDHW a batch of one's channel slices are "
                            "dense already, and the paper's channels-last variants measure upstream's code)")
        if self.recompute_edge_columns and not self.edge_gemms:
            problems.append("recompute_edge_columns needs edge_gemms: true (the columns are the first convolution's "
                            "as a matrix product; cuDNN's convolution keeps no columns)")
        if self.time_embedding_in_norm and not self.ndhwc:
            problems.append("time_embedding_in_norm needs ndhwc: true (the offset is an input of the NDHWC norm "
                            "kernels; elsewhere the norm is inductor's, which fuses the add already)")
        for switch in ("cuda_graphs", "cuda_graph_training"):
            if getattr(self, switch) and self.compile is not None and COMPILE_MODES[self.compile]:
                problems.append(f"{switch} with compile mode {self.compile!r}, which captures CUDA graphs itself "
                                f"(use 'default' or 'max-autotune-no-cudagraphs' with {switch})")
        if isinstance(self.data_parallel, bool) or not isinstance(self.data_parallel, int) or self.data_parallel < 1:
            problems.append(f"data_parallel {self.data_parallel!r} is not a whole number of processes, 1 or more")
        elif self.data_parallel > 1 and self.cuda_graph_training:
            problems.append("data_parallel with cuda_graph_training: the gradients' all-reduce between processes "
                            "cannot run inside the captured step (use one or the other)")
        if self.stacked_micro_batches and isinstance(self.data_parallel, int) and self.data_parallel > 1:
            problems.append("stacked_micro_batches with data_parallel: each process runs its share of the "
                            "micro-batches one by one (stacking a process's share is not built; use one or the other)")
        if problems:
            raise ValueError(f"variant {self.name!r}: " + "; ".join(problems))

    @classmethod
    def from_config(cls, name: str, switches: dict) -> Variant:
        known = {f.name for f in fields(cls)} - {"name"}
        unknown = set(switches) - known
        if unknown:
            raise ValueError(f"variant {name!r}: unknown switch(es) {sorted(unknown)}; known: {sorted(known)}")
        return cls(name=name, **switches)

    def switches(self) -> dict:
        """Every switch with its value, defaults included (a stable description of the variant)."""
        return {k: v for k, v in asdict(self).items() if k != "name"}

    @property
    def compiles(self) -> bool:
        return self.compile is not None

    def effective_on(self, device) -> dict:
        """Which switches mean something on this device (a torch.device or its type, 'cpu' or 'cuda').

        TF32, cuDNN and CUDA graphs exist only on CUDA GPUs. torch.compile works on a CPU too (inductor writes
        C++). `ndhwc`'s GroupNorm + SiLU kernels are Triton kernels for CUDA; on a CPU the plain function runs. The
        fused GroupNorm + SiLU is one kernel on CUDA (compiled on its own, or inside the compiled U-Net)
        and under `compile` on a CPU; on a CPU without `compile` the same arithmetic runs unfused, so it is marked
        without effect there.
        """
        kind = getattr(device, "type", device)
        cuda = kind == "cuda"
        return {
            "cudnn_tf32": cuda,
            "matmul_tf32": cuda,
            "cudnn_benchmark": cuda,
            "cudnn_benchmark_all_engines": cuda,
            "channels_last": True,
            "autocast": self.autocast is None or cuda or self.autocast == "bfloat16",
            "compile": True,
            "fused_norm_act": cuda or self.compiles,
            "checkpointing": True,
            "fused_adam": True,
            "foreach_ema": True,
            "cuda_graphs": cuda,
            "cuda_graph_training": cuda,
            "gather_upsampling": True,
            "ndhwc": cuda,
            # cuDNN's layouts and inductor's layout choice around the output convolution are CUDA's; on a CPU the
            # padded filters are computed too, for nothing.
            "ndhwc_edges": cuda,
            # cuDNN's kernels for the two edges are what it replaces; on a CPU the products are computed for nothing.
            "edge_gemms": cuda,
            # Autograd's slices and the library's copies of them are there on a CPU too.
            "dense_skip_gradients": True,
            # The NDHWC norm kernels run on CUDA; on a CPU the plain function adds the offset where the add was.
            "time_embedding_in_norm": cuda,
            # Where edge_gemms is: the columns are the products'.
            "recompute_edge_columns": cuda,
            # Processes of one node, each with its own GPU (NCCL), or on a CPU each with its share of the cores (gloo).
            "data_parallel": True,
            "stacked_micro_batches": True,
        }
