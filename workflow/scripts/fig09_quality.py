"""Snakemake job: fig09, loss curves, sample slices and SSIM/PSNR per variant."""

from medddpm.dataset import heldout_images
from reporting.collect import loss_curves, quality, run_key
from reporting.figures import plot_quality
from reporting.style import apply_style, save, variant_order
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    apply_style()
    inputs = snakemake.input
    slices = {}
    for path in inputs.first_samples:
        gpu, variant = run_key(path.replace("/samples/", "/"))
        slices.setdefault(gpu, {})[variant] = path
    panels = {
        gpu: [("real image", heldout_images(inputs.dataset)[0])] + [(v, by_variant[v]) for v in variant_order(by_variant)]
        for gpu, by_variant in slices.items()
    }
    fig = plot_quality(loss_curves(inputs.steps), quality(inputs.quality), panels, snakemake.params.gpus)
    save(fig, snakemake.output.pdf, snakemake.output.png)


run_job(snakemake.log[0], main)
