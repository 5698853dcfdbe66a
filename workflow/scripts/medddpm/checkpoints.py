"""Checkpoints written whole or not at all, and read back only into the configuration that wrote them."""

from __future__ import annotations

import os
import shlex
import tempfile
from pathlib import Path

import torch

from jobio.errors import ExpectedError, writing

from .settings import as_dict


class CheckpointError(ExpectedError, ValueError):
    """A checkpoint that cannot be used here; the message names the file and the fix."""


def workload_record(model_spec) -> dict:
    """The settings a checkpoint's weights belong to (a build.ModelSpec: the network and the diffusion), as plain
    values that torch.load(..., weights_only=True) reads back."""
    return {"model": as_dict(model_spec.unet), "diffusion": as_dict(model_spec.diffusion)}


# The Snakemake command line of this run, as typed (workflow/rules/common.smk sets it; jobs inherit it).
COMMAND_VARIABLE = "MEDDDPM_SNAKEMAKE_COMMAND"


def forced_command(command: str, path: str | Path) -> str:
    """`command` (a snakemake command line) with `--forcerun path` added: among the values of its own --forcerun (-R)
    where it has one, else before a `--` that ends the options, else at the end (--forcerun takes several values, so
    it must not stand before a target)."""
    words = shlex.split(command)
    at = words.index("--") if "--" in words else len(words)
    given = [n for n, word in enumerate(words[:at]) if word in ("--forcerun", "-R")]
    if given:  # its values are a list: one more, rather than a second option that would replace the first
        return shlex.join(words[: given[0] + 1] + [str(path)] + words[given[0] + 1:])
    return shlex.join(words[:at] + ["--forcerun", str(path)] + words[at:])


def _fix(path: Path) -> str:
    """The command that trains the variant again and redoes what depends on it. Deleting the file is not enough:
    Snakemake does not rebuild a missing file whose consumers are up to date ("Nothing to be done")."""
    command = os.environ.get(COMMAND_VARIABLE)
    if command:
        return f"fix: run {forced_command(command, path)} (the same command forcing its train job: it trains again)"
    return (f"fix: add --forcerun {path} to the snakemake command (before any --): Snakemake then trains that variant "
            "again and redoes what depends on it")


class _RecordingWriter:
    """A file object for torch.save that keeps the first OSError of its writes.

    torch's zip writer swallows an exception raised by the file's write() and fails later with an unrelated
    RuntimeError ("enforce fail at inline_container.cc ... unexpected pos", seen on a full tmpfs, torch 2.13); the
    recorded error is the one to report (ENOSPC names the full disk).
    """

    def __init__(self, out) -> None:
        self.out = out
        self.error: OSError | None = None

    def write(self, data) -> int:
        try:
            return self.out.write(data)
        except OSError as error:
            self.error = self.error or error
            raise

    def flush(self) -> None:
        self.out.flush()


def save_checkpoint(state: dict, path: str | Path) -> None:
    """torch.save `state` to `path` through a temporary file beside it, renamed into place when complete.

    A failed write (a full disk) raises its OSError (ENOSPC), not torch's RuntimeError, and a failed or killed save
    leaves no file at `path`.
    """
    path = Path(path)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with writing(path), os.fdopen(handle, "wb") as out:
            recorder = _RecordingWriter(out)
            try:
                torch.save(state, recorder)
            except RuntimeError:
                if recorder.error is None:
                    raise
                raise recorder.error from None
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # as open() would create it (mkstemp makes it private)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load_checkpoint(path: str | Path, workload: dict | None = None, keys: tuple[str, ...] = ("model", "ema")) -> dict:
    """The checkpoint at `path`, refused with one line if it is cut short, not a checkpoint, lacks `keys`, or was
    written for another workload (`workload`: the model and diffusion settings this job runs, compared with those
    the checkpoint records)."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path} does not exist; {_fix(path)}") from None
    except Exception as error:  # torch raises RuntimeError, UnpicklingError, EOFError, KeyError for damaged files
        detail = str(error).split(". ")[0].splitlines()[0][:120] if str(error) else type(error).__name__
        raise CheckpointError(
            f"checkpoint {path} is truncated or not a checkpoint of this workflow ({detail}); {_fix(path)}"
        ) from None
    if not isinstance(state, dict) or any(key not in state for key in keys):
        if isinstance(state, dict):
            names = sorted(map(str, state))
            found = f"{len(names)} entries ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
        else:
            found = f"a {type(state).__name__}"
        raise CheckpointError(
            f"checkpoint {path} holds {found}, not the {' and '.join(keys)} weights this workflow's train job writes "
            f"(a bare state_dict, or another program's file); {_fix(path)}"
        )
    recorded = state.get("workload")
    if workload is not None and recorded is not None and recorded != workload:
        raise CheckpointError(
            f"checkpoint {path} was trained for another configuration ({_difference(recorded, workload)}); "
            f"{_fix(path)}"
        )
    return state


def _difference(recorded: dict, here: dict, prefix: str = "") -> str:
    """'model.base_width 64 there, 32 here' for the first setting that differs."""
    for key in sorted(set(recorded) | set(here), key=str):
        there_value, here_value = recorded.get(key), here.get(key)
        if isinstance(there_value, dict) and isinstance(here_value, dict):
            found = _difference(there_value, here_value, f"{prefix}{key}.")
            if found:
                return found
        elif there_value != here_value:
            return f"{prefix}{key} {there_value!r} there, {here_value!r} here"
    return ""


def load_weights_into(module: torch.nn.Module, weights: dict, path: str | Path, which: str) -> None:
    """`module.load_state_dict(weights)`, refused with one line naming the first key or shape that differs (a
    checkpoint of another network: another base width, depth or attention layout)."""
    own = module.state_dict()
    missing = [key for key in own if key not in weights]
    unexpected = [key for key in weights if key not in own]
    shapes = [key for key in own if key in weights and tuple(own[key].shape) != tuple(weights[key].shape)]
    if shapes:
        key = shapes[0]
        problem = (f"{len(shapes)} tensors differ in shape, e.g. {key} is {list(weights[key].shape)} there and "
                   f"{list(own[key].shape)} here")
    elif missing or unexpected:
        problem = (f"{len(missing)} tensors missing, {len(unexpected)} unknown "
                   f"(e.g. {(missing or unexpected)[0]})")
    else:
        module.load_state_dict(weights)
        return
    raise CheckpointError(
        f"checkpoint {path} holds {which} weights of another network ({problem}): it was trained for another "
        f"configuration; {_fix(Path(path))}"
    )
