"""Kernel classification: kernel class, precision tag and short name of a GPU kernel or a CPU operator name."""

from __future__ import annotations

import re

# GPU kernel classes, matched in this order on the name as exported (demangled where the tool gives it); the
# first class with a matching pattern wins. Copied from the checked table in shared/reference/profiling.md.
# Matching is case-sensitive, as in that table. Consequence worth knowing: GroupNorm's backward kernels
# (ComputeInternalGradientsCUDAKernel, GammaBeta*BackwardCUDAKernel, Compute*BackwardFusedParamsCUDAKernel)
# match no pattern and land in "other".
KERNEL_CLASSES: list[tuple[str, list[str]]] = [
    (
        "conv_fprop",
        [
            r"xmma_fprop",
            r"fprop_implicit_gemm",
            r"implicit_convolveNd_sgemm",
            r"conv.*fprop",
            r"convolve_common_engine",
        ],
    ),
    ("conv_dgrad", [r"dgrad"]),
    ("conv_wgrad", [r"wgrad"]),
    ("gemm", [r"gemm", r"cutlass", r"nvjet", r"s884gemm", r"s1688gemm"]),
    ("layout_conversion", [r"nchwToNhwc", r"nhwcToNchw", r"convertTensor", r"direct_copy", r"copy_kernel"]),
    ("normalization", [r"group_norm", r"RowwiseMoments", r"ComputeFusedParams", r"batch_norm", r"layer_norm"]),
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
# - Copies (copy_, _to_copy, contiguous, clone) are layout_conversion, like the GPU copy kernels.
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


def classify(name: str) -> str:
    """Kernel class of a GPU kernel name (full or short); unmatched names are "other", never dropped."""
    return _first_match(name, _COMPILED)


def classify_cpu_op(name: str) -> str:
    """Kernel class of a CPU torch.profiler operator name (e.g. "aten::convolution_backward")."""
    return _first_match(name, _COMPILED_CPU)


# Precision tags as they appear inside cuDNN/CUTLASS kernel names (reference table), plus PyTorch's demangled
# template arguments c10::BFloat16 / c10::Half. tf32 is tested first: "f32f32_tf32f32" kernels are TF32.
_PRECISION_TAGS: list[tuple[str, re.Pattern[str]]] = [
    ("tf32", re.compile(r"tf32")),
    ("bf16", re.compile(r"bf16|BFloat16")),
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
