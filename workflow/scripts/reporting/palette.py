"""One palette per meaning: a colour per variant, per kernel class, per instruction kind and per sampler, the same in
every figure and panel, and far enough from every other colour a figure can show beside it.

Distances are CIEDE2000 colour differences (`colour_distance`): every two colours of one palette differ by at least
MIN_DISTANCE, and the legibility tests check the same of every two colours a figure draws together. A figure never
shows two palettes where their colours would come closer than that (fig11's rungs are variants; the kernel mix by class
is fig01's).

Variants: the paper's four keep the colours they have always had (grey baseline, blue TF32,
orange channels-last, green TF32 + channels-last), the variants beyond the paper take colours chosen to lie as far as
possible from those and from each other; a variant added later takes one from a further list by a stable hash of its
name, so adding a variant never recolours another one (two added variants may share a colour, and an added one lies
closer to the listed ones: their names are always printed beside their marks). Kernel classes: matplotlib's tab10 in
class order, two of them replaced where tab10's were too close, and a light grey for `other`.
"""

from __future__ import annotations

import hashlib
import math

from matplotlib.colors import to_rgb

from profiling.instructions import CATEGORY_NAMES
from profiling.kernels import CLASS_NAMES

MIN_DISTANCE = 20.0  # CIEDE2000: two colours shown together differ at least this much

VARIANT_COLORS: dict[str, str] = {
    # the paper's variants and PyTorch's defaults
    "baseline": "#848482",             # grey: the reference every other variant is compared with
    "torch_defaults": "#ddbb44",       # gold
    "tf32": "#0067a5",                 # blue
    "channels_last": "#f38400",        # orange
    "tf32_channels_last": "#008856",   # green
    # beyond the paper (config.yaml `variants`)
    "bf16": "#9966cc",                 # purple
    "bf16_channels_last": "#ffaaee",   # light pink
    "bf16_channels_last_fused": "#aa0066",  # magenta
    "bf16_channels_last_fused_compile": "#88aaff",  # periwinkle
    "bf16_compile": "#ffbbaa",         # salmon
    "bf16_compile_tuned": "#779900",   # olive
    "bf16_checkpoint_all": "#996600",  # ochre
    "frontier": "#ee5566",             # red
    "frontier_channels_last": "#88ddaa",  # mint
    "frontier_max_autotune": "#555522",   # dark olive
    "frontier_ndhwc": "#993322",          # brick
    "frontier_graphed": "#00ddff",        # cyan
}
# For variants not listed above: each as far from the listed colours as the rest allows (none is one of them).
EXTRA_COLORS = ("#008899", "#bb7799", "#664488", "#44aa99", "#bb7755", "#aa99cc", "#116600", "#998855")


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
# tab10's purple and brown lie too close to its pink and red (CIEDE2000 17 and 16): layout conversion and dtype cast
# take a deeper purple and an olive brown.
CLASS_COLORS: dict[str, str] = {name: (_TAB10 + ("#c7c7c7",))[k] for k, name in enumerate(CLASS_NAMES)} | {
    "layout_conversion": "#773399", "dtype_cast": "#665500"}


def class_color(kernel_class: str) -> str:
    return CLASS_COLORS.get(kernel_class, "#c7c7c7")


# Instruction kinds (fig03, profiling.instructions.CATEGORIES); "not split" is a light grey drawn hatched.
_INSTRUCTION_LIST = ("#4e79a7", "#e15759", "#f28e2b", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#665500")
INSTRUCTION_COLORS: dict[str, str] = (
    dict(zip([n for n in CATEGORY_NAMES if n != "not_split"], _INSTRUCTION_LIST)) | {"not_split": "#d9d9d9"})

# Samplers (fig12; medddpm.samplers): the Okabe-Ito colours, each with its marker; the T-step chain is a black star.
SAMPLER_COLORS = {"deis_ipndm": "#0072b2", "deis_ipndm_as_shipped": "#56b4e9", "ddim": "#e69f00",
                  "dpm_solver_pp_2m": "#009e73"}
SAMPLER_MARKERS = {"deis_ipndm": "o", "deis_ipndm_as_shipped": "v", "ddim": "s", "dpm_solver_pp_2m": "D"}
OTHER_SAMPLER = "#7f7f7f"  # a sampler not listed above

PALETTES = {"variant": VARIANT_COLORS, "class": CLASS_COLORS, "kind": INSTRUCTION_COLORS, "sampler": SAMPLER_COLORS}


# -- colour difference ------------------------------------------------------------------------------------------------
def _lab(colour) -> tuple[float, float, float]:
    """CIELAB (D65) of an sRGB colour."""
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(colour)]
    matrix = ((0.4124564, 0.3575761, 0.1804375), (0.2126729, 0.7151522, 0.0721750), (0.0193339, 0.1191920, 0.9503041))
    white = (0.95047, 1.0, 1.08883)
    xyz = [sum(m * c for m, c in zip(row, linear)) / w for row, w in zip(matrix, white)]
    f = [v ** (1 / 3) if v > (6 / 29) ** 3 else v / (3 * (6 / 29) ** 2) + 4 / 29 for v in xyz]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def delta_e_2000(lab1, lab2) -> float:
    """CIEDE2000 difference of two CIELAB colours (Sharma, Wu and Dalal 2005, equations 1-22)."""
    (l1, a1, b1), (l2, a2, b2) = lab1, lab2
    c_mean = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_mean ** 7 / (c_mean ** 7 + 25 ** 7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = math.hypot(a1p, b1), math.hypot(a2p, b2)
    h1p = math.degrees(math.atan2(b1, a1p)) % 360 if c1p else 0.0
    h2p = math.degrees(math.atan2(b2, a2p)) % 360 if c2p else 0.0
    dh = 0.0 if c1p * c2p == 0 else (h2p - h1p + 180) % 360 - 180
    d_l, d_c = l2 - l1, c2p - c1p
    d_h = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dh / 2))
    l_mean, cp_mean = (l1 + l2) / 2, (c1p + c2p) / 2
    if c1p * c2p == 0:
        h_mean = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        h_mean = (h1p + h2p) / 2
    else:
        h_mean = (h1p + h2p + 360) / 2 if h1p + h2p < 360 else (h1p + h2p - 360) / 2
    t = (1 - 0.17 * math.cos(math.radians(h_mean - 30)) + 0.24 * math.cos(math.radians(2 * h_mean))
         + 0.32 * math.cos(math.radians(3 * h_mean + 6)) - 0.20 * math.cos(math.radians(4 * h_mean - 63)))
    rotation = 30 * math.exp(-(((h_mean - 275) / 25) ** 2))
    r_c = 2 * math.sqrt(cp_mean ** 7 / (cp_mean ** 7 + 25 ** 7))
    s_l = 1 + 0.015 * (l_mean - 50) ** 2 / math.sqrt(20 + (l_mean - 50) ** 2)
    s_c, s_h = 1 + 0.045 * cp_mean, 1 + 0.015 * cp_mean * t
    r_t = -math.sin(math.radians(2 * rotation)) * r_c
    return math.sqrt((d_l / s_l) ** 2 + (d_c / s_c) ** 2 + (d_h / s_h) ** 2 + r_t * (d_c / s_c) * (d_h / s_h))


def colour_distance(a, b) -> float:
    """How far apart two colours look (CIEDE2000 of their CIELAB values; about 2: just noticeable side by side)."""
    return delta_e_2000(_lab(a), _lab(b))


def closest_pair(palette: dict[str, str]) -> tuple[float, str, str]:
    """The two entries of a palette whose colours lie closest, with their distance."""
    names = list(palette)
    return min(((colour_distance(palette[x], palette[y]), x, y) for k, x in enumerate(names) for y in names[k + 1:]),
               default=(math.inf, "", ""))
