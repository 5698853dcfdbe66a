"""The U-Net's output convolution (64 channels to 1) in frontier_ndhwc's 128^3 training step on an H200, from the
shipped torch.profiler trace recorded with operator shapes (the same compiled step as frontier_graphed's, launched
without its CUDA graph): every kernel of the convolution's forward and backward operators (their weight is the only
one of shape 1x64x3x3x3), and the layout copy launched just before the forward, per micro-batch of one sample.

    PYTHONPATH=workflow/scripts python3 data/measurements/h200-2026-12-05-eval-floors/output_conv_train.py
"""

from __future__ import annotations

from pathlib import Path

from profiling.argument_bytes import kernel_operators
from profiling.torchprof import read_trace

ROOT = Path(__file__).resolve().parents[3]
TRACE = ROOT / "data/reference/wholehead/h200/frontier_ndhwc/profile/train/torch_trace.json.gz"
WEIGHT = [1, 64, 3, 3, 3]
CONVOLUTIONS = ("aten::cudnn_convolution", "aten::convolution_backward")


def main() -> None:
    kernels, owner = zip(*kernel_operators(read_trace(TRACE)))
    picked: dict[str, float] = {}
    forwards = 0
    for index, (kernel, op) in enumerate(zip(kernels, owner)):
        if op is None or op["name"] not in CONVOLUTIONS or WEIGHT not in op["args"].get("Input Dims", []):
            continue
        key = f"{op['name']}: {kernel['name'][:60]}"
        picked[key] = picked.get(key, 0.0) + float(kernel["dur"])
        first_of_forward = op["name"] == CONVOLUTIONS[0] and (index == 0 or owner[index - 1] is not op)
        if first_of_forward:
            forwards += 1
            before = index - 1  # the layout copy of the input, launched by the copy operator just before
            while before >= 0 and owner[before] is not None and owner[before]["name"] == "aten::copy_":
                name = f"aten::copy_ before it: {kernels[before]['name'][:60]}"
                picked[name] = picked.get(name, 0.0) + float(kernels[before]["dur"])
                before -= 1
    print(f"# The output convolution in frontier_ndhwc's training step (H200, {forwards} micro-batches)\n")
    print("| operator: kernel | us per micro-batch |")
    print("|---|---|")
    for key, total in sorted(picked.items(), key=lambda item: -item[1]):
        print(f"| {key} | {total / forwards:.0f} |")
    print(f"| all | {sum(picked.values()) / forwards:.0f} |")


if __name__ == "__main__":
    main()
