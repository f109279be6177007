"""A pool: a fixed set of unique training documents plus held-out validation documents, tokenized.

On disk (docs/CONTRACT.md):
    POOL/meta.json, POOL/tokenizer.json,
    POOL/{train,val}/tokens.npy       flat token ids (uint16 if vocab <= 65535 else uint32), no EOS
    POOL/{train,val}/doc_offsets.npy  int64, n_docs + 1 entries; doc i = tokens[off[i]:off[i+1]]

Integrity. meta.json records each file's size (bytes), sha256 and, for arrays, shape and dtype
(`files`). load_pool checks sizes, shapes, dtypes, the offsets against the tokens and the token
ids against the vocab (cheap: one max over each split's tokens, so that a flipped byte is found
before training rather than as an index error inside it); verify_pool (`repro data verify`)
reads every byte against the checksums and the fingerprint. Pools built before `files` existed
load and verify without the checksums.
A damaged pool is a one-line error that says how to rebuild it.

Building a pool: repro.data.build.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG

import numpy as np
from tqdm.std import tqdm

from repro.errors import ReproError
from repro.runtime.progress import progress_bar

FORMAT_VERSION = 1
SPLITS = ("train", "val")
HASH_CHUNK_BYTES = 1 << 22  # read 4 MiB at a time when hashing
ARRAYS = ("tokens", "doc_offsets")  # each split's arrays, stored as SPLIT/NAME.npy
POOL_ENTRIES = frozenset({"meta.json", "tokenizer.json", *SPLITS})  # all a pool folder holds
REQUIRED_META = ("splits", "vocab_size", "eos_id", "dtype", "tokenizer_sha256", "fingerprint")


@dataclass
class Split:
    tokens: np.ndarray
    doc_offsets: np.ndarray

    @property
    def n_docs(self) -> int:
        return len(self.doc_offsets) - 1

    @property
    def n_tokens(self) -> int:
        return int(self.doc_offsets[-1])

    def doc_lengths(self) -> np.ndarray:
        return np.diff(self.doc_offsets)

    def doc(self, i: int) -> np.ndarray:
        return self.tokens[self.doc_offsets[i] : self.doc_offsets[i + 1]]


@dataclass
class Pool:
    path: Path
    meta: dict
    train: Split
    val: Split

    @property
    def vocab_size(self) -> int:
        return self.meta["vocab_size"]

    @property
    def eos_id(self) -> int:
        return self.meta["eos_id"]

    def split(self, name: str) -> Split:
        return {"train": self.train, "val": self.val}[name]


def packed_sequences(tokens: int, docs: int, seq_len: int) -> int:
    """Sequences of seq_len + 1 tokens that a split of `tokens` tokens in `docs` documents packs
    into (documents joined by one end-of-text token each)."""
    return (tokens + docs) // (seq_len + 1)


def built_meta(path: str | Path) -> dict | None:
    """The meta.json of the pool at `path` (a new dict on every call), or None while it is not
    built. Its text is read once per version of the file (run ids ask for it for every run)."""
    meta_path = Path(path) / "meta.json"
    try:
        version = meta_path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not S_ISREG(version.st_mode):
        return None
    try:
        text = _meta_text(str(meta_path), version.st_mtime_ns, version.st_size, version.st_ino)
    except UnicodeDecodeError as exc:
        raise _damaged(Path(path), f"meta.json is not valid JSON ({exc})") from exc
    return _parse_meta(Path(path), text)


@functools.lru_cache(maxsize=1024)
def _meta_text(meta_path: str, mtime_ns: int, size: int, inode: int) -> str:
    """meta.json's text, cached by the file's version (modification time, size, inode)."""
    return Path(meta_path).read_text()


def load_pool(path: str | Path) -> Pool:
    """Memory-map a built pool after cheap checks: file sizes, array shapes and dtypes, offsets
    against tokens, token ids against the vocab, meta.json against the arrays (no checksums: see
    verify_pool). A damaged pool is a one-line ReproError that says how to rebuild it."""
    path = Path(path)
    meta = _read_meta(path)
    try:
        _check_sizes(path, meta.get("files"))
        splits = {name: _load_split(path, name, meta.get("files")) for name in SPLITS}
        _check_arrays(path, meta, splits)
    except (KeyError, TypeError) as exc:
        raise _damaged(path, f"meta.json is malformed ({type(exc).__name__}: {exc})") from exc
    return Pool(path, meta, splits["train"], splits["val"])


def _damaged(path: Path, what: str) -> ReproError:
    return ReproError(
        f"pool {path} is damaged: {what}; remove it and run again what built it (repro "
        f"reproduce rebuilds its pools), or repro data build ... --out {path} --force (the same "
        "arguments as before)"
    )


def _read_meta(path: Path) -> dict:
    """meta.json of pool folder `path` (an error when it is missing or not a JSON object)."""
    meta_path = path / "meta.json"
    if not meta_path.is_file():
        raise ReproError(
            f"{path} is not a pool (no meta.json); build one with: "
            f"repro data build --source stdlib --tokens 1M --out {path}"
        )
    try:
        text = meta_path.read_text()
    except UnicodeDecodeError as exc:
        raise _damaged(path, f"meta.json is not valid JSON ({exc})") from exc
    return _parse_meta(path, text)


def _parse_meta(path: Path, text: str) -> dict:
    """meta.json's object from its text (an error naming the pool when it is not one)."""
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _damaged(path, f"meta.json is not valid JSON ({exc})") from exc
    if not isinstance(meta, dict):
        raise _damaged(path, "meta.json is not a JSON object")
    return meta


def _check_sizes(path: Path, files: dict | None) -> None:
    """Each file that meta.json records (`files`; None for pools built before it) exists with its
    recorded size in bytes."""
    for rel, record in (files or {}).items():
        if not (path / rel).is_file():
            raise _damaged(path, f"{rel} is missing")
        size = (path / rel).stat().st_size
        if size != record["bytes"]:
            raise _damaged(path, f"{rel} has {size:,} bytes, meta.json records {record['bytes']:,}")


def _load_split(path: Path, name: str, files: dict | None) -> Split:
    """Split `name`, its tokens memory-mapped; shapes and dtypes checked against `files`."""
    arrays = []
    for array in ARRAYS:
        rel, file = f"{name}/{array}.npy", path / name / f"{array}.npy"
        record = (files or {}).get(rel)
        try:
            loaded = np.load(file, mmap_mode="r" if array == "tokens" else None)
        except (OSError, ValueError, EOFError) as exc:
            raise _damaged(path, f"{rel} is not a readable .npy file ({exc})") from exc
        if record is not None and [list(loaded.shape), loaded.dtype.name] != [
            record["shape"],
            record["dtype"],
        ]:
            raise _damaged(path, f"{rel}'s shape or dtype differs from meta.json's record")
        arrays.append(loaded)
    return Split(*arrays)


def _check_arrays(path: Path, meta: dict, splits: dict[str, Split]) -> None:
    """Each split's offsets index its tokens, its token ids lie below the vocab size, and
    meta.json's counts and dtype match the arrays."""
    missing = [key for key in REQUIRED_META if key not in meta]
    if missing:
        raise _damaged(path, f"meta.json lacks {', '.join(missing)}")
    for name, split in splits.items():
        tokens, offsets = split.tokens, split.doc_offsets
        if tokens.ndim != 1 or offsets.ndim != 1 or len(offsets) < 2 or offsets.dtype != np.int64:
            raise _damaged(path, f"{name}/ arrays are not flat, or the offsets are not int64")
        if tokens.dtype.name != meta["dtype"]:
            raise _damaged(path, f"{name}/tokens.npy is {tokens.dtype.name}, not {meta['dtype']}")
        if offsets[0] != 0 or offsets[-1] != len(tokens) or np.any(np.diff(offsets) < 0):
            raise _damaged(path, f"{name}/doc_offsets.npy does not index {name}/tokens.npy")
        top = int(tokens.max(initial=0))
        if top >= meta["vocab_size"]:
            raise _damaged(
                path,
                f"{name}/tokens.npy holds token id {top:,}, beyond its vocab of "
                f"{meta['vocab_size']:,} (repro data verify {path} checks every byte)",
            )
        stats = meta["splits"][name]
        if (stats["tokens"], stats["docs"]) != (split.n_tokens, split.n_docs):
            raise _damaged(
                path,
                f"meta.json records {stats['tokens']:,} {name} tokens in {stats['docs']:,} docs, "
                f"the arrays hold {split.n_tokens:,} in {split.n_docs:,}",
            )


def verify_pool(path: str | Path, progress: bool = True) -> str:
    """Read every byte of a pool: each file against the sha256 recorded at build time, the arrays
    against the fingerprint. A mismatch is a ReproError; returns a one-line verdict."""
    pool = load_pool(path)
    files = pool.meta.get("files")
    for rel, record in (files or {}).items():
        if file_sha256(pool.path / rel, progress) != record.get("sha256"):
            raise _damaged(pool.path, f"{rel} does not match the sha256 in meta.json")
    splits = {"train": pool.train, "val": pool.val}
    recomputed = fingerprint(pool.meta["tokenizer_sha256"], splits, progress)
    if recomputed != pool.meta["fingerprint"]:
        raise _damaged(pool.path, "the arrays do not match the fingerprint in meta.json")
    checked = (
        f"{len(files)} files match their sha256"
        if files
        else "checksums are not recorded (the pool was built before they were)"
    )
    return f"{pool.path}: ok: {checked}; the arrays match fingerprint {recomputed[:12]}"


def _hash_bar(total_bytes: int, desc: str, progress: bool) -> tqdm:
    """A progress bar for hashing, shown only when it takes over a second."""
    return progress_bar(
        total=total_bytes,
        desc=desc,
        unit="B",
        unit_scale=True,
        disable=not progress,
        leave=False,
        delay=1.0,
    )


def _hash_chunks(digest, chunks: Iterable, bar: tqdm) -> None:
    for chunk in chunks:
        digest.update(chunk)
        bar.update(len(chunk))


def file_sha256(file: Path, progress: bool) -> str:
    """sha256 of a file, read in chunks of HASH_CHUNK_BYTES."""
    digest = hashlib.sha256()
    bar = _hash_bar(file.stat().st_size, f"sha256 {file.name}", progress)
    with open(file, "rb") as f, bar:
        _hash_chunks(digest, iter(lambda: f.read(HASH_CHUNK_BYTES), b""), bar)
    return digest.hexdigest()


def overshoot_tokens(meta: dict) -> dict[str, int]:
    """Tokens each split holds beyond its target (less than its last document; 0 for training with
    exact_tokens), from a pool's meta.json (old pools included)."""
    targets = {"train": meta["build_args"]["tokens"], "val": meta["build_args"]["val_tokens"]}
    return {name: meta["splits"][name]["tokens"] - targets[name] for name in SPLITS}


def fingerprint(tokenizer_sha: str, splits: dict[str, Split], progress: bool = False) -> str:
    """sha256 over the tokenizer's sha256 and every split's tokens and doc offsets (their raw
    bytes, read in chunks of HASH_CHUNK_BYTES)."""
    digest = hashlib.sha256(tokenizer_sha.encode())
    arrays = [np.ascontiguousarray(getattr(splits[s], a)) for s in SPLITS for a in ARRAYS]
    with _hash_bar(sum(a.nbytes for a in arrays), "fingerprint", progress) as bar:
        for array in arrays:
            data = memoryview(array).cast("B")
            _hash_chunks(
                digest,
                (data[i : i + HASH_CHUNK_BYTES] for i in range(0, len(data), HASH_CHUNK_BYTES)),
                bar,
            )
    return digest.hexdigest()


def pool_summary(pool: Pool) -> str:
    """Human-readable counts for `repro data info`."""
    m = pool.meta
    lines = [
        f"pool        {pool.path}",
        f"source      {m['source']}  (seed {m['seed']}, val seed {m['val_seed']})",
        (
            f"tokenizer   {m['tokenizer']}  vocab {m['vocab_size']}, eos id {m['eos_id']}, "
            f"dtype {m['dtype']}"
        ),
        f"duplicates  {m['duplicates_dropped']} dropped"
        + (f", {m['skipped_records']:,} bad records skipped" if m.get("skipped_records") else ""),
        "overshoot   "
        + ", ".join(
            f"{name} +{over:,} over {m['splits'][name]['tokens'] - over:,}"
            for name, over in overshoot_tokens(m).items()
        )
        + " tokens"
        + (" (training cut to its target)" if m["build_args"].get("exact_tokens") else ""),
        "",
        (
            f"{'split':<6} {'docs':>9} {'tokens':>12} {'mean/doc':>10} {'median/doc':>11} "
            f"{'min':>7} {'max':>9}"
        ),
    ]
    for name in SPLITS:
        s = m["splits"][name]
        lines.append(
            f"{name:<6} {s['docs']:>9,} {s['tokens']:>12,} {s['mean_doc_tokens']:>10.1f} "
            f"{s['median_doc_tokens']:>11.1f} {s['min_doc_tokens']:>7,} {s['max_doc_tokens']:>9,}"
        )
    if m.get("bayes_floor_nats_per_token") is not None:
        lines += [
            "",
            f"Bayes floor (val, nats/token incl. EOS): {m['bayes_floor_nats_per_token']:.4f}"
            + (
                f"   train: {train_floor:.4f}"
                if (train_floor := m["splits"]["train"].get("bayes_floor_nats_per_token"))
                else ""
            ),
        ]
    return "\n".join(lines)
