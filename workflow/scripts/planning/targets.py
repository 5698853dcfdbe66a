"""A result path typed on the command line that this configuration cannot build: one line naming the setting to
change, before Snakemake's bare "No rule to produce ..."."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from medddpm.workloads import WORKLOADS

from . import layout
from .configcheck import set_in


def target_problem(target: str, config: dict, files: Sequence[str | Path] = ()) -> str | None:
    """Why a result path typed as a target cannot be built by this configuration (a path of the layout before the
    workload was an axis, another workload, a label not in `gpus`, a variant not in `run_variants` or the study's),
    naming the setting to change; None when it can or when it is not a result path. `files`: the config files merged
    (the embedded default first), to name the one that sets `workload`. Snakemake itself would answer only "No rule
    to produce ..."."""
    place = layout.parse(target)
    if Path(target).parts[:1] != (layout.RESULTS,) or place.workload is None:
        return None
    workload, label = place.workload, place.gpu
    if workload not in WORKLOADS:
        moved = old_layout_target(target, config)
        if moved:
            then = target_problem(moved, config, files)
            return (f"target {target}: a path of the result layout before the workload became a folder of its own "
                    f"(results/<label>/...; now results/<workload>/<label>/...); fix: ask for {moved}"
                    + (f", and {then.split('; fix: ', 1)[1]}" if then else ""))
        return (f"target {target}: {workload!r} is not a workload (results/<workload>/<label>/..., the workloads are "
                f"{', '.join(WORKLOADS)}); fix: correct the path")
    if workload != config["workload"]:
        if WORKLOADS[workload].overlay:
            other = f"add {WORKLOADS[workload].overlay} after your other overlays"
        else:
            chosen = set_in(["workload"], files[1:]) if files else None
            other = (f"leave out {chosen}, which sets workload: {config['workload']}" if chosen else
                     f"set workload: {workload}")
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


def old_layout_target(target: str, config: dict) -> str | None:
    """The path in today's layout of a target written in the layout before the workload was an axis
    (results/<label>/..., a BraTS label as <label>_brats, results/dataset/prepared[_brats]), or None when `target`
    is not one."""
    first, *rest = Path(target).parts[1:]
    workload = config["workload"]
    if first == "dataset" and rest:
        name = rest[0]
        if name.endswith("_brats"):
            workload, name = "brats", name.removesuffix("_brats")
        return Path(layout.RESULTS, workload, "dataset", name, *rest[1:]).as_posix()
    label = first
    if label.endswith("_brats") and label.removesuffix("_brats") in config["hardware"]:
        workload, label = "brats", label.removesuffix("_brats")
    if label not in config["hardware"]:
        return None
    return Path(layout.label_dir(workload, label), *rest).as_posix()
