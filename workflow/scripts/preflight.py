"""Snakemake job: the preflight of one hardware label's timed campaign (profiling.preflight): conv3d at the study's
shapes against float64 in every precision and layout the variants use, cuDNN running it on a GPU, the versions."""

from pathlib import Path

from jobio.errors import write_json
from jobio.job import JobError, repo_root, run_job
from measurement.devices import resolve_device
from measurement.provenance import provenance
from measurement.stack import stack_of
from medddpm.settings import DeviceSpec, from_mapping, params_dict
from profiling.conv_checks import Check, problem_line
from profiling.preflight import run_check

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params = params_dict(snakemake.params)
    spec = from_mapping(DeviceSpec, params["device"], "device")
    device = resolve_device(spec.label, spec.hardware(), spec.emulate_gpus_on_cpu)
    conv = params["conv"]
    record = provenance(device, params, repo_root(snakemake.scriptdir), spec.label, spec.device != device.type)
    checks = []
    for check in conv["checks"]:
        checks.append(run_check(Check(**{**check, "variants": tuple(check["variants"])}), conv["channels"],
                                conv["shape"], device))
        print(f"{checks[-1]['name']} ({', '.join(check['variants'])}): {checks[-1]['state']}")
    result = {"provenance": record, "stack": stack_of(record), "checks": checks}
    problem = problem_line(result)
    if problem:
        raise JobError(problem)
    write_json(Path(snakemake.output[0]), {**result, "passed": True})


run_job(snakemake.log[0], main, snakemake.output)
