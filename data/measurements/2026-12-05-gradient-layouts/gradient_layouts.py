"""Which convolutions of a rung's compiled training step receive their gradient in NCDHW, as they run.

The profile of frontier_edges's training step on an H100 (../2026-12-05-conv-layouts/h100-pinned/) still shows
cuDNN's layout copies before some gradient convolutions: 48 per optimizer step, 2.7 ms, the largest three 336 us each,
right after a Triton kernel that adds gradients (a residual's). The forward's convolutions all read NDHWC since the
pinning; this records the backward's. One forward and backward of the U-Net through `GaussianDiffusion.loss_at` (the
training loss, the rung's autocast, inputs laid out by `prepare_input`), compiled with the rung's switches from
config.yaml; after a first step (which compiles), a second runs its backward under a dispatch mode that records each
`aten.convolution_backward` call inductor's generated code makes: the gradient's, the input's and the weight's shapes
and layouts as cuDNN receives them. Writes `gradient_layouts_<rung>_<network>_<device>.md` beside the script.

    python3 gradient_layouts.py --network tiny            # the tests' two-level U-Net at 16^3 (seconds on a GPU)
    python3 gradient_layouts.py --network wholehead       # config/paper.yaml's network at 128^3 (a GPU's minute)

On a CPU inductor lays 3-D convolutions out NCDHW, so only a GPU run answers the question; the CPU run checks the
script."""

import argparse
import sys
from collections import Counter
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
from unet_helpers import TINY, gradient_convolutions, layout  # noqa: E402


def described(tensor: torch.Tensor) -> str:
    """Shape and layout; a layout neither NCDHW nor NDHWC with its strides."""
    kind = layout(tensor)
    strides = f" {tuple(tensor.stride())}" if kind == "other" else ""
    return f"{'x'.join(map(str, tensor.shape))} {kind}{strides}"


def network(name: str) -> tuple[UNetConfig, int]:
    """The whole-head network at 128^3, or the tests' tiny one (unet_helpers.TINY) at 16^3."""
    if name == "wholehead":
        return paper_unet(), 128
    return TINY, 16


def recorded_gradient_convolutions(rung: str, config: UNetConfig, size: int, device: torch.device) -> list[dict]:
    """Each gradient convolution of the second compiled training step's backward, in call order."""
    variant = Variant.from_config(rung, yaml.safe_load((REPO / "config.yaml").read_text())["variants"][rung])
    apply_backend(variant)
    model = prepare_model(UNet3D(config).to(device), variant, device)
    compile_model(model, variant)
    diffusion = GaussianDiffusion(model, timesteps=10).to(device)
    x = prepare_input(torch.randn(1, 1, size, size, size, device=device), variant)
    condition = prepare_input(torch.randn(1, config.in_channels - 1, size, size, size, device=device), variant)
    t = torch.tensor([3], device=device)
    noise = torch.randn_like(x)
    for step in range(2):
        model.zero_grad(set_to_none=True)
        with autocast(variant, device):
            loss = diffusion.loss_at(x, condition, t, noise)
        if step == 0:
            loss.backward()  # compiles the backward too
            continue
        with gradient_convolutions() as calls:
            loss.backward()
    return [{"gradient": described(c["gradient"]), "input": described(c["input"]),
             "weight": described(c["weight"]), "mask": "".join("1" if m else "0" for m in c["mask"])}
            for c in calls]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", choices=("tiny", "wholehead"), default="tiny")
    parser.add_argument("--rung", default="frontier_edges", help="a variant of config.yaml")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    config, size = network(args.network)
    rows = recorded_gradient_convolutions(args.rung, config, size, device)
    where = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    lines = [f"# {args.rung}'s compiled training step: the layouts its gradient convolutions read", "",
             f"{args.network} network at {size}^3, {where}, torch {torch.__version__}. Output mask: input gradient, "
             "weight gradient, bias gradient.", "",
             "| # | gradient | input | weight | mask |", "|---:|---|---|---|---|"]
    lines += [f"| {i} | {r['gradient']} | {r['input']} | {r['weight']} | {r['mask']} |" for i, r in enumerate(rows)]
    counts = Counter(row["gradient"].split()[1] for row in rows)
    lines += ["", "Gradients by layout: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), ""]
    out = Path(__file__).with_name(f"gradient_layouts_{args.rung}_{args.network}_{device.type}.md")
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
