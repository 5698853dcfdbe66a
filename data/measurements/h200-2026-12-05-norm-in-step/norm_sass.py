"""What the NDHWC norm kernels' instructions are: each activation pass of medddpm.ndhwc_norm compiled for sm_90 (the
H200) by this machine's Triton, without a GPU (Triton's own ptxas and cuobjdump), at the largest site (128 channels
of 128^3, bfloat16), with the specialisation Triton's launcher gives those arguments (pointers and integers divisible
by 16 marked so, as its JIT does), and its SASS counted per element of the activation.

A sums pass loops over tiles: its instructions per element are the loop body's over the elements one thread handles
per tile. An apply pass handles one tile per program: the whole kernel's over the elements per thread. Each count sits
beside what Nsight Compute measured for the same pass in frontier_graphed's profiled step
(smsp__thread_inst_executed.sum per element: norm_issue.py), compiled there by the Triton of the GPU machine.

    python3 data/measurements/h200-2026-12-05-norm-in-step/norm_sass.py > data/measurements/h200-2026-12-05-norm-in-step/norm_sass.md
"""

from __future__ import annotations

import collections
import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "workflow" / "scripts"))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from medddpm import ndhwc_norm  # noqa: E402

sys.path.insert(0, str(HERE))
from norm_issue import LARGEST, pass_rows  # noqa: E402

WARPS = 4
CHANNELS, VOXELS, GROUPS, PROGRAMS = 128, 128**3, 32, 1024
TOOLS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
# SASS opcodes by what they do for an element.
GROUPS_OF = {
    "memory": {"LDG", "STG"},
    "type conversion": {"F2F", "SHF", "PRMT", "F2FP", "I2F"},
    "special function (exp2, reciprocal)": {"MUFU"},
    "float arithmetic": {"FMUL", "FADD", "FFMA", "HFMA2", "FMNMX"},
    "float compare and select": {"FSETP", "FSEL"},
}


def compiled(kernel, pointers: dict[str, str], integers: dict[str, int], constants: dict[str, int]) -> bytes:
    """The cubin of `kernel` for sm_90, its integer arguments specialised as Triton's launcher does for these values."""
    names = kernel.arg_names
    signature = {**pointers, **dict.fromkeys(integers, "i32"), **dict.fromkeys(constants, "constexpr")}
    divisible = [name for name in pointers] + [name for name, value in integers.items() if value % 16 == 0]
    source = ASTSource(fn=kernel, signature=signature,
                       constexprs={(names.index(name),): value for name, value in constants.items()},
                       attrs={(names.index(name),): [["tt.divisibility", 16]] for name in divisible})
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": WARPS}).asm["cubin"]


def sass(cubin: bytes) -> tuple[list[tuple[int, str, int | None]], int]:
    """(address, opcode, branch target or None) of every instruction, and the registers per thread (cuobjdump)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        text = subprocess.run([TOOLS / "cuobjdump", "-sass", file.name], capture_output=True, text=True).stdout
        usage = subprocess.run([TOOLS / "cuobjdump", "-res-usage", file.name], capture_output=True, text=True).stdout
    pattern = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(?:\S*\s+0x([0-9a-f]+))?")
    found = [m for m in map(pattern.search, text.splitlines()) if m]
    return ([(int(m.group(1), 16), m.group(2), int(m.group(3), 16) if m.group(2) == "BRA" and m.group(3) else None)
             for m in found], int(re.search(r"REG:(\d+)", usage).group(1)))


def loop_body(instructions: list[tuple[int, str, int | None]]) -> list[str]:
    """The opcodes of the kernel's loop (from a backward branch's target to the branch), or of the whole kernel where
    no branch jumps back (the final self-branch that pads the code excepted)."""
    for address, opcode, target in instructions:
        if opcode == "BRA" and target is not None and target < address:
            return [o for a, o, _ in instructions if target <= a <= address]
    return [o for a, o, t in instructions if not (o == "BRA" and t == a)]


def main() -> None:
    tiling = ndhwc_norm.TILING
    rows = {"forward sums": tiling.forward_sums_elements // CHANNELS,
            "backward sums": tiling.backward_sums_elements // CHANNELS, "apply": tiling.apply_elements // CHANNELS}
    common = dict(S=VOXELS, C=CHANNELS, CPG=CHANNELS // GROUPS)
    statistics = dict(w_ptr="*fp32", b_ptr="*fp32", mean_ptr="*fp32", rstd_ptr="*fp32")
    passes = {
        "forward sums": (ndhwc_norm._forward_sums, dict(x_ptr="*bf16", sums_ptr="*fp32"),
                         dict(**common, TILES=VOXELS // rows["forward sums"], PARTS=PROGRAMS, PLANE=PROGRAMS * CHANNELS),
                         rows["forward sums"]),
        "forward apply": (ndhwc_norm._forward_apply, dict(x_ptr="*bf16", y_ptr="*bf16", **statistics),
                          dict(**common, G=GROUPS, TILES=VOXELS // rows["apply"]), rows["apply"]),
        "backward sums": (ndhwc_norm._backward_sums, dict(x_ptr="*bf16", dy_ptr="*bf16", **statistics,
                                                          sums_ptr="*fp32"),
                          dict(**common, G=GROUPS, TILES=VOXELS // rows["backward sums"], PARTS=PROGRAMS,
                               PLANE=PROGRAMS * CHANNELS), rows["backward sums"]),
        "backward apply": (ndhwc_norm._backward_apply, dict(x_ptr="*bf16", dy_ptr="*bf16", dx_ptr="*bf16",
                                                            **statistics, pqr_ptr="*fp32"),
                           dict(N=1, **common, G=GROUPS, TILES=VOXELS // rows["apply"]), rows["apply"]),
    }
    # What Nsight Compute measured per element for each pass at this site in the profiled step (norm_issue.py); the
    # copy bandwidth does not enter the instruction counts.
    measured = {row["pass"]: row["per_element"] for row in pass_rows(math.nan) if row["site"] == LARGEST[0]}
    print(f"Triton {triton.__version__}, sm_90, {WARPS} warps, {CHANNELS} channels of 128^3 in bfloat16 (the tiles of "
          "ndhwc_norm.TILING); instructions per element of the activation.\n")
    groups = list(GROUPS_OF) + ["integer and other"]
    print("| pass | elements per thread and tile | registers | SASS per element | " + " | ".join(groups)
          + " | measured (Nsight Compute, step) |")
    print("|---|---:|---:|---:|" + "---:|" * len(groups) + "---:|")
    for name, (kernel, pointers, integers, block_s) in passes.items():
        # N=1 is what Triton's launcher specialises to a constant; the compile here takes it as an integer like C.
        instructions, registers = sass(compiled(kernel, pointers, integers,
                                                dict(FP64=False, BLOCK_S=block_s, BLOCK_C=CHANNELS)))
        body = loop_body(instructions)
        per_thread = block_s * CHANNELS // (32 * WARPS)
        counts = collections.Counter(body)
        grouped = {group: sum(counts[o] for o in opcodes) for group, opcodes in GROUPS_OF.items()}
        grouped["integer and other"] = len(body) - sum(grouped.values())
        print(f"| {name} | {per_thread} | {registers} | {len(body) / per_thread:.1f} | "
              + " | ".join(f"{grouped[g] / per_thread:.1f}" for g in groups) + f" | {measured[name]:.1f} |")


if __name__ == "__main__":
    main()
