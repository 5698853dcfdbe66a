"""A result path typed on the command line that this configuration cannot build: one line naming the setting to
change, before Snakemake's bare "No rule to produce ..."."""

from __future__ import annotations

from pathlib import Path

from medddpm.workloads import WORKLOADS

from . import layout


def target_problem(target: str, config: dict) -> str | None:
    """Why a result path typed as a target cannot be built by this configuration (another workload, a label not in
    `gpus`, a variant not in `run_variants` or the study's), naming the setting to change; None when it can or when
    it is not a result path. Snakemake itself would answer only "No rule to produce ..."."""
    place = layout.parse(target)
    if Path(target).parts[:1] != (layout.RESULTS,) or place.workload is None:
        return None
    workload, label = place.workload, place.gpu
    if workload != config["workload"]:
        if workload not in WORKLOADS:
            other = f"the workloads are {', '.join(WORKLOADS)}: correct the path"
        elif WORKLOADS[workload].overlay:
            other = f"add {WORKLOADS[workload].overlay} after your other overlays"
        else:
            other = f"leave {WORKLOADS[config['workload']].overlay} out"
        return (f"target {target}: the {workload} workload, but this configuration measures workload: "
                f"{config['workload']}; fix: {other}")
    if label is None:
        return None
    if label not in config["gpus"]:
        return (f"target {target}: hardware label {label!r} is not measured by this configuration (gpus: "
                f"{config['gpus']}); fix: set gpus in an overlay (config/paper.yaml measures h200), or use "
                f"{layout.label_dir(workload, config['gpus'][0])}/...")
    variant = place.variant
    if variant is None:
        return None
    if place.study:
        variants, key = list(config["quality_study"]["variants"]), "quality_study.variants"
    else:
        variants, key = list(config["run_variants"]), "run_variants"
    if variant in variants:
        return None
    if variant not in config["variants"]:
        return (f"target {target}: {variant!r} is not a defined variant (config `variants`: "
                f"{', '.join(config['variants'])}); fix: define it under `variants` in an overlay, or correct the name")
    listed = f"[{', '.join([*variants, variant])}]"
    overlay = f"quality_study: {{variants: {listed}}}" if key == "quality_study.variants" else f"run_variants: {listed}"
    return (f"target {target}: variant {variant!r} is defined but not in {key} ({', '.join(variants)}); fix: add it "
            f"in an overlay: printf '{overlay}\\n' > more.yaml, then add --configfile more.yaml")
