"""Faults of pool builds and pools: `repro data build` killed (SIGKILL) at random moments, and
just before each of its file-system writes, leaves --out absent or a complete pool, and the next
build repairs it; damaged pool files are one-line errors with a non-zero exit status."""

import json
import os
import random
import resource
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

import pytest

from repro.data.build import PoolSpec, build_pool
from repro.data.pool import load_pool
from repro.errors import ReproError

SPEC = PoolSpec(source="synthetic", tokens=2_000, val_tokens=500, vocab_size=300)
OTHER = PoolSpec(source="synthetic", tokens=2_000, val_tokens=500, vocab_size=300, seed=1)
CLI = [sys.executable, "-m", "repro.cli", "data"]
CLI_BUILD = [*CLI, "build", "--source", "synthetic", "--tokens", "2000", "--val-tokens", "500"]
CLI_BUILD += ["--vocab-size", "300", "--quiet", "--out"]  # the same pool as SPEC
RANDOM_KILLS = 4
PARALLEL = 4  # subprocesses at a time

# Builds a PoolSpec (argv[1], JSON) at argv[2] and SIGKILLs itself just before its N-th
# file-system write (argv[3]; an audit event); with N = 0 it finishes and prints its writes.
KILL_AT_WRITE = """
import json, os, signal, sys
from repro.data.build import PoolSpec, build_pool
spec, out, kill_at = PoolSpec(**json.loads(sys.argv[1])), sys.argv[2], int(sys.argv[3])
WRITES = {"os.rename", "os.replace", "os.mkdir", "os.rmdir", "os.remove", "shutil.rmtree"}
writes = []
def hook(event, args):
    if event in WRITES or (event == "open" and set(str(args[1])) & set("wax+")):
        writes.append([event, os.path.basename(str(args[0]))])
        if len(writes) == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
sys.addaudithook(hook)
build_pool(spec, out, force=True, progress=False)
print("\\n".join(json.dumps(w) for w in writes))
"""


def _snapshot(pool) -> dict:
    """Every file of a pool (meta.json with its fingerprint included) by relative path."""
    files = sorted(pool.rglob("*"))
    return {str(p.relative_to(pool)): p.read_bytes() for p in files if p.is_file()}


def _temps(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".pool."))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    """Snapshots of the uninterrupted builds of SPEC and OTHER."""
    root = tmp_path_factory.mktemp("reference")
    return {
        "spec": _snapshot(build_pool(SPEC, root / "spec", progress=False)),
        "other": _snapshot(build_pool(OTHER, root / "other", progress=False)),
    }


def _run_all(commands: list[list[str]]) -> list[subprocess.CompletedProcess]:
    """Run commands, PARALLEL at a time; their results in order."""
    with ThreadPoolExecutor(PARALLEL) as pool:
        return list(pool.map(lambda c: subprocess.run(c, capture_output=True, text=True), commands))


def _kill_at_write(spec: PoolSpec, out, kill_at: int) -> list[str]:
    """The command that builds `spec` at `out` and is killed just before its `kill_at`-th write."""
    return [sys.executable, "-c", KILL_AT_WRITE, json.dumps(asdict(spec)), str(out), str(kill_at)]


def _rebuild_repairs(out, expected: dict) -> None:
    """Building again gives the uninterrupted pool and leaves no temporary folder."""
    build_pool(SPEC, out, force=True, progress=False)
    assert _snapshot(out) == expected and _temps(out.parent) == []


def test_build_killed_at_random_moments(tmp_path, uninterrupted):
    """SIGKILL `repro data build` at seeded random moments, one in each of RANDOM_KILLS equal
    slices of an uninterrupted run (which ends with the interpreter's exit: a late kill may find
    the pool written; the next test kills the build at each of its writes)."""
    out = tmp_path / "pool"
    started = time.perf_counter()
    assert subprocess.run([*CLI_BUILD, str(out)], capture_output=True).returncode == 0
    seconds = time.perf_counter() - started
    assert _snapshot(out) == uninterrupted["spec"]
    rng = random.Random(20251130)
    outcomes = []
    for trial in range(RANDOM_KILLS):
        out = tmp_path / f"trial{trial}" / "pool"
        delay = rng.uniform(trial, trial + 1) / RANDOM_KILLS * seconds
        proc = subprocess.Popen([*CLI_BUILD, str(out)], stdout=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        outcomes.append((round(delay, 2), proc.wait(), out.exists()))
        assert not out.exists() or _snapshot(out) == uninterrupted["spec"], outcomes[-1]
        _rebuild_repairs(out, uninterrupted["spec"])
    print(f"build {seconds:.2f} s; kills (delay s, exit status, pool there): {outcomes}")


def _writes(tmp_path, replacing: bool) -> list[list[str]]:
    """The file-system writes of an uninterrupted build of SPEC (over OTHER when `replacing`),
    laid out as each step's build is."""
    dry = tmp_path / "dry" / "pool"
    dry.parent.mkdir()
    if replacing:
        build_pool(OTHER, dry, progress=False)
    (done,) = _run_all([_kill_at_write(SPEC, dry, 0)])
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.parametrize("replacing", [False, True], ids=["fresh", "replacing-another-pool"])
def test_build_killed_before_each_write(tmp_path, uninterrupted, replacing):
    """SIGKILL the build just before each of its file-system writes (replacing a pool: from the
    first rename on, the earlier writes being a fresh build's): --out is absent, the pool it
    replaces or the new pool, complete; the next build repairs it and removes the killed build's
    temporary folders."""
    writes = _writes(tmp_path, replacing)
    first = next(i for i, w in enumerate(writes, 1) if w[0] == "os.rename") if replacing else 1
    steps = range(first, len(writes) + 1)
    outs = {step: tmp_path / f"step{step}" / "pool" for step in steps}
    for out in outs.values():
        out.parent.mkdir()
        if replacing:
            build_pool(OTHER, out, progress=False)
    killed = _run_all([_kill_at_write(SPEC, outs[step], step) for step in steps])
    allowed = [uninterrupted["spec"], *([uninterrupted["other"]] if replacing else [])]
    for step, result in zip(steps, killed):
        where = (step, writes[step - 1], result.stderr[-300:])
        assert result.returncode == -signal.SIGKILL, where
        assert not outs[step].exists() or _snapshot(outs[step]) in allowed, where
        _rebuild_repairs(outs[step], uninterrupted["spec"])


# --- damaged pools: one line that says what to do, non-zero exit ---------------------------------


def _truncate(path, keep: int | None = None) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 7] if keep is None else data[:keep])


def _flip_last_byte(path) -> None:
    """The same size, the last token's high byte flipped: an id beyond the vocab."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def _edit_meta(pool, edit) -> None:
    meta = json.loads((pool / "meta.json").read_text())
    edit(meta)
    (pool / "meta.json").write_text(json.dumps(meta))


def _forget_files(meta: dict) -> None:
    del meta["files"]  # as in a pool built before sizes and checksums were recorded


DAMAGES = {
    "truncated-tokens": lambda pool: _truncate(pool / "train" / "tokens.npy"),
    "empty-tokens": lambda pool: _truncate(pool / "val" / "tokens.npy", keep=0),
    "garbled-meta": lambda pool: (pool / "meta.json").write_bytes(b'{"format": 1, "spl\x00'),
    "meta-wrong-sizes": lambda pool: _edit_meta(
        pool, lambda m: m["files"]["train/tokens.npy"].update(bytes=12)
    ),
    "meta-wrong-counts": lambda pool: _edit_meta(pool, lambda m: m["splits"]["val"].update(docs=9)),
    "missing-offsets": lambda pool: (pool / "train" / "doc_offsets.npy").unlink(),
    "flipped-token-byte": lambda pool: _flip_last_byte(pool / "train" / "tokens.npy"),
    "old-pool-truncated-tokens": lambda pool: (
        _edit_meta(pool, _forget_files),
        _truncate(pool / "train" / "tokens.npy"),
    ),
    "old-pool-wrong-counts": lambda pool: _edit_meta(
        pool, lambda m: (_forget_files(m), m["splits"]["train"].update(tokens=5))
    ),
}
CLI_CASES = ["truncated-tokens", "empty-tokens", "garbled-meta", "meta-wrong-sizes"]


def _damaged_copy(folder, damage: str, uninterrupted: dict):
    """A copy of the SPEC pool in `folder` with damage `damage` done to it."""
    for rel, data in uninterrupted["spec"].items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    DAMAGES[damage](folder)
    return folder


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_pool_is_a_one_line_error_that_says_rebuild(tmp_path, uninterrupted, damage):
    pool = _damaged_copy(tmp_path / "pool", damage, uninterrupted)
    advice = r"remove it and run again what built it .*or repro data build .*--force"
    with pytest.raises(ReproError, match=rf"is damaged: .*; {advice}") as error:
        load_pool(pool)
    assert "\n" not in str(error.value)
    with pytest.raises(ReproError, match="is damaged"):  # without --force nothing is replaced
        build_pool(SPEC, pool, progress=False)
    build_pool(SPEC, pool, force=True, progress=False)
    assert _snapshot(pool) == uninterrupted["spec"]


def test_cli_on_damaged_pools_exits_non_zero_with_one_line(tmp_path, uninterrupted):
    """`repro data info` on each damaged pool of CLI_CASES (`repro data verify` on a damaged pool:
    tests/test_data.py)."""
    pools = [_damaged_copy(tmp_path / case, case, uninterrupted) for case in CLI_CASES]
    commands = [[*CLI, "info", str(pool)] for pool in pools]
    for command, result in zip(commands, _run_all(commands)):
        assert result.returncode == 2 and result.stdout == "", command
        assert result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith("repro: error: pool") and "--force" in result.stderr


def test_a_build_flushes_every_file_before_its_rename_and_the_rename(tmp_path, monkeypatch):
    flushed, fsync = set(), os.fsync

    def recording(fd):
        flushed.add(os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    out = build_pool(SPEC, tmp_path / "pool", progress=False)
    tmp = f"{tmp_path.resolve()}/.pool.tmp-{os.getpid()}"  # the folder renamed into place
    written = {f"{tmp}/{p.relative_to(out)}" for p in out.rglob("*")}
    assert written | {tmp, str(tmp_path.resolve())} <= flushed


def test_a_full_disk_is_one_line_and_the_next_build_completes(tmp_path, uninterrupted):
    """Out of space (ulimit -f below the token arrays' size) `repro data build` stops with rc 2
    and one line naming the file and the free space, and leaves no temporary folder; built again
    with space, the pool is the uninterrupted one."""

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(
            resource.RLIMIT_FSIZE, (1000, resource.getrlimit(resource.RLIMIT_FSIZE)[1])
        )

    out = tmp_path / "pool"
    proc = subprocess.run(
        [*CLI_BUILD, str(out)], capture_output=True, text=True, preexec_fn=small_files
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert proc.stderr.startswith(f"repro: error: writing {tmp_path}/.pool.tmp-")
    assert "size limit (ulimit -f)" in proc.stderr and _temps(tmp_path) == [] and not out.exists()
    _rebuild_repairs(out, uninterrupted["spec"])


def test_two_builds_of_one_pool_at_once_both_succeed(tmp_path, uninterrupted):
    """Two reproductions (or notebooks run in parallel) building the same pool: the second waits
    for the first and finds its pool; nothing is left beside it."""
    out = tmp_path / "pool"
    results = _run_all([[*CLI_BUILD, str(out)]] * 2)
    assert all(r.returncode == 0 for r in results), [r.stderr[-500:] for r in results]
    assert _snapshot(out) == uninterrupted["spec"] and sorted(os.listdir(tmp_path)) == ["pool"]
