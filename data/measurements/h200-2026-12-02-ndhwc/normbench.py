"""Microbench: GroupNorm32+SiLU at every norm site of the whole-head U-Net (base 64, 128^3, batch 1, bf16),
forward+backward: NDHWC Triton kernels at several tile shapes vs the plain function (ATen, contiguous) and
vs the plain function compiled by inductor in channels-last."""
import sys, json, itertools, statistics
sys.path.insert(0, "workflow/scripts")
import torch, torch.nn.functional as F
from medddpm.unet import UNet3D, UNetConfig, GroupNormSiLU, fuse_norm_act, group_norm_silu
from medddpm import ndhwc_norm as nn_

cfg = UNetConfig(in_channels=3, out_channels=1, base_width=64, channel_mult=(1, 1, 2, 3, 4), num_res_blocks=1,
                 attention_downsample_rates=(8,), num_heads=1, dropout=0.0)
model = UNet3D(cfg).cuda()
fuse_norm_act(model)
shapes = []
hooks = [m.register_forward_pre_hook(lambda m, a: shapes.append(tuple(a[0].shape))) for m in model.modules()
         if isinstance(m, GroupNormSiLU)]
with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):
    model(torch.randn(1, 3, 128, 128, 128, device="cuda"), torch.tensor([5], device="cuda"))
for h in hooks: h.remove()
del model; torch.cuda.empty_cache()
print(len(shapes), "norm sites; distinct:", sorted(set(shapes), key=lambda s: -s[1]*s[2]**3))

def timeit(fn, reps=15, warm=3):
    for _ in range(warm): fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
        a.record(); fn(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    return statistics.median(ts)

compiled_cl = torch.compile(group_norm_silu, dynamic=False, fullgraph=True)
torch._dynamo.config.cache_size_limit = 64
results = {}
def site_cost(shape, impl, layout):
    C = shape[1]
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16).mul_(2).add_(0.5)
    x = x.contiguous(memory_format=layout).requires_grad_(True)
    w = torch.randn(C, device="cuda").requires_grad_(True); b = torch.randn(C, device="cuda").requires_grad_(True)
    dy = torch.randn_like(x)
    fwd = lambda: impl(x, w, b, 32, 1e-5)
    y = fwd()
    t_f = timeit(fwd)
    def fb():
        y = fwd(); torch.autograd.grad(y, (x, w, b), dy)
    t_fb = timeit(fb)
    return t_f, t_fb

cl = torch.channels_last_3d
configs = {"inductor_ncdhw": (compiled_cl, torch.contiguous_format)}
for te, nw in ((4096, 4), (8192, 4), (4096, 8), (2048, 4), (8192, 8)):
    configs[f"triton_t{te}_w{nw}"] = ((te, nw), cl)
counts = {s: shapes.count(s) for s in set(shapes)}
for name, (impl, layout) in configs.items():
    if isinstance(impl, tuple):
        nn_.TILE_ELEMENTS, nn_.NUM_WARPS = impl
        impl = nn_.group_norm_silu_ndhwc
    tot_f = tot_fb = 0.0; per = {}
    try:
        for s, k in counts.items():
            f, fb = site_cost(s, impl, layout)
            per[str(s)] = (round(f, 3), round(fb, 3)); tot_f += k * f; tot_fb += k * fb
    except Exception as e:
        print(name, "FAILED", repr(e)[:300]); continue
    results[name] = {"forward_ms": tot_f, "fwd_bwd_ms": tot_fb, "per_site": per}
    print(f"{name:24s} forward {tot_f:7.2f} ms  fwd+bwd {tot_fb:7.2f} ms (sum over {len(shapes)} sites, batch 1)", flush=True)
# bandwidth of the best at the largest site
big = max(counts, key=lambda s: s[1] * s[2] ** 3)
nbytes = torch.Size(big).numel() * 2
for name in results:
    f, fb = results[name]["per_site"][str(big)]
    print(f"{name:24s} at {big}: fwd {f:.3f} ms = {3*nbytes/f/1e6:.0f} GB/s (3 passes), fwd+bwd {fb:.3f} ms = {8*nbytes/fb/1e6:.0f} GB/s (8 passes)")
json.dump({"shapes": shapes, "results": results}, open(sys.argv[1], "w"), indent=1)
