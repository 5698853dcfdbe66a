"""Snakemake job: numeric fidelity and image quality of one (hardware label, variant) against float64 and baseline."""

from pathlib import Path

from medddpm.dataset import heldout_images
from medddpm.jobs import write_json
from medddpm.quality import image_similarity, loss_curve_deviation, numeric_error, summarise_similarity
from medddpm.runs import start_run
from ruleio import repo_root, run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    config, inputs = snakemake.config, snakemake.input
    run = start_run(config, snakemake.wildcards.gpu, snakemake.wildcards.variant, repo_root(snakemake.scriptdir))
    dataset = Path(inputs.dataset)
    kernel = config["quality"]["ssim_kernel"]
    samples = [Path(p) for p in inputs.samples]
    write_json(
        Path(snakemake.output[0]),
        {
            "provenance": run.provenance,
            "numeric": numeric_error(config, run, Path(inputs.checkpoint), dataset),
            "loss_curve": loss_curve_deviation(Path(inputs.steps), Path(inputs.baseline_steps)),
            "vs_real": summarise_similarity(image_similarity(samples, heldout_images(dataset), kernel, run.device)),
            "vs_baseline": summarise_similarity(
                image_similarity(samples, [Path(p) for p in inputs.baseline_samples], kernel, run.device)
            ),
        },
    )


run_job(snakemake.log[0], main)
