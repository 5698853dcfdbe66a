"""A few kernels of the kinds a Med-DDPM training step launches (a bf16 channels-last 3-D convolution forward and
backward, GroupNorm, an element-wise add), after a warm-up, between cudaProfilerStart and Stop, for Nsight Compute to
profile with one metric set at a time (`ncu --profile-from-start off`)."""
import torch

x = torch.randn(1, 64, 32, 32, 32, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last_3d)
x.requires_grad_(True)
conv = torch.nn.Conv3d(64, 64, 3, padding=1).cuda().to(torch.bfloat16).to(memory_format=torch.channels_last_3d)
norm = torch.nn.GroupNorm(16, 64).cuda().to(torch.bfloat16)


def step():
    y = norm(conv(x)) + x
    y.float().sum().backward()


step()
torch.cuda.synchronize()
torch.cuda.profiler.start()
step()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
