"""Snakemake job: numeric fidelity and image quality of one (hardware label, variant) against float64 and baseline."""

from pathlib import Path

from jobio.errors import write_json
from jobio.job import repo_root, run_job
from medddpm.build import ModelSpec
from medddpm.prepare import heldout_images
from medddpm.quality import image_similarity, loss_curve_deviation, numeric_error, summarise_similarity
from medddpm.runs import start_job
from medddpm.settings import QualitySettings, params_dict

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params, inputs = params_dict(snakemake.params), snakemake.input
    run = start_job(params, snakemake.wildcards.variant, repo_root(snakemake.scriptdir))
    quality = QualitySettings.from_params(params["quality"])
    model_spec = ModelSpec.from_params(params["model"], params["diffusion"])
    dataset = Path(inputs.dataset)
    samples = [Path(p) for p in inputs.samples]
    write_json(
        Path(snakemake.output[0]),
        {
            "provenance": run.provenance,
            "numeric": numeric_error(model_spec, quality, run, Path(inputs.checkpoint), dataset),
            "loss_curve": loss_curve_deviation(Path(inputs.steps), Path(inputs.baseline_steps)),
            "vs_real": summarise_similarity(
                image_similarity(samples, heldout_images(dataset), quality.ssim_kernel, run.device)
            ),
            "vs_baseline": summarise_similarity(
                image_similarity(samples, [Path(p) for p in inputs.baseline_samples], quality.ssim_kernel, run.device)
            ),
        },
    )


run_job(snakemake.log[0], main, snakemake.output)
