#!/bin/bash
# How many replay passes Nsight Compute needs on this GPU for each candidate training-step metric set: one pass means
# no replay and no memory save/restore (the cost of profiling a 128^3 step is then that of running its kernels once).
# Run from the repository root; prints "<set>: <passes per kernel, as ncu reports them>".
D=data/measurements/h200-2026-12-05-dram-passes
ONE="gpu__time_duration.sum,sm__cycles_elapsed.max,smsp__inst_executed.sum,sm__inst_executed.avg.per_cycle_active"
ONE="$ONE,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__thread_inst_executed.sum"
GMMA="sm__inst_executed_pipe_tensor_op_gmma.sum"
DRAM="dram__bytes_read.sum,dram__bytes_write.sum"
# What instructions.kernel_flop counts FLOPs from: the tensor-op paths and the FP32 arithmetic instructions.
FLOPS="sm__ops_path_tensor_src_tf32_dst_fp32.sum,sm__ops_path_tensor_src_bf16_dst_fp32.sum,sm__ops_path_tensor_src_fp16.sum"
FLOPS="$FLOPS,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"
FLOPS="$FLOPS,smsp__sass_thread_inst_executed_op_fmul_pred_on.sum"
declare -A SETS=(
  [one_pass]="$ONE,$GMMA"
  [one_pass+dram_rw]="$ONE,$GMMA,$DRAM"
  [one_pass+dram_rw+flops]="$ONE,$GMMA,$DRAM,$FLOPS"
  [one_pass+dram_total]="$ONE,$GMMA,dram__bytes.sum"
  [one_pass-gmma+dram_rw]="$ONE,$DRAM"
  [time+dram_rw]="gpu__time_duration.sum,$DRAM"
  [time+cycles+dram_rw]="gpu__time_duration.sum,sm__cycles_elapsed.max,$DRAM"
  [time+cycles+inst+dram_rw]="gpu__time_duration.sum,sm__cycles_elapsed.max,smsp__inst_executed.sum,$DRAM"
  [time+cycles+inst+ipc+dram_rw]="gpu__time_duration.sum,sm__cycles_elapsed.max,smsp__inst_executed.sum,sm__inst_executed.avg.per_cycle_active,$DRAM"
  [time+hmma+dram_rw]="gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,$DRAM"
  [time+thread_inst+dram_rw]="gpu__time_duration.sum,smsp__thread_inst_executed.sum,$DRAM"
  [time+gmma+dram_rw]="gpu__time_duration.sum,$GMMA,$DRAM"
)
for name in one_pass one_pass+dram_rw one_pass+dram_rw+flops one_pass+dram_total one_pass-gmma+dram_rw time+dram_rw time+cycles+dram_rw \
    time+cycles+inst+dram_rw time+cycles+inst+ipc+dram_rw time+hmma+dram_rw time+thread_inst+dram_rw time+gmma+dram_rw; do
  passes=$(ncu --clock-control none --profile-from-start off --metrics "${SETS[$name]}" python3 $D/probe.py 2>&1 \
    | grep -o -- "- [0-9]* pass[es]*" | sort | uniq -c | tr -s ' ' | tr '\n' ';')
  echo "$name: $passes"
  echo "$name=${SETS[$name]}" >> "${SETS_FILE:-/dev/null}"
done
# Where a GPU job's first seconds go: the interpreter with torch, CUDA's context, the U-Net's modules.
python3 - <<'PY'
import time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t2 = time.perf_counter()
torch.backends.cudnn.version(); x = torch.randn(1, 8, 8, 8, 8, device="cuda")
torch.nn.functional.conv3d(x, torch.randn(8, 8, 3, 3, 3, device="cuda"), padding=1); torch.cuda.synchronize()
t3 = time.perf_counter()
print(f"import torch {t1 - t0:.2f} s, CUDA context {t2 - t1:.2f} s, first cuDNN convolution {t3 - t2:.2f} s")
PY
for i in 1 2 3; do /usr/bin/time -f "nvidia-smi query: %e s" nvidia-smi --query-gpu=driver_version --format=csv,noheader > /dev/null; done
