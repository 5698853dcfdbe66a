"""The norm bench (profiling.norm_bench): the U-Net's norm sites, the bytes and bandwidth of each Triton pass, the best
tiling of a sweep, the sums over the U-Net's sites; on a GPU the whole bench at a small volume."""

import json
from dataclasses import replace

import pandas as pd
import pytest
import torch

from medddpm import ndhwc_norm
from profiling import norm_bench

PAPER_MODEL = {"in_channels": 3, "out_channels": 1, "base_width": 64, "channel_mult": [1, 1, 2, 3, 4],
               "num_res_blocks": 1, "attention_downsample_rates": [8], "num_heads": 1, "dropout": 0.0}
# The distinct norm sites of the whole-head U-Net at 128^3 as a forward hook listed them on an H200
# (data/measurements/h200-2026-12-02-ndhwc/normbench.log), largest first.
RECORDED_SITES = [(1, 128, 128, 128, 128), (1, 64, 128, 128, 128), (1, 192, 64, 64, 64), (1, 128, 64, 64, 64),
                  (1, 64, 64, 64, 64), (1, 320, 32, 32, 32), (1, 192, 32, 32, 32), (1, 128, 32, 32, 32),
                  (1, 64, 32, 32, 32), (1, 448, 16, 16, 16), (1, 320, 16, 16, 16), (1, 192, 16, 16, 16),
                  (1, 128, 16, 16, 16), (1, 512, 8, 8, 8), (1, 448, 8, 8, 8), (1, 256, 8, 8, 8), (1, 192, 8, 8, 8)]


def test_the_norm_sites_are_the_ones_recorded_on_the_gpu():
    shapes = norm_bench.norm_sites(PAPER_MODEL, (128, 128, 128))
    assert len(shapes) == 35
    sites = norm_bench.site_counts(shapes)
    assert [tuple(int(v) for v in s.split("x")) for s in sites["shape"]] == RECORDED_SITES
    assert sites["count"].sum() == 35
    assert sites["elements"].iloc[0] == 128 * 128**3


def test_each_triton_pass_gets_its_bytes_and_bandwidth():
    """Two calls at a site of 1,000 bfloat16 elements: the forward sums pass reads x once (2,000 bytes in 1 us per
    call: 2 GB/s), the apply passes read and write, the statistics pass moves no activation."""
    kernels = pd.DataFrame({"name": ["_forward_sums", "_forward_sums", "_forward_statistics", "_forward_apply",
                                     "_backward_apply", "other_kernel"],
                            "duration_us": [1.0, 1.0, 0.5, 4.0, 6.0, 100.0]})
    rows = {(r["direction"], r["pass"]): r for r in norm_bench.pass_rows(kernels, 2, 1000, 2)}
    assert set(rows) == {("forward", "sums"), ("forward", "statistics"), ("forward", "apply"), ("backward", "apply")}
    assert rows["forward", "sums"]["kernel_us"] == 1.0
    assert rows["forward", "sums"]["gb_per_s"] == pytest.approx(2.0)
    assert rows["forward", "apply"]["bytes"] == 4000 and rows["forward", "apply"]["gb_per_s"] == pytest.approx(2.0)
    assert rows["backward", "apply"]["bytes"] == 6000 and rows["backward", "apply"]["gb_per_s"] == pytest.approx(2.0)
    assert rows["forward", "statistics"]["bytes"] == 0


def test_the_floor_is_one_read_and_one_write_at_the_copys_bandwidth():
    # 2^20 bfloat16 elements: forward reads and writes 4 MiB, backward moves 6 MiB; at 4,000 GB/s.
    assert norm_bench.floor_us(2**20, 2, "forward", 4000.0) == pytest.approx(4 * 2**20 / 4000 / 1e3)
    assert norm_bench.floor_us(2**20, 2, "backward", 4000.0) == pytest.approx(6 * 2**20 / 4000 / 1e3)


def _swept(forward_us: dict, backward_us: dict, apply_us: dict) -> pd.DataFrame:
    """A sweep at one site: each apply tiling (the default sums passes), then each sums setting (the same tile for
    both directions, the default apply passes); times by tile elements."""
    base = ndhwc_norm.Tiling()
    rows = []

    def add(tiling, sums_forward, sums_backward, apply):
        for direction, sums in (("forward", sums_forward), ("backward", sums_backward)):
            rows.append({**vars(tiling), "shape": "s", "direction": direction, "pass": "sums", "kernel_us": sums})
            rows.append({**vars(tiling), "shape": "s", "direction": direction, "pass": "apply", "kernel_us": apply})

    for elements, us in apply_us.items():
        add(replace(base, apply_elements=elements), forward_us[base.forward_sums_elements],
            backward_us[base.backward_sums_elements], us)
    for elements in forward_us:
        add(replace(base, forward_sums_elements=elements, backward_sums_elements=elements), forward_us[elements],
            backward_us[elements], apply_us[base.apply_elements])
    return pd.DataFrame(rows)


def test_the_best_tiling_takes_each_pass_at_its_fastest():
    """The forward sums pass fastest at 8192 elements, the backward one at 2048, the apply passes at 16384."""
    best = norm_bench.best_tiling(_swept({2048: 30.0, 4096: 20.0, 8192: 10.0}, {2048: 5.0, 4096: 20.0, 8192: 30.0},
                                         {4096: 50.0, 16384: 40.0}))
    assert (best.forward_sums_elements, best.backward_sums_elements, best.apply_elements) == (8192, 2048, 16384)
    assert (best.forward_sums_warps, best.programs) == (ndhwc_norm.Tiling().forward_sums_warps,
                                                        ndhwc_norm.Tiling().programs)
    assert all(type(v) is int for v in vars(best).values())  # Triton specializes on Python ints only


def test_the_default_timed_many_times_counts_once():
    """The default sums setting is timed beside every apply tiling: counted by its median, not its sum, it stays
    the fastest where it is."""
    base = ndhwc_norm.Tiling()
    forward = {2048: 20.0, 4096: 21.0, 8192: 30.0}
    backward = {2048: 25.0, 4096: 20.0, 8192: 21.0}
    best = norm_bench.best_tiling(_swept(forward, backward, {4096: 50.0, 8192: 51.0, 16384: 52.0}))
    assert (best.forward_sums_elements, best.backward_sums_elements, best.apply_elements) == (
        base.forward_sums_elements, base.backward_sums_elements, base.apply_elements)


def test_totals_weigh_each_site_by_its_count():
    compared = pd.DataFrame({"implementation": ["a", "a", "a", "a"], "shape": ["big", "big", "small", "small"],
                             "count": [2, 2, 3, 3], "direction": ["forward", "backward"] * 2,
                             "kernel_us": [100.0, 300.0, 10.0, 30.0], "floor_us": [50.0, 75.0, 5.0, 7.5]})
    summed = norm_bench.totals(compared).set_index("direction")
    assert summed.loc["forward", "kernel_ms"] == pytest.approx((2 * 100 + 3 * 10) / 1e3)
    assert summed.loc["backward", "floor_ms"] == pytest.approx((2 * 75 + 3 * 7.5) / 1e3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's answer; the GPU test below runs the bench")
def test_without_a_gpu_the_bench_says_so_in_one_line(tmp_path, capsys):
    assert norm_bench.main(["--out", str(tmp_path / "bench")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["norm_bench: needs a CUDA GPU (the Triton kernels and the device times are the GPU's)"]
    assert not (tmp_path / "bench").exists()


def test_a_missing_config_is_named_in_one_line(tmp_path, capsys):
    assert norm_bench.main(["--config", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "bench")]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [f"norm_bench: {tmp_path / 'nope.yaml'}: no such config file"]
    assert not (tmp_path / "bench").exists()


@pytest.mark.cuda
def test_on_the_gpu_the_bench_times_every_implementation_at_every_site(tmp_path):
    out = tmp_path / "bench"
    # The tests' two-level U-Net at 16^3: a few sites, so inductor compiles a few functions.
    assert norm_bench.main(["--config", "tests/tiny.yaml", "--out", str(out), "--shape", "16", "16", "16",
                            "--calls", "2", "--sweep-sites", "1", "--sweep-seconds", "5"]) == 0
    sites = pd.read_csv(out / "sites.csv")
    compared = pd.read_csv(out / "implementations.csv")
    assert len(compared) == len(sites) * 2 * compared["implementation"].nunique()
    assert (compared["kernel_us"] > 0).all()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["copy_gb_per_s"] > 100
    swept = pd.read_csv(out / "sweep.csv")
    assert (swept["gb_per_s"].dropna() > 0).all()


def test_the_pass_summary_of_the_sweep_recorded_on_an_h200():
    """The sweep an H200 recorded (data/measurements/h200-2026-12-04-norm-tiles/sweep.csv): per tile pass at the
    largest site, the fastest setting of that pass with its bandwidth, beside the chosen tiling's time."""
    swept = pd.read_csv("data/measurements/h200-2026-12-04-norm-tiles/sweep.csv")
    summary = norm_bench.pass_summary(swept, "1x128x128x128x128", ndhwc_norm.Tiling()).set_index("pass")
    assert list(summary.index) == ["forward sums", "forward apply", "backward sums", "backward apply"]
    assert summary.loc["forward sums", "fastest tile"] == "2048 x 4 warps, 1024 programs"
    assert summary.loc["forward apply", "fastest tile"] == "8192 x 4 warps"
    assert summary.loc["forward sums", "TB/s"] == pytest.approx(3.42, abs=0.01)
    assert summary.loc["backward sums", "TB/s"] == pytest.approx(2.41, abs=0.01)
    # The chosen tiling is the sweep's default: each pass's time where the sweep ran that pass's setting.
    assert summary.loc["forward apply", "chosen tiling's us"] == pytest.approx(275.2, abs=0.1)
    assert (summary["chosen tiling's us"] >= summary["us"]).all()
