"""How many replay passes Nsight Compute needs per kernel for each metric set and section list, on this GPU.

One small CUDA program (a Conv3d, a GroupNorm and a SiLU of the U-Net's kind, 16^3, after a warm-up) is profiled once per
configuration between cudaProfilerStart/Stop; ncu's log line per kernel ('==PROF== Profiling "NAME" - ID: ... - N
passes') gives the passes. The pass count depends on the counters asked for and the chip, not on the kernel's size.
For configurations that name sections, the details page says which rules ran and how their speedups were typed.

    python3 pass_probe.py OUT_FOLDER            (on a machine with a GPU and ncu; reads config/ncu-metrics.yaml)
    python3 pass_probe.py OUT_FOLDER hit_rates  (the cache hit rates of a residual block's kernels under four metric
                                                 and section lists, each run twice: pass_probe_hit_rates.csv)
    python3 pass_probe.py OUT_FOLDER hit_rate_fixes  (the same with the new set and one L2 metric of SpeedOfLight
                                                      added each)
    python3 pass_probe.py OUT_FOLDER memory_floor    (the training step's candidate sets with the DRAM bytes; the
                                                      most complete that fits one pass is written as an overlay,
                                                      OUT_FOLDER/memory_floor_set.yaml: ../h200-2026-12-05-dram-passes/)
"""

from __future__ import annotations

import csv
import glob
import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
SETS = yaml.safe_load((REPO / "config" / "ncu-metrics.yaml").read_text())
SM90 = ["sm__inst_executed_pipe_tensor_op_gmma.sum", "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio"]
SECTIONS = ["SpeedOfLight", "LaunchStats", "Occupancy", "WarpStateStats"]
STALLS = [m for m in SETS["paper_instruction_mix"] if m.startswith("smsp__average_warps_issue_stalled_")]
PROGRAM = """
import torch
x = torch.randn(1, 64, 16, 16, 16, device="cuda")
conv = torch.nn.Conv3d(64, 64, 3, padding=1).cuda()
norm = torch.nn.GroupNorm(8, 64).cuda()
with torch.no_grad():
    for _ in range(2):
        conv(torch.nn.functional.silu(norm(x)))
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    conv(torch.nn.functional.silu(norm(x)))
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
"""
BLOCK = """
import torch
torch.backends.cudnn.allow_tf32 = True
torch.backends.cuda.matmul.allow_tf32 = True
x = torch.randn(1, 64, 32, 32, 32, device="cuda")
layers = [torch.nn.GroupNorm(8, 64), torch.nn.SiLU(), torch.nn.Conv3d(64, 64, 3, padding=1),
          torch.nn.GroupNorm(8, 64), torch.nn.SiLU(), torch.nn.Conv3d(64, 64, 3, padding=1)]
block = torch.nn.Sequential(*layers).cuda()
def step():
    y = block(x) + x
    z = torch.nn.functional.interpolate(y[:, :, ::2, ::2, ::2], scale_factor=2, mode="trilinear")
    return torch.cat([y, z], dim=1).sum()
with torch.no_grad():
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    step()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
"""
HIT_RATES = ["lts__t_sector_hit_rate.pct", "l1tex__t_sector_hit_rate.pct"]


def hit_rate_configurations() -> dict[str, tuple[list[str], list[str]]]:
    pim = SETS["paper_instruction_mix"] + SM90
    figures = SETS["paper_figures"] + SM90[1:]
    return {
        "shipped: paper_instruction_mix + 4 sections": (pim, SECTIONS),
        "new: paper_figures (no wgmma count) + 3 sections": (figures, SECTIONS[1:]),
        "paper_instruction_mix (no wgmma count) + 3 sections": (pim[:-2] + SM90[1:], SECTIONS[1:]),
        "paper_figures (no wgmma count) + 4 sections": (figures, SECTIONS),
    }


def hit_rate_fixes() -> dict[str, tuple[list[str], list[str]]]:
    """The new set and sections with one SpeedOfLight metric of the L2 added each."""
    figures = SETS["paper_figures"] + SM90[1:]
    added = ["lts__t_sectors.avg.pct_of_peak_sustained_elapsed", "lts__throughput.avg.pct_of_peak_sustained_elapsed",
             "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "lts__t_sectors_lookup_hit.sum"]
    return {f"new + {metric}": (figures + [metric], SECTIONS[1:]) for metric in added}


def hit_rates(out: Path, ncu: str, configurations=hit_rate_configurations) -> None:
    program = out / "block.py"
    program.write_text(BLOCK)
    frames = []
    for repeat in (1, 2):
        for number, (name, (metrics, sections)) in enumerate(configurations().items()):
            report = out / f"hit{number}_{repeat}"
            argv = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--metrics", ",".join(metrics)]
            for section in sections:
                argv += ["--section", section]
            argv += ["-o", str(report), "-f", sys.executable, str(program)]
            done = subprocess.run(argv, capture_output=True, text=True)
            passes = sorted(set(re.findall(r"- (\d+) pass", done.stdout)))
            page = subprocess.run([ncu, "-i", f"{report}.ncu-rep", "--csv", "--page", "raw"], capture_output=True,
                                  text=True).stdout
            Path(f"{report}.ncu-rep").unlink(missing_ok=True)
            rows = list(csv.reader(io.StringIO("".join(l for l in page.splitlines(True) if not l.startswith("==")))))
            head = rows[0]
            for kernel, row in enumerate(rows[2:]):
                frames.append({"configuration": name, "repeat": repeat, "passes": "/".join(passes), "kernel": kernel,
                               "name": row[head.index("Kernel Name")][:60],
                               **{m: row[head.index(m)] for m in HIT_RATES}})
            print(f"{name} (run {repeat}): passes {passes}, {len(rows) - 2} kernels", flush=True)
    with open(out / "pass_probe_hit_rates.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(frames[0]))
        writer.writeheader()
        writer.writerows(frames)
    program.unlink()


def configurations() -> dict[str, tuple[list[str], list[str]]]:
    pim = SETS["paper_instruction_mix"] + SM90
    figures = SETS["paper_figures"] + SM90
    no_wgmma = [m for m in figures if m != SM90[0]]
    sol = ["sm__throughput.avg.pct_of_peak_sustained_elapsed",
           "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"]
    return {
        "paper_instruction_mix + 4 sections (shipped sampling profile)": (pim, SECTIONS),
        "paper_instruction_mix, no sections": (pim, []),
        "paper_figures": (figures, []),
        "paper_figures without the wgmma count": (no_wgmma, []),
        "paper_figures + 4 sections": (figures, SECTIONS),
        "paper_figures + LaunchStats, Occupancy, WarpStateStats": (figures, SECTIONS[1:]),
        "paper_figures without stall reasons": ([m for m in figures if m not in STALLS and m != SM90[1]], []),
        "SpeedOfLight alone": ([], ["SpeedOfLight"]),
        "sm__throughput + gpu__compute_memory_throughput alone": (sol, []),
        "WarpStateStats alone": ([], ["WarpStateStats"]),
        "LaunchStats + Occupancy alone": ([], ["LaunchStats", "Occupancy"]),
        "train_one_pass (+ wgmma count)": (SETS["train_one_pass"] + SM90[:1], []),
    }


DRAM = ["dram__bytes_read.sum", "dram__bytes_write.sum"]
# What instructions.kernel_flop counts FLOPs from: the tensor-op paths and the FP32 arithmetic instructions.
FLOP_COUNTERS = [m for m in SETS["paper_figures"] if m.startswith("sm__ops_path_tensor_")
                 or m.endswith(("_ffma_pred_on.sum", "_fadd_pred_on.sum", "_fmul_pred_on.sum"))]


def memory_floor_configurations() -> dict[str, tuple[list[str], list[str]]]:
    """The training step's candidate sets with the DRAM bytes (profiling/memory_floor.py reads them), most complete
    first, and the one-pass set as it is (one pass: the check)."""
    one, gmma = SETS["train_one_pass"], SM90[:1]
    time_cycles = one[:2]  # gpu__time_duration.sum, sm__cycles_elapsed.max
    return {
        "train_one_pass + wgmma count + DRAM bytes + FLOP counters": (one + gmma + DRAM + FLOP_COUNTERS, []),
        "train_one_pass + wgmma count + DRAM bytes": (one + gmma + DRAM, []),
        "train_one_pass + DRAM bytes": (one + DRAM, []),
        "time, cycles, warp instructions, IPC + DRAM bytes": (time_cycles + one[2:4] + DRAM, []),
        "time, cycles, warp instructions + DRAM bytes": (time_cycles + one[2:3] + DRAM, []),
        "time, cycles + DRAM bytes": (time_cycles + DRAM, []),
        "time + DRAM bytes": (one[:1] + DRAM, []),
        "train_one_pass + wgmma count": (one + gmma, []),
    }


def memory_floor_overlay(results: list[dict], sets: dict[str, tuple[list[str], list[str]]]) -> dict | None:
    """An overlay of the training step's metrics: the first set with the DRAM bytes whose every kernel took one pass
    (config.yaml's by_architecture.sm90 adds the wgmma count to every phase: dropped for the training step unless the
    set has it). None where no candidate fits one pass."""
    for result in results:
        metrics = sets[result["configuration"]][0]
        if result["returncode"] == 0 and result["passes"] and set(result["passes"]) == {1} and DRAM[0] in metrics:
            removed = [SM90[1]] + ([] if SM90[0] in metrics else SM90[:1])
            return {"profiling": {"ncu": {"by_phase": {"train": {"metrics": metrics}},
                                          "by_architecture": {"sm90": {"by_phase": {"train": {
                                              "metrics_remove": removed}}}}}}}
    return None


def probe(out: Path, ncu: str, configurations: dict[str, tuple[list[str], list[str]]]) -> list[dict]:
    """Every configuration's passes per kernel (and, with sections, the rules' speedup types) on PROGRAM."""
    program = out / "program.py"
    program.write_text(PROGRAM)
    results = []
    for number, (name, (metrics, sections)) in enumerate(configurations.items()):
        report = out / f"probe{number}"
        argv = [ncu, "--clock-control", "none", "--profile-from-start", "off"]
        argv += ["--metrics", ",".join(metrics)] if metrics else []
        for section in sections:
            argv += ["--section", section]
        argv += ["-o", str(report), "-f", sys.executable, str(program)]
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        passes = [int(p) for p in re.findall(r"- (\d+) pass", done.stdout + done.stderr)]
        rules = {}
        if sections and done.returncode == 0:
            page = subprocess.run([ncu, "-i", f"{report}.ncu-rep", "--csv", "--page", "details"], capture_output=True,
                                  text=True).stdout
            rows = list(csv.reader(io.StringIO("".join(l for l in page.splitlines(True) if not l.startswith("==")))))
            head = rows[0] if rows else []
            if "Rule Name" in head:
                r, t, s = head.index("Rule Name"), head.index("Estimated Speedup Type"), head.index("Estimated Speedup")
                for row in rows[1:]:
                    if len(row) > s and row[r]:
                        rules.setdefault(row[r], set()).add((row[t], row[s]) if row[s] else (row[t], ""))
            rules = {k: sorted(v)[:4] for k, v in rules.items()}
        Path(f"{report}.ncu-rep").unlink(missing_ok=True)
        results.append({"configuration": name, "metrics": len(metrics), "sections": sections, "passes": passes,
                        "seconds": round(seconds, 1), "returncode": done.returncode, "rules": rules,
                        "tail": (done.stdout + done.stderr)[-300:] if done.returncode else ""})
        print(f"{name}: passes {passes} ({len(metrics)} metrics, sections {sections}), {seconds:.1f} s", flush=True)
        for rule, values in rules.items():
            print(f"    rule {rule}: {values}", flush=True)
    return results


def main(out: Path, mode: str = "passes") -> None:
    ncu = (subprocess.run(["which", "ncu"], capture_output=True, text=True).stdout.strip()
           or sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"))[-1])
    if mode == "hit_rates":
        return hit_rates(out, ncu)
    if mode == "hit_rate_fixes":
        return hit_rates(out, ncu, hit_rate_fixes)
    if mode == "memory_floor":
        sets = memory_floor_configurations()
        results = probe(out, ncu, sets)
        (out / "pass_probe_memory_floor.json").write_text(json.dumps(results, indent=1))
        overlay = memory_floor_overlay(results, sets)
        if overlay is None:
            print("no candidate with the DRAM bytes fits one pass: the three-pass train_memory_floor set stays")
        else:
            (out / "memory_floor_set.yaml").write_text(yaml.safe_dump(overlay, sort_keys=False))
            print(f"one pass with the DRAM bytes: {overlay['profiling']['ncu']['by_phase']['train']['metrics']}")
        return
    results = probe(out, ncu, configurations())
    (out / "pass_probe.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:])
