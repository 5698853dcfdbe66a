"""Where a GPU job's first seconds go: importing torch, CUDA's context, the first cuDNN convolution, one nvidia-smi
query (the timing chain's jobs spend 13-17 s beyond their timed steps: ../h200-2026-12-05-paper-plan/)."""
import subprocess
import time

started = time.perf_counter()
import torch  # noqa: E402

imported = time.perf_counter()
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
context = time.perf_counter()
x = torch.randn(1, 8, 8, 8, 8, device="cuda")
torch.nn.functional.conv3d(x, torch.randn(8, 8, 3, 3, 3, device="cuda"), padding=1)
torch.cuda.synchronize()
convolution = time.perf_counter()
subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, check=True)
queried = time.perf_counter()
print(f"import torch {imported - started:.2f} s, CUDA context {context - imported:.2f} s, first cuDNN convolution "
      f"{convolution - context:.2f} s, nvidia-smi query {queried - convolution:.2f} s")
