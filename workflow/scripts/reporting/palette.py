"""One colour per variant, per kernel class and per instruction kind, the same in every figure and panel.

Variants: the paper's four, PyTorch's defaults and the configured variants beyond the paper have fixed colours (Kelly's
colours of maximum contrast, none repeated); a variant added later takes one from a further list by a stable hash of
its name, so adding a variant never recolours another one (two added variants may share a colour: their names are
always printed beside their marks). Kernel classes: matplotlib's tab10 in class order and a light grey for `other`.
"""

from __future__ import annotations

import hashlib

from profiling.instructions import CATEGORY_NAMES
from profiling.kernels import CLASS_NAMES

VARIANT_COLORS: dict[str, str] = {
    # the paper's variants and PyTorch's defaults
    "baseline": "#848482",             # grey: the reference every other variant is compared with
    "torch_defaults": "#c2b280",       # buff
    "tf32": "#0067a5",                 # blue
    "channels_last": "#f38400",        # orange
    "tf32_channels_last": "#008856",   # green
    # beyond the paper (config.yaml `variants`)
    "bf16": "#875692",                 # purple
    "bf16_channels_last": "#e68fac",   # purplish pink
    "bf16_channels_last_fused": "#b3446c",  # purplish red
    "bf16_channels_last_fused_compile": "#604e97",  # violet
    "bf16_compile": "#a1caf1",         # light blue
    "bf16_compile_tuned": "#8db600",   # yellow green
    "bf16_checkpoint_all": "#f3c300",  # yellow
    "frontier": "#be0032",             # red
    "frontier_channels_last": "#f99379",  # yellowish pink
    "frontier_max_autotune": "#882d17",   # reddish brown
    "frontier_ndhwc": "#2b3d26",          # olive green
    "frontier_graphed": "#e25822",        # reddish orange
}
# For variants not listed above: none of these is a colour above.
EXTRA_COLORS = ("#dcd300", "#654522", "#f6a600", "#393b79", "#637939", "#7b4173", "#17becf", "#8c6d31")


def variant_color(variant: str) -> str:
    """The variant's colour: fixed for the listed variants, else chosen by a hash of the name (stable across runs,
    processes and the set of variants drawn)."""
    if variant in VARIANT_COLORS:
        return VARIANT_COLORS[variant]
    digest = int.from_bytes(hashlib.sha256(str(variant).encode()).digest()[:4], "big")
    return EXTRA_COLORS[digest % len(EXTRA_COLORS)]


_TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
          "#17becf")
# tab10 holds ten colours and there are eleven classes: the eleventh ("other", last) is a light grey unlike any of them.
CLASS_COLORS: dict[str, str] = {name: (_TAB10 + ("#c7c7c7",))[k] for k, name in enumerate(CLASS_NAMES)}


def class_color(kernel_class: str) -> str:
    return CLASS_COLORS.get(kernel_class, "#c7c7c7")


# Instruction kinds (fig03, profiling.instructions.CATEGORIES); "not split" is a light grey drawn hatched.
_INSTRUCTION_LIST = ("#4e79a7", "#e15759", "#f28e2b", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#9c755f")
INSTRUCTION_COLORS: dict[str, str] = (
    dict(zip([n for n in CATEGORY_NAMES if n != "not_split"], _INSTRUCTION_LIST)) | {"not_split": "#d9d9d9"})
