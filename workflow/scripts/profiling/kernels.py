"""Kernel classification: kernel class, precision tag and short name of a GPU kernel or a CPU operator name."""

from __future__ import annotations

import re

# GPU kernel classes, matched in this order on the name as exported; the first class with a matching pattern wins.
# Names come in two spellings: torch.profiler and nsys print the demangled name ("{lambda(float)#1}",
# "at::native::(anonymous namespace)::"), ncu's CSV a simplified one ("[lambda(float) (instance 1)]",
# "at::<unnamed>::", template parameters as T1, T2...). Every pattern below matches both; the decision for every
# distinct kernel name of the real H200 exports is written down in tests/fixtures/profiling/kernel_classes_h200.csv.
# Matching is case-sensitive. The rules, class by class:
# - conv_fprop / conv_dgrad / conv_wgrad: cuDNN convolution kernels, named by direction; cuDNN's workspace
#   initialisation (cask_plugin init_device_workspace_kernel) goes with the convolution its template names
#   (fprop::, dgrad::, wgrad_indexed::). ncu also spells one of them "<xmma__5x_cudnn::
#   Warp_specialized_params_non_template<...>>": "_non_template" is the fprop parameter type (dgrad's is
#   "_nontemplate", wgrad's has no suffix), and that kernel precedes an fprop kernel every time it was seen.
# - gemm: cuBLAS/cuBLASLt/CUTLASS matrix products, including GEMV (cuBLAS picks it for the batch-1 linear layers)
#   and cuBLASLt's split-K reduction, which finishes a GEMM.
# - layout_conversion: real re-layouts only: cuDNN NCHW<->NHWC transposes (also those whose input and output
#   types differ: a transpose that also casts is still a transpose), cuDNN tensor transforms (tensorTransformGeneric,
#   convertTensor), cuDNN channel padding (nhwcAddPaddingKernel and friends), and PyTorch's permute copies: a
#   direct_copy_kernel_cuda through the strided, non-vectorised path without casting (elementwise_kernel<...,
#   gpu_kernel_impl_nocast<direct_copy_kernel_cuda ...>>).
# - dtype_cast: PyTorch dtype conversions: direct_copy_kernel_cuda loaded/stored with casts (the contiguous
#   unrolled_elementwise_kernel<..., LoadWithCast, StoreWithCast> and the strided casting path gpu_kernel_impl<...>),
#   and the float->bf16/fp16/fp8 copy kernels (bfloat16_copy_kernel_cuda, float16_copy_kernel_cuda, ...).
#   A contiguous same-dtype copy (vectorized_elementwise_kernel<..., direct_copy_kernel_cuda ...>) is neither: it
#   falls through to elementwise.
# - normalization: GroupNorm forward and backward (its statistics kernels, the fused-parameter kernels, the
#   gamma/beta gradient and the elementwise kernels instantiated inside GroupNorm(Backward)KernelImplInternal),
#   batch and layer norm, and this workflow's own NDHWC GroupNorm + SiLU kernels (medddpm.ndhwc_norm: Triton names a
#   kernel after its function, so their six function names, matched whole).
# - optimizer: the foreach (multi_tensor_apply) kernels of Adam and the EMA update.
# - reduction: PyTorch's reduce_kernel.
# - elementwise: PyTorch's elementwise kernels (vectorized, unrolled, strided, with index, scatter/gather).
# - other: everything else (softmax, upsampling, concatenation, random numbers, cuDNN helpers): reported, never
#   dropped.
_TORCH = r"(?:at::)?(?:native::)?"  # at::native:: in torch/nsys names, at:: or nothing in ncu's
# PyTorch's copy functor inside the strided (non-vectorised) TensorIterator kernel, without and with casting.
_STRIDED = r"(?<!\w)elementwise_kernel<\d+, \d+, (?:void )?" + _TORCH
_DIRECT_COPY = _TORCH + r"direct_copy_kernel_cuda\b"
KERNEL_CLASSES: list[tuple[str, list[str]]] = [
    (
        "conv_fprop",
        [
            r"xmma_fprop",
            r"fprop_implicit_gemm",
            r"implicit_convolveNd_sgemm",
            r"conv.*fprop",
            r"convolve_common_engine",
            r"init_device_workspace_kernel<.*\bfprop::",
            r"init_device_workspace_kernel<xmma__5x_cudnn::Warp_specialized_params_non_template<",
        ],
    ),
    ("conv_dgrad", [r"dgrad"]),
    ("conv_wgrad", [r"wgrad"]),
    (
        "gemm",
        [r"gemm", r"cutlass", r"nvjet", r"s884gemm", r"s1688gemm", r"\bgemv", r"cublasGemv", r"splitKreduce_kernel"],
    ),
    (
        "layout_conversion",
        [
            r"nchwToNhwc",
            r"nhwcToNchw",
            r"tensorTransformGeneric",
            r"convertTensor",
            r"(?:Add|Remove)PaddingKernel",
            _STRIDED + "gpu_kernel_impl_nocast<" + _DIRECT_COPY,
        ],
    ),
    (
        "dtype_cast",
        [
            r"(?<!\w)unrolled_elementwise_kernel<" + _DIRECT_COPY + r".*\bLoadWithCast<",
            _STRIDED + "gpu_kernel_impl<" + _DIRECT_COPY,
            r"vectorized_templated_elementwise_kernel<.*\bdirect_copy_kernel_cuda\b",
            r"\b(?:bfloat16|float16|float8)_copy_kernel_cuda\b",
        ],
    ),
    (
        "normalization",
        [
            r"group_norm",
            r"GroupNorm",
            r"RowwiseMoments",
            r"ComputeFusedParams",
            r"ComputeBackwardFusedParams",
            r"ComputeInternalGradients",
            r"GammaBetaBackward",
            r"batch_norm",
            r"layer_norm",
            r"^_(?:forward_(?:sums|statistics|apply)|backward_(?:sums|coefficients|apply))$",
        ],
    ),
    ("optimizer", [r"multi_tensor_apply"]),
    ("reduction", [r"reduce_kernel"]),
    ("elementwise", [r"elementwise_kernel"]),
]
OTHER = "other"
CLASS_NAMES: list[str] = [name for name, _ in KERNEL_CLASSES] + [OTHER]

# CPU operators (torch.profiler rows of a run without CUDA) mapped onto the same closed class set, so that CPU
# and GPU tables share one vocabulary. Matched in order on the operator name.
# - On CPU one operator, aten::convolution_backward, computes the data and the weight gradient together; there
#   is no separate weight-gradient operator, so all convolution-backward time is counted as conv_dgrad and
#   conv_wgrad stays empty on CPU.
# - The class is taken from the operator's own name only: the per-parameter arithmetic of a non-foreach Adam
#   (aten::lerp_, aten::addcmul_, ...) is elementwise; only the Optimizer.* ranges' own time and the
#   _foreach_/_fused_ optimizer operators count as optimizer.
# - Copies (copy_, _to_copy, contiguous, clone) are layout_conversion: an operator name does not say whether a
#   copy casts or re-lays out (the work of both is in aten::copy_), so CPU tables have no dtype_cast rows.
_ELEMENTWISE_OPS = (
    "abs|add|addcdiv|addcmul|clamp|clamp_max|clamp_min|cos|div|eq|exp|fill|ge|gelu|gelu_backward|gt|le|lerp|log|"
    "lt|masked_fill|maximum|minimum|mul|ne|neg|pow|reciprocal|relu|rsqrt|rsub|sigmoid|sigmoid_backward|sign|silu|"
    "silu_backward|sin|sqrt|square|sub|tanh|tanh_backward|threshold_backward|where|zero"
)
CPU_OPERATOR_CLASSES: list[tuple[str, list[str]]] = [
    (
        "conv_fprop",
        [
            r"^aten::(conv[123]d|convolution|_convolution|mkldnn_convolution|cudnn_convolution|slow_conv3d"
            r"|slow_conv3d_forward|_slow_conv2d_forward|_nnpack_spatial_convolution)$"
        ],
    ),
    ("conv_dgrad", [r"convolution_backward", r"ConvolutionBackward", r"slow_conv3d_backward"]),
    (
        "gemm",
        [r"^aten::(mm|bmm|addmm|addbmm|baddbmm|matmul|linear|einsum|_addmm_activation)$", r"^(Mm|Bmm|Addmm)Backward"],
    ),
    ("layout_conversion", [r"^aten::(copy_|_to_copy|contiguous|clone|to_mkldnn|to_dense)$"]),
    ("normalization", [r"(?i)(group|batch|layer)_?norm"]),
    ("optimizer", [r"^Optimizer\.", r"^aten::_foreach_", r"^aten::_fused_(adam|adamw|sgd)"]),
    (
        "reduction",
        [r"^aten::(sum|mean|amax|amin|max|min|prod|norm|linalg_vector_norm|var|std|var_mean|std_mean|argmax|argmin)$"],
    ),
    ("elementwise", [rf"^aten::({_ELEMENTWISE_OPS})_?$", r"^(Silu|Pow|Mul|Div|Add|Sub|Neg|Exp|Sigmoid)Backward"]),
]

_COMPILED = [(name, [re.compile(p) for p in patterns]) for name, patterns in KERNEL_CLASSES]
_COMPILED_CPU = [(name, [re.compile(p) for p in patterns]) for name, patterns in CPU_OPERATOR_CLASSES]


def _first_match(name: str, table: list[tuple[str, list[re.Pattern[str]]]]) -> str:
    for class_name, patterns in table:
        if any(p.search(name) for p in patterns):
            return class_name
    return OTHER


# Kernels generated by torch.compile (inductor) are named "triton_<kind>_fused_<aten ops>_<n>": kind poi
# (pointwise), red / per (reductions), tem (a matrix-product template); the ops are the aten operators fused into the
# kernel, joined by "_". One kernel often fuses work of several classes; it goes to the class of the operator that
# defines its memory traffic, in this order:
# - normalization: any GroupNorm operator (native_group_norm, its backward) or its statistics (var_mean), also when
#   a bias add, concatenation or a convolution's bias gradient is fused in; and a SiLU fused with a mean subtraction
#   (silu and sub): GroupNorm + SiLU written out, as the fused_norm_act kernel computes it, forward and backward;
#   and a pointwise kernel with a mean subtraction and a power or rsqrt of the variance (mean, sub, pow or rsqrt):
#   that written-out GroupNorm's input gradient where inductor fused the SiLU's into the kernel before it.
# - other: softmax (attention) and upsampling (_unsafe_index gathers and scatters, arange/clamp index arithmetic),
#   as their eager kernels are.
# - gemm: matrix-product templates (tem).
# - reduction: every other reduction kernel (a convolution's bias gradient, a sum).
# - dtype_cast: a pointwise kernel that only converts (_to_copy) and views (view, permute, squeeze, ...).
# - elementwise: every other pointwise kernel (bias adds and casts around convolutions, SiLU, residual adds,
#   concatenations fused with their producers, the timestep embedding).
_INDUCTOR = re.compile(r"^triton_(poi|red|per|tem)_fused_(\w*?)(?:_\d+)?$")
_VIEW_OPS = {"view", "permute", "squeeze", "unsqueeze", "expand", "slice", "clone", "split", "select"}


def _has(ops: str, op: str) -> bool:
    return f"_{op}_" in f"_{ops}_"


def _inductor_class(kind: str, ops: str) -> str:
    if _has(ops, "native_group_norm") or _has(ops, "native_group_norm_backward") or _has(ops, "var_mean"):
        return "normalization"
    if _has(ops, "silu") and _has(ops, "sub"):
        return "normalization"
    if _has(ops, "mean") and _has(ops, "sub") and (_has(ops, "pow") or _has(ops, "rsqrt")):
        return "normalization"
    upsampling = _has(ops, "_unsafe_index") or _has(ops, "_unsafe_index_put") or (_has(ops, "arange") and _has(ops, "clamp"))
    if _has(ops, "_softmax") or upsampling:
        return OTHER
    if kind == "tem":
        return "gemm"
    if kind in ("red", "per"):
        return "reduction"
    rest = ops.removeprefix("_to_copy").strip("_")
    if ops.startswith("_to_copy") and all(token in _VIEW_OPS for token in filter(None, rest.split("_"))):
        return "dtype_cast"
    return "elementwise"


def classify(name: str) -> str:
    """Kernel class of a GPU kernel name (full or short); unmatched names are "other", never dropped."""
    inductor = _INDUCTOR.match(name.strip())
    if inductor:
        return _inductor_class(*inductor.groups())
    return _first_match(name, _COMPILED)


def classify_cpu_op(name: str) -> str:
    """Kernel class of a CPU torch.profiler operator name (e.g. "aten::convolution_backward")."""
    return _first_match(name, _COMPILED_CPU)


# Precision tags as they appear inside cuDNN/CUTLASS kernel names (reference table), plus PyTorch's demangled
# template arguments c10::BFloat16 / c10::Half and CUDA's __nv_bfloat16 / __half. tf32 is tested first:
# "f32f32_tf32f32" kernels are TF32.
_PRECISION_TAGS: list[tuple[str, re.Pattern[str]]] = [
    ("tf32", re.compile(r"tf32")),
    ("bf16", re.compile(r"bf16|BFloat16|bfloat16")),
    ("f16", re.compile(r"(?<![bt])f16|c10::Half|__half")),
    ("fp32", re.compile(r"ffma|f32f32")),
]


def precision_tag(name: str) -> str:
    """Arithmetic precision named inside a kernel name: tf32, bf16, f16, fp32, or "unknown"."""
    for tag, pattern in _PRECISION_TAGS:
        if pattern.search(name):
            return tag
    return "unknown"


def short_name(name: str) -> str:
    """Unqualified function name without return type, template arguments or parameter list.

    "void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float>(long, ...)" gives
    "RowwiseMomentsCUDAKernel"; names that are no C++ signature ("sm80_xmma_fprop_...", "nvjet_tst_...",
    "Optimizer.step#Adam.step") come back unchanged.
    """
    # The one parenthesis that is part of a qualified name rather than a parameter list.
    text = name.strip().replace("(anonymous namespace)", "anonymous_namespace")
    kept: list[str] = []
    depth = 0
    for char in text:
        if char == "<":
            depth += 1
        elif char == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            if char == "(":
                break  # the parameter list starts here
            kept.append(char)
    # What is left is "[return type] ns::ns::function"; keep the last token, then its last scope component.
    tokens = "".join(kept).split()
    if not tokens:
        return name.strip()
    return tokens[-1].split("::")[-1] or name.strip()
