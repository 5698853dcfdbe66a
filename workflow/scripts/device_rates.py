"""Snakemake job: the measured ceilings of one hardware label's device (bf16 matrix-product rate, copy bandwidth)."""

from pathlib import Path

from measurement.devices import resolve_device
from measurement.provenance import provenance
from measurement.rates import RateSettings, device_rates
from jobio.errors import write_json
from medddpm.settings import DeviceSpec, from_mapping, params_dict
from jobio.job import repo_root, run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params = params_dict(snakemake.params)
    spec = from_mapping(DeviceSpec, params["device"], "device")
    device = resolve_device(spec.label, spec.hardware(), spec.emulate_gpus_on_cpu)
    rates = device_rates(device, from_mapping(RateSettings, params["rates"], "bench"))
    record = provenance(device, params, repo_root(snakemake.scriptdir), spec.label, spec.device != device.type)
    write_json(Path(snakemake.output[0]), {"provenance": record, **rates})
    print(f"bf16 matrix product {rates['bf16_matmul_tflops']:.4g} TFLOP/s, copy {rates['copy_gb_per_s']:.4g} GB/s")


run_job(snakemake.log[0], main, snakemake.output)
