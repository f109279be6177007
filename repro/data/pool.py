"""A pool: a fixed set of unique training documents plus held-out validation documents, tokenized.

On disk (docs/CONTRACT.md):
    POOL/meta.json, POOL/tokenizer.json,
    POOL/{train,val}/tokens.npy       flat token ids (uint16 if vocab <= 65535 else uint32), no EOS
    POOL/{train,val}/doc_offsets.npy  int64, n_docs + 1 entries; doc i = tokens[off[i]:off[i+1]]

How documents are drawn. Exact duplicates (same text) are dropped. Validation documents are drawn
first with `val_seed` (default: `seed`), then training documents with `seed` from what is left, so
no validation document contributes a token to training. A finite source (stdlib, local files) is
read in full and each document gets a pseudo-random key from (seed, sha256(text)); documents are
taken in key order, i.e. a seeded uniform sample without replacement. An unbounded source
(synthetic, hub) is a seeded stream and documents are taken in stream order. Either way only the
candidates are held in memory (a few bytes per token of the target), never the whole source.

Budgets. Whole documents are added until the split reaches its token target, so a split exceeds
its target by less than its last document (meta.json `overshoot_tokens`: tokens over the target,
per split). With `exact_tokens` the last training document is cut so that the training split holds
exactly `tokens` tokens (the training Bayes floor is then not recorded: a cut document's
probability is unknown); the validation split always ends with a whole document.

The trained byte-level BPE sees the training candidates only: the training split plus the few
documents next in the seeded order (bytes-per-token is unknown before the tokenizer exists, so
candidates are gathered by a byte estimate, then the split is cut by exact token count). A vocab
size the BPE cannot reach on them is an error.

Integrity. meta.json records each file's size (bytes), sha256 and, for arrays, shape and dtype
(`files`). load_pool checks sizes, shapes, dtypes and the offsets against the tokens (cheap: no
file is read through); verify_pool (`repro data verify`) reads every byte against the checksums
and the fingerprint. Pools built before `files` existed load and verify without the checksums.
A damaged pool is a one-line error that says how to rebuild it.

Writing. A build writes into the sibling folder .NAME.tmp-PID and renames it into place, so --out
is either absent or a complete pool. A build removes the .NAME.tmp-PID / .NAME.old-PID siblings of
builds that were killed (no process PID on this machine), never those of a live build. --out may
be absent or a pool folder (meta.json and nothing but pool entries); a file or any other folder is
refused, force or not.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import re
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from repro.data.sources import Document, open_source
from repro.data.tokenizer import (
    MIN_BPE_VOCAB,
    eos_id,
    is_local_tokenizer,
    load_tokenizer,
    tokenizer_sha256,
    train_bpe,
)
from repro.errors import ReproError

FORMAT_VERSION = 1
SPLITS = ("train", "val")
DTYPES = ("auto", "uint16", "uint32")
INITIAL_BYTES_PER_TOKEN = 4.5  # first guess for gathering candidates; corrected by measurement
ENCODE_BATCH_DOCS = 256
HASH_CHUNK_BYTES = 1 << 22  # read 4 MiB at a time when hashing
ARRAYS = ("tokens", "doc_offsets")  # each split's arrays, stored as SPLIT/NAME.npy
POOL_ENTRIES = frozenset({"meta.json", "tokenizer.json", *SPLITS})  # all a pool folder holds
# spec fields added after pools were first built: left out of build_args at these defaults, so that
# pools built before them still match the same request
LATER_FIELDS = {"skip_bad_records": False, "exact_tokens": False}
REQUIRED_META = ("splits", "vocab_size", "eos_id", "dtype", "tokenizer_sha256", "fingerprint")


@dataclass(frozen=True)
class PoolSpec:
    """Everything that determines a pool. Token counts are tokens (no EOS), not sequences."""

    source: str
    tokens: int
    val_tokens: int = 100_000
    seed: int = 0
    # None: same as seed; fix it to share the validation documents across pools
    val_seed: int | None = None
    vocab_size: int = 2048  # for a trained BPE; ignored when `tokenizer` is given
    tokenizer: str | None = None  # tokenizer.json path, pool directory or hub name
    text_field: str = "text"
    text_unit: str = "file"  # .txt files: file | paragraph | line
    dtype: str = "auto"
    # skip (and count) file / hub records without a string text instead of failing
    skip_bad_records: bool = False
    exact_tokens: bool = False  # cut the last training document: exactly `tokens` training tokens

    def build_args(self) -> dict:
        """The request as meta.json records it (`build_args`); equal ones build the same pool."""
        args = asdict(self) | {"format": FORMAT_VERSION}
        for name, default in LATER_FIELDS.items():
            if args[name] == default:
                del args[name]
        args["val_seed"] = self.seed if self.val_seed is None else self.val_seed
        if self.tokenizer is not None:
            args["vocab_size"] = None
        return args


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
    """The meta.json of the pool at `path`, or None while it is not built."""
    return _read_meta(Path(path)) if (Path(path) / "meta.json").is_file() else None


def load_pool(path: str | Path) -> Pool:
    """Memory-map a built pool after cheap checks: file sizes, array shapes and dtypes, offsets
    against tokens, meta.json against the arrays (no checksums: see verify_pool). A damaged pool
    is a one-line ReproError that says how to rebuild it."""
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
        f"pool {path} is damaged: {what}; rebuild it with "
        f"repro data build ... --out {path} --force (the same arguments as before)"
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
        meta = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
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
    """Each split's offsets index its tokens, and meta.json's counts and dtype match the arrays."""
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
        if _file_sha256(pool.path / rel, progress) != record.get("sha256"):
            raise _damaged(pool.path, f"{rel} does not match the sha256 in meta.json")
    splits = {"train": pool.train, "val": pool.val}
    fingerprint = _fingerprint(pool.meta["tokenizer_sha256"], splits, progress)
    if fingerprint != pool.meta["fingerprint"]:
        raise _damaged(pool.path, "the arrays do not match the fingerprint in meta.json")
    checked = (
        f"{len(files)} files match their sha256"
        if files
        else "checksums are not recorded (the pool was built before they were)"
    )
    return f"{pool.path}: ok: {checked}; the arrays match fingerprint {fingerprint[:12]}"


def _hash_bar(total_bytes: int, desc: str, progress: bool) -> tqdm:
    """A progress bar for hashing, shown only when it takes over a second."""
    return tqdm(
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


def _file_sha256(file: Path, progress: bool) -> str:
    """sha256 of a file, read in chunks of HASH_CHUNK_BYTES."""
    digest = hashlib.sha256()
    bar = _hash_bar(file.stat().st_size, f"sha256 {file.name}", progress)
    with open(file, "rb") as f, bar:
        _hash_chunks(digest, iter(lambda: f.read(HASH_CHUNK_BYTES), b""), bar)
    return digest.hexdigest()


# --- selection of candidate documents ---------------------------------------------------------


@dataclass
class _Candidates:
    docs: list[Document] = field(default_factory=list)
    shas: list[bytes] = field(default_factory=list)
    exhausted: bool = False  # True when every eligible document of the source is held
    duplicates: int = 0


def _key(seed: int, sha: bytes) -> int:
    return int.from_bytes(
        hashlib.blake2b(sha, digest_size=8, key=seed.to_bytes(8, "little", signed=True)).digest(),
        "little",
    )


def _gather(
    docs: Iterator[Document],
    budget_bytes: int,
    seed: int,
    finite: bool,
    exclude: set[bytes],
    desc: str,
    progress: bool,
) -> _Candidates:
    """The first documents of the seeded order whose UTF-8 size reaches `budget_bytes`."""
    out = _Candidates()
    held: set[bytes] = set()
    heap: list[
        tuple[int, bytes, int, int, Document]
    ] = []  # (-key, sha, index, bytes, doc): a max-heap on key
    total = 0
    bar = tqdm(desc=desc, unit=" docs", disable=not progress, leave=False)
    for index, doc in enumerate(docs):
        bar.update()
        if not doc.text.strip():
            continue
        data = doc.text.encode("utf-8", errors="surrogatepass")
        sha = hashlib.sha256(data).digest()
        if sha in exclude:
            continue
        if sha in held:
            out.duplicates += 1
            continue
        held.add(sha)
        total += len(data)
        if not finite:
            out.docs.append(doc)
            out.shas.append(sha)
            if total >= budget_bytes:
                bar.close()
                return out
            continue
        heapq.heappush(heap, (-_key(seed, sha), sha, index, len(data), doc))
        while (
            total - heap[0][3] >= budget_bytes
        ):  # drop the largest key while the rest still meets the budget
            _, gone, _, size, _ = heapq.heappop(heap)
            held.discard(gone)
            total -= size
    bar.close()
    if finite:
        heap.sort(key=lambda item: -item[0])
        out.docs, out.shas = [item[4] for item in heap], [item[1] for item in heap]
    out.exhausted = not finite or total < budget_bytes
    return out


def _tokenize_until(
    tokenizer, docs: list[Document], budget_tokens: int, desc: str, progress: bool
) -> list[np.ndarray]:
    """Token arrays of the leading documents whose total first reaches `budget_tokens`."""
    arrays: list[np.ndarray] = []
    total = 0
    with tqdm(
        total=budget_tokens,
        desc=desc,
        unit=" tok",
        unit_scale=True,
        disable=not progress,
        leave=False,
    ) as bar:
        for start in range(0, len(docs), ENCODE_BATCH_DOCS):
            batch = docs[start : start + ENCODE_BATCH_DOCS]
            for enc in tokenizer.encode_batch([d.text for d in batch], add_special_tokens=False):
                ids = np.asarray(enc.ids, dtype=np.int64)  # non-empty: blank documents were skipped
                arrays.append(ids)
                total += len(ids)
                bar.update(len(ids))
                if total >= budget_tokens:
                    return arrays
    return arrays


# --- building --------------------------------------------------------------------------------


def _check_out(out: Path) -> None:
    """Refuse an --out that cannot become a pool, force or not: a file, a folder other than a pool
    folder (meta.json and nothing but pool entries), a path below a file."""
    if (out.exists() or out.is_symlink()) and not out.is_dir():
        raise ReproError(f"--out {out} is a file, not a pool folder; choose another --out")
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if p.name not in POOL_ENTRIES)
        if foreign or not (out / "meta.json").is_file():
            why = f"it holds {foreign[0]!r}" if foreign else "it has no meta.json"
            raise ReproError(
                f"--out {out} is a folder but not a pool ({why}); only a pool is ever replaced: "
                "choose another --out, or move that folder away yourself"
            )
        return
    parent = next(p for p in out.absolute().parents if p.exists() or p.is_symlink())
    if not parent.is_dir():
        raise ReproError(f"--out {out} lies below {parent}, which is a file; choose another --out")


def _remove_stale_temps(out: Path) -> None:
    """Remove the .NAME.tmp-PID / .NAME.old-PID siblings of `out` that builds killed before they
    finished left behind: those whose process PID is gone (a live build's are kept)."""
    if not out.parent.is_dir():
        return
    pattern = re.compile(rf"\.{re.escape(out.name)}\.(?:tmp|old)-(\d+)")
    for entry in out.parent.iterdir():
        match = pattern.fullmatch(entry.name)
        if match and not _process_alive(int(match[1])):
            shutil.rmtree(entry, ignore_errors=True)


def _process_alive(pid: int) -> bool:
    """Whether process `pid` runs on this machine (signal 0 probes without signalling)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _check_existing(out: Path, build_args: dict, force: bool) -> bool:
    """True when `out` already holds this exact, undamaged pool (rebuilding is then a no-op); an
    error when it holds another or a damaged one and not `force`. `out` passed _check_out."""
    if not out.exists():
        return False
    try:
        existing = load_pool(out).meta.get("build_args")
    except ReproError:
        if force:
            return False
        raise  # the message says: rebuild with --force
    if existing == build_args:
        return True
    if not force:
        raise ReproError(
            f"{out} already holds a different pool; "
            "pass --force to replace it or choose another --out"
        )
    return False


def _split_stats(split: Split, logprobs: list[float] | None) -> dict:
    lengths = split.doc_lengths()
    stats = {
        "docs": split.n_docs,
        "tokens": split.n_tokens,
        "mean_doc_tokens": float(lengths.mean()),
        "median_doc_tokens": float(np.median(lengths)),
        "min_doc_tokens": int(lengths.min()),
        "max_doc_tokens": int(lengths.max()),
    }
    if logprobs is not None:
        # Bayes floor: -sum_d log p(d) / sum_d (tokens(d) + 1), the +1 being the EOS that ends d.
        stats["bayes_floor_nats_per_token"] = -float(np.sum(logprobs)) / (
            split.n_tokens + split.n_docs
        )
    return stats


def _check_spec(spec: PoolSpec) -> None:
    """Reject a dtype or vocab size that cannot make a pool, before reading the source."""
    if spec.dtype not in DTYPES:
        raise ReproError(f"unknown dtype {spec.dtype!r}; choose one of: {', '.join(DTYPES)}")
    if spec.tokenizer is None and spec.vocab_size < MIN_BPE_VOCAB:
        raise ReproError(
            f"vocab size {spec.vocab_size} is too small for a byte-level BPE; "
            f"use at least {MIN_BPE_VOCAB}"
        )
    if spec.dtype == "uint16" and spec.tokenizer is None and spec.vocab_size > 65536:
        raise ReproError(
            f"vocab size {spec.vocab_size} does not fit dtype uint16 (at most 65536 ids); "
            "use --dtype uint32 or auto"
        )


def _local_tokenizer(spec: PoolSpec):
    """The given tokenizer when it is a local file or pool folder (an error when such a path does
    not exist); None for a hub name or none."""
    local = spec.tokenizer is not None and is_local_tokenizer(spec.tokenizer)
    return load_tokenizer(spec.tokenizer) if local else None


def _check_vocab_reached(tokenizer, vocab_size: int, n_candidates: int) -> None:
    """A trained BPE must have the vocab size asked for: a smaller one is an error."""
    reached = tokenizer.get_vocab_size(with_added_tokens=True)
    if reached < vocab_size:
        raise ReproError(
            f"the byte-level BPE reaches only {reached:,} of the {vocab_size:,} vocab entries "
            f"asked for (its {n_candidates:,} training candidates allow no more merges); "
            f"pass --vocab-size {reached} or less, or more --tokens"
        )


def _cut_to_budget(arrays: list[np.ndarray], cands: _Candidates, budget: int) -> None:
    """Cut the last document so that `arrays` hold exactly `budget` tokens (the cut one keeps at
    least one token); its log-probability becomes unknown."""
    over = sum(map(len, arrays)) - budget
    if over > 0:
        arrays[-1] = arrays[-1][:-over]
        last = len(arrays) - 1
        cands.docs[last] = replace(cands.docs[last], logprob=None)


def _check_given_tokenizer(tokenizer, dtype: str) -> None:
    """A given tokenizer must fit `dtype` and have an end-of-text token."""
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    if dtype == "uint16" and vocab > 65536:
        raise ReproError(
            f"tokenizer vocab {vocab} does not fit dtype uint16; use --dtype uint32 or auto"
        )
    eos_id(tokenizer)


def _gather_splits(
    spec: PoolSpec, source, val_seed: int, bytes_per_token: float, progress: bool
) -> dict[str, _Candidates]:
    """Validation, then training candidates (disjoint), each `bytes_per_token` x its token target
    in UTF-8 bytes."""
    val = _gather(
        source.documents(val_seed),
        int(spec.val_tokens * bytes_per_token) + 1,
        val_seed,
        source.finite,
        set(),
        "val docs",
        progress,
    )
    if not val.docs:
        raise ReproError(
            f"source {spec.source!r} yielded no non-empty documents; "
            "check the path, text field and text unit"
        )
    train = _gather(
        source.documents(spec.seed),
        int(spec.tokens * bytes_per_token) + 1,
        spec.seed,
        source.finite,
        set(val.shas),
        "train docs",
        progress,
    )
    if not train.docs:
        raise ReproError(
            f"source {spec.source!r} has no documents left for training "
            "after the validation split; lower --val-tokens or use a larger source"
        )
    return {"val": val, "train": train}


def _short_bytes_per_token(
    spec: PoolSpec, arrays: dict[str, list[np.ndarray]], cands: dict[str, _Candidates]
) -> float | None:
    """Measured UTF-8 bytes per token of the first split short of its token target (None: none
    is short); an error when that split's source has nothing more to give."""
    checks = (
        ("validation", sum(map(len, arrays["val"])), spec.val_tokens, cands["val"]),
        ("training", sum(map(len, arrays["train"])), spec.tokens, cands["train"]),
    )
    short = [(name, got, want, c) for name, got, want, c in checks if got < want]
    if not short:
        return None
    name, got, want, short_cands = short[0]
    if short_cands.exhausted:
        flag = "--val-tokens" if name == "validation" else "--tokens"
        raise ReproError(
            f"source {spec.source!r} supplies only {got:,} unique {name} tokens "
            f"(asked for {want:,}); ask for at most {got:,} with {flag} or use a larger source"
        )
    n_bytes = sum(len(d.text.encode("utf-8", errors="surrogatepass")) for d in short_cands.docs)
    return n_bytes / max(got, 1)


def _tokenize_splits(spec: PoolSpec, source, given, val_seed: int, progress: bool):
    """(tokenizer, token arrays per split, candidates per split); candidates are gathered again
    with a larger bytes-per-token estimate until both splits reach their token targets."""
    bytes_per_token = INITIAL_BYTES_PER_TOKEN
    while True:
        cands = _gather_splits(spec, source, val_seed, bytes_per_token, progress)
        tokenizer = given or train_bpe((d.text for d in cands["train"].docs), spec.vocab_size)
        arrays = {
            "val": _tokenize_until(
                tokenizer, cands["val"].docs, spec.val_tokens, "tokenize val", progress
            ),
            "train": _tokenize_until(
                tokenizer, cands["train"].docs, spec.tokens, "tokenize train", progress
            ),
        }
        measured = _short_bytes_per_token(spec, arrays, cands)
        if measured is None:
            return tokenizer, arrays, cands
        bytes_per_token = max(bytes_per_token, measured) * 1.25


def _token_dtype(dtype: str, vocab_size: int) -> type:
    """numpy dtype of the token ids: uint16 when asked or when `auto` and the vocab fits."""
    if dtype == "uint16" or (dtype == "auto" and vocab_size <= 65535):
        return np.uint16
    return np.uint32


def _make_splits(
    arrays: dict[str, list[np.ndarray]], cands: dict[str, _Candidates], dtype: type
) -> tuple[dict[str, Split], dict[str, list[float] | None]]:
    """Each split's flat tokens and doc offsets, and its documents' log-probabilities (nats) when
    the source knows them."""
    splits, logprobs = {}, {}
    for name in ("val", "train"):
        lengths = np.fromiter(
            (len(a) for a in arrays[name]), dtype=np.int64, count=len(arrays[name])
        )
        splits[name] = Split(
            np.concatenate(arrays[name]).astype(dtype),
            np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        )
        used = cands[name].docs[: len(arrays[name])]
        known = all(d.logprob is not None for d in used)
        logprobs[name] = [d.logprob for d in used] if known else None
    return splits, logprobs


def _pool_meta(
    spec: PoolSpec,
    build_args: dict,
    tokenizer,
    splits: dict[str, Split],
    logprobs: dict[str, list[float] | None],
    cands: dict[str, _Candidates],
    skipped_records: int,
) -> dict:
    """meta.json of a pool (docs/CONTRACT.md), fingerprint included; `files` is added once the
    files are written."""
    meta = {
        "format": FORMAT_VERSION,
        "source": spec.source,
        "source_info": build_args["source_info"],
        "seed": spec.seed,
        "val_seed": build_args["val_seed"],
        "splits": {name: _split_stats(splits[name], logprobs[name]) for name in SPLITS},
        "vocab_size": tokenizer.get_vocab_size(with_added_tokens=True),
        "eos_id": eos_id(tokenizer),
        "tokenizer": spec.tokenizer
        or f"byte-level BPE trained on {len(cands['train'].docs)} training candidates",
        "tokenizer_sha256": tokenizer_sha256(tokenizer),
        "dtype": splits["train"].tokens.dtype.name,
        "duplicates_dropped": cands["val"].duplicates + cands["train"].duplicates,
        "skipped_records": skipped_records,
        "bayes_floor_nats_per_token": (
            _split_stats(splits["val"], logprobs["val"]).get("bayes_floor_nats_per_token")
        ),
        "build_args": build_args,
    }
    meta["overshoot_tokens"] = overshoot_tokens(meta)
    meta["fingerprint"] = _fingerprint(meta["tokenizer_sha256"], splits)
    return meta


def overshoot_tokens(meta: dict) -> dict[str, int]:
    """Tokens each split holds beyond its target (less than its last document; 0 for training with
    exact_tokens), from a pool's meta.json (old pools included)."""
    targets = {"train": meta["build_args"]["tokens"], "val": meta["build_args"]["val_tokens"]}
    return {name: meta["splits"][name]["tokens"] - targets[name] for name in SPLITS}


def _fingerprint(tokenizer_sha: str, splits: dict[str, Split], progress: bool = False) -> str:
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


def build_pool(spec: PoolSpec, out: str | Path, force: bool = False, progress: bool = True) -> Path:
    """Build the pool described by `spec` at `out` (atomically); a no-op if it is already there."""
    out = Path(out)
    _check_spec(spec)
    _check_out(out)
    _remove_stale_temps(out)
    source = open_source(spec.source, spec.text_field, spec.text_unit, spec.skip_bad_records)
    build_args = spec.build_args() | {"source_info": source.info}
    given = _local_tokenizer(spec)
    if given is not None:  # a local tokenizer is identified by its content, not by where it lies
        build_args["tokenizer"] = f"sha256:{tokenizer_sha256(given)}"
    if _check_existing(out, build_args, force):
        return out
    if spec.tokenizer and given is None:
        given = load_tokenizer(spec.tokenizer)
    if given is not None:
        _check_given_tokenizer(given, spec.dtype)
    tokenizer, arrays, cands = _tokenize_splits(
        spec, source, given, build_args["val_seed"], progress
    )
    if given is None:
        _check_vocab_reached(tokenizer, spec.vocab_size, len(cands["train"].docs))
    if spec.exact_tokens:
        _cut_to_budget(arrays["train"], cands["train"], spec.tokens)
    dtype = _token_dtype(spec.dtype, tokenizer.get_vocab_size(with_added_tokens=True))
    splits, logprobs = _make_splits(arrays, cands, dtype)
    meta = _pool_meta(spec, build_args, tokenizer, splits, logprobs, cands, len(source.skipped))
    _write_atomically(out, meta, tokenizer, splits, progress)
    return out


def _file_records(folder: Path, splits: dict[str, Split], progress: bool) -> dict:
    """meta.json's `files`: size (bytes) and sha256 of each pool file, shape and dtype of arrays."""
    records = {
        f"{name}/{array}.npy": {
            "shape": list(getattr(splits[name], array).shape),
            "dtype": getattr(splits[name], array).dtype.name,
        }
        for name in SPLITS
        for array in ARRAYS
    } | {"tokenizer.json": {}}
    for rel, record in records.items():
        record["bytes"] = (folder / rel).stat().st_size
        record["sha256"] = _file_sha256(folder / rel, progress)
    return records


def _write_atomically(
    out: Path, meta: dict, tokenizer, splits: dict[str, Split], progress: bool
) -> None:
    """Write into the temporary sibling .NAME.tmp-PID (meta.json last, with the other files' sizes
    and checksums), then rename it into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for name, split in splits.items():
            (tmp / name).mkdir(parents=True)
            for array in ARRAYS:
                np.save(tmp / name / f"{array}.npy", getattr(split, array))
        tokenizer.save(str(tmp / "tokenizer.json"))
        meta = meta | {"files": _file_records(tmp, splits, progress)}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old)
        else:
            tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
