"""The sampling evaluation of frontier_graphed at one batch, 128^3, compiled: MIN_VOXELS from argv."""
import sys

sys.path[:0] = ["workflow/scripts", "tests"]
import torch  # noqa: E402

from config_settings import paper_unet  # noqa: E402
from medddpm import ndhwc_norm  # noqa: E402
from medddpm.diffusion import GaussianDiffusion  # noqa: E402
from medddpm.unet import UNet3D  # noqa: E402
from medddpm.variants import Variant, apply_backend, autocast, prepare_model  # noqa: E402

ndhwc_norm.MIN_VOXELS = int(sys.argv[1])
batch = int(sys.argv[2])
cuda = torch.device("cuda")
variant = Variant("g", True, True, True, cudnn_benchmark=True, autocast="bfloat16", compile="default",
                  checkpointing="none", cuda_graphs=True, gather_upsampling=True, ndhwc=True)
apply_backend(variant)
d = prepare_model(GaussianDiffusion(UNet3D(paper_unet()), timesteps=250).to(cuda), variant, cuda)
d = d.requires_grad_(False).eval()
d.denoiser.compile(fullgraph=True, dynamic=False)
cl = torch.channels_last_3d
x = torch.randn(batch, 1, 128, 128, 128, device=cuda).contiguous(memory_format=cl)
c = torch.randn(batch, 2, 128, 128, 128, device=cuda).contiguous(memory_format=cl)
t = torch.full((batch,), 125, device=cuda)
with torch.no_grad(), autocast(variant, cuda):
    y = d.denoise(x, c, t)
torch.cuda.synchronize()
print("ok", sys.argv[1:], float(y.float().abs().mean()))
