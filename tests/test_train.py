"""The trainer: resume bit-identity, divergence, DDP equivalence, overfitting, bad configs,
checkpoints that must not load, status.json while running (kills and corrupt checkpoints:
test_train_faults.py)."""

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from fractions import Fraction

import numpy as np
import pytest
import torch

import repro.runtime.run_dir
import repro.runtime.train
from repro.cli import main
from repro.data.build import PoolSpec, build_pool
from repro.data.pool import load_pool, packed_sequences
from repro.errors import ReproError
from repro.runtime.config import config_record, load_run_config, make_run_config
from repro.runtime.member import evaluation_epochs
from repro.runtime.run_dir import LATEST
from repro.runtime.train import check_config, train

BASE = dict(
    model="tiny",
    seq_len=32,
    batch_size=8,
    micro_batch=4,
    lr=3e-3,
    epochs=2,
    eval_every=0.5,
    threads=1,
    loader="repack",
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _metrics(run, drop=("wall_s",)):
    return [
        {k: v for k, v in json.loads(line).items() if k not in drop}
        for line in (run / "metrics.jsonl").read_text().splitlines()
    ]


def _cli_train(pool, out, *overrides):
    return [
        sys.executable,
        "-m",
        "repro.cli",
        "train",
        "--pool",
        str(pool),
        "--out",
        str(out),
        "--quiet",
        *[f"{k}={v}" for k, v in overrides],
    ]


def test_metrics_and_status(synthetic_pool, tmp_path):
    status = train(
        make_run_config(BASE | {"pool": str(synthetic_pool)}), tmp_path / "run", progress=False
    )
    lines = _metrics(tmp_path / "run", drop=())
    pool = load_pool(synthetic_pool)
    assert status["status"] == "done" and len(lines) == 4
    # evaluations after the last whole batch (8 sequences) before each half epoch; the run's end
    # completes its 2 epochs
    per_epoch = packed_sequences(pool.train.n_tokens, pool.train.n_docs, 32)
    for line, point in zip(lines, [0.5, 1.0, 1.5]):
        assert point - 8 / per_epoch < line["epoch"] <= point
    assert lines[-1]["epoch"] == 2.0
    assert all(
        {"step", "epoch", "tokens", "lr", "train_loss", "wall_s", "val_loss"} <= set(line)
        for line in lines
    )
    assert lines[-1]["tokens"] == lines[-1]["step"] * 8 * 32
    assert status["best_val_loss"] == min(line["val_loss"] for line in lines)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["model"] == "tiny"
    # each evaluation's summed loss per validation document, and each document's scored tokens
    docs = tmp_path / "run" / "val_docs"
    tokens = np.load(docs / "tokens.npy")
    assert tokens.sum() == packed_sequences(pool.val.n_tokens, pool.val.n_docs, 32) * 32
    for line in lines:
        per_doc = np.load(docs / f"step-{line['step']}.npy")
        assert per_doc.shape == tokens.shape == (pool.val.n_docs,)
        assert per_doc.sum() / tokens.sum() == pytest.approx(line["val_loss"], rel=1e-6)
    # starting a finished run again is a no-op
    assert (
        train(
            make_run_config(BASE | {"pool": str(synthetic_pool)}), tmp_path / "run", progress=False
        )
        == status
    )


def test_evaluation_epochs_even_and_log():
    assert evaluation_epochs(2, 0.5, "even") == [Fraction(k, 2) for k in (1, 2, 3, 4)]
    assert evaluation_epochs(32, 1.0, "log") == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]
    assert evaluation_epochs(48, 1.0, "log")[-3:] == [24, 32, 48]
    assert evaluation_epochs(10, 1.0, "log") == [1, 2, 3, 4, 6, 8, 10]  # and always the last
    # every epoch of a cool-down: a WSD trunk's last fifth, the whole of a branch's
    assert evaluation_epochs(32, 1.0, "log", 0.2) == [1, 2, 3, 4, 6, 8, 12, 16, 24, *range(26, 33)]
    assert evaluation_epochs(16, 1.0, "log", 0.2) == [1, 2, 3, 4, 6, 8, 12, 13, 14, 15, 16]


def test_log_spaced_evaluations_leave_the_run_and_its_training_loss_unchanged(
    synthetic_pool, tmp_path
):
    """Fewer evaluations, the same run: at every step both evaluate, the same validation and
    training loss (the mean over the last epoch either way), and the same final weights."""
    fields = BASE | {"pool": str(synthetic_pool), "epochs": 6, "eval_every": 1.0}
    fields |= {"schedule": "wsd", "decay_fraction": 0.1}  # log: after epochs 1, 2, 3, 4, 6
    train(make_run_config(fields), tmp_path / "even", progress=False)
    train(make_run_config(fields | {"eval_spacing": "log"}), tmp_path / "log", progress=False)
    even = {line["step"]: line for line in _metrics(tmp_path / "even")}
    log = {line["step"]: line for line in _metrics(tmp_path / "log")}
    assert len(even) == 6 and sorted(log) == sorted(even)[:4] + [max(even)]
    assert all(log[step] == even[step] for step in log)
    a, b = (
        torch.load(tmp_path / name / "checkpoint.pt", weights_only=True)["model"]
        for name in ("even", "log")
    )
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_killed_run_resumes_bit_identically(synthetic_pool, tmp_path):
    fields = BASE | {"epochs": 6, "eval_every": 0.25}
    train(
        make_run_config(fields | {"pool": str(synthetic_pool)}),
        tmp_path / "straight",
        progress=False,
    )
    cmd = _cli_train(synthetic_pool, tmp_path / "killed", *fields.items())
    proc = subprocess.Popen(cmd)
    metrics = tmp_path / "killed" / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (
        not metrics.exists() or len(metrics.read_text().splitlines()) < 3
    ):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = len(metrics.read_text().splitlines())
    assert 3 <= killed_at < 24, "the kill must land mid-run"
    assert json.loads((tmp_path / "killed" / "status.json").read_text())["status"] == "running"
    subprocess.run(cmd, check=True)
    assert _metrics(tmp_path / "killed") == _metrics(tmp_path / "straight")
    a = torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_divergence_is_recorded_not_crashed(synthetic_pool, tmp_path):
    result = subprocess.run(
        _cli_train(synthetic_pool, tmp_path / "run", *(BASE | {"lr": 1e30}).items()),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["status"] == "diverged" and status["step"] < status["total_steps"]
    assert (
        _metrics(tmp_path / "run")[-1].get("diverged")
        or _metrics(tmp_path / "run")[-1]["val_loss"] is None
    )


def test_ddp_matches_single_process(synthetic_pool, tmp_path):
    fields = BASE | {
        "epochs": 1,
        "batch_size": 8,
        "micro_batch": 2,
        "noise_scale": True,
    }  # DDP: per-rank norms before the all-reduce
    train(
        make_run_config(fields | {"pool": str(synthetic_pool)}), tmp_path / "single", progress=False
    )
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(_free_port()),
        "-m",
        "repro.cli",
        "train",
        "--pool",
        str(synthetic_pool),
        "--out",
        str(tmp_path / "ddp"),
        "--quiet",
        *[f"{k}={v}" for k, v in fields.items()],
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, "\n".join(
        line for line in done.stderr.splitlines() if "rank" in line or "error" in line.lower()
    )[-4000:]
    single, ddp = _metrics(tmp_path / "single"), _metrics(tmp_path / "ddp")
    assert len(single) == len(ddp) == 2
    for a, b in zip(single, ddp):
        assert a["step"] == b["step"]
        assert b["train_loss"] == pytest.approx(a["train_loss"], abs=1e-4)
        assert b["val_loss"] == pytest.approx(a["val_loss"], abs=1e-4)
        assert b["trace_cov"] > 0 and b["b_simple"] is not None and a["b_simple"] is not None


def test_small_model_overfits_a_tiny_pool(tmp_path):
    pool = build_pool(
        PoolSpec(source="synthetic", tokens=3_000, val_tokens=2_000, vocab_size=300),
        tmp_path / "pool",
        progress=False,
    )
    status = train(
        make_run_config(
            BASE
            | {
                "pool": str(pool),
                "epochs": 60,
                "eval_every": 1.0,
                "lr": 1e-2,
                "weight_decay": 0.0,
                "loader": "repeat",
                "batch_size": 4,
                "micro_batch": 4,
            }
        ),
        tmp_path / "run",
        progress=False,
    )
    lines = _metrics(tmp_path / "run")
    assert lines[-1]["train_loss"] < 0.5 * lines[0]["train_loss"]  # training loss falls far
    assert (
        status["best_epoch"] < 60 and lines[-1]["val_loss"] > status["best_val_loss"] + 0.05
    )  # validation turned up
    assert lines[-1]["train_loss"] < lines[-1]["val_loss"] - 0.5


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"batch_size": 10, "micro_batch": 4}, "not divisible by micro_batch"),
        ({"seq_len": 1024}, "exceeds model tiny's limit"),
        ({"seq_len": 500, "batch_size": 512, "micro_batch": 0}, "less than one batch"),
        ({"vocab_size": 1000}, "does not match"),
        ({"model": "huge"}, "unknown model size"),
        ({"loader": "random"}, "unknown loader"),
        ({"lr": -1}, "lr must be positive"),
        ({"epochs": 0}, "epochs must be positive"),
        ({"colour": "red"}, "unknown field 'colour'; fields: pool, model"),
        ({"tie_embeddings": "maybe"}, "tie_embeddings: expected bool, got 'maybe'"),
        ({"micro_batch": -1}, "must be >= 0"),
        ({"seed": -3}, "must be >= 0"),
        ({"device": "gpu"}, "use auto, cpu, cuda"),
        ({"eval_every": 0.4}, "must be 1/k"),
        ({"eval_spacing": "sqrt"}, "choose one of: even, log"),
        ({"eval_spacing": "log", "eval_every": 0.5}, "set eval_every 1 or eval_spacing even"),
        ({"batch_size": 8.5}, "batch_size: expected int, got '8.5'"),
        ({"lr": "nan"}, "lr: expected a finite float, got 'nan'"),
        ({"lr": "inf"}, "lr: expected a finite float, got 'inf'"),
        ({"weight_decay": "-inf"}, "weight_decay: expected a finite float, got '-inf'"),
        ({"batch_schedule": "0:4,x"}, "must look like 0:4,0.5:16"),
        ({"batch_schedule": "0.5:4"}, "must look like 0:4,0.5:16"),
        ({"save_steps": "10,ten"}, "not a comma-separated list of steps"),
        ({"adam_beta2": 1}, "adam_beta2=1.0 is outside [0, 1)"),
    ],
)
def test_bad_configs_fail_before_compute(synthetic_pool, tmp_path, overrides, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(_cli_train(synthetic_pool, tmp_path / "run", *(BASE | overrides).items())[3:])
    stderr = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in stderr and stderr.count("\n") == 1, stderr
    assert not (tmp_path / "run").exists()


def test_config_file_and_overrides(tmp_path, synthetic_pool):
    (tmp_path / "run.yaml").write_text(
        "model: tiny\nlr: 0.001\ntie_embeddings: true\nloader: shuffle\n"
    )
    config = load_run_config(
        str(tmp_path / "run.yaml"), ["lr=2e-3", "epochs=3"], pool=str(synthetic_pool)
    )
    assert (config.lr, config.epochs, config.tie_embeddings, config.loader, config.model) == (
        2e-3,
        3,
        True,
        "shuffle",
        "tiny",
    )
    with pytest.raises(ReproError, match="key=value"):
        load_run_config(None, ["lr"])
    (tmp_path / "float.yaml").write_text("batch_size: 8.7\n")
    with pytest.raises(ReproError, match="batch_size: expected int, got 8.7"):
        load_run_config(str(tmp_path / "float.yaml"), [])
    (tmp_path / "list.yaml").write_text("- lr\n")
    with pytest.raises(ReproError, match="must be a mapping"):
        load_run_config(str(tmp_path / "list.yaml"), [])
    train(
        make_run_config(BASE | {"pool": str(synthetic_pool), "epochs": 1}),
        tmp_path / "a",
        progress=False,
    )
    with pytest.raises(ReproError, match="holds a different run.*lr"):
        train(
            make_run_config(BASE | {"pool": str(synthetic_pool), "epochs": 1, "lr": 1e-3}),
            tmp_path / "a",
            progress=False,
        )


def test_betas_from_the_command_line_are_recorded_and_kept_by_a_branch(
    synthetic_pool, tmp_path, capsys
):
    """`repro train ... adam_beta2=0.99` records it in config.json and steps with it, also as a WSD
    branch continuing a trunk of the default betas (whose optimizer state holds those)."""
    fields = BASE | {"epochs": 1, "schedule": "wsd", "warmup_steps": 1}
    trunk = make_run_config(fields | {"pool": str(synthetic_pool), "save_steps": "2"})
    train(trunk, tmp_path / "trunk", progress=False)
    branch = fields | {"init_from": tmp_path / "trunk" / "checkpoints" / "step-2.pt"}
    main(_cli_train(synthetic_pool, tmp_path / "run", *(branch | {"adam_beta2": 0.99}).items())[3:])
    assert "run: done" in capsys.readouterr().out
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["adam_beta1"], config["adam_beta2"]) == (0.9, 0.99)
    for run, betas in (("trunk", (0.9, 0.95)), ("run", (0.9, 0.99))):
        checkpoint = torch.load(tmp_path / run / LATEST, weights_only=True)
        assert {tuple(g["betas"]) for g in checkpoint["optimizer"]["param_groups"]} == {betas}


def test_trainer_logs_noise_scale_and_follows_a_batch_schedule(synthetic_pool, tmp_path):
    base = dict(
        pool=str(synthetic_pool),
        model="tiny",
        seq_len=32,
        batch_size=8,
        micro_batch=2,
        epochs=2,
        eval_every=1.0,
        threads=1,
        lr=3e-3,
    )
    status = train(
        make_run_config(base | {"noise_scale": True}), tmp_path / "noise", progress=False
    )
    lines = [json.loads(x) for x in (tmp_path / "noise" / "metrics.jsonl").read_text().splitlines()]
    assert status["status"] == "done" and all(
        math.isfinite(x["b_simple"]) and x["trace_cov"] > 0 for x in lines
    )
    train(
        make_run_config(base | {"batch_schedule": "0:4,0.5:16"}),
        tmp_path / "schedule",
        progress=False,
    )
    lines = [
        json.loads(x) for x in (tmp_path / "schedule" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [x["step_batch"] for x in lines] == [4, 16]
    assert (
        lines[0]["lr"] < 3e-3 * math.sqrt(4 / 8) * 1.0001
        and lines[1]["tokens"] > 2 * lines[0]["tokens"] - 16 * 32 * 2
    )
    with pytest.raises(ReproError, match="noise_scale needs at least two micro-batches"):
        train(
            make_run_config(base | {"noise_scale": True, "micro_batch": 0}),
            tmp_path / "bad",
            progress=False,
        )


def test_the_trainer_imports_neither_scipy_nor_pandas():
    """The runtime (what the trainer runs) stays apart from the analysis code."""
    code = "import sys, repro.runtime.train; print(sorted({'scipy', 'pandas'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class _TouchOnLoad:
    """Unpickled by a plain pickle load, it creates a file (as arbitrary code could)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __setstate__(self, state):
        open(state["marker"], "w").close()


class _ShellOnLoad:
    """Unpickled by a plain pickle load, it runs a shell command."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("payload", [_TouchOnLoad, _ShellOnLoad])
@pytest.mark.parametrize("where", ["checkpoint", "init_from"])
def test_a_checkpoint_that_would_run_code_is_refused(synthetic_pool, tmp_path, payload, where):
    marker, evil = tmp_path / "ran", tmp_path / "evil.pt"
    torch.save({"model": payload(marker), "step": 0}, evil)
    fields = BASE | {"pool": str(synthetic_pool)}
    if where == "checkpoint":  # in a run folder (config.json marks one)
        (tmp_path / "run").mkdir()
        config = config_record(make_run_config(fields))
        (tmp_path / "run" / "config.json").write_text(json.dumps(config))
        evil.rename(tmp_path / "run" / LATEST)
        message = (
            f"{re.escape(str(tmp_path / 'run' / LATEST))} is unusable: .* to start this run over"
        )
    else:
        fields |= {"init_from": str(evil)}
        message = f"init_from: {re.escape(str(evil))} is unusable: .*tensors and plain values"
    with pytest.raises(ReproError, match=message) as error:
        train(make_run_config(fields), tmp_path / "run", progress=False)
    assert "\n" not in str(error.value) and not marker.exists()
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["status"] == "failed"


def test_status_shows_progress_while_running(synthetic_pool, tmp_path, monkeypatch):
    written, write_json = [], repro.runtime.run_dir.write_json

    def recorded(path, obj):
        if path.name == "status.json":
            written.append(obj)
        write_json(path, obj)

    monkeypatch.setattr(repro.runtime.run_dir, "write_json", recorded)
    final = train(make_run_config(BASE | {"pool": str(synthetic_pool)}), tmp_path, progress=False)
    evaluations = _metrics(tmp_path)
    start, *running, done = written
    assert start == {"status": "running", "step": 0, "total_steps": final["total_steps"]} | {
        "epoch": 0.0,
        "tokens": 0,
    }
    assert running == [
        {"status": "running", "total_steps": final["total_steps"]}
        | {k: line[k] for k in ("step", "epoch", "tokens", "val_loss")}
        for line in evaluations
    ]
    assert done == final and set(final) == {
        "status",
        "step",
        "total_steps",
        "steps_per_epoch",
        "wall_s",
        "stacked",
        "best_val_loss",
        "best_step",
        "best_epoch",
    }


def test_a_kill_while_keeping_a_trunk_step_writes_it_on_resume(
    synthetic_pool, tmp_path, monkeypatch
):
    """A WSD trunk's kept step (here an evaluation) is written before checkpoint.pt moves past it:
    a kill while writing it resumes before it, and the rerun writes it."""
    fields = BASE | {"pool": str(synthetic_pool), "schedule": "wsd", "warmup_steps": 1}
    kept = check_config(make_run_config(fields), load_pool(synthetic_pool)).steps_per_epoch
    config = make_run_config(fields | {"save_steps": str(kept)})
    train(config, tmp_path / "straight", progress=False)
    save = repro.runtime.train.save_member

    def save_or_die(path, *args, **kwargs):
        if path.name == f"step-{kept}.pt":
            raise KeyboardInterrupt
        save(path, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(repro.runtime.train, "save_member", save_or_die)
        with pytest.raises(KeyboardInterrupt):
            train(config, tmp_path / "killed", progress=False)
    train(config, tmp_path / "killed", progress=False)
    a, b = (
        torch.load(run / "checkpoints" / f"step-{kept}.pt", weights_only=True)["model"]
        for run in (tmp_path / "straight", tmp_path / "killed")
    )
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert _metrics(tmp_path / "killed") == _metrics(tmp_path / "straight")


@pytest.mark.slow
def test_a_gpu_presets_compile_and_bf16_fall_back_cleanly_on_a_cpu(synthetic_pool, tmp_path):
    """compile=True on a CPU compiles for the CPU, and bf16 autocast (CUDA only) stays off: the
    losses are the eager float32 ones."""
    fields = BASE | {"pool": str(synthetic_pool), "epochs": 1, "device": "auto"}
    eager = train(make_run_config(fields), tmp_path / "eager", progress=False)
    compiled = train(make_run_config(fields | {"compile": True}), tmp_path / "c", progress=False)
    assert eager["status"] == compiled["status"] == "done"
    assert compiled["best_val_loss"] == pytest.approx(eager["best_val_loss"], abs=1e-3)
