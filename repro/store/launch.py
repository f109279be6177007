"""How a run on several processes starts (the run field `gpus`; DDP through torch.distributed).

On one machine (`repro sweep run`, local executor) the worker that claimed the run starts it with
torchrun, over the GPUs the executor gave that worker (CUDA_VISIBLE_DEVICES), or over gloo processes
on a CPU. Under submitit (Slurm, or its local executor) the job has one task per GPU, possibly over
several nodes; each task reads the distributed environment from the job's variables (submitit's
TorchDistributedEnvironment, from Slurm's) and joins the process group before training.
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from repro.errors import ReproError
from repro.runtime.config import RunConfig, config_record
from repro.runtime.run_dir import FINISHED, RunDir


def train_with_torchrun(config: RunConfig, run_dir: Path, threads: int = 0) -> dict:
    """Train `config` into `run_dir` in config.gpus processes started by torchrun (this machine);
    returns the run's final status. `threads`: CPU threads per process (0: torch's default)."""
    run = RunDir(run_dir)
    run.write_launch(config_record(config))
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(config.gpus),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_free_port()),
        "-m",
        "repro.cli",
        "train",
        "--pool",
        config.pool,
        "--out",
        str(run_dir),
        "--config",
        str(run.launch_file),
        "--quiet",
    ]
    env = os.environ | ({"OMP_NUM_THREADS": str(threads)} if threads else {})
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, preexec_fn=_die_with_parent
    )
    status = run.status()
    if done.returncode or status.get("status") not in FINISHED:
        lines = done.stderr.splitlines()
        errors = [line for line in lines if "repro: error:" in line] or [
            line for line in lines if "Error" in line
        ]
        cause = status.get("error") or (errors[-1] if errors else "no error line printed")
        raise ReproError(
            f"torchrun of {config.gpus} processes exited with {done.returncode}: {cause}"
        )
    return status


def _die_with_parent() -> None:
    """In the torchrun child: die with the process that started it (Linux: PR_SET_PDEATHSIG), so a
    killed sweep worker, whose run lock then drops, leaves no trainer behind."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def join_job_processes(device: str) -> int:
    """In a task of a submitit job (Slurm or local): export the distributed environment from the
    job's variables and join the process group (NCCL for a run on CUDA, else gloo; `device` is the
    run field); returns the rank."""
    import torch
    import torch.distributed as dist
    from submitit import JobEnvironment
    from submitit.helpers import TorchDistributedEnvironment

    env = TorchDistributedEnvironment()
    if JobEnvironment().cluster == "local":
        env.master_addr = "127.0.0.1"
    env.export(set_cuda_visible_devices=False, overwrite=True)
    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    dist.init_process_group("nccl" if cuda else "gloo")
    return env.rank


def job_resources(gpus: int, gpus_per_node: int, local: bool) -> dict:
    """submitit parameters for a run on `gpus` processes: one task per GPU, spread over whole
    nodes of `gpus_per_node` GPUs (the local executor: one node, and on a machine without CUDA
    gloo processes and no GPUs requested)."""
    if gpus <= gpus_per_node or local:
        nodes, per_node = 1, gpus
    elif gpus % gpus_per_node:
        raise ReproError(
            f"gpus={gpus} does not fill whole nodes of {gpus_per_node} GPUs; use a multiple of "
            f"{gpus_per_node} (or set --gpus-per-node)"
        )
    else:
        nodes, per_node = math.ceil(gpus / gpus_per_node), gpus_per_node
    resources = {"nodes": nodes, "tasks_per_node": per_node}
    if local:
        import torch

        return resources | ({"gpus_per_node": per_node} if torch.cuda.is_available() else {})
    return resources | {"gpus_per_node": per_node}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
