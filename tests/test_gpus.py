"""GPU ownership (measurement.gpus) on a CPU machine, with made-up GPU lists: each job holds one GPU alone, binds
itself and the processes it starts to it, records it, waits or fails in one line when all are taken, and a killed
job's GPU is free again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import SCRIPTS, Files, Params, run_script
from measurement import gpus
from measurement.gpus import CLAIMED, Gpu, NoFreeGpu, claim_gpu, visible_gpus

TWO = [Gpu("0", "GPU-aaaa"), Gpu("1", "GPU-bbbb")]


@pytest.fixture(autouse=True)
def no_lease_held(monkeypatch):
    monkeypatch.setattr(gpus, "_HELD", [])


def test_two_jobs_take_two_gpus_and_bind_to_them(tmp_path):
    first, second = {}, {}
    a = claim_gpu("job a", first, TWO, tmp_path)
    b = claim_gpu("job b", second, TWO, tmp_path)
    assert (a.gpu, b.gpu) == (TWO[0], TWO[1])
    assert first["CUDA_VISIBLE_DEVICES"] == first[CLAIMED] == "GPU-aaaa"  # by UUID: immune to device ordering
    assert second["CUDA_VISIBLE_DEVICES"] == "GPU-bbbb"
    assert (tmp_path / "gpu-GPU-aaaa.lock").read_text() == f"pid {os.getpid()} (job a)\n"
    assert a.provenance() == {"gpu_index": "0", "gpu_uuid": "GPU-aaaa", "gpu_lock": str(tmp_path / "gpu-GPU-aaaa.lock"),
                              "gpu_wait_seconds": a.provenance()["gpu_wait_seconds"]}


def test_processes_the_job_starts_inherit_its_gpu_and_claim_no_other(tmp_path):
    env = {"PATH": os.environ["PATH"]}
    claim_gpu("profile job", env, TWO, tmp_path)
    seen = subprocess.run([sys.executable, "-c", "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"], env=env,
                          capture_output=True, text=True, check=True).stdout.strip()
    assert seen == "GPU-aaaa"
    child = dict(env)  # the profiled program under ncu keeps the GPU its parent holds, without a lock of its own
    lease = claim_gpu("profiled program", child, TWO, tmp_path)
    assert lease.gpu.uuid == "GPU-aaaa" and lease.lock_path is None


def test_cuda_visible_devices_limits_the_choice(tmp_path):
    env = {"CUDA_VISIBLE_DEVICES": "1"}
    assert claim_gpu("job", env, TWO, tmp_path).gpu == TWO[1]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-bbbb,0"}, TWO) == [TWO[1], TWO[0]]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, TWO) == []
    assert claim_gpu("job", {"CUDA_VISIBLE_DEVICES": ""}, TWO, tmp_path) is None  # no GPU: the device check says so


def test_without_uuids_the_index_is_bound_in_pci_order(tmp_path):
    env = {}
    claim_gpu("job", env, [Gpu("0"), Gpu("1")], tmp_path)
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert (tmp_path / "gpu-index-0.lock").exists()


class Clock:
    """A clock that advances only when the claim sleeps."""

    def __init__(self, on_sleep=None):
        self.now, self.sleeps, self.on_sleep = 0.0, [], on_sleep

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.on_sleep:
            self.on_sleep()


def test_a_job_waits_for_a_gpu_to_come_free(tmp_path):
    held = [claim_gpu(name, {}, TWO, tmp_path) for name in ("job a", "job b")]
    clock = Clock(on_sleep=lambda: held[1].release())  # job b ends while the third one waits
    env = {}
    lease = claim_gpu("job c", env, TWO, tmp_path, wait_s=60, poll_s=2, clock=clock, sleep=clock.sleep)
    assert lease.gpu == TWO[1] and lease.waited_s == 2 and env["CUDA_VISIBLE_DEVICES"] == "GPU-bbbb"


def test_a_job_that_cannot_get_a_gpu_fails_in_one_line(tmp_path):
    held = [claim_gpu(name, {}, TWO, tmp_path) for name in ("train baseline", "sample tf32")]  # noqa: F841 (held)
    clock = Clock()
    with pytest.raises(NoFreeGpu) as caught:
        claim_gpu("profile tf32", {}, TWO, tmp_path, wait_s=60, poll_s=10, clock=clock, sleep=clock.sleep)
    message = str(caught.value)
    assert "\n" not in message and clock.sleeps == [10] * 6
    assert message.startswith("no free GPU for profile tf32 after waiting 1.0 min: every visible GPU is held (GPU 0: "
                               f"pid {os.getpid()} (train baseline); GPU 1: pid {os.getpid()} (sample tf32)); fix: run "
                               "with --resources gpu=N where N is at most the number of GPUs (2)")


def test_a_killed_job_leaves_its_gpu_free(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         f"sys.path.insert(0, {str(SCRIPTS)!r})\n"
         "from measurement.gpus import Gpu, claim_gpu\n"
         f"lease = claim_gpu('killed job', {{}}, [Gpu('0', 'GPU-aaaa'), Gpu('1', 'GPU-bbbb')], {str(tmp_path)!r})\n"
         "print('holding', flush=True)\n"
         "time.sleep(600)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        running = claim_gpu("while it runs", {}, TWO, tmp_path)
        assert running.gpu == TWO[1]
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    lease = claim_gpu("after it was killed", {}, [TWO[0]], tmp_path)  # the kernel dropped the dead job's lock
    assert lease.gpu == TWO[0] and lease.waited_s < 1


def test_under_slurm_the_allocated_gpu_is_used_without_a_lock(tmp_path):
    env = {"SLURM_JOB_ID": "17", "CUDA_VISIBLE_DEVICES": "0"}
    lease = claim_gpu("slurm job", env, [Gpu("0", "GPU-cccc")], tmp_path)
    assert lease.gpu.uuid == "GPU-cccc" and lease.lock_path is None and list(tmp_path.iterdir()) == []


def test_nvidia_smi_listing():
    listing = "0, GPU-aaaa\n1, GPU-bbbb\n"
    run = lambda *args, **kwargs: SimpleNamespace(stdout=listing)  # noqa: E731
    assert gpus.nvidia_smi_gpus(run) == TWO

    def missing(*args, **kwargs):
        raise FileNotFoundError("nvidia-smi")

    assert gpus.nvidia_smi_gpus(missing) == []


def test_device_files_count_the_gpus_without_nvidia_smi(tmp_path):
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    assert gpus.device_file_gpus(tmp_path) == [Gpu("0"), Gpu("1")]


def test_the_profile_job_binds_the_profiler_and_records_nothing_else(tmp_path, monkeypatch):
    """profile_tool.py for a GPU label holds a GPU before it starts ncu: ncu (here a script that prints what it sees)
    and the program it profiles run on that GPU alone; a second job at the same time gets the other GPU."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa,GPU-bbbb")
    monkeypatch.setenv("GPU_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv(CLAIMED, "")  # recorded as it was (unset), so that the binding the job makes is undone
    monkeypatch.delenv(CLAIMED)
    other = claim_gpu("another profile job", {}, TWO, tmp_path / "locks")  # GPU-aaaa is taken
    raw = (Path(__file__).parent / "fixtures" / "profiling" / "ncu_raw_h200_tiny_train_step.csv").read_text()
    (tmp_path / "raw.csv").write_text(raw)
    ncu = tmp_path / "ncu"
    ncu.write_text(f"""#!/bin/sh
case " $* " in
  *" --page raw "*) echo "export on $CUDA_VISIBLE_DEVICES" >&2; cat '{tmp_path}/raw.csv'; exit 0 ;;
  *" --page details "*) exit 0 ;;
esac
previous=""
for argument in "$@"; do
  if [ "$previous" = "-o" ]; then : > "$argument.ncu-rep"; fi
  previous="$argument"
done
echo "profiling on $CUDA_VISIBLE_DEVICES, claimed $GPU_CLAIMED"
for k in $(seq 0 40); do echo "==PROF== Profiling \\"k\\" - $k: 0%....50%....100% - 1 pass"; done
""")
    ncu.chmod(0o755)
    h200 = {"label": "h200", "device": "cuda", "name_pattern": r"\bH200\b", "emulate_gpus_on_cpu": False}
    settings = {"executable": str(ncu), "metrics": ["gpu__time_duration.sum"], "sections": [], "launch_count": None,
                "extra_args": [], "timeout_minutes": 1}
    out = Files(report=tmp_path / "ncu.ncu-rep", raw=tmp_path / "ncu_raw.csv", details=tmp_path / "ncu_details.csv",
                conditions=tmp_path / "ncu_conditions.json")
    run_script("profile_tool.py", params=Params(tool="ncu", settings=settings, device=h200, variant={}, model={},
                                               diffusion={}, train={"seed": 0}, warmup_steps=1),
               wildcards=SimpleNamespace(gpu="h200", variant="baseline", phase="train"),
               input=Files(dataset=tmp_path, preflight=tmp_path / "preflight.json"), output=out,
               log=Files(job=tmp_path / "job.log", tool=tmp_path / "tool.log"))
    assert "profiling on GPU-bbbb, claimed GPU-bbbb" in (tmp_path / "tool.log").read_text()
    assert gpus.held().provenance()["gpu_uuid"] == "GPU-bbbb"
    assert (tmp_path / "locks" / "gpu-GPU-bbbb.lock").read_text().startswith(f"pid {os.getpid()} (label h200")
    other.release()


def test_provenance_records_the_gpu_held(tmp_path):
    import torch

    from measurement.provenance import provenance

    assert provenance(torch.device("cpu"), {}, tmp_path, "cpu", False)["gpu_lease"] is None
    gpus._HELD.append(claim_gpu("job", {}, TWO, tmp_path))
    assert provenance(torch.device("cpu"), {}, tmp_path, "h200", True)["gpu_lease"]["gpu_uuid"] == "GPU-aaaa"
