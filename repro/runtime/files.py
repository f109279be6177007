"""Files written so that a reader never sees half of one: write a temporary file, flush it to disk,
rename it over the target, then flush the rename (the folder's entries) to disk. Also: JSON files
read back with a one-line error, and the check of an output folder before anything is written."""

import errno
import json
import os
import resource
import shutil
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from repro.errors import ReproError


def fsync(path: Path) -> None:
    """Flush a file's data, or a folder's entries (the renames into it), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: Path) -> None:
    """Flush every file and folder under `folder`, and `folder` itself, to disk."""
    for path in [*sorted(folder.rglob("*"), reverse=True), folder]:
        fsync(path)


NO_SPACE = {
    errno.ENOSPC: "no space is left on its device",
    errno.EDQUOT: "the disk quota is used up",
    errno.EFBIG: "the file passed the size limit (ulimit -f)",
}
MIN_FREE = 2**20
"""Bytes: a write that fails while its device has less free is taken for a full disk."""


class WriteRefused(ReproError):
    """A write that the device refused (full, or read-only): the work stops (no run is marked
    failed: that too would be refused) and resumes from its last checkpoint when the same command
    runs again once the device is fixed."""


class NoSpace(WriteRefused):
    """A write failed for want of space (no_space)."""


class ReadOnly(WriteRefused):
    """A write failed because its folder is on a read-only file system (read_only)."""


def read_only(path: Path, exc: BaseException) -> ReadOnly | None:
    """ReadOnly naming the folder that holds `path` (its nearest existing one) when `exc`, raised
    while `path` was being written or created, says the file system is read-only, else None."""
    if getattr(exc, "errno", None) != errno.EROFS:
        return None
    folder = next(p for p in Path(path).absolute().parents if p.exists())
    return ReadOnly(
        f"cannot write {path}: {folder} is on a read-only file system; choose an output folder "
        "on a writable one, or remount it read-write"
    )


def refused(path: Path, exc: BaseException) -> WriteRefused | None:
    """The WriteRefused that `exc`, raised while `path` was being written, means (no_space,
    read_only), else None."""
    return read_only(path, exc) or no_space(path, exc)


def no_space(path: Path, exc: BaseException) -> NoSpace | None:
    """NoSpace when `exc`, raised while `path` was being written, came from a full device, a
    used-up quota or the file size limit, else None. Libraries report these in their own words
    (torch.save raises a RuntimeError without an errno), so a write that failed while the device
    holds under MIN_FREE bytes, or the file reached the size limit, counts too."""
    code = getattr(exc, "errno", None)
    try:
        free = shutil.disk_usage(path.parent).free
        size = path.stat().st_size if path.exists() else 0
    except OSError:  # the folder is gone: not a matter of space
        return None
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if code not in NO_SPACE and limit != resource.RLIM_INFINITY and size >= limit:
        code = errno.EFBIG
    elif code not in NO_SPACE and free < MIN_FREE:
        code = errno.ENOSPC
    elif code not in NO_SPACE:
        return None
    return NoSpace(
        f"writing {path} failed: {NO_SPACE[code]} ({free / 2**20:,.0f} MiB free there); free "
        "space, then run the same command again"
    )


@contextmanager
def space_checked(path: Path) -> Iterator[None]:
    """Within the block, `path` is being written (or created): a failure that came from a lack of
    space or a read-only file system (refused) becomes NoSpace or ReadOnly naming it."""
    try:
        yield
    except Exception as exc:
        problem = refused(path, exc)
        if problem:
            raise problem from exc
        raise


def make_folder(path: Path) -> None:
    """Create folder `path` and its parents if missing (a full or read-only device: refused)."""
    with space_checked(path):
        path.mkdir(parents=True, exist_ok=True)


@contextmanager
def atomic_write(path: Path, mode: str = "w", keep_previous: Path | None = None) -> Iterator[IO]:
    """Open `path` + ".tmp" for writing; once the block succeeds, flush it to disk, move the old
    `path` to `keep_previous` (if given, beside `path`), rename the temporary file to `path` and
    flush the folder. A failing block removes the temporary file; a killed process leaves at most
    the temporary file, which the next write replaces. A write that fails for want of space raises
    NoSpace, one to a read-only file system ReadOnly (refused)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
    except BaseException as exc:
        problem = refused(tmp, exc) if isinstance(exc, Exception) else None
        tmp.unlink(missing_ok=True)
        if problem:
            raise problem from exc
        raise
    if keep_previous is not None and path.exists():
        os.replace(path, keep_previous)
    os.replace(tmp, path)
    fsync(path.parent)


def json_text(obj: dict) -> str:
    """`obj` as the indented JSON text that write_json writes."""
    return json.dumps(obj, indent=2) + "\n"


def write_json(path: Path, obj: dict) -> None:
    """Write `obj` to `path` as indented JSON (json_text), atomically."""
    with atomic_write(path) as f:
        f.write(json_text(obj))


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs on this machine (signal 0 probes without signalling); what a
    killed process left (named by its pid) may go once it does not."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def read_json(path: Path, fix: str) -> dict:
    """The JSON object in file `path`; a one-line ReproError naming the file, what is wrong with it
    (unreadable, not UTF-8, empty, not JSON, not an object) and `fix`: what to do about it."""
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        problem = f"cannot be read ({exc.strerror or type(exc).__name__})"
    except UnicodeDecodeError:
        problem = "is not UTF-8 text"
    except json.JSONDecodeError as exc:
        problem = "is empty" if not exc.doc.strip() else f"is not valid JSON ({exc})"
    else:
        if isinstance(value, dict):
            return value
        problem = f"holds a JSON {type(value).__name__}, not an object"
    raise ReproError(f"{path} {problem}; {fix}")


def read_metrics(path: Path, fix: str, torn_ok: bool = True) -> list[dict]:
    """The records of a metrics.jsonl file, one JSON object per line, [] while there is none. The
    last line is skipped while it has no newline (a live run is writing it, or a kill tore it),
    or without `torn_ok` (a finished run's) refused; any other line that is not a JSON object is a
    one-line ReproError naming the file, the line and `fix`."""
    if not path.exists():
        return []
    try:
        *complete, torn = path.read_bytes().split(b"\n")
    except OSError as exc:
        raise ReproError(f"{path} cannot be read ({exc.strerror}); {fix}") from None
    if torn and not torn_ok:
        number = len(complete) + 1
        raise ReproError(f"{path} line {number} is torn (it has no newline); {fix}")
    records = []
    for number, line in enumerate(complete, 1):
        try:
            record = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            record = None
        if not isinstance(record, dict):
            raise ReproError(f"{path} line {number} is not a JSON object; {fix}")
        records.append(record)
    return records


def check_out(
    out: Path, kind: str, entries: Collection[str], marker: str, scratch: Collection[str] = ()
) -> None:
    """Refuse, before any work, an --out that writing a `kind` there would damage: a file, a path
    below a file, a folder holding anything but `entries` and `scratch` (what interrupted writes
    leave), or one holding any of `entries` without `marker` (so not a `kind`). Accepted: a missing
    folder, one holding nothing but `scratch`, and a `kind` (which the caller may reuse)."""
    if (out.exists() or out.is_symlink()) and not out.is_dir():
        raise ReproError(f"--out {out} is a file, not a {kind} folder; choose another --out")
    if out.is_dir():
        names = {p.name for p in out.iterdir()}
        foreign = sorted(names - set(entries) - set(scratch))
        if foreign or (names - set(scratch) and marker not in names):
            why = f"it holds {foreign[0]!r}" if foreign else f"it has no {marker}"
            raise ReproError(
                f"--out {out} is a folder but not a {kind} ({why}); only an empty folder or a "
                f"{kind} is written into: choose another --out, or move that folder away yourself"
            )
        return
    parent = next(p for p in out.absolute().parents if p.exists() or p.is_symlink())
    if not parent.is_dir():
        raise ReproError(f"--out {out} lies below {parent}, which is a file; choose another --out")
