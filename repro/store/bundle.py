"""Results bundles: a store's finished runs in one file, without checkpoints, to ship or share.

A bundle (FILE.tar.xz, and FILE.part2.tar.xz ... where it passes VOLUME_BYTES: volumes, each a
bundle of its own) holds, for every finished (done or diverged) run of a store, what the
analyses read: config.json, status.json, metrics.jsonl, downstream.json where there is one, and
val_docs/ (per-document losses at each evaluation and the documents' token counts); plus
bundle.json (format, config.NUMERICS, run count). Exported with `read` (the analyses' record of
what they read: documents_read), it holds per-document losses only at each run's last evaluation
and at the evaluations read, and val_docs/halves.json with the loss on each half of the
documents at every evaluation (run_dir.half_losses, what notebook 04 chooses on): the analyses
of those figures then read the same numbers from it, in a few MB. A file whose bytes an earlier
entry holds (a WSD branch's evaluations before its branch point are its trunk's) is a hard link to
that entry, so it is stored once. The same store gives the same bytes (entries sorted, times and
owners zeroed), so a committed bundle changes only when its runs do. A run's config.json names no
folder of the machine that trained it: its pool relative to the project root (data/pools/<name>)
and a WSD branch's init_from relative to the store (<trunk>/checkpoints/<file>), as run_identity
names them; import resolves both against the store it fills (bundles of format 3 or less, which
hold the trainer's absolute paths, are read by the same rule).

Importing refuses, before it writes anything, a bundle of other numerics, an entry that is not one
of those files or that comes twice, a file or a whole past MAX_MEMBER_BYTES or MAX_BUNDLE_BYTES,
and a run the store already holds with other contents (other files than the bundle's apart from
per-document losses, or other bytes in a file both hold): nothing in the store is overwritten.
The new runs are unpacked beside the store, each file then read once by its rule
(RunDir.check_results: a damaged one is refused, naming it, and none lands), then renamed into
it, each whole. Exporting refuses a run that check_results refuses (a torn metrics line).
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import math
import os
import re
import shutil
import tarfile
import tempfile
from contextlib import suppress
from pathlib import Path

from repro.errors import ReproError
from repro.paths import project_root
from repro.runtime.config import NUMERICS
from repro.runtime.files import atomic_write, json_text, make_folder, process_alive, read_json
from repro.runtime.run_dir import ANALYSED_FILE, LOSSES_FILE, RunDir

FORMAT = 4  # 2: repeated files as hard links; 3: val_docs/halves.json; 4: relative paths (1-4 read)
MANIFEST = "bundle.json"
RUN_FILE = re.compile(rf"(?P<run>[0-9a-f]{{12}})/({ANALYSED_FILE.pattern})")
"""The entries a bundle may hold besides its manifest: a run's files that the analyses read."""

MAX_MEMBER_BYTES, MAX_BUNDLE_BYTES = 64 * 2**20, 2**30
"""Bytes that one file of a bundle, and all of them, may unpack to (the shipped bundles': 33 kB
and 13 MB at most): checked against the tar headers before a file is read, and while it is."""
READ_CHUNK = 2**20
"""Bytes read from a bundle's file at a time."""

DOCUMENTS_READ = "_documents_read.json"
"""figures/<preset>/<N>_documents_read.json: {run id: [steps]} whose per-document losses notebook
N read (written by repro.study.Study with its figures)."""

Steps = dict[str, set[int]]
"""run id -> the steps of its evaluations whose per-document losses a bundle keeps."""


def documents_read(folder: str | Path) -> Steps:
    """The union of the records of `folder` (DOCUMENTS_READ), or a one-line error without one."""
    records = sorted(Path(folder).glob(f"*{DOCUMENTS_READ}"))
    if not records:
        raise ReproError(
            f"{folder} holds no *{DOCUMENTS_READ} (the notebooks write them beside their "
            "figures): run the notebooks first (repro reproduce), or export without --read"
        )
    steps: Steps = {}
    for record in records:
        for run_id, read in read_json(record, "run its notebook again").items():
            if not (isinstance(read, list) and all(type(step) is int for step in read)):
                raise ReproError(
                    f"{record}: {run_id} holds no list of steps; run its notebook again"
                )
            steps.setdefault(run_id, set()).update(read)
    return steps


def _run_entries(run: Path, keep: set[int] | None) -> dict[str, bytes]:
    """What a bundle holds of `run` (RunDir.analysed_entries), by name inside the run; with `keep`
    (steps), per-document losses only at those and the last evaluation, and halves.json
    (run_dir.half_losses at every evaluation) where some are left out."""
    folder = RunDir(run)
    entries = _portable(folder.analysed_entries(), project_root(run))
    if keep is None:
        return entries
    held = folder.document_steps()
    if not keep <= set(held):
        raise ReproError(
            f"{run} has no per-document losses at step {min(keep - set(held))}, which the "
            "record of the notebooks names: run them again against this store"
        )
    left_out = set(held[:-1]) - keep  # the last evaluation is always kept
    if left_out:
        halves = {str(step): folder.half_losses(step) for step in held}
        entries[folder.entry(folder.halves_file)] = json.dumps(halves, sort_keys=True).encode()
    for step in left_out:
        entries.pop(folder.entry(folder.document_losses_file(step)), None)
    return entries


POOLS = ("data", "pools")
"""Where a project keeps its pools, under its root (repro.study.open_study)."""


def _relative_pool(pool: Path, root: Path) -> str:
    """A run's pool relative to the project `root`; an absolute path elsewhere from its data/pools/
    on (the machine that trained it), else as it is (a pool outside any project)."""
    if not pool.is_absolute():
        return pool.as_posix()
    if pool.is_relative_to(root):
        return pool.relative_to(root).as_posix()
    parts = pool.parts
    starts = [i for i in range(len(parts) - 1) if parts[i : i + 2] == POOLS]
    return Path(*parts[starts[-1] :]).as_posix() if starts else pool.as_posix()


def _with_config(entries: dict[str, bytes], change) -> dict[str, bytes]:
    """`entries` with config.json's record passed through `change` (a damaged one left as it is,
    for RunDir.check_results to name)."""
    name = "config.json"
    try:
        record = json.loads(entries[name])
    except (KeyError, ValueError):
        return entries
    if not isinstance(record, dict):
        return entries
    return entries | {name: json_text(change(record)).encode()}


def _portable(entries: dict[str, bytes], root: Path) -> dict[str, bytes]:
    """A run's `entries` as a bundle holds them (module docstring): config.json's pool relative to
    the project `root`, a branch's init_from to its store."""

    def change(record: dict) -> dict:
        if record.get("pool"):
            record["pool"] = _relative_pool(Path(record["pool"]), root)
        if record.get("init_from"):
            record["init_from"] = "/".join(Path(record["init_from"]).parts[-3:])
        return record

    return _with_config(entries, change)


def _resolved(entries: dict[str, bytes], store: Path) -> dict[str, bytes]:
    """A bundle's run `entries` as `store` holds them: config.json's relative pool under the
    store's project root, a branch's init_from under the store."""

    def change(record: dict) -> dict:
        if record.get("pool") and not Path(record["pool"]).is_absolute():
            record["pool"] = str(project_root(store) / record["pool"])
        if record.get("init_from"):
            record["init_from"] = str(store.resolve() / record["init_from"])
        return record

    return _with_config(entries, change)


def _check_read(store: Path, runs: list[Path], read: Steps | None) -> None:
    """A one-line error for a record of the notebooks (`read`) that names a run `store` does not
    hold finished: they analysed another store."""
    missing = sorted(set(read or {}) - {run.name for run in runs})
    if missing:
        raise ReproError(
            f"the notebooks' record names run {missing[0]}, which {store} does not hold "
            f"finished ({len(missing)} such runs): run them again against this store"
        )


def _add(archive: tarfile.TarFile, name: str, data: bytes, stored: dict[str, str]) -> None:
    """One entry with zeroed time and owner (same store, same bytes): a regular file, or a hard
    link to the entry that holds the same bytes (`stored`: sha256 -> the first entry's name)."""
    info = tarfile.TarInfo(name)
    info.mode, info.mtime = 0o644, 0
    digest = hashlib.sha256(data).hexdigest()
    if digest in stored:
        info.type, info.linkname = tarfile.LNKTYPE, stored[digest]
        archive.addfile(info)
        return
    stored[digest] = name
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


VOLUME_BYTES = 4 * 2**20
"""Compressed bytes after which an export starts its next volume (volumes): a volume ends after
the run family that passes it, so each stays under MAX_VOLUME_BYTES."""
MAX_VOLUME_BYTES = 5 * 2**20
"""The most one volume file may hold (the repository's limit on a tracked file)."""


def volumes(first: str | Path) -> list[Path]:
    """The volumes of the bundle whose first volume is `first` (NAME.tar.xz): it, then
    NAME.part2.tar.xz, NAME.part3.tar.xz, ... while they exist."""
    first = Path(first)
    found, part = [first], 2
    while (following := volume_path(first, part)).is_file():
        found.append(following)
        part += 1
    return found


def volume_path(first: Path, part: int) -> Path:
    """Volume `part` (from 1) of the bundle whose first volume is `first`."""
    if part == 1:
        return first
    stem = first.name.removesuffix(".tar.xz")
    return first.with_name(f"{stem}.part{part}.tar.xz")


def export_bundle(store: str | Path, out: str | Path, read: Steps | None = None) -> int:
    """Write the finished runs of `store` to the bundle `out` (.tar.xz), with per-document losses
    at every evaluation, or, given `read` (documents_read), at those read and each run's last
    (module docstring); returns the number of runs. It writes `out`, then NAME.part2.tar.xz, ...
    (volumes): a volume ends once it passes VOLUME_BYTES, a WSD trunk and its branches in one. A
    store with no finished run, or an `out` or a volume of it that exists, is a one-line error."""
    store, out = Path(store), Path(out)
    if not store.is_dir():
        raise ReproError(f"{store} is not a directory of runs")
    stem = out.name.removesuffix(".tar.xz")
    for taken in [out, *sorted(out.parent.glob(f"{glob.escape(stem)}.part*.tar.xz"))]:
        if taken.exists():
            raise ReproError(f"{taken} exists; choose another --out, or remove it yourself")
    runs = [
        run
        for run in sorted(store.iterdir())
        if re.fullmatch(r"[0-9a-f]{12}", run.name) and RunDir(run).is_finished()
    ]
    if not runs:
        raise ReproError(f"{store} has no finished runs to export")
    _check_read(store, runs, read)
    for run in runs:
        RunDir(run).check_results()
    partial = read is not None or any(RunDir(run).halves_file.is_file() for run in runs)
    documents = "the last and those the analyses read" if partial else "every evaluation"
    families = _families(runs)
    header = {"format": FORMAT, "numerics": NUMERICS, "documents": documents}
    part = 1
    while families:
        families = _write_volume(volume_path(out, part), header, families, read)
        part += 1
    return len(runs)


def _families(runs: list[Path]) -> list[list[Path]]:
    """`runs` grouped by WSD trunk (a branch with the trunk it starts from, whose files it shares),
    in run-id order of each family's first run."""
    families: dict[str, list[Path]] = {}
    for run in runs:
        start = RunDir(run).config().get("init_from") or ""
        trunk = Path(start).parts[-3] if start else run.name
        families.setdefault(trunk, []).append(run)
    return sorted(families.values(), key=lambda family: family[0].name)


def _write_volume(
    path: Path, header: dict, families: list[list[Path]], read: Steps | None
) -> list[list[Path]]:
    """Write to the volume `path` the first families of runs that fill it to VOLUME_BYTES (at
    least one; its manifest counts their runs); returns the families left for the next one."""
    taken = _archive(io.BytesIO(), header, families, read, stop_at=VOLUME_BYTES)
    with atomic_write(path, "wb") as file:
        _archive(file, header, families[:taken], read)
    if path.stat().st_size > MAX_VOLUME_BYTES:
        raise ReproError(f"{path} passed {MAX_VOLUME_BYTES / 2**20:.0f} MiB; lower VOLUME_BYTES")
    return families[taken:]


def _archive(
    file, header: dict, families: list[list[Path]], read: Steps | None, stop_at: float = math.inf
) -> int:
    """Write `families` of runs as one .tar.xz to `file`, stopping after the family at which the
    compressed bytes pass `stop_at`; returns how many families it wrote."""
    stored: dict[str, str] = {}
    runs = sum(len(family) for family in families)
    with tarfile.open(fileobj=file, mode="w:xz", format=tarfile.PAX_FORMAT) as archive:
        manifest = json.dumps(header | {"runs": runs}, sort_keys=True).encode()
        _add(archive, MANIFEST, manifest, stored)
        for written, family in enumerate(families, start=1):
            for run in family:
                keep = None if read is None else read.get(run.name, set())
                for name, data in sorted(_run_entries(run, keep).items()):
                    _add(archive, f"{run.name}/{name}", data, stored)
            if file.tell() > stop_at:
                return written
    return len(families)


def import_bundle(bundle: str | Path, store: str | Path) -> tuple[int, int]:
    """Unpack `bundle` into `store` (created if missing); returns (runs added, runs the store
    already held with the same contents). Refused before any write: see the module docstring."""
    bundle, store = Path(bundle), Path(store)
    root = project_root(store)
    runs = {rid: _portable(entries, root) for rid, entries in _read_bundle(bundle).items()}
    added = [rid for rid in runs if not (store / rid).exists()]
    for rid in sorted(set(runs) - set(added)):
        if not _same_run(store / rid, runs[rid]):
            raise ReproError(
                f"{store / rid} holds other contents than {bundle}'s run {rid}; nothing was "
                "imported: move that folder away, or import into another store"
            )
    created = not store.exists()
    make_folder(store)
    _remove_dead_imports(store)
    try:
        _place(bundle, store, {rid: runs[rid] for rid in added})
    except ReproError:
        if created:  # a store made for this import goes too (while empty)
            with suppress(OSError):
                store.rmdir()
        raise
    return len(added), len(runs) - len(added)


def _place(bundle: Path, store: Path, runs: dict[str, dict[str, bytes]]) -> None:
    """Unpack `runs` (run id -> entries) beside `store`, check each (RunDir.check_results), then
    rename each into it: a damaged file is a one-line error naming it, and no run lands."""
    with tempfile.TemporaryDirectory(dir=store, prefix=f".import-{os.getpid()}-") as scratch:
        for rid, entries in runs.items():
            staged = RunDir(Path(scratch) / rid)
            staged.write_entries(_resolved(entries, store))
            try:
                staged.check_results()
            except ReproError as exc:
                inner = str(exc).split(staged.retrain)[0].rstrip(":; ")  # not ours to retrain
                inner = inner.replace(f"{scratch}{os.sep}", "")
                raise ReproError(
                    f"{bundle} holds a damaged run, nothing was imported (fetch or export it "
                    f"again): {inner}"
                ) from None
        for rid, entries in runs.items():
            try:
                os.rename(Path(scratch) / rid, store / rid)
            except OSError:  # another import (a second notebook) placed it first
                if not _same_run(store / rid, entries):
                    raise


def bundle_manifest(bundle: str | Path) -> dict:
    """A bundle's bundle.json (its first entry: read without unpacking the runs)."""
    with tarfile.open(bundle, mode="r:*") as archive:
        first = archive.next()
        if first is None or first.name != MANIFEST:
            raise ReproError(f"{bundle} does not start with {MANIFEST}; export it again")
        return json.loads(archive.extractfile(first).read())


def _read_bundle(bundle: Path) -> dict[str, dict[str, bytes]]:
    """run id -> {file name inside the run: bytes}; a one-line error for a bundle that is not one,
    is damaged, of other numerics, holds an entry RUN_FILE does not name or one twice, or passes
    the size limits (MAX_MEMBER_BYTES, MAX_BUNDLE_BYTES)."""
    fix = "fetch or export it again"
    try:
        with tarfile.open(bundle, mode="r:*") as archive:
            entries: dict[str, bytes] = {}
            unpacked = 0  # bytes
            for info in archive:
                known = info.name == MANIFEST or RUN_FILE.fullmatch(info.name)
                linked = info.islnk() and info.linkname in entries
                if not ((info.isfile() or linked) and known):
                    raise ReproError(f"{bundle} holds {info.name!r}, which no bundle holds; {fix}")
                if info.name in entries:
                    raise ReproError(f"{bundle} holds {info.name!r} twice; {fix}")
                room = MAX_BUNDLE_BYTES - unpacked
                data = entries[info.linkname] if linked else _member(archive, info, room, bundle)
                if len(data) > room:  # a hard link unpacks to a file too
                    raise _too_large(bundle, info.name, len(data))
                entries[info.name] = data
                unpacked += len(data)
    except FileNotFoundError:
        raise ReproError(f"{bundle} does not exist") from None
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ReproError(f"{bundle} is not a readable results bundle ({exc}); {fix}") from None
    try:
        manifest = json.loads(entries.pop(MANIFEST))
    except (KeyError, ValueError):
        raise ReproError(f"{bundle} has no readable {MANIFEST}; {fix}") from None
    if manifest.get("numerics") != NUMERICS:
        raise ReproError(
            f"{bundle} holds runs of numerics {manifest.get('numerics')}, this repro trains with "
            f"{NUMERICS} (config.NUMERICS): its runs would not match this repro's run ids"
        )
    runs: dict[str, dict[str, bytes]] = {}
    for name, data in entries.items():
        rid, inside = name.split("/", 1)
        runs.setdefault(rid, {})[inside] = data
    return runs


def _member(archive: tarfile.TarFile, info: tarfile.TarInfo, room: int, bundle: Path) -> bytes:
    """The bytes of file `info`, read in chunks (READ_CHUNK); a one-line error, before its bytes
    are read (its header's size) or while they are, once they pass MAX_MEMBER_BYTES or `room`
    (what MAX_BUNDLE_BYTES leaves)."""
    limit = min(MAX_MEMBER_BYTES, room)
    if info.size > limit:
        raise _too_large(bundle, info.name, info.size)
    source, chunks, size = archive.extractfile(info), [], 0
    while chunk := source.read(READ_CHUNK):
        size += len(chunk)
        if size > limit:
            raise _too_large(bundle, info.name, size)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(bundle: Path, name: str, size: int) -> ReproError:
    return ReproError(
        f"{bundle} holds {name!r} of {size:,} bytes or more, past a bundle's limits "
        f"({MAX_MEMBER_BYTES:,} bytes a file, {MAX_BUNDLE_BYTES:,} in all: "
        "repro.store.bundle); nothing was imported: fetch or export it again"
    )


def _same_run(run: Path, entries: dict[str, bytes]) -> bool:
    """Whether the store's `run` is a bundle's `entries`: the same files apart from per-document
    losses (a bundle may leave some out: Steps), the same bytes in every file that both hold, the
    paths of its config.json as a bundle holds them (_portable)."""
    held = _run_entries(run, None)
    if {n for n in held if not _losses(n)} != {n for n in entries if not _losses(n)}:
        return False
    return all(held[name] == data for name, data in entries.items() if name in held)


def _losses(name: str) -> bool:
    """Whether a run's file `name` holds per-document or half losses of one evaluation or more."""
    return LOSSES_FILE.fullmatch(name) is not None


def _remove_dead_imports(store: Path) -> None:
    """Scratch folders that a killed import left in `store` (.import-<pid>-*, that pid gone)."""
    for scratch in store.glob(".import-*-*"):
        pid = scratch.name.split("-")[1]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(scratch, ignore_errors=True)
