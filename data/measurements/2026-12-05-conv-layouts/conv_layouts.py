"""Which convolutions of a rung's compiled sampling evaluation read NCDHW tensors, as they run.

One U-Net evaluation (no gradients, the rung's autocast), inputs laid out as the sampling job lays them out
(`prepare_input`) and joined by `GaussianDiffusion.denoise`, compiled with the rung's switches from config.yaml. After
a first call (which compiles), a second runs with inductor's convolution entry point (`extern_kernels.convolution`,
which its generated code looks up at each call) wrapped: each convolution's input, weight and output are recorded
with their shapes and layouts as cuDNN receives them. Writes `conv_layouts_<network>_<device>.md` beside the script.

    python3 conv_layouts.py --network tiny            # the tests' two-level U-Net at 16^3 (seconds on a GPU)
    python3 conv_layouts.py --network wholehead       # config/paper.yaml's network at 128^3 (a GPU's minute)

On a CPU every 3-D convolution is laid out NCDHW by inductor's CPU path, so only a GPU run answers the question; the
CPU run checks the script."""

import argparse
import sys
from pathlib import Path

import torch
import yaml

REPO = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(REPO / "workflow/scripts"), str(REPO / "tests")]

from config_settings import paper_unet  # noqa: E402
from medddpm.diffusion import GaussianDiffusion  # noqa: E402
from medddpm.unet import UNet3D, UNetConfig  # noqa: E402
from medddpm.variants import (Variant, apply_backend, autocast, compile_model, prepare_input,  # noqa: E402
                              prepare_model)
from unet_helpers import TINY, inductor_convolutions, layout  # noqa: E402


def described(tensor: torch.Tensor) -> str:
    return f"{'x'.join(map(str, tensor.shape))} {layout(tensor)}"


def network(name: str) -> tuple[UNetConfig, int]:
    """The whole-head network at 128^3, or the tests' tiny one (unet_helpers.TINY) at 16^3."""
    if name == "wholehead":
        return paper_unet(), 128
    return TINY, 16


def recorded_convolutions(rung: str, config: UNetConfig, size: int, device: torch.device) -> tuple[str, list[dict]]:
    """The U-Net's input as denoise joins it, and each convolution of the second compiled evaluation in call order."""
    variant = Variant.from_config(rung, yaml.safe_load((REPO / "config.yaml").read_text())["variants"][rung])
    apply_backend(variant)
    model = prepare_model(UNet3D(config).to(device), variant, device)
    compile_model(model, variant)
    diffusion = GaussianDiffusion(model, timesteps=10)
    x = prepare_input(torch.randn(1, 1, size, size, size, device=device), variant)
    condition = prepare_input(torch.randn(1, config.in_channels - 1, size, size, size, device=device), variant)
    t = torch.tensor([3], device=device)
    with torch.no_grad(), autocast(variant, device):
        diffusion.denoise(x, condition, t)
        with inductor_convolutions() as calls:
            diffusion.denoise(x, condition, t)
    rows = [{"input": described(c["input"]), "weight": described(c["weight"]), "output": described(c["output"]),
             "stride": c["stride"]} for c in calls]
    return described(torch.cat([x, condition], dim=1)), rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", choices=("tiny", "wholehead"), default="tiny")
    parser.add_argument("--rung", default="frontier_edges")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    config, size = network(args.network)
    unet_input, rows = recorded_convolutions(args.rung, config, size, device)
    where = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    lines = [f"# {args.rung}'s compiled sampling evaluation: the layouts its convolutions read", "",
             f"{args.network} network at {size}^3, {where}, torch {torch.__version__}.", "",
             f"The U-Net's input, as denoise joins the noisy image and the mask before the compiled U-Net: "
             f"{unet_input}.", "",
             "| # | input | weight | output | stride |", "|---:|---|---|---|---|"]
    lines += [f"| {i} | {r['input']} | {r['weight']} | {r['output']} | {r['stride']} |" for i, r in enumerate(rows)]
    counts = {}
    for row in rows:
        kind = row["input"].split()[-1]
        counts[kind] = counts.get(kind, 0) + 1
    lines += ["", "Convolution inputs by layout: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), ""]
    out = Path(__file__).with_name(f"conv_layouts_{args.network}_{device.type}.md")
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
