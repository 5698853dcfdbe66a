"""Executed instructions by kind (the instruction mix) and FLOPs of a tidy Nsight Compute kernel table.

Input: a table of tables.from_ncu (tidy column names of tables.METRIC_COLUMNS). Output: per kernel (kernel_mix)
and summed per kernel class and run (mix_by_class), in one unit.

Unit: thread instructions executed with the predicate on. That is what ncu's SASS thread-level families count
(smsp__sass_thread_inst_executed_op_<family>_pred_on.sum: per executed warp instruction, the threads that executed it
with a true predicate). The ten families fp32, fp16, integer, bit, control, conversion, memory, uniform, misc and
inter_thread_communication together are the predicated-on thread instructions of a kernel (ncu 2025.3.1 on an H200:
equal to smsp__thread_inst_executed_pred_on.sum in every kernel without warpgroup MMA or cuBLASLt split-K reduction;
up to 0.8 % above it in a step with those). A tensor warp instruction (HMMA, and on Hopper HGMMA) counts 32 thread
instructions, inside the fp16 family, as ncu counts it itself.

Categories, as functions of the tidy columns (a term whose counters were not collected contributes nothing and
its instructions stay in not_split):
  fp32_arith  FP32 FMA/add/multiply: thread_inst_ffma + thread_inst_fadd + thread_inst_fmul (all three needed)
  tensor      tensor math: 32 x tensor_hmma_instructions (tensor_instructions where the HMMA count is missing; on
              Hopper the HMMA count includes HGMMA), counted only in kernels whose tensor-op counters show tensor math
              (tensor_ops_tf32 + tensor_ops_bf16 + tensor_ops_fp16 > 0). The HMMA pipe also executes HFMA2.MMA
              register moves: an fp32 kernel shows HMMA-pipe instructions and no tensor ops, so HMMA counts alone
              are not tensor math.
  fp16_bf16   FP16/BF16 instructions off the tensor math: thread_inst_fp16 - tensor. Where the tensor-op counters were
              not collected, the HMMA-pipe part of the family (up to 32 x HMMA count) is not split; where the family
              was not collected, thread_inst_hfma + thread_inst_hadd + thread_inst_hmul (those collected).
  integer     thread_inst_integer + thread_inst_bit (integer arithmetic and bit logic)
  memory      thread_inst_memory (loads, stores and the other instructions ncu groups as memory)
  control     thread_inst_control (control flow: branches, calls, returns, exits)
  conversion  thread_inst_conversion (type conversions)
  other       the rest: FP32 instructions other than FFMA/FADD/FMUL (thread_inst_fp32 - fp32_arith: compares, min/max,
              ...; only with the fp32 family and all three FP32 counters), thread_inst_uniform, thread_inst_misc,
              thread_inst_inter_thread_communication
  not_split   "not split (counters not collected)": total - all of the above. Zero when the ten families, the three
              FP32 counters, the HMMA count and the tensor-op counters were collected.
  total       the sum of the ten families where all were collected; else thread_instructions_pred_on; else
              thread_instructions (smsp__thread_inst_executed.sum, which also counts predicated-off threads: those
              then fall in not_split). mix_total_metric names which.

Warp-level memory and branch counters (inst_global, inst_shared, inst_ldgsts, inst_tma, inst_branch, inst_global_ld,
...) count warp instructions whatever the number of active threads, so they are not converted into this unit; they
stay columns of the kernel table.

FLOPs (per kernel; NaN where the counters were not collected):
  tensor_flop  tensor_ops_tf32 + tensor_ops_bf16 + tensor_ops_fp16 (ncu's sm__ops_path_tensor_src_* counters; all
               three needed). ncu's roofline counts these operations as FLOPs (one m16n8k8 TF32 HMMA = 2,048). They
               include tile padding: 32-channel convolutions run in 64-wide tiles, so a bf16 sampling step executed
               7.66e9 tensor ops for 4.64e9 model FLOPs.
  fp32_flop    2 x thread_inst_ffma + thread_inst_fadd + thread_inst_fmul (all three needed)
  kernel_flop  tensor_flop + fp32_flop: what the roofline (fig10) and the memory floor's FLOP floor count
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .kernels import CLASS_NAMES

UNIT = "thread instructions (predicated on)"
CATEGORIES: list[tuple[str, str]] = [
    ("fp32_arith", "FP32 arithmetic (FFMA, FADD, FMUL)"),
    ("tensor", "tensor math (HMMA, HGMMA)"),
    ("fp16_bf16", "FP16/BF16, not tensor"),
    ("integer", "integer and bit logic"),
    ("memory", "memory"),
    ("control", "control"),
    ("conversion", "conversion"),
    ("other", "other (FP32 compare/min/max, uniform, misc, warp shuffles)"),
    ("not_split", "not split (counters not collected)"),
]
CATEGORY_NAMES = [name for name, _ in CATEGORIES]
MIX_COLUMNS = [f"mix_{name}" for name in CATEGORY_NAMES] + ["mix_total"]

FAMILIES = [
    "fp32",
    "fp16",
    "integer",
    "bit",
    "control",
    "conversion",
    "memory",
    "uniform",
    "misc",
    "inter_thread_communication",
]
FAMILY_COLUMNS = [f"thread_inst_{family}" for family in FAMILIES]
FP32_COLUMNS = ["thread_inst_ffma", "thread_inst_fadd", "thread_inst_fmul"]
FP16_OP_COLUMNS = ["thread_inst_hfma", "thread_inst_hadd", "thread_inst_hmul"]
TENSOR_OPS_COLUMNS = ["tensor_ops_tf32", "tensor_ops_bf16", "tensor_ops_fp16"]
# Thread instructions per tensor warp instruction, as ncu counts them inside the fp16 family.
THREADS_PER_TENSOR_INSTRUCTION = 32
# Which total a kernel's mix was split from (mix_total_metric).
TOTAL_FAMILIES = "sum of the ten smsp__sass_thread_inst_executed_op_*_pred_on.sum families"
TOTAL_PRED_ON = "smsp__thread_inst_executed_pred_on.sum"
TOTAL_ALL_THREADS = "smsp__thread_inst_executed.sum (includes predicated-off threads)"


def _values(kernels: pd.DataFrame, column: str) -> np.ndarray:
    """The column as floats; all NaN (not collected) when the table lacks it."""
    if column not in kernels.columns:
        return np.full(len(kernels), np.nan)
    return pd.to_numeric(kernels[column], errors="coerce").to_numpy(dtype=float)


def _all_of(kernels: pd.DataFrame, columns: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(sum, collected): the per-kernel sum of `columns` and where every one of them was collected."""
    stacked = np.vstack([_values(kernels, c) for c in columns])
    collected = ~np.isnan(stacked).any(axis=0)
    return np.where(collected, np.nansum(stacked, axis=0), 0.0), collected


def _any_of(kernels: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """Per-kernel sum of those of `columns` that were collected (zero where none was)."""
    return np.nansum(np.vstack([_values(kernels, c) for c in columns]), axis=0)


def _collected(values: np.ndarray) -> np.ndarray:
    return ~np.isnan(values)


def tensor_flop(kernels: pd.DataFrame) -> pd.Series:
    """Tensor-core operations (ncu's FLOPs) per kernel; NaN where the three tensor-op counters were not collected."""
    total, collected = _all_of(kernels, TENSOR_OPS_COLUMNS)
    return pd.Series(np.where(collected, total, np.nan), index=kernels.index, name="tensor_flop")


def fp32_flop(kernels: pd.DataFrame) -> pd.Series:
    """2 x FFMA + FADD + FMUL thread instructions per kernel; NaN where one of the three was not collected."""
    ffma, fadd, fmul = (_values(kernels, c) for c in FP32_COLUMNS)
    return pd.Series(2 * ffma + fadd + fmul, index=kernels.index, name="fp32_flop")


# Kernels whose name says they compute on tensor cores (kernels.precision_tag): their FLOPs are uncounted without the
# tensor-op counters, since no FP32 counter shows tensor math.
TENSOR_PRECISIONS = ("tf32", "bf16", "f16")


def kernel_flop(kernels: pd.DataFrame) -> pd.Series:
    """FLOPs per kernel: tensor-core operations (tensor_flop) plus FP32 arithmetic (fp32_flop). NaN where they cannot
    be counted: no FP32 counters, or a tensor-precision kernel (TENSOR_PRECISIONS) profiled without the tensor-op
    counters. Reads the tidy table's tensor_flop and fp32_flop columns (NaN where the table lacks them)."""
    fp32 = kernels["fp32_flop"] if "fp32_flop" in kernels else pd.Series(np.nan, index=kernels.index)
    tensor = kernels["tensor_flop"] if "tensor_flop" in kernels else pd.Series(np.nan, index=kernels.index)
    uncounted_tensor = tensor.isna() & kernels["precision"].isin(TENSOR_PRECISIONS)
    return (fp32 + tensor.fillna(0)).where(~uncounted_tensor)


def _tensor_warp_instructions(kernels: pd.DataFrame) -> np.ndarray:
    hmma = _values(kernels, "tensor_hmma_instructions")
    return np.where(_collected(hmma), hmma, _values(kernels, "tensor_instructions"))


def kernel_mix(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per kernel (same index as `kernels`): MIX_COLUMNS in UNIT, and mix_total_metric naming the total used."""
    family = {f: _values(kernels, f"thread_inst_{f}") for f in FAMILIES}
    family_sum, all_families = _all_of(kernels, FAMILY_COLUMNS)
    pred_on = _values(kernels, "thread_instructions_pred_on")
    all_threads = _values(kernels, "thread_instructions")
    total = np.where(all_families, family_sum, np.where(_collected(pred_on), pred_on, all_threads))
    total_metric = np.where(
        all_families,
        TOTAL_FAMILIES,
        np.where(_collected(pred_on), TOTAL_PRED_ON, np.where(_collected(all_threads), TOTAL_ALL_THREADS, "")),
    )

    fp32_arith, fp32_split = _all_of(kernels, FP32_COLUMNS)
    fp32_family = family["fp32"]
    fp32_rest = np.where(fp32_split & _collected(fp32_family), fp32_family - fp32_arith, 0.0)

    tensor_warp = _tensor_warp_instructions(kernels)
    ops, ops_collected = _all_of(kernels, TENSOR_OPS_COLUMNS)
    pipe_threads = THREADS_PER_TENSOR_INSTRUCTION * np.nan_to_num(tensor_warp)
    tensor_known = ops_collected & _collected(tensor_warp)
    tensor = np.where(tensor_known & (ops > 0), pipe_threads, 0.0)

    fp16_family = family["fp16"]
    fp16_bf16 = np.where(
        _collected(fp16_family),
        np.where(
            tensor_known,
            fp16_family - tensor,
            # HMMA-pipe instructions of unknown nature (tensor math or HFMA2.MMA moves) stay not split.
            np.where(_collected(tensor_warp), np.maximum(fp16_family - pipe_threads, 0.0), 0.0),
        ),
        _any_of(kernels, FP16_OP_COLUMNS),
    )

    def present(name: str) -> np.ndarray:
        return np.nan_to_num(family[name])

    parts = {
        "fp32_arith": fp32_arith,
        "tensor": tensor,
        "fp16_bf16": fp16_bf16,
        "integer": present("integer") + present("bit"),
        "memory": present("memory"),
        "control": present("control"),
        "conversion": present("conversion"),
        "other": fp32_rest + present("uniform") + present("misc") + present("inter_thread_communication"),
    }
    parts["not_split"] = total - sum(parts.values())
    mix = pd.DataFrame({f"mix_{name}": values for name, values in parts.items()}, index=kernels.index)
    mix["mix_total"] = total
    mix["mix_total_metric"] = total_metric
    # A kernel without any total (no thread-instruction counter at all) has no mix.
    mix.loc[np.isnan(total), [f"mix_{name}" for name in CATEGORY_NAMES]] = np.nan
    return mix


def mix_by_class(kernels: pd.DataFrame) -> pd.DataFrame:
    """Sum of kernel_mix per kernel class present (in CLASS_NAMES order) and over the run ("all").

    Columns: kernel_class, kernels, then MIX_COLUMNS. A class with a kernel without a mix gets NaN, not a partial sum.
    """
    mix = kernel_mix(kernels)
    classes = kernels["kernel_class"].to_numpy()
    groups = [(c, mix[classes == c]) for c in CLASS_NAMES if (classes == c).any()]
    rows = []
    for kernel_class, group in [*groups, ("all", mix)]:
        sums = {c: (group[c].sum() if group[c].notna().all() else np.nan) for c in MIX_COLUMNS}
        rows.append({"kernel_class": kernel_class, "kernels": len(group), **sums})
    return pd.DataFrame(rows)
