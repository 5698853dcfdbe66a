"""The workflow's configuration, checked: YAML files read with the file and line of a syntax error, the schema with one
line per problem (the key, what is wrong, the file that set it), and the consistency the schema cannot express.

The workflow (workflow/rules/checks.smk) runs `check_config` when it builds the DAG. Snakemake itself reads the
overlays given with --configfile while it parses its command line, before any workflow code runs, and reports a
missing one or a YAML error there without the file's line (the workflow cannot name the file then); checking them
here first names both. An overlay that Snakemake accepts but that gives a key twice (PyYAML keeps the second,
silently) is refused by the workflow itself, naming the file and line:

    PYTHONPATH=workflow/scripts python3 -m planning.configcheck config/paper.yaml my-overlay.yaml
"""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from jobio.errors import ExpectedError
from medddpm.workloads import WORKLOADS, source_of, workload_of

from .plan import reference_set_problem

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"
DEFAULT_CONFIG = Path(__file__).resolve().parents[3] / "config.yaml"
_SCHEMA_FIX = "workflow/schemas/config.schema.yaml describes every key"


# Hardware labels once carried the BraTS workload as a suffix (h200_brats); the workload is its own key now. A
# migration shim (it names the new keys to an overlay of before 2026-12-01): remove it, and its message in
# consistency_problem, once overlays of that time are no longer in use.
OLD_BRATS_SUFFIX = "_brats"


class ConfigError(ExpectedError, ValueError):
    """A configuration file or value that cannot be used; the message names the key or file and the fix."""


# libyaml's parser where PyYAML was built with it: the pure-Python one took 0.7 s of every Snakemake start for the
# config and the schema (every job's planning and every dry run pays it).
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_SafeLoader):
    """A safe loader that refuses a key given twice in one mapping. PyYAML (and so Snakemake, reading an overlay)
    keeps the second silently: `train:` written twice loses every setting of the first."""


def _mapping_without_repeats(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *anchor` merges on purpose; its keys may be given again
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, (str, int, float, bool)) or key is None:
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping (first at line {seen[key]}), and the second "
                    "would silently replace the first", key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_repeats)


def read_yaml(path: str | Path, what: str = "config file") -> Any:
    """The YAML document of `path`; ConfigError with one line for a missing file or a syntax error
    (file:line:column)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{what} {path} does not exist; fix: correct the path (relative to {Path.cwd()})") from None
    except (IsADirectoryError, UnicodeDecodeError) as error:
        raise ConfigError(f"{what} {path} is not a text file ({type(error).__name__}); fix: name a YAML file") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        context, started = getattr(error, "context", None), getattr(error, "context_mark", None)
        if context and started is not None and mark is not None and started.line != mark.line:
            context += f" that starts at line {started.line + 1}"
        detail = f"{problem} ({context})" if context else problem
        if "appears twice" in problem:
            raise ConfigError(f"{where}: YAML error in this {what}: {detail}; fix: write the key once, with the "
                              "settings of both") from None
        raise ConfigError(f"{where}: YAML syntax error in this {what}: {detail}; fix: correct the YAML there "
                          "(indent with spaces, close every bracket and quote)") from None


def read_mapping(path: str | Path, what: str = "config file") -> dict:
    """A YAML file that must hold a mapping (a config file or overlay), read with read_yaml."""
    data = read_yaml(path, what)
    if data is None and what == "overlay":
        raise ConfigError(f"overlay {path} is empty (or holds only comments), which Snakemake refuses without naming "
                          "it; fix: write the settings it changes as `key: value` lines, or leave it out")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path} holds a {type(data).__name__}, not keys and values; fix: write it as "
                          "`key: value` lines (see config.yaml)")
    return data


def check_start(basedir: str | Path, cwd: str | Path | None = None) -> None:
    """Raise ConfigError unless Snakemake runs in the workflow's folder (every path of the rules and the config is
    relative to it), and the embedded default config.yaml there reads."""
    basedir, cwd = Path(basedir).resolve(), Path(cwd or Path.cwd()).resolve()
    if cwd != basedir:
        raise ConfigError(
            f"Snakemake runs in {cwd}, but this workflow runs in its own folder {basedir} (its paths are relative "
            f"to it); fix: cd {basedir} and run it there (-s is then not needed), or add --directory {basedir}"
        )
    read_mapping(basedir / "config.yaml", "embedded default")


# --- the schema ----------------------------------------------------------------------------------------------------


def _dotted(path: Iterable) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _description(schema: dict, schema_path: Iterable) -> str:
    """The description nearest to the failing part of the schema (the key's own, else its parent's)."""
    node, found = schema, ""
    for part in schema_path:
        if isinstance(node, dict) and "description" in node:
            found = node["description"]
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            break
        if isinstance(node, dict) and "$ref" in node:
            target = node["$ref"].removeprefix("#/")
            node = schema
            for key in target.split("/"):
                node = node[key]
    if isinstance(node, dict) and "description" in node:
        found = node["description"]
    text = " ".join(str(found).split())
    for stop in (". ", " (", ": ", "; ", ", "):
        text = text.split(stop)[0]
    return text.rstrip(".") if len(text) <= 100 else ""


def set_in(key_path: Sequence, files: Sequence[str | Path]) -> str | None:
    """The last of `files` (later ones win, as Snakemake merges them) that sets `key_path`, or None."""
    keys = [k for k in key_path if not isinstance(k, int)]
    for path in reversed(list(files)):
        try:
            node = read_mapping(path)
        except ConfigError:
            continue
        for key in keys:
            if not isinstance(node, dict) or key not in node:
                break
            node = node[key]
        else:
            return _shown(path)
    return None


def _shown(path: str | Path) -> str:
    """`path` relative to the working directory where it lies below it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _has(mapping: dict, key_path: Sequence) -> bool:
    node = mapping
    for key in (k for k in key_path if not isinstance(k, int)):
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


# A number as YAML 1.2 writes it. PyYAML (and so Snakemake, reading an overlay) follows YAML 1.1, where a float needs a
# dot: `lr: 1e-4` arrives as the string '1e-4'.
_YAML12_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)[eE][-+]?[0-9]+")


def read_yaml12_numbers(config: dict, schema_path: Path = SCHEMA) -> list[str]:
    """Turn, in place, every string where the schema wants a number and YAML 1.2 reads one (`1e-4`: a string in
    YAML 1.1) into that number; returns the keys it changed."""
    import jsonschema

    schema = read_yaml(schema_path, "schema")
    validator = jsonschema.validators.validator_for(schema)(schema)
    changed = []
    for error in list(validator.iter_errors(config)):  # all found before any value changes
        wanted = error.validator_value if error.validator == "type" else None
        wanted = [wanted] if isinstance(wanted, str) else (wanted or [])
        if "number" not in wanted or not isinstance(error.instance, str):
            continue
        if not _YAML12_FLOAT.fullmatch(error.instance.strip()) or not error.absolute_path:
            continue
        *parents, last = error.absolute_path
        node = config
        for key in parents:
            node = node[key]
        node[last] = float(error.instance)
        changed.append(_dotted(error.absolute_path))
    return changed


def schema_problem(config: dict, files: Sequence[str | Path] = (), command_line: dict | None = None,
                   schema_path: Path = SCHEMA) -> str | None:
    """One line naming the most relevant schema violation of `config` (key, problem, and the file that set it or
    --config, whose values `command_line` holds), or None."""
    command_line = command_line or {}
    import jsonschema
    from jsonschema.exceptions import best_match

    schema = read_yaml(schema_path, "schema")
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = best_match(validator.iter_errors(copy.deepcopy(config)))
    if error is None:
        return None
    path = list(error.absolute_path)
    key = _dotted(path) or "the top level"
    described = _description(schema, error.absolute_schema_path)
    if path and _has(command_line, path):
        origin = " (set with --config)"
    else:
        where = set_in(path, files) if path else None
        origin = f" (set in {where})" if where else ""
    about = f" [{key.split('[')[0]}: {described}]" if described else ""
    return f"config: {key}: {error.message}{origin}{about}; fix: correct it there, {_SCHEMA_FIX}"


# --- what the schema cannot say --------------------------------------------------------------------------------------


def _nearest_multiple(value: int, factor: int) -> int:
    return max(factor, round(value / factor) * factor)


def consistency_problem(config: dict, basedir: Path, files: Sequence[str | Path] = (),
                        command_line: dict | None = None) -> str | None:
    """One line for the first inconsistency between keys the schema checks one by one (with the file that set the
    key and the fix), or None."""
    command_line = command_line or {}

    def origin(*key_path: str) -> str:
        if _has(command_line, key_path):
            return " (set with --config)"
        where = set_in(key_path, files)
        return f" (set in {where})" if where else ""

    for label in config["gpus"]:
        if label not in config["hardware"] and label.endswith(OLD_BRATS_SUFFIX):
            return (f"config: gpus lists {label!r}{origin('gpus')}, a hardware label with the workload in its name; "
                    f"the workload is its own key now; fix: list {label.removesuffix(OLD_BRATS_SUFFIX)!r} and set "
                    "workload: brats (config/brats.yaml does)")
        if label not in config["hardware"]:
            return (f"config: gpus lists {label!r}{origin('gpus')}, which is not defined under 'hardware'; fix: add "
                    f"it there (device, name_pattern, architecture) or use one of {sorted(config['hardware'])}")
    workload, source = WORKLOADS[config["workload"]], config["dataset"]["source"]
    if source not in workload.source_names:
        other = workload_of(source).name
        return (f"config: dataset.source {source}{origin('dataset', 'source')} belongs to the {other} workload, but "
                f"workload is {workload.name}{origin('workload')}; fix: set workload: {other} (config/brats.yaml does "
                f"for BraTS) or a {workload.name} source ({', '.join(workload.source_names)})")
    image, mask = workload.image_channels, workload.mask_channels
    model = config["model"]
    if (model["in_channels"], model["out_channels"]) != (image + mask, image):
        return (f"config: the {workload.name} workload has {image} image and {mask} mask channel(s), so "
                f"model.in_channels must be {image + mask} and model.out_channels {image} (got "
                f"{model['in_channels']} and {model['out_channels']}){origin('model')}; fix: set them so")
    problem = _variant_list_problem(config, ("run_variants",), origin,
                                    "every quality check and speed-up is relative to it")
    if problem:
        return problem
    problem = _data_parallel_problem(config, origin)
    if problem:
        return problem
    at_once = config["comparison"]["processes_at_once"]
    references = [name for name in config["comparison"]["references"] if name in config["run_variants"]]
    if at_once is not None and at_once <= len(references) < len(config["run_variants"]):
        return (f"config: comparison.processes_at_once {at_once}{origin('comparison', 'processes_at_once')} leaves "
                f"no process beside the references {references}, which every group of the paired rounds holds; fix: "
                f"set it to {len(references) + 1} or more, or null")
    kernel = config["quality"]["ssim_kernel"]
    if kernel % 2 == 0:
        return (f"config: quality.ssim_kernel must be odd (a centred Gaussian window), got {kernel}"
                f"{origin('quality', 'ssim_kernel')}; fix: use {kernel - 1} or {kernel + 1}")
    if config["sample"]["masks"] > config["dataset"]["heldout"]:
        return (f"config: sample.masks ({config['sample']['masks']}) exceeds dataset.heldout "
                f"({config['dataset']['heldout']}){origin('sample', 'masks')}; fix: lower sample.masks or hold out "
                "more cases")
    synthetic = source_of(config["dataset"]["source"]).synthetic
    if config["dataset"]["heldout"] >= config["dataset"]["cases"] and synthetic:
        return (f"config: dataset.heldout must leave at least one training case{origin('dataset', 'heldout')}; "
                f"fix: hold out fewer than dataset.cases ({config['dataset']['cases']})")
    factor = 2 ** (len(config["model"]["channel_mult"]) - 1)
    shape = config["dataset"]["shape"]
    crop = config["quality"]["reference_shape"]
    if crop is not None and any(c % factor or c > s for c, s in zip(crop, shape)):
        return (f"config: quality.reference_shape {crop} must fit in dataset.shape and be divisible by {factor}"
                f"{origin('quality', 'reference_shape')}; fix: use multiples of {factor} up to {shape}, or null")
    if any(side % factor for side in shape):
        return (f"config: dataset.shape {shape} must be divisible by {factor} (the U-Net halves it "
                f"{factor.bit_length() - 1} times){origin('dataset', 'shape')}; fix: use "
                f"{[_nearest_multiple(side, factor) for side in shape]}")
    problem = _study_problem(config, origin) or _fast_sampling_problem(config, origin)
    if problem:
        return problem
    for label in config.get("reference_results", []):
        problem = None if label in config["gpus"] else reference_set_problem(basedir, config["workload"], label)
        if problem:
            listed, rest = problem.split(", ", 1)
            return f"config: {listed}{origin('reference_results')}, {rest}"
    return None


def _fast_sampling_problem(config: dict, origin) -> str | None:
    """fast_sampling's variants among the runs and the study's, its step counts within both schedules."""
    fast = config["fast_sampling"]
    for key, listed, among in (("variants", fast["variants"], config["run_variants"]),
                               ("study_variants", fast["study_variants"], config["quality_study"]["variants"])):
        missing = [v for v in (listed or []) if v not in among]
        if missing:
            where = "run_variants" if key == "variants" else "quality_study.variants"
            return (f"config: fast_sampling.{key} lists {missing}{origin('fast_sampling', key)}, which {where} does "
                    f"not; fix: add them to {where} or leave them out (it has {list(among)})")
    schedules = {"diffusion.timesteps": config["diffusion"]["timesteps"],
                 "quality_study.timesteps": config["quality_study"]["timesteps"]}
    for sampler, counts in fast["samplers"].items():
        for key, timesteps in schedules.items():
            beyond = [steps for steps in counts if steps > timesteps]
            if beyond:
                return (f"config: fast_sampling.samplers.{sampler} runs {beyond} steps"
                        f"{origin('fast_sampling', 'samplers')}, more than {key} ({timesteps}); fix: at most "
                        f"{timesteps} steps (a fast sampler takes a subset of the schedule's timesteps)")
    return None


def _data_parallel_problem(config: dict, origin) -> str | None:
    """Every run variant's data_parallel processes divide train.gradient_accumulation: each process runs an equal share
    of the optimizer step's micro-batches (medddpm.data_parallel)."""
    accumulation = config["train"]["gradient_accumulation"]
    for name in config["run_variants"]:
        processes = config["variants"][name].get("data_parallel", 1)
        if isinstance(processes, int) and processes > 1 and accumulation % processes:
            divisors = [n for n in range(1, accumulation + 1) if accumulation % n == 0]
            set_by = origin("train", "gradient_accumulation")
            return (f"config: variant {name!r} runs data_parallel {processes}{origin('variants', name)} processes, "
                    f"which do not divide train.gradient_accumulation {accumulation}{set_by} (each process runs an "
                    f"equal share of the step's micro-batches); fix: set data_parallel to one of {divisors}, or "
                    f"train.gradient_accumulation to a multiple of {processes}")
    return None


def _variant_list_problem(config: dict, key_path: tuple[str, ...], origin, why_baseline: str) -> str | None:
    """A list of variant names (run_variants, quality_study.variants): every name defined, baseline among them."""
    names, key = config, ".".join(key_path)
    for part in key_path:
        names = names[part]
    for name in names:
        if name not in config["variants"]:
            return (f"config: {key} lists {name!r}{origin(*key_path)}, which is not defined under 'variants'; fix: "
                    "define its switches there, or correct the name")
    if "baseline" not in names:
        return (f"config: {key} must include 'baseline'{origin(*key_path)} ({why_baseline}); fix: add baseline to "
                "the list")
    return None


def _study_problem(config: dict, origin) -> str | None:
    """The quality study's settings against the rest of the configuration (one line, or None)."""
    study = config["quality_study"]
    problem = _variant_list_problem(config, ("quality_study", "variants"), origin, "every run is compared with it")
    if problem:
        return problem
    for label in study["gpus"] or []:
        if label not in config["gpus"]:
            return (f"config: quality_study.gpus lists {label!r}{origin('quality_study', 'gpus')}, which this "
                    f"invocation does not measure (gpus: {config['gpus']}); fix: leave it out, or null for every label")
    data = study["dataset"]
    synthetic = source_of(config["dataset"]["source"]).synthetic
    if data["heldout"] >= data["cases"] and synthetic:
        return (f"config: quality_study.dataset.heldout must leave at least one training case"
                f"{origin('quality_study', 'dataset', 'heldout')}; fix: hold out fewer than quality_study.dataset."
                f"cases ({data['cases']})")
    if study["masks"] > data["heldout"]:
        return (f"config: quality_study.masks ({study['masks']}) exceeds quality_study.dataset.heldout "
                f"({data['heldout']}){origin('quality_study', 'masks')}; fix: lower the masks or hold out more cases")
    levels = len(study["model"].get("channel_mult", config["model"]["channel_mult"]))
    factor = 2 ** (levels - 1)
    if any(side % factor for side in data["shape"]):
        return (f"config: quality_study.dataset.shape {data['shape']} must be divisible by {factor} (the U-Net halves "
                f"it {levels - 1} times){origin('quality_study', 'dataset', 'shape')}; fix: use "
                f"{[_nearest_multiple(side, factor) for side in data['shape']]}")
    kernel, smallest = study["ssim_kernel"], min(data["shape"])
    if kernel % 2 == 0 or kernel > 2 * smallest - 1:
        return (f"config: quality_study.ssim_kernel must be odd and below twice the smallest side of "
                f"quality_study.dataset.shape ({smallest}), got {kernel}{origin('quality_study', 'ssim_kernel')}; "
                f"fix: use {min(11, 2 * smallest - 1)}")
    return None


def check_config(config: dict, basedir: str | Path, files: Sequence[str | Path] = (),
                 command_line: dict | None = None) -> None:
    """Raise ConfigError with one line for the first problem of `config`: the schema's, then consistency.
    `files` are the config files it was merged from (the embedded default, then the overlays), `command_line` the
    values given with --config. Each overlay is read again here: Snakemake accepts one with a key given twice (the
    second replaces the first, silently), which this reader refuses naming the file and line. A number written as
    YAML 1.2 writes it (`lr: 1e-4`, a string to YAML 1.1 and so to Snakemake) becomes that number in `config`."""
    for path in list(files)[1:]:
        read_mapping(path, "overlay")
    read_yaml12_numbers(config)
    problem = schema_problem(config, files, command_line) or consistency_problem(config, Path(basedir), files,
                                                                                  command_line)
    if problem:
        raise ConfigError(problem)


def check_files(paths: Sequence[str | Path], basedir: Path = DEFAULT_CONFIG.parent) -> None:
    """Read the embedded default and `paths` as Snakemake merges them and check the result (the command line)."""
    from snakemake.utils import update_config

    files = [DEFAULT_CONFIG, *map(Path, paths)]
    config = read_mapping(DEFAULT_CONFIG, "embedded default")
    for path in paths:
        update_config(config, read_mapping(path, "overlay"))
    check_config(config, basedir, files)


def main(argv: Sequence[str]) -> int:
    try:
        check_files(argv)
    except ExpectedError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"ok: {', '.join(argv) or DEFAULT_CONFIG.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
