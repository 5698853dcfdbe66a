"""Every figure and table of the study, declared once. The rules that render them, the manifest
(`paper/figures/all`), the HTML report's entries, the README's list and the tests all derive from OUTPUTS.

Adding an output: one entry here, its code in `reporting/outputs/<id>.py` (a `build(job)` returning a figure or a
`Table`, and `describe(context)`, its paragraph in the article), and its caption in `workflow/report/<id>.rst`. The
article (`paper/article.pdf`) places every output, with its caption and paragraph, in the section and subsection the
entry names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The article (reporting.article): every output in one of its sections, in this order.
ARTICLE = "paper/article.pdf"
SECTIONS = ("methods", "results", "claims", "frontier", "sampling", "conformance")
# The results' subsections (Output.group), in the order the article shows them: cost first, then where the time goes,
# then the counters, then quality. A results output of no group gets a subsection of its own, after these.
RESULTS_GROUPS = {
    "cost": "End-to-end time and memory",
    "time": "Where the time goes",
    "counters": "What the optimizations change in the counters",
    "quality": "Quality of the samples",
}
# The HTML report's categories (`snakemake --report`): every output sits in one; the article in its own.
CATEGORIES = ("Setup", "Profiling", "Optimization", "Quality", "Conformance")

# Tables of the collected results (reporting.results.TABLES) an output can read; `hardware` is always read. The
# reference_* tables hold the shipped sets of labels measured here too (the other side of tab08); study and
# study_losses the quality study's runs.
BUNDLE = ("runs", "quality", "losses", "summaries", "kernels", "ncu_kernels", "rules", "slices", "bench", "memory_floor",
          "comparisons", "samplers", "study_samplers",
          "reference_hardware", "reference_runs", "reference_summaries", "study", "study_losses")
# The collected tables the article's text is written from (inputs of the article rule besides the outputs).
ARTICLE_TABLES = ("runs", "kernels", "ncu_kernels", "rules")


@dataclass(frozen=True)
class Output:
    id: str  # "fig01_runtime_breakdown": also the rule's name, the module's and the caption's
    title: str  # one line, for the README and the report
    reads: tuple[str, ...] = ()  # tables of the collected results
    # Other inputs, by name (paths from the workflow's root; `{prepared}` is the configured prepared dataset,
    # `{baseline_training}` the train.json of the baseline on the first hardware label measured).
    files: dict[str, str] = field(default_factory=dict)
    config: tuple[str, ...] = ()  # config sections the output depends on (given to it as settings)
    extra: dict[str, str] = field(default_factory=dict)  # further output files, by name
    # Timing-bearing: it shows measured times, or what is derived from them (time shares, speed-ups, means weighted
    # by kernel time, achieved rates), so two runs of one configuration differ there and only there; the manifest
    # marks its files. Every other output is byte-identical between clean runs on one machine (and one day: panel
    # titles carry the measurement date).
    timing: bool = False
    section: str = "results"  # where the article shows it (SECTIONS)
    # Its subsection there, outputs of one in the order of OUTPUTS: for the results one of RESULTS_GROUPS; for the
    # methods the subsection of the method's text it belongs to (reporting.article.text.METHOD), at their end if none.
    group: str = ""
    category: str = "Profiling"  # where the HTML report lists it (CATEGORIES)

    def __post_init__(self) -> None:
        if self.section not in SECTIONS or self.category not in CATEGORIES:
            raise ValueError(f"{self.id}: section {self.section!r} must be one of {SECTIONS}, category "
                             f"{self.category!r} one of {CATEGORIES}")
        if self.section == "results" and self.group and self.group not in RESULTS_GROUPS:
            raise ValueError(f"{self.id}: group {self.group!r} must be one of {tuple(RESULTS_GROUPS)}")

    @property
    def kind(self) -> str:
        return "figure" if self.id.startswith("fig") else "table"

    @property
    def module(self) -> str:
        return f"reporting.outputs.{self.id}"

    @property
    def code(self) -> str:
        return f"workflow/scripts/reporting/outputs/{self.id}.py"

    @property
    def caption(self) -> str:
        return f"workflow/report/{self.id}.rst"

    def files_out(self) -> dict[str, str]:
        """Output files by name: pdf and png for a figure; csv, tex, md and html (the HTML report's view) for a table;
        then the extra ones."""
        if self.kind == "figure":
            out = {ext: f"paper/figures/{self.id}.{ext}" for ext in ("pdf", "png")}
        else:
            out = {ext: f"paper/tables/{self.id}.{ext}" for ext in ("csv", "tex", "md", "html")}
        return {**out, **self.extra}


OUTPUTS: list[Output] = [
    Output("fig01_runtime_breakdown", "Runtime breakdown: share of kernel time per kernel class, per variant and phase",
           reads=("summaries", "runs"), timing=True, group="time"),
    Output("fig02_top_kernels", "Top kernels of a training step with their class and precision",
           reads=("kernels", "runs"), timing=True, group="time"),
    # First of the counters: the whole step's totals relative to the baseline, before the figures that break them down.
    Output("fig07_optimization_impact", "SM cycles, instructions, IPC and tensor use relative to baseline; speed-ups",
           reads=("summaries", "runs"), timing=True, group="counters", category="Optimization"),
    # Timing-bearing although it shows counts: the counts follow the kernels a run executed, and variants with
    # cudnn_benchmark or max-autotune compilation pick their kernels by timing them, so two clean GPU runs may differ.
    Output("fig03_instruction_mix", "Executed instructions by kind (FP32, tensor, integer, memory, control, ...)",
           reads=("ncu_kernels", "summaries", "runs"), timing=True, group="counters"),
    Output("fig04_memory_system", "DRAM traffic and cache hit rates per kernel class",
           reads=("ncu_kernels", "summaries", "runs"), timing=True, group="counters"),
    Output("fig05_warp_states", "Warp stall reasons and achieved occupancy",
           reads=("ncu_kernels", "summaries", "runs"), timing=True, group="counters"),
    Output("fig06_priority_scores", "Nsight Compute's estimated speedups by rule and kernel class",
           reads=("rules", "ncu_kernels", "summaries", "runs"), timing=True, group="counters"),
    Output("fig08_end_to_end", "Training time per sample, sampling time per volume and peak memory", reads=("runs",),
           timing=True, group="cost", category="Optimization"),
    Output("fig09_quality", "Quality study: every seed's distance to the real images, each variant's paired difference "
           "from the baseline with its 90 % interval against the margin, loss curves as bands, sample slices",
           reads=("study", "study_losses", "slices"), files={"claims": "data/paper_claims.yaml"}, group="quality",
           category="Quality"),
    Output("fig10_roofline", "Kernel classes and top kernels on the roofline (FP32, TF32 and BF16 ceilings)",
           reads=("ncu_kernels", "summaries", "runs", "memory_floor"), files={"peaks": "data/gpu_peaks.yaml"}, config=("hardware",),
           timing=True, group="counters"),
    Output("tab01_hardware", "Each device: name, SMs, memory, driver, CUDA, cuDNN, torch", section="methods",
           group="hardware", category="Setup"),
    Output("tab02_workload", "Model and diffusion settings, parameters, FLOPs per step, dataset",
           files={"dataset": "{prepared}", "training": "{baseline_training}"},
           config=("model", "diffusion", "train", "dataset"), section="methods", group="workload", category="Setup"),
    Output("tab03_kernels", "Per run and kernel class: time share, count, SM cycles, instructions, IPC, tensor %",
           reads=("summaries",), extra={"classes": "paper/tables/tab03_kernels_by_class.csv"}, timing=True,
           group="time"),
    Output("tab04_optimization", "Headline numbers per variant and device", reads=("runs", "summaries"),
           config=("comparison",), timing=True, group="cost", category="Optimization"),
    Output("tab05_claims", "The paper's claims: published value, measured value, verdict",
           reads=("runs", "summaries", "study"), files={"claims": "data/paper_claims.yaml"}, timing=True,
           section="claims", category="Optimization"),
    Output("tab06_quality", "Quality study per variant: the verdict's metric and 3D SSIM over the seeds, the paired "
           "difference from the baseline with its 90 % interval, margin and outcome, the baseline's rerun",
           reads=("study", "quality", "runs"), files={"claims": "data/paper_claims.yaml"},
           extra={"runs": "paper/tables/tab06_quality_runs.csv", "checks": "paper/tables/tab06_quality_checks.csv"},
           group="quality", category="Quality"),
    Output("fig11_optimization_ladder", "From baseline to the fastest variant: time per rung against the FLOP floor, "
           "volumes sampled per hour, and what each rung changed in the kernel mix",
           reads=("bench", "runs", "summaries"), config=("run_variants",), timing=True, section="frontier",
           category="Optimization"),
    Output("tab07_frontier", "Per variant: ms per training sample, TFLOP/s and share of the measured bf16 rate, the "
           "FLOP floor, memory floor and kernel limit of the profiled steps, s per volume, volumes per hour at batch 1 "
           "and at the best batch, peak GiB, compile s", reads=("bench", "runs"),
           config=("comparison",), timing=True, section="frontier", category="Optimization"),
    Output("fig12_fast_sampling", "Fast samplers: each sampler's distance to the real images against seconds per "
           "volume over its step counts, the T-step chain marked, the quality claim's margin shaded",
           reads=("study_samplers", "samplers", "runs"), files={"claims": "data/paper_claims.yaml"}, timing=True,
           section="sampling", category="Quality"),
    Output("tab09_samplers", "Per sampler and step count: U-Net evaluations, s per volume, volumes per hour, peak "
           "GiB, and the distance to the real images against the T-step chain with its 90 % interval and verdict",
           reads=("study_samplers", "samplers", "runs"), files={"claims": "data/paper_claims.yaml"}, timing=True,
           section="sampling", category="Quality"),
    Output("tab08_conformance", "Each label measured here against its shipped reference set: per metric a band, a "
           "verdict (within, faster, slower, lower, higher, not comparable, not measurable under this load) and the likely "
           "reasons",
           reads=("runs", "summaries", "reference_hardware", "reference_runs", "reference_summaries"),
           config=("conformance", "reference_results"),
           extra={"classes": "paper/tables/tab08_conformance_by_class.csv"}, timing=True, section="conformance",
           category="Conformance"),
]
BY_ID = {output.id: output for output in OUTPUTS}


def registered_files(outputs=OUTPUTS) -> list[str]:
    """Every file that `outputs` write (figures: PDF and PNG; tables: CSV, LaTeX, Markdown, HTML and their extras)."""
    return [path for output in outputs for path in output.files_out().values()]


def timing_bearing_files() -> set[str]:
    """The files of the timing-bearing outputs (Output.timing), as the manifest lists them, and the article (which
    shows them all)."""
    return set(registered_files([output for output in OUTPUTS if output.timing])) | {ARTICLE}


def deterministic_files() -> set[str]:
    """The files of the outputs that are the same bytes in every clean run (the manifest's first section)."""
    return set(registered_files()) - timing_bearing_files()


def markdown_list() -> str:
    """The README's list of outputs."""
    return "\n".join(f"- `{o.id}`: {o.title}" for o in OUTPUTS)


if __name__ == "__main__":
    print(markdown_list())
