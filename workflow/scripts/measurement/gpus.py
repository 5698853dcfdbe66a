"""GPU ownership on a host with several GPUs: each GPU job takes one free GPU exclusively and binds itself to it.

Snakemake does not assign GPUs to local jobs (`--resources gpu=N` only counts them), so without this two measurement
jobs run at once on GPU 0 and both time a shared device. A job calls `claim_gpu` before anything touches CUDA:

- the visible GPUs are those of CUDA_VISIBLE_DEVICES, else every GPU `nvidia-smi` lists (in PCI order, the order
  CUDA_DEVICE_ORDER=PCI_BUS_ID gives CUDA too);
- a GPU is taken with an exclusive `fcntl.flock` on a file per GPU (by its UUID where known, so that jobs that see
  the same GPU under different indices still exclude each other). The kernel drops the lock when the process ends,
  however it ends: a killed job never leaves a GPU taken;
- the job then sets CUDA_VISIBLE_DEVICES to that GPU alone, for itself and for every process it starts (ncu, nsys
  and the profiled program inherit it), and GPU_CLAIMED so that a child does not claim a second GPU;
- with every GPU taken the job waits, polling, up to `wait_s`; then it fails with one line naming the holders.

Under SLURM (SLURM_JOB_ID set) the scheduler already gives each job its own GPUs: nothing is locked there, the
visible GPU is recorded as it is.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from jobio.errors import ExpectedError

CLAIMED = "GPU_CLAIMED"  # set by a job that holds a GPU, for the processes it starts
LOCK_DIR_VARIABLE = "GPU_LOCK_DIR"
DEFAULT_LOCK_DIR = Path("/tmp/gpu-locks")


class NoFreeGpu(ExpectedError, RuntimeError):
    """Every visible GPU is held by another job, and stayed so for the whole wait."""


@dataclass(frozen=True)
class Gpu:
    index: str  # as CUDA_VISIBLE_DEVICES names it for this job: an index or a UUID
    uuid: str | None = None  # the physical identity, where nvidia-smi gives it

    @property
    def key(self) -> str:
        """What the lock file is named after: the UUID where known, else the index."""
        return self.uuid or f"index-{self.index}"


def nvidia_smi_gpus(run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> list[Gpu]:
    """Every GPU nvidia-smi lists (PCI order), with its UUID; [] without nvidia-smi or GPUs."""
    try:
        out = run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"], capture_output=True, text=True,
                  check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            gpus.append(Gpu(parts[0], parts[1]))
    return gpus


def device_file_gpus(dev: Path = Path("/dev")) -> list[Gpu]:
    """GPUs by their device files (/dev/nvidia0, ...) where nvidia-smi is missing: indices in PCI order, no UUID."""
    numbers = sorted(int(path.name.removeprefix("nvidia")) for path in dev.glob("nvidia[0-9]*")
                     if path.name.removeprefix("nvidia").isdigit())
    return [Gpu(str(position)) for position in range(len(numbers))]


def visible_gpus(env: Mapping[str, str], listed: Sequence[Gpu]) -> list[Gpu]:
    """The GPUs this job may use: CUDA_VISIBLE_DEVICES (indices into `listed`, or UUIDs) if set, else `listed`."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return list(listed)
    by_index = {gpu.index: gpu for gpu in listed}
    by_uuid = {gpu.uuid: gpu for gpu in listed if gpu.uuid}
    visible = []
    for item in (part.strip() for part in value.split(",")):
        if not item or item == "-1":
            break  # CUDA stops at the first invalid entry
        visible.append(by_index.get(item) or by_uuid.get(item) or Gpu(item, item if item.startswith("GPU-") else None))
    return visible


@dataclass
class Lease:
    """A GPU held by this process (the lock is released when the process ends, or by `release`)."""

    gpu: Gpu
    lock_path: Path | None
    waited_s: float
    _handle: object = field(default=None, repr=False)

    def provenance(self) -> dict:
        return {"gpu_index": self.gpu.index, "gpu_uuid": self.gpu.uuid, "gpu_lock": str(self.lock_path or ""),
                "gpu_wait_seconds": round(self.waited_s, 3)}

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing the file drops the flock
            self._handle = None


def _try_lock(path: Path, owner: str):
    """The open lock file with its exclusive flock taken, or None where another process holds it."""
    try:
        handle = open(path, "a+")
        writable = True
    except PermissionError:  # another user's lock file: a lock needs no write access, the owner note does
        handle, writable = open(path), False
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    if writable:
        try:
            path.chmod(0o666)  # jobs of other users on this host take the same GPU's lock
        except OSError:
            pass
        handle.seek(0)
        handle.truncate()
        handle.write(owner + "\n")
        handle.flush()
    return handle


def _holder(path: Path) -> str:
    try:
        return path.read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def claim_gpu(owner: str, env: dict | None = None, listed: Sequence[Gpu] | None = None,
              lock_dir: str | Path | None = None, wait_s: float = 3600.0, poll_s: float = 2.0,
              clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> Lease | None:
    """Take one free visible GPU for this process and bind it (and every process it starts) to that GPU.

    `env` is the environment to read and bind (os.environ by default); `listed` the GPUs nvidia-smi would list
    (found when None). A job started by one that holds a GPU (GPU_CLAIMED set) keeps its parent's GPU. None when no
    GPU is visible at all.
    """
    env = os.environ if env is None else env
    if env.get(CLAIMED):
        gpu = Gpu(env.get("CUDA_VISIBLE_DEVICES", env[CLAIMED]), env[CLAIMED] if env[CLAIMED].startswith("GPU-")
                  else None)
        return Lease(gpu, None, 0.0)
    listed = (nvidia_smi_gpus() or device_file_gpus()) if listed is None else listed
    candidates = visible_gpus(env, listed)
    if not candidates:
        return None  # no GPU here: the device check that follows says so
    if env.get("SLURM_JOB_ID"):
        return _bind(env, Lease(candidates[0], None, 0.0))  # SLURM gave this job its GPUs
    folder = Path(lock_dir or env.get(LOCK_DIR_VARIABLE) or DEFAULT_LOCK_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        folder.chmod(0o1777)  # jobs of every user on the host share the locks
    except OSError:
        pass
    started = clock()
    while True:
        for gpu in candidates:
            path = folder / f"gpu-{gpu.key}.lock"
            handle = _try_lock(path, f"pid {os.getpid()} ({owner})")
            if handle is not None:
                return _bind(env, Lease(gpu, path, clock() - started, handle))
        waited = clock() - started
        if waited >= wait_s:
            holders = "; ".join(f"GPU {gpu.index}: {_holder(folder / f'gpu-{gpu.key}.lock')}" for gpu in candidates)
            raise NoFreeGpu(
                f"no free GPU for {owner} after waiting {waited / 60:.1f} min: every visible GPU is held ({holders}); "
                f"fix: run with --resources gpu=N where N is at most the number of GPUs ({len(candidates)}), or wait "
                f"for those jobs (locks in {folder})"
            )
        sleep(min(poll_s, max(wait_s - waited, 0.0)))


def _bind(env, lease: Lease) -> Lease:
    """Point CUDA_VISIBLE_DEVICES at the leased GPU alone (by UUID where known: immune to device ordering)."""
    env["CUDA_VISIBLE_DEVICES"] = lease.gpu.uuid or lease.gpu.index
    env[CLAIMED] = lease.gpu.uuid or lease.gpu.index
    if lease.gpu.uuid is None:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # nvidia-smi's indices, not CUDA's fastest-first order
    return lease


_HELD: list[Lease] = []  # the lease of this process, kept referenced: its lock lives as long as the process


def hold(owner: str, env: dict | None = None) -> Lease | None:
    """claim_gpu once per process (a later call returns the same lease); the wait is GPU_WAIT_MINUTES (default 60)."""
    if not _HELD:
        env = os.environ if env is None else env
        lease = claim_gpu(owner, env, wait_s=60 * float(env.get("GPU_WAIT_MINUTES", "60")))
        if lease is None:
            return None
        _HELD.append(lease)
    return _HELD[0]


def held() -> Lease | None:
    """The GPU this process holds, if any."""
    return _HELD[0] if _HELD else None
