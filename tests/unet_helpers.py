"""A U-Net small enough for many CPU tests: every block kind of the faithful network (ResBlocks with and without a
skip convolution, attention in the encoder, middle and decoder, down- and upsampling), 1.8 M parameters at 8^3."""

import contextlib

import torch

from config_settings import unet
from medddpm.unet import UNet3D

TINY = unet(channel_mult=(1, 2), attention_downsample_rates=(2,))  # config.yaml's network, two levels
TINY_SHAPE = (8, 8, 8)


def tiny_unet(seed: int = 0) -> UNet3D:
    """The tiny U-Net with every parameter drawn at random: the zero-initialised output convolutions of a fresh
    network would make most gradients zero and hide differences."""
    torch.manual_seed(seed)
    model = UNet3D(TINY)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.05)
    return model


def tiny_inputs(seed: int = 1, shape=TINY_SHAPE):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(1, TINY.in_channels, *shape, generator=generator)
    return x, torch.tensor([3])


def forward_backward(model, x, t, context=None):
    """Output and parameter gradients (by name) of one forward and backward of an L1-like loss."""
    model.zero_grad(set_to_none=True)
    if context is None:
        out = model(x, t)
    else:
        with context:
            out = model(x, t)
    out.float().abs().mean().backward()
    return out.detach(), {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def same_function_in_float64(plain, switched, device) -> dict:
    """Asserts the two U-Nets give the same output and parameter gradients on the tiny inputs in float64, channels-last
    on `device` (each gradient against the scale of all: a convolution's bias before a norm of one channel per group
    has a gradient of zero, and rounding-sized values there); returns the plain one's gradients by name."""
    x, t = tiny_inputs()
    x, t = x.double().to(device).contiguous(memory_format=torch.channels_last_3d), t.to(device)
    (out, grads), (out_switched, grads_switched) = (forward_backward(m, x, t) for m in (plain, switched))
    assert float(torch.linalg.vector_norm(out_switched - out) / torch.linalg.vector_norm(out)) < 1e-12
    scale = float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads.values()])))
    for name, grad in grads.items():
        assert float(torch.linalg.vector_norm(grads_switched[name] - grad)) < 1e-12 * scale, name
    return grads


def compiled_denoise_kernels(shape=(16, 16, 16), **switches):
    """One forward and backward of the tiny U-Net through GaussianDiffusion.denoise, compiled in bfloat16
    channels-last with the frontier's switches plus `switches`, on the GPU after two warm-up calls (the first
    compiles): the output (float32) and the names of the CUDA kernels that ran."""
    from torch.profiler import ProfilerActivity, profile

    from medddpm.diffusion import GaussianDiffusion
    from medddpm.variants import Variant, apply_backend, autocast, compile_model, prepare_model

    cuda = torch.device("cuda")
    inputs, t = tiny_inputs(shape=shape)
    noise, mask, t = inputs[:, :1].contiguous().to(cuda), inputs[:, 1:].to(cuda), t.to(cuda)
    mask = mask.contiguous(memory_format=torch.channels_last_3d)
    frontier = dict(autocast="bfloat16", compile="default", checkpointing="none", gather_upsampling=True, ndhwc=True)
    variant = Variant("v", True, True, True, **frontier, **switches)
    apply_backend(variant)
    torch._dynamo.reset()
    model = prepare_model(tiny_unet().to(cuda), variant, cuda)
    compile_model(model, variant)
    diffusion = GaussianDiffusion(model, timesteps=10)
    with autocast(variant, cuda):
        for _ in range(2):
            out = diffusion.denoise(noise, mask, t)
            out.float().abs().mean().backward()
        model.zero_grad(set_to_none=True)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            out = diffusion.denoise(noise, mask, t)
            out.float().abs().mean().backward()
            torch.cuda.synchronize()
    return out.detach().float(), [e.name for e in prof.events() if e.device_type.name == "CUDA"]


def layout(tensor: torch.Tensor) -> str:
    """NDHWC, NCDHW, either (a shape both describe, e.g. one channel) or other, for a 5-D tensor."""
    if tensor.dim() != 5:
        return f"{tensor.dim()}-D"
    last, first = tensor.is_contiguous(memory_format=torch.channels_last_3d), tensor.is_contiguous()
    return {(True, True): "either", (True, False): "NDHWC", (False, True): "NCDHW"}.get((last, first), "other")


@contextlib.contextmanager
def inductor_convolutions():
    """Every convolution that inductor's generated code runs inside the block, in call order: its input, weight and
    output tensors as cuDNN (or the CPU's library) receives them, and its stride. The generated code looks up
    `extern_kernels.convolution` at each call, so wrapping it sees the layouts inductor chose."""
    from torch._inductor.select_algorithm import extern_kernels

    calls = []
    convolve = extern_kernels.convolution

    def recording(x, weight, *args, **kwargs):
        out = convolve(x, weight, *args, **kwargs)
        calls.append({"input": x, "weight": weight, "output": out, "stride": kwargs.get("stride", "?")})
        return out

    extern_kernels.convolution = recording
    try:
        yield calls
    finally:
        extern_kernels.convolution = convolve


@contextlib.contextmanager
def gradient_convolutions():
    """Every gradient convolution (aten.convolution_backward) dispatched inside the block, eager or from inductor's
    generated code (its fallback goes through the dispatcher), in call order: the gradient, input and weight tensors
    as the library receives them, and the output mask (input, weight, bias gradients)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    calls = []

    class Recording(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.convolution_backward.default:
                calls.append({"gradient": args[0], "input": args[1], "weight": args[2], "mask": args[-1]})
            return func(*args, **(kwargs or {}))

    with Recording():
        yield calls
