"""Snakemake job: the preflight of one hardware label's timed campaign (profiling.preflight): conv3d at the study's
shapes against float64 in every precision, layout and autotuner setting, cuDNN running it on a GPU, the versions.
Which variants use each combination is read from the config (the run variants and the quality study's)."""

from pathlib import Path

from jobio.errors import write_json
from jobio.job import JobError, repo_root, run_job
from measurement.conv_checks import checks_for, problem_line
from measurement.devices import resolve_device
from measurement.provenance import provenance
from measurement.stack import stack_of
from medddpm.settings import DeviceSpec, from_mapping, params_dict
from profiling.preflight import run_check

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params = params_dict(snakemake.params)
    spec = from_mapping(DeviceSpec, params["device"], "device")
    device = resolve_device(spec.label, spec.hardware(), spec.emulate_gpus_on_cpu)
    conv, config = params["conv"], snakemake.config
    record = provenance(device, params, repo_root(snakemake.scriptdir), spec.label, spec.device != device.type)
    names = dict.fromkeys([*config["run_variants"], *config["quality_study"]["variants"]])
    checks = []
    for check in checks_for({name: config["variants"][name] for name in names}):
        checks.append(run_check(check, conv["channels"], conv["shape"], device))
        print(f"{check.name} ({', '.join(check.variants) or 'no configured variant'}): {checks[-1]['state']}")
    result = {"provenance": record, "stack": stack_of(record), "checks": checks}
    problem = problem_line(result)
    if problem:
        raise JobError(problem)
    write_json(Path(snakemake.output[0]), {**result, "passed": True})


run_job(snakemake.log[0], main, snakemake.output)
