"""Fault injection: `repro train` and a stacked run SIGKILLed at random points (seeded), and
corrupt checkpoints. Re-running the same command ends exactly as an uninterrupted run (metrics,
status and weights, wall time aside) and leaves no temporary files; an unusable checkpoint falls
back to the previous one, or stops with one line naming the file to remove."""

import errno
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

import repro.runtime.train
from repro.cli import main
from repro.data.build import PoolSpec, build_pool
from repro.runtime.config import make_run_config
from repro.runtime.files import ReadOnly, write_json
from repro.runtime.model import Transformer
from repro.runtime.run_dir import LATEST, PREVIOUS
from repro.runtime.shapes import model_config
from repro.runtime.train import train, train_stacked

pytestmark = pytest.mark.slow  # trains or analyses whole studies: CI runs it, `pytest` skips it

# seeds whose kill plans include the windows that matter: a kill between keeping the previous
# checkpoint and installing the new one, and between two stack members' checkpoints
SEED, STACK_SEED = 20261131, 20261145
FIELDS = dict(
    model="tiny",
    seq_len=32,
    batch_size=4,
    micro_batch=2,
    lr=3e-3,
    epochs=2,
    eval_every=0.25,
    threads=1,
    loader="repack",
)
STACK = [dict(lr=1e-3, weight_decay=0.1), dict(lr=1e-2, weight_decay=0.0)]
# the child dies (SIGKILL) just before its N-th rename: a complete temporary file, not yet in place
KILL_HOOK = """
import os, signal, sys
die_at, renames, replace = int(sys.argv[1]), [], os.replace
def replace_or_die(*args, **kwargs):
    renames.append(args)
    if len(renames) == die_at:
        os.kill(os.getpid(), signal.SIGKILL)
    replace(*args, **kwargs)
if die_at:
    os.replace = replace_or_die
"""
TRAIN = "from repro.cli import main; main(sys.argv[2:])"
TRAIN_STACK = """
import json
from repro.runtime.config import make_run_config
from repro.runtime.train import train_stacked

configs, outs = json.loads(sys.argv[2]), json.loads(sys.argv[3])
train_stacked([make_run_config(c) for c in configs], outs, progress=False)
"""


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """A 6k-token synthetic pool: 2 epochs of batch 4 are 92 steps, 8 evaluations."""
    spec = PoolSpec(source="synthetic", tokens=6_000, val_tokens=1_000, vocab_size=300)
    return build_pool(spec, tmp_path_factory.mktemp("faults") / "pool", progress=False)


def _counting_renames(run):
    """Run `run()` in this process; returns the number of renames (os.replace) it made."""
    calls, replace = [], os.replace

    def counted(*args, **kwargs):
        calls.append(args)
        replace(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "replace", counted)
        run()
    return len(calls)


@pytest.fixture(scope="module")
def straight(pool, tmp_path_factory):
    """Uninterrupted runs: a single one and a stack of two, each with its renames counted."""
    root = tmp_path_factory.mktemp("straight")
    config = make_run_config(FIELDS | {"pool": str(pool)})
    stack = [make_run_config(FIELDS | c | {"pool": str(pool)}) for c in STACK]
    outs = [root / f"stacked{k}" for k in range(len(STACK))]
    single = {
        "out": root / "single",
        "renames": _counting_renames(lambda: train(config, root / "single", progress=False)),
    }
    stacked = {
        "outs": outs,
        "renames": _counting_renames(lambda: train_stacked(stack, outs, progress=False)),
    }
    for run, out in ((single, single["out"]), (stacked, outs[0])):
        run["wall_s"] = json.loads((out / "status.json").read_text())["wall_s"]
    return {"single": single, "stack": stacked}


def _metrics(run):
    return [
        {k: v for k, v in json.loads(line).items() if k != "wall_s"}
        for line in (run / "metrics.jsonl").read_text().splitlines()
    ]


def _assert_same_run(run, reference):
    """Identical metrics, final status and weights; no temporary files left. Wall time and the
    stack size of the last process (1 for a member that a kill left alone to finish) describe how
    the run was executed, not its result."""
    assert _metrics(run) == _metrics(reference)
    status, expected = (json.loads((r / "status.json").read_text()) for r in (run, reference))
    for key in ("wall_s", "stacked"):
        assert status.pop(key) > 0 and expected.pop(key) > 0
    assert status == expected
    weights, want = (torch.load(r / LATEST, weights_only=True)["model"] for r in (run, reference))
    assert weights.keys() == want.keys() and all(torch.equal(weights[k], want[k]) for k in want)
    assert not list(run.rglob("*.tmp")) and not (run / PREVIOUS).exists()


def _start(script, die_at, *args):
    return subprocess.Popen(
        [sys.executable, "-c", KILL_HOOK + script, str(die_at), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _mtime(path):
    return path.stat().st_mtime_ns if path.exists() else None


def _kill_somewhere(rng, reference, script, status, *args):
    """Start the command and SIGKILL it before a random one of its renames (as many as in the
    uninterrupted `reference` run), or at a random time within the reference's training time once
    training started (status.json rewritten). Returns whether the kill landed."""
    if rng.random() < 0.6:
        proc = _start(script, rng.randint(3, reference["renames"]), *args)  # after config, status
    else:
        before, proc, deadline = _mtime(status), _start(script, 0, *args), time.time() + 60
        while _mtime(status) == before and proc.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0, reference["wall_s"]))
        proc.send_signal(signal.SIGKILL)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode in (0, -signal.SIGKILL), stderr.decode()[-2000:]
    return proc.returncode == -signal.SIGKILL


def test_killed_run_reruns_to_the_same_end(pool, straight, tmp_path):
    """Seeded trials of one or two SIGKILLs each (at renames: between a checkpoint's write and
    its rename, between keeping the previous checkpoint and installing the new one, mid status
    or metrics rewrite; or at a random time), then the same command to the end."""
    rng, killed, trials = random.Random(SEED), 0, 4
    argv = ["train", "--pool", str(pool), "--quiet"] + [f"{k}={v}" for k, v in FIELDS.items()]
    for trial in range(trials):
        out = tmp_path / f"trial{trial}"
        args = [*argv, "--out", str(out)]
        for _ in range(rng.randint(1, 2)):
            killed += _kill_somewhere(rng, straight["single"], TRAIN, out / "status.json", *args)
        main(args)
        _assert_same_run(out, straight["single"]["out"])
    assert killed >= trials, f"only {killed} kills landed mid-run in {trials} trials"


def test_killed_stack_reruns_to_the_same_end(pool, straight, tmp_path):
    """A stack of two killed the same way: its members (maybe one evaluation apart) end exactly
    as in the uninterrupted stack."""
    rng, killed, trials = random.Random(STACK_SEED), 0, 3
    configs = [FIELDS | c | {"pool": str(pool)} for c in STACK]
    for trial in range(trials):
        outs = [tmp_path / f"trial{trial}" / f"m{k}" for k in range(len(configs))]
        args = [json.dumps(configs), json.dumps([str(out) for out in outs])]
        killed += _kill_somewhere(
            rng, straight["stack"], TRAIN_STACK, outs[-1] / "status.json", *args
        )
        train_stacked([make_run_config(c) for c in configs], outs, progress=False)
        for out, reference in zip(outs, straight["stack"]["outs"]):
            _assert_same_run(out, reference)
    assert killed >= trials - 1, f"only {killed} kills landed mid-run in {trials} trials"


def _interrupted(pool, out, evaluations, monkeypatch):
    """The run started (or resumed) and stopped in its `evaluations`-th evaluation from there;
    returns the command line that continues it."""
    evaluate, calls = repro.runtime.train.evaluate, []

    def evaluate_then_stop(*args, **kwargs):
        calls.append(1)
        if len(calls) == evaluations:
            raise KeyboardInterrupt
        return evaluate(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(repro.runtime.train, "evaluate", evaluate_then_stop)
        with pytest.raises(KeyboardInterrupt):
            train(make_run_config(FIELDS | {"pool": str(pool)}), out, progress=False)
    assert (out / LATEST).exists() and (out / PREVIOUS).exists()
    return ["train", "--pool", str(pool), "--out", str(out), "--quiet"] + [
        f"{k}={v}" for k, v in FIELDS.items()
    ]


def _corrupt(path, how):
    """Make the checkpoint at `path` empty, truncated, or one of another model size."""
    if how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        other = Transformer(model_config("cpu-s", 300, tie_embeddings=False)).state_dict()
        torch.save(torch.load(path, weights_only=True) | {"model": other}, path)


@pytest.mark.parametrize("how", ["empty", "truncated", "other model"])
def test_unusable_checkpoint_falls_back_to_the_previous(
    pool, straight, tmp_path, how, monkeypatch, capsys
):
    """Twice: the second time right after the first fallback's next checkpoint, which must have
    kept the good previous one, not the unusable one."""
    run = tmp_path / "run"
    argv = _interrupted(pool, run, 4, monkeypatch)  # checkpoints of evaluations 3 and 2
    _corrupt(run / LATEST, how)
    _interrupted(pool, run, 2, monkeypatch)  # from 2: checkpoint of 3 again, the previous is 2
    _corrupt(run / LATEST, how)
    main(argv)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(f"resuming from {run / PREVIOUS}" in line for line in err), err
    assert ("another model" in err[0]) == (how == "other model")
    _assert_same_run(run, straight["single"]["out"])


def test_no_usable_checkpoint_is_one_line_naming_the_files(pool, straight, tmp_path, monkeypatch):
    run = tmp_path / "run"
    argv = _interrupted(pool, run, 3, monkeypatch)
    _corrupt(run / LATEST, "truncated")
    _corrupt(run / PREVIOUS, "empty")
    done = subprocess.run(
        [sys.executable, "-m", "repro.cli", *argv], capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"remove {run / LATEST} and {run / PREVIOUS} to start this run over" in done.stderr
    (run / LATEST).unlink()
    (run / PREVIOUS).unlink()
    main(argv)  # as the message says: the run starts over
    _assert_same_run(run, straight["single"]["out"])


def test_unusable_init_from_is_one_line(pool, straight, tmp_path, capsys):
    trunk = tmp_path / "trunk.pt"
    trunk.write_bytes((straight["single"]["out"] / LATEST).read_bytes()[:1000])
    argv = ["train", "--pool", str(pool), "--out", str(tmp_path / "run"), "--quiet"]
    with pytest.raises(SystemExit) as exit_info:
        main(argv + [f"{k}={v}" for k, v in FIELDS.items()] + [f"init_from={trunk}"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert f"init_from: {trunk} is unusable" in err and "good checkpoint" in err


USER_FILES = ("metrics.jsonl", "notes.txt")
# damaged JSON files and what the one-line error says of each
DAMAGES = {
    b"": "is empty",
    b'{"status": "do': "is not valid JSON",
    b'{"status": "\xff"}': "is not UTF-8 text",
    b"[1, 2]": "holds a JSON list, not an object",
}


def _tree(path):
    return sorted((str(p), p.is_file() and p.read_bytes()) for p in path.rglob("*"))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda out, pool: out.write_text("mine"), "is a file, not a run folder"),
        (
            lambda out, pool: [out.mkdir()] + [(out / n).write_text("mine") for n in USER_FILES],
            "holds 'notes.txt'",
        ),
        (
            lambda out, pool: (out.mkdir(), (out / "metrics.jsonl").write_text("mine")),
            "has no config.json",
        ),
        (lambda out, pool: shutil.copytree(pool, out), "holds 'meta.json'"),
    ],
    ids=["file", "user-files", "user-metrics", "pool"],
)
def test_train_out_that_is_not_a_run_is_one_line_and_left_untouched(
    pool, tmp_path, make, message, capsys
):
    """A user's files, a pool or a file at --out: refused before any work; an empty folder or a
    run (tested throughout) is trained into."""
    out = tmp_path / "out"
    make(out, pool)
    before = _tree(tmp_path)
    argv = ["train", "--pool", str(pool), "--out", str(out), "--quiet", "model=tiny"]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and message in err, err
    assert _tree(tmp_path) == before


def test_checkpoints_and_statuses_are_flushed_with_their_folder(pool, tmp_path, monkeypatch):
    """Each published file is on disk before its rename, and the rename (its folder) after it."""
    run = tmp_path / "run"
    run.mkdir()  # an empty folder is trained into
    flushed, fsync = set(), os.fsync

    def recording(fd):
        flushed.add(os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    train(make_run_config(FIELDS | {"pool": str(pool), "epochs": 1}), run, progress=False)
    published = {f"{run.resolve()}/{name}.tmp" for name in ("config.json", "status.json", LATEST)}
    assert published | {str(run.resolve())} <= flushed


@pytest.mark.parametrize("damage", list(DAMAGES), ids=list(DAMAGES.values()))
@pytest.mark.parametrize("name", ["config.json", "status.json"])
def test_a_damaged_run_file_is_one_line_naming_it(pool, straight, tmp_path, name, damage, capsys):
    """Rerunning a finished run whose config.json or status.json is damaged: one line naming the
    file and what to do; a status.json removed as it says, the run ends done again."""
    run = shutil.copytree(straight["single"]["out"], tmp_path / "run")
    (run / name).write_bytes(damage)
    argv = ["train", "--pool", str(pool), "--out", str(run), "--quiet"]
    argv += [f"{k}={v}" for k, v in FIELDS.items()]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    fix = f"remove {run} to retrain it" if name == "config.json" else "remove it: the run then"
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"repro: error: {run / name} {DAMAGES[damage]}") and fix in err, err
    if name == "status.json":
        (run / name).unlink()
        main(argv)
        assert json.loads((run / name).read_text())["status"] == "done"


def _limit_file_size(limit: int):
    """For a child process: files it writes stop at `limit` bytes (ulimit -f), the write then
    failing with EFBIG instead of the process being killed by SIGXFSZ."""

    def set_limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(
            resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1])
        )

    return set_limit


def test_a_full_disk_stops_with_one_line_and_the_run_resumes_exactly(pool, straight, tmp_path):
    """Out of space (here: ulimit -f below the checkpoint's size) `repro train` stops with rc 2
    and one line naming the file and the free space, marks nothing failed and leaves no temporary
    file; run again with space, it ends exactly as the uninterrupted run."""
    out = tmp_path / "run"
    argv = ["train", "--pool", str(pool), "--out", str(out), "--quiet"]
    argv += [f"{k}={v}" for k, v in FIELDS.items()]
    checkpoint = (straight["single"]["out"] / LATEST).stat().st_size
    proc = subprocess.run(
        [sys.executable, "-m", "repro.cli", *argv],
        capture_output=True,
        text=True,
        preexec_fn=_limit_file_size(checkpoint // 2),
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert proc.stderr.startswith(f"repro: error: writing {out / LATEST}.tmp failed: ")
    assert "size limit (ulimit -f)" in proc.stderr and "MiB free there" in proc.stderr
    assert json.loads((out / "status.json").read_text())["status"] == "running"
    assert not list(out.rglob("*.tmp"))
    main(argv)
    _assert_same_run(out, straight["single"]["out"])


def _train_argv(pool, out) -> list[str]:
    argv = ["train", "--pool", str(pool), "--out", str(out), "--quiet"]
    return argv + [f"{k}={v}" for k, v in FIELDS.items()]


def test_a_run_another_process_holds_is_refused_in_one_line(pool, tmp_path, capsys):
    """One writer per run folder: a second repro train fails at once, writing nothing; once the
    holder is gone, the run trains."""
    out, hold = tmp_path / "run", "import sys; from repro.runtime.run_dir import RunDir; "
    hold += "h = RunDir(sys.argv[1]).held(); assert h.__enter__(); print(1, flush=True); input()"
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        holder.stdout.readline()
        with pytest.raises(SystemExit) as exit_info:
            main(_train_argv(pool, out))
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert f"{out} is being trained by another process (pid {holder.pid} " in err
    assert sorted(p.name for p in out.iterdir()) == [".lock"]
    main(_train_argv(pool, out))
    assert json.loads((out / "status.json").read_text())["status"] == "done"


def test_a_read_only_folder_is_one_line_naming_it(pool, tmp_path, monkeypatch, capsys):
    """EROFS from creating the run folder, and from an atomic write into it."""
    real_mkdir, real_open = os.mkdir, open

    def read_only(call):
        def refusing(path, *args, **kwargs):
            if str(path).startswith(str(tmp_path / "ro")):
                raise OSError(errno.EROFS, "Read-only file system", str(path))
            return call(path, *args, **kwargs)

        return refusing

    monkeypatch.setattr(os, "mkdir", read_only(real_mkdir))
    monkeypatch.setattr("builtins.open", read_only(real_open))
    real_mkdir(tmp_path / "ro")
    with pytest.raises(SystemExit) as exit_info:
        main(_train_argv(pool, tmp_path / "ro" / "run"))
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert f"{tmp_path / 'ro'} is on a read-only file system" in err
    with pytest.raises(ReadOnly, match=f"cannot write {tmp_path / 'ro' / 'x.json.tmp'}: "):
        write_json(tmp_path / "ro" / "x.json", {})
