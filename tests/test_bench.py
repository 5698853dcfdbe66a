"""The bench: measured device ceilings and the per-variant table built from train.json / sample.json."""

import json
import math
import warnings

import pandas as pd
import pytest
import torch

from config_settings import configured
from measurement import rates as rates_module
from measurement.rates import RateSettings, device_rates, matmul_rate
from reporting.bench import bench_markdown, bench_rows, describe_switches
from reporting.results import collect
from medddpm.switches import Variant


def test_cpu_rates_are_measured_and_say_they_are_a_cpus():
    settings = configured(RateSettings, "bench", cpu_matmul_size=64, cpu_copy_mib=1, warmup=1, repeats=3)
    rates = device_rates(torch.device("cpu"), settings)
    assert rates["device_kind"] == "cpu" and "CPU's" in rates["note"]
    assert [m["dtype"] for m in rates["matmul"]] == ["bfloat16", "float32"]  # a CPU: fp32 too
    first = rates["matmul"][0]
    assert first["n"] == 64 and first["time"]["n"] == 3 and first["flop"] == 2 * 64**3
    # Every rate from its own times, written out here: FLOP / ms / 1e9 = TFLOP/s, bytes / ms / 1e6 = GB/s; the
    # slower quartile of times gives the lower rate.
    for matmul in rates["matmul"]:
        time = matmul["time"]
        assert matmul["tflops"] == pytest.approx(matmul["flop"] / time["median_ms"] / 1e9, rel=1e-12)
        assert matmul["tflops_q1_time"] == pytest.approx(matmul["flop"] / time["q3_ms"] / 1e9, rel=1e-12)
        assert matmul["tflops_q3_time"] == pytest.approx(matmul["flop"] / time["q1_ms"] / 1e9, rel=1e-12)
    assert rates["bf16_matmul_tflops"] == first["tflops"]
    copy = rates["copy"]
    assert copy["bytes_copied"] == 2**20 and copy["bytes_moved"] == 2 * 2**20 and copy["time"]["n"] == 3
    assert rates["copy_gb_per_s"] == copy["gb_per_s"] == pytest.approx(2 * 2**20 / copy["time"]["median_ms"] / 1e6,
                                                                       rel=1e-12)
    assert rates["settings"] == {"warmup": 1, "repeats": 3}
    assert rates["note"] == "these ceilings are the CPU's (this label's device), not a GPU's"


def test_cpu_rates_agree_with_the_same_operations_timed_with_numpy():
    """The fp32 matrix-product rate and the copy bandwidth against numpy's BLAS product and memory copy of the same
    sizes, timed here with a clock (best of several, so load slows both alike or this side): within a factor of 10
    either way. A rate written in another unit (GFLOP/s as TFLOP/s, MB/s as GB/s) is off by 1000."""
    import time

    import numpy as np

    n, mib = 256, 16
    settings = configured(RateSettings, "bench", cpu_matmul_size=n, cpu_copy_mib=mib, warmup=2, repeats=5)
    rates = device_rates(torch.device("cpu"), settings)

    def best_seconds(fn, repeats=7):
        fn()
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
        return min(times)

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    numpy_tflops = 2 * n**3 / best_seconds(lambda: a @ b) / 1e12
    fp32 = next(m for m in rates["matmul"] if m["dtype"] == "float32")
    assert numpy_tflops / 10 < fp32["tflops"] < numpy_tflops * 10, (fp32["tflops"], numpy_tflops)
    src = rng.random(mib * 2**20 // 4, dtype=np.float32)
    dst = np.empty_like(src)
    numpy_gb_per_s = 2 * src.nbytes / best_seconds(lambda: np.copyto(dst, src)) / 1e9
    assert numpy_gb_per_s / 10 < rates["copy_gb_per_s"] < numpy_gb_per_s * 10, (rates["copy_gb_per_s"],
                                                                                numpy_gb_per_s)


def test_cpu_rates_and_a_gpus_are_measured_at_their_own_sizes_and_precisions(monkeypatch):
    """What device_rates asks of each measurement, by device kind (the measurements replaced by stand-ins that
    record their arguments): a GPU the large sizes and bf16 only, a CPU the small sizes, bf16 and fp32, and the
    note saying the ceilings are a CPU's."""
    settings = RateSettings(gpu_matmul_size=8192, cpu_matmul_size=64, gpu_copy_mib=1024, cpu_copy_mib=2, warmup=2,
                            repeats=5)
    asked = []

    def matmul(device, n, dtype, warmup, repeats):
        asked.append(("matmul", device.type, n, dtype, warmup, repeats))
        return {"dtype": dtype, "tflops": {"bfloat16": 700.0, "float32": 50.0}[dtype]}

    def copy(device, mib, warmup, repeats):
        asked.append(("copy", device.type, mib, warmup, repeats))
        return {"gb_per_s": 4000.0}

    monkeypatch.setattr(rates_module, "matmul_rate", matmul)
    monkeypatch.setattr(rates_module, "copy_bandwidth", copy)
    gpu = device_rates(torch.device("cuda", 0), settings)
    assert asked == [("matmul", "cuda", 8192, "bfloat16", 2, 5), ("copy", "cuda", 1024, 2, 5)]
    assert gpu["device_kind"] == "cuda" and gpu["note"] is None
    assert gpu["bf16_matmul_tflops"] == 700.0 and gpu["copy_gb_per_s"] == 4000.0
    asked.clear()
    cpu = device_rates(torch.device("cpu"), settings)
    assert asked == [("matmul", "cpu", 64, "bfloat16", 2, 5), ("matmul", "cpu", 64, "float32", 2, 5),
                     ("copy", "cpu", 2, 2, 5)]
    assert cpu["device_kind"] == "cpu" and cpu["bf16_matmul_tflops"] == 700.0
    assert cpu["note"] == "these ceilings are the CPU's (this label's device), not a GPU's"


def test_cpu_rates_draw_their_operands_from_their_own_seed_into_a_product_of_the_right_shape():
    """The operands come from the measurement's own seeded generator: torch's global generator (a job's seeded
    draws) is left where it was. The product is written into an n x n tensor made for it: nothing is resized (torch
    warns where an output is), and the byte counts of the copy are whole numbers (as JSON writes them)."""
    torch.manual_seed(11)
    before = torch.get_rng_state()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        matmul_rate(torch.device("cpu"), 16, "float32", warmup=1, repeats=2)
    assert torch.equal(torch.get_rng_state(), before)
    copy = rates_module.copy_bandwidth(torch.device("cpu"), 1, warmup=0, repeats=1)
    assert json.dumps([copy["bytes_copied"], copy["bytes_moved"]]) == "[1048576, 2097152]"


def _flops(shape, checkpointing):
    extra = {"none": 0, "attention": 1e9, "all": 4e9}[checkpointing]
    return {"forward": {"total": 5e12}, "train_micro_batch": {"total": 16e12 + extra}, "shape": shape,
            "checkpointing": checkpointing}


def bench_of(files, rates: dict, label: str = "h200"):
    """The bench of `files` (train.json and sample.json of one label) against `rates` as the bench job computes it:
    the runs through the reader every table uses, then bench_rows."""
    return bench_rows(collect(files, measured_labels=[label])["runs"], {label: rates})


def _write(tmp_path, variant, switches, step_ms, sample_ms, compile_s=None, bare=None, peak=2**30, sweep=None,
           cache=(None, None)):
    folder = tmp_path / "results" / "wholehead" / "h200" / variant
    folder.mkdir(parents=True)
    full = Variant.from_config(variant, switches).switches()
    train = {"provenance": {"switches": full, "device_name": "NVIDIA H200", "torch": "2.11.0",
                            "measured_at": "2026-12-01T00:00:00+00:00"},
             "settings": {"gradient_accumulation": 2}, "volume_shape": [8, 8, 8], "parameters": 1000,
             "flops": {"model": _flops([8, 8, 8], "none"), "executed": _flops([8, 8, 8], full["checkpointing"])},
             "step_time": {"n": 3, "median_ms": step_ms, "q1_ms": step_ms - 2, "q3_ms": step_ms + 2},
             "train_ms_per_sample": step_ms / 2, "peak_memory_bytes": peak, "peak_memory_kind": "cuda_max_allocated",
             "compile_seconds": compile_s, "compile_cache": cache[0], "bare_loop_ms_per_sample": bare}
    sample = {"provenance": train["provenance"], "volume_shape": [8, 8, 8], "timesteps": 250, "chain_complete": True, "step_time": {"median_ms": sample_ms, "q1_ms": sample_ms,
              "q3_ms": sample_ms}, "volume_seconds_estimate": sample_ms * 250 / 1e3, "peak_memory_bytes": peak // 2,
              "compile_seconds": compile_s, "compile_cache": cache[1]}
    if sweep:  # {batch: median step ms}: the throughput sweep (a sample.json without it predates the sweep)
        batches = [{"batch": b, "fits": True, "step_time": {"median_ms": ms},
                    "volumes_per_hour": 3600 * b / (250 * ms / 1e3)} for b, ms in sweep.items()]
        best = max(batches, key=lambda r: r["volumes_per_hour"])
        sample["throughput"] = {"timesteps": 250, "batches": batches, "best_batch": best["batch"],
                                "volumes_per_hour_best": best["volumes_per_hour"]}
    (folder / "train.json").write_text(json.dumps(train))
    (folder / "sample.json").write_text(json.dumps(sample))
    return folder / "train.json", folder / "sample.json"


def test_bench_table_rows_rates_and_speedups(tmp_path):
    paper = {"cudnn_tf32": False, "matmul_tf32": False, "channels_last": False}
    files = [
        _write(tmp_path, "baseline", paper, 2400.0, 200.0),
        _write(tmp_path, "tf32", {**paper, "cudnn_tf32": True, "matmul_tf32": True}, 480.0, 90.0, bare=230.0,
               sweep={1: 90.0}),  # sample.batch_sizes: [1], as a short timing run
        _write(tmp_path, "frontier", {**paper, "autocast": "bfloat16", "compile": "default", "cuda_graphs": True},
               200.0, 25.0, compile_s=70.5, bare=98.0, sweep={1: 25.0, 2: 40.0},
               # inductor's cache: every lookup of the training job's compilation hit, the sampling job's all missed
               cache=({"fx_graph_hits": 2, "fx_graph_misses": 0, "autograd_hits": 1, "autograd_misses": 0},
                      {"fx_graph_hits": 0, "fx_graph_misses": 1, "autograd_hits": 0, "autograd_misses": 0})),
    ]
    rates = {"bf16_matmul_tflops": 800.0, "copy_gb_per_s": 4300.0, "device_kind": "cuda", "note": None,
             "matmul": [{"n": 8192, "time": {"n": 10}}]}
    frame = bench_of([f for pair in files for f in pair], rates).set_index("variant")
    assert frame.loc["tf32", "train_ms_per_sample"] == 240.0
    assert frame.loc["tf32", "train_ms_per_sample_q1"] == 239.0 and frame.loc["tf32", "train_ms_per_sample_q3"] == 241.0
    # Model FLOPs (no recomputation) per second, and as a fraction of the measured bf16 rate.
    assert frame.loc["frontier", "train_model_tflops"] == pytest.approx(16e12 / 0.1 / 1e12)
    assert frame.loc["frontier", "train_fraction_of_bf16_rate"] == pytest.approx(160 / 800)
    assert frame.loc["frontier", "train_executed_tflop_per_sample"] == pytest.approx(16.001)
    assert frame.loc["frontier", "sample_model_tflops"] == pytest.approx(5e12 / 0.025 / 1e12)
    assert frame.loc["frontier", "train_speedup_vs_baseline"] == pytest.approx(12.0)
    assert frame.loc["frontier", "train_speedup_vs_tf32"] == pytest.approx(2.4)
    assert frame.loc["frontier", "sample_speedup_vs_tf32"] == pytest.approx(3.6)
    assert frame.loc["frontier", "sample_volume_s"] == pytest.approx(6.25)
    assert frame.loc["frontier", "train_compile_s"] == 70.5
    assert frame.loc["frontier", "train_compile_cache"] == "warm"
    assert frame.loc["frontier", "sample_compile_cache"] == "cold"
    assert frame.loc["baseline", ["train_compile_cache", "sample_compile_cache"]].isna().all()
    assert frame.loc["frontier", "bare_loop_gap_pct"] == pytest.approx(100 * (100 / 98 - 1))
    assert frame.loc["frontier", "switches"] == "bfloat16 autocast, compile default, cuda graphs"
    text = bench_markdown(frame.reset_index(), "h200", rates, {"device_name": "NVIDIA H200", "torch": "2.11.0",
                                                               "measured_at": "2026-12-01"},
                          {"forward_model_flop": 5e12, "train_model_flop_per_sample": 16e12, "flop_shape": "8x8x8"})
    assert "| frontier | bfloat16 autocast, compile default, cuda graphs | 100.0 (99.0-101.0) | 160 | 20.0 % |" in text
    assert "| baseline | fp32 |" in text and "- / -" in text  # nothing compiled: no compile time
    assert "| 70.5 (warm cache) / 70.5 |" in text  # a cold compile's time unmarked
    assert "20 ms per training sample" in text  # the floor at the measured bf16 rate
    # Volumes per hour: 3600 x batch / (T x step s) at batch 1 and at the best batch, from the sweep; a sampling run
    # without one says so (nothing derived from its s/volume).
    assert frame.loc["frontier", "sample_volumes_per_hour_b1"] == pytest.approx(576.0)
    assert frame.loc["frontier", "sample_best_batch"] == 2
    assert frame.loc["frontier", "sample_volumes_per_hour_best"] == pytest.approx(720.0)
    assert "| volumes/h batch 1 | volumes/h best batch |" in text
    assert "| 25.00 | 6.25 | 576 | 720 (batch 2) |" in text
    assert "| 200.00 | 50 | not measured | not measured |" in text
    # A sweep of batch 1 alone: its rate, and no best batch to choose.
    assert frame.loc["tf32", "sample_volumes_per_hour_b1"] == pytest.approx(160.0)
    assert math.isnan(frame.loc["tf32", "sample_volumes_per_hour_best"])
    assert "| 90.00 | 22.5 | 160 | batch 1 only |" in text


def test_switch_descriptions():
    assert describe_switches({"cudnn_tf32": True, "matmul_tf32": False}) == "tf32 conv"
    assert describe_switches({"cudnn_tf32": True, "matmul_tf32": True, "channels_last": True,
                              "checkpointing": "all"}) == "tf32, channels-last, checkpointing all"
    assert describe_switches({"autocast": "bfloat16", "cuda_graphs": True, "fused_adam": True},
                             {"cuda_graphs": False, "fused_adam": True}) == (
        "bfloat16 autocast, fused adam, cuda graphs (no effect here)")


def test_bench_refuses_a_training_run_without_its_flop_count_and_a_sample_of_another_volume(tmp_path):
    """The FLOPs come from the training job that was timed: a train.json of an older version (no count) and a
    sampling run on other volumes are each refused in one line naming the file."""
    from jobio.errors import ExpectedError

    paper = {"cudnn_tf32": False, "matmul_tf32": False, "channels_last": False}
    rates = {"bf16_matmul_tflops": 800.0}
    train, sample = _write(tmp_path, "baseline", paper, 2400.0, 200.0)
    record = json.loads(train.read_text())
    assert bench_of([train, sample], rates).loc[0, "train_executed_tflop_per_sample"] == pytest.approx(16.001)
    sample.write_text(json.dumps({**json.loads(sample.read_text()), "volume_shape": [16, 16, 16]}))
    with pytest.raises(ExpectedError, match=r"h200 baseline: sampled volumes of 16x16x16 \(sample.json\), but "
                                            r"trained on 8x8x8 \(train.json\)"):
        bench_of([train, sample], rates)
    del record["flops"]
    train.write_text(json.dumps(record))
    with pytest.raises(ExpectedError, match=r"h200 baseline: its train.json has no FLOP count .* run that job again"):
        bench_of([train, sample], rates)


def test_an_exported_sets_readme_writes_volumes_per_hour_as_measured():
    """The README of an exported reference set: batch 1 and the best batch of a sweep, "batch 1 only" for a sweep of
    batch 1 alone, "not measured" for a sample.json of before the sweep."""
    from reporting.export import _measurements

    def sample(batches):
        record = {"step_time": {"median_ms": 20.0}, "volume_seconds_estimate": 5.0}
        if batches:
            rows = [{"batch": b, "fits": True, "volumes_per_hour": rate} for b, rate in batches.items()]
            best = max(batches, key=batches.get)
            record["throughput"] = {"batches": rows, "best_batch": best, "volumes_per_hour_best": batches[best]}
        return record

    records = {"swept": {"sample": sample({1: 720.0, 4: 778.0})}, "alone": {"sample": sample({1: 725.0})},
               "before": {"sample": sample({})}}
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[5] for line in _measurements(records, list(records))
            if line.startswith("| ") and not line.startswith("| variant")}
    assert rows == {"swept": "720 / 778 (batch 4)", "alone": "725 / batch 1 only", "before": "not measured"}


def test_the_bench_gives_the_paired_rounds_interval_and_separate_jobs_none(tmp_path):
    """The shipped CPU set: with its comparison.json, each speed-up cell of bench.md is the paired rounds' ratio with
    its interval (the numbers of comparison.json); the reference's own row says 1.00 alone; without the comparison,
    the ratio of the two jobs' medians, without brackets."""
    from pathlib import Path

    import pandas as pd

    from reporting.bench_files import write_bench

    cpu = Path(__file__).resolve().parents[1] / "data/reference/wholehead/cpu"
    variants = list(pd.read_csv(cpu / "bench.csv")["variant"])
    runs = ([cpu / v / "train.json" for v in variants], [cpu / v / "sample.json" for v in variants])

    def rows(comparison):
        write_bench("cpu", *runs, cpu / "device_rates.json", tmp_path / "bench.csv", tmp_path / "bench.md", comparison)
        lines = (tmp_path / "bench.md").read_text().splitlines()
        return {line.split(" | ")[0].strip("| "): line.split(" | ") for line in lines if line.startswith("| ")}

    paired = rows([cpu / "comparison.json"])
    phases = json.loads((cpu / "comparison.json").read_text())["phases"]
    train, sample = ({c["variant"]: c for c in phases[p]["comparisons"] if c["reference"] == "baseline"}
                     for p in ("train", "sample"))
    other = next(v for v in variants if v != "baseline")
    expected = " / ".join(f"{c['speedup']:.2f} [{c['low']:.2f}-{c['high']:.2f}]" for c in (train[other], sample[other]))
    assert expected in paired[other]
    assert "1.00 / 1.00" in paired["baseline"]
    separate = rows([])
    assert not any("[" in cell for row in separate.values() for cell in row[-3:-1])
    table = pd.read_csv(tmp_path / "bench.csv").set_index("variant")
    assert table[["train_speedup_vs_baseline_low", "train_speedup_vs_baseline_high"]].isna().all().all()


# bench.md's columns: the bench.csv columns each cell prints, in order ("a / b" cells print two, the training's then
# the sampling's; a bracket after a value holds its interval or quartiles).
BENCH_MD_CELLS = {
    "train ms/sample (q1-q3)": ["train_ms_per_sample", "train_ms_per_sample_q1", "train_ms_per_sample_q3"],
    "TFLOP/s": ["train_model_tflops"],
    "of bf16": ["train_fraction_of_bf16_rate"],
    "bare ms/sample": ["bare_loop_ms_per_sample"],
    "sample step ms": ["sample_step_ms"],
    "s/volume": ["sample_volume_s"],
    "volumes/h batch 1": ["sample_volumes_per_hour_b1"],
    "volumes/h best batch": ["sample_volumes_per_hour_best", "sample_best_batch"],
    "peak GiB train/sample": ["train_peak_gib", "sample_peak_gib"],
    "x baseline train/sample": ["train_speedup_vs_baseline", "train_speedup_vs_baseline_low",
                                "train_speedup_vs_baseline_high", "sample_speedup_vs_baseline",
                                "sample_speedup_vs_baseline_low", "sample_speedup_vs_baseline_high"],
    "x tf32 train/sample": ["train_speedup_vs_tf32", "train_speedup_vs_tf32_low", "train_speedup_vs_tf32_high",
                            "sample_speedup_vs_tf32", "sample_speedup_vs_tf32_low", "sample_speedup_vs_tf32_high"],
}


@pytest.mark.parametrize("label", ["h200", "cpu"])
def test_every_number_bench_md_prints_is_bench_csvs(label):
    """Each shipped set's bench.md holds its bench.csv's numbers, cell by cell, as rounded there (a percentage as
    100 x the share; a missing value as "-" or the words the page gives), so a page that drifted from its table or a
    cell printed from another column fails."""
    import re

    from conftest import REPO
    from printed_numbers import agrees

    folder = REPO / "data" / "reference" / "wholehead" / label
    bench = pd.read_csv(folder / "bench.csv").set_index("variant")
    lines = [line for line in (folder / "bench.md").read_text().splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert set(BENCH_MD_CELLS) <= set(header), header
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:]]
    assert [row[0] for row in rows] == list(bench.index)
    checked = 0
    for row in rows:
        values = bench.loc[row[0]]
        for title, columns in BENCH_MD_CELLS.items():
            cell = row[header.index(title)]
            numbers = re.findall(r"\d[\d,]*(?:\.\d+)?", cell)
            if title.startswith(f"x {row[0]} "):  # the reference's own row: 1.00, no interval with itself
                columns = [c for c in columns if not c.endswith(("_low", "_high"))]
            expected = [values[c] for c in columns if c in values.index and pd.notna(values[c])]
            if title == "of bf16":
                expected = [100 * v for v in expected]
            if title == "volumes/h best batch" and "only" in cell:  # "batch 1 only": no sweep beyond batch 1
                expected = []
                numbers = []
            assert len(numbers) == len(expected), (label, row[0], title, cell, expected)
            for printed, value in zip(numbers, expected):
                assert agrees(printed, value), (label, row[0], title, cell, value)
                checked += 1
    assert checked >= 10 * len(rows)
