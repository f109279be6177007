"""Building a pool (repro.data.pool holds its format, loading and verification).

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

Writing. A build writes into the sibling folder .NAME.tmp-PID and renames it into place, so --out
is either absent or a complete pool. A build removes the .NAME.tmp-PID / .NAME.old-PID siblings of
builds that were killed (no process PID on this machine), never those of a live build. --out may
be absent, an empty folder or a pool folder (meta.json and nothing but pool entries); a file or any
other folder is refused, force or not. Every file is flushed to disk before the rename, and the
rename after it.
"""

from __future__ import annotations

import fcntl
import hashlib
import heapq
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from repro.data.pool import (
    ARRAYS,
    FORMAT_VERSION,
    POOL_ENTRIES,
    SPLITS,
    Split,
    file_sha256,
    fingerprint,
    load_pool,
    overshoot_tokens,
)
from repro.data.sources import Document, open_source, parse_grammar
from repro.data.tokenizer import (
    MIN_BPE_VOCAB,
    eos_id,
    is_local_tokenizer,
    load_tokenizer,
    tokenizer_sha256,
    train_bpe,
)
from repro.errors import ReproError
from repro.runtime.files import check_out, fsync, fsync_tree, process_alive, space_checked
from repro.runtime.progress import progress_bar

DTYPES = ("auto", "uint16", "uint32")
INITIAL_BYTES_PER_TOKEN = 4.5  # first guess for gathering candidates; corrected by measurement
ENCODE_BATCH_DOCS = 256
# spec fields added after pools were first built: left out of build_args at these defaults, so that
# pools built before them still match the same request
LATER_FIELDS = {"skip_bad_records": False, "exact_tokens": False}


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
    bar = progress_bar(desc=desc, unit=" docs", disable=not progress, leave=False)
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
    with progress_bar(
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


def _remove_stale_temps(out: Path) -> None:
    """Remove the .NAME.tmp-PID / .NAME.old-PID siblings of `out` that builds killed before they
    finished left behind: those whose process PID is gone (a live build's are kept)."""
    if not out.parent.is_dir():
        return
    pattern = re.compile(rf"\.{re.escape(out.name)}\.(?:tmp|old)-(\d+)")
    for entry in out.parent.iterdir():
        match = pattern.fullmatch(entry.name)
        if match and not process_alive(int(match[1])):
            shutil.rmtree(entry, ignore_errors=True)


def _check_existing(out: Path, build_args: dict, force: bool) -> bool:
    """True when `out` already holds this exact, undamaged pool (rebuilding is then a no-op); an
    error when it holds another or a damaged one and not `force`. `out` passed check_out."""
    if not out.exists() or not any(out.iterdir()):
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
            f"{out} already holds a different pool; move it away or remove it, or replace it with "
            f"repro data build ... --out {out} --force"
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


def check_spec(spec: PoolSpec) -> None:
    """Reject token counts, a dtype or a vocab size that cannot make a pool, before reading the
    source (presets check their pool with it)."""
    for name in ("tokens", "val_tokens"):
        if getattr(spec, name) < 1:
            raise ReproError(f"{name} must be positive, got {getattr(spec, name)}")
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
    if spec.source.startswith("synthetic:"):
        parse_grammar(spec.source.removeprefix("synthetic:"))


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
    meta["fingerprint"] = fingerprint(meta["tokenizer_sha256"], splits)
    return meta


def build_pool(spec: PoolSpec, out: str | Path, force: bool = False, progress: bool = True) -> Path:
    """Build the pool described by `spec` at `out` (atomically); a no-op if it is already there."""
    out = Path(out)
    check_spec(spec)
    check_out(out, "pool", POOL_ENTRIES, "meta.json")
    _check_space(spec, out, progress)
    with open(_lock_path(out), "w") as lock:  # one build of `out` at a time on this machine
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_locked(spec, out, force, progress)


def _lock_path(out: Path) -> Path:
    """The lock file of builds of `out`: in the temporary folder, named by out's absolute path,
    so that nothing is added beside the user's folders."""
    key = hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"repro-pool-{key}.lock"


def _build_locked(spec: PoolSpec, out: Path, force: bool, progress: bool) -> Path:
    """build_pool's work, under the lock that keeps two builds of `out` apart (the second then
    finds the first's pool and returns)."""
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


LARGE_POOL = 2**30
"""Bytes: a pool at least this large says its size before the build starts."""


def _check_space(spec: PoolSpec, out: Path, progress: bool) -> None:
    """Refuse, before the source is read, a pool whose token arrays (2 bytes a token for a vocab
    that fits uint16, else 4) would not fit in the free space of --out's device; say the size of
    a large one (LARGE_POOL) first."""
    small_vocab = spec.tokenizer is None and spec.vocab_size <= 65535
    width = 2 if spec.dtype == "uint16" or (spec.dtype == "auto" and small_vocab) else 4
    need = (spec.tokens + spec.val_tokens) * width
    folder = next(p for p in [out, *out.parents] if p.exists())
    free = shutil.disk_usage(folder).free
    if need > free:
        raise ReproError(
            f"the pool needs about {_size(need)} for its tokens, and {folder} has {_size(free)} "
            "free; free space or choose --out on another disk"
        )
    if need >= LARGE_POOL and progress:
        print(f"building a pool of about {_size(need)} at {out} ({_size(free)} free)", flush=True)


def _size(size: int) -> str:
    """Bytes in GiB from 1 GiB, else MiB."""
    return f"{size / 2**30:,.1f} GiB" if size >= 2**30 else f"{size / 2**20:,.0f} MiB"


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
        record["sha256"] = file_sha256(folder / rel, progress)
    return records


def _write_atomically(
    out: Path, meta: dict, tokenizer, splits: dict[str, Split], progress: bool
) -> None:
    """Write into the temporary sibling .NAME.tmp-PID (meta.json last, with the other files' sizes
    and checksums), then rename it into place."""
    out = out.resolve() if out.is_symlink() else out  # a link to a pool: rebuild its target
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for name, split in splits.items():
            (tmp / name).mkdir(parents=True)
            for array in ARRAYS:
                with space_checked(tmp / name / f"{array}.npy"):
                    np.save(tmp / name / f"{array}.npy", getattr(split, array))
        with space_checked(tmp / "tokenizer.json"):
            tokenizer.save(str(tmp / "tokenizer.json"))
        meta = meta | {"files": _file_records(tmp, splits, progress)}
        with space_checked(tmp / "meta.json"):
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        fsync_tree(tmp)
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old)
        else:
            tmp.rename(out)
        fsync(out.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
