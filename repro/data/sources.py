"""Document sources: each yields documents (id, text[, log-probability]) as a stream.

A source is either *finite* (the Python standard library, local files: read in a fixed order, the
pool builder draws a seeded random subset of it) or *unbounded* (the synthetic generator, a Hugging
Face hub dataset: the stream itself is seeded, `documents(seed)` yields documents in a seeded
random order and the builder takes a prefix).

Records of .jsonl / .json / .parquet files and hub datasets must hold a string in the text field;
one that does not is an error naming the file (or dataset) and the record's number, or, with
`skip_bad_records`, is skipped and counted in `Source.skipped`.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import os
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from repro.data.synthetic import Grammar, synthetic_documents
from repro.errors import ReproError

TEXT_UNITS = {"file": "document", "paragraph": "paragraph", "line": "line"}
LOCAL_BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
HUB_SHUFFLE_BUFFER = 10_000  # documents held by datasets' streaming shuffle


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    logprob: float | None = None  # natural log-probability under a known generator (synthetic only)


@dataclass
class Source:
    """A named stream of documents; `info` is recorded in the pool's meta.json."""

    spec: str
    finite: bool
    info: dict = field(default_factory=dict)
    skip_bad_records: bool = False  # skip records without a string text instead of failing
    # (file or dataset, record number) of each bad record skipped so far, over every pass
    skipped: set[tuple[str, int]] = field(default_factory=set)

    def documents(self, seed: int) -> Iterator[Document]:
        raise NotImplementedError

    def _text_documents(
        self, records: Iterable[dict], text_field: str, where: str
    ) -> Iterator[Document]:
        """Documents of the records of file or dataset `where`; a record without a string in
        `text_field` is an error naming its number (from 1) unless bad records are skipped. A
        `where` that lacks the field altogether is an error either way (a wrong --text-field)."""
        for number, record in enumerate(records, 1):
            if number == 1:
                _check_text_field(record, text_field, where)
            text = record.get(text_field)
            if isinstance(text, str):
                yield Document(str(record.get("id", f"{where}:{number}")), text)
            elif self.skip_bad_records:
                self.skipped.add((where, number))
            else:
                found = "missing or null" if text is None else f"found {type(text).__name__}"
                raise ReproError(
                    f"{where}: record {number} has no string in field {text_field!r} "
                    f"({found}); fix it or pass --skip-bad-records to skip such records"
                )


# --- the Python standard library -------------------------------------------------------------

_TEST_DIRS = {"test", "tests", "idle_test", "__pycache__", "site-packages", "dist-packages"}


def stdlib_files() -> list[Path]:
    """The standard library's .py files, tests excluded, in sorted order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files: list[Path] = []
    for folder, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in _TEST_DIRS and not d.startswith("test_")]
        files += [
            Path(folder) / n for n in names if n.endswith(".py") and not n.startswith("test_")
        ]
    return sorted(files)


class StdlibSource(Source):
    def __init__(self) -> None:
        self._root = Path(sysconfig.get_paths()["stdlib"])
        files = stdlib_files()
        digest = hashlib.sha256()
        for path in files:
            digest.update(str(path.relative_to(self._root)).encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        super().__init__(
            "stdlib",
            finite=True,
            info={
                "python_version": sys.version.split()[0],
                "files": len(files),
                "content_sha256": digest.hexdigest(),
            },
        )
        self._files = files

    def documents(self, seed: int) -> Iterator[Document]:
        for path in self._files:
            yield Document(
                str(path.relative_to(self._root)),
                path.read_text(encoding="utf-8", errors="replace"),
            )


# --- synthetic ----------------------------------------------------------------------------------


_DEFAULT_GRAMMAR = Grammar()  # frozen, so one shared default instance is safe


def parse_grammar(overrides: str) -> Grammar:
    """`max_sentences=20,n_topics=4` -> Grammar with those fields changed (ints or floats)."""
    fields = {f.name: f.type for f in dataclasses.fields(Grammar) if f.name != "template_probs"}
    changes = {}
    for item in filter(None, overrides.split(",")):
        name, _, value = item.partition("=")
        if name not in fields or not value:
            raise ReproError(
                f"synthetic:{overrides}: {item!r} is not NAME=VALUE of a grammar field "
                f"({', '.join(fields)})"
            )
        try:
            changes[name] = int(value) if fields[name] in (int, "int") else float(value)
        except ValueError:
            raise ReproError(
                f"synthetic:{overrides}: {name} needs a number, not {value!r}"
            ) from None
    grammar = dataclasses.replace(_DEFAULT_GRAMMAR, **changes)
    if not 1 <= grammar.min_sentences <= grammar.max_sentences:
        raise ReproError(f"synthetic:{overrides}: needs 1 <= min_sentences <= max_sentences")
    return grammar


class SyntheticSource(Source):
    """`synthetic[:FIELD=VALUE,...]`: the generator of repro.data.synthetic with its Grammar's
    fields changed (e.g. `synthetic:max_sentences=20` for shorter documents)."""

    def __init__(self, grammar: Grammar = _DEFAULT_GRAMMAR) -> None:
        super().__init__(
            "synthetic",
            finite=False,
            info={"grammar": grammar.__dict__ | {"template_probs": list(grammar.template_probs)}},
        )
        self.grammar = grammar

    def documents(self, seed: int) -> Iterator[Document]:
        for doc_id, text, logp in synthetic_documents(seed, self.grammar):
            yield Document(doc_id, text, logp)


# --- Hugging Face datasets: the hub, and local files through the packaged builders ----------


def _check_text_field(record: dict, text_field: str, where: str) -> None:
    if text_field not in record:
        raise ReproError(
            f"{where} has no field {text_field!r} (fields: {', '.join(record)}); "
            "pass --text-field NAME"
        )


class HubSource(Source):
    """`hf:NAME[:CONFIG]`, streamed (train split) and shuffled with datasets' seeded shuffle
    buffer."""

    def __init__(
        self, name: str, config: str | None, text_field: str, skip_bad_records: bool = False
    ) -> None:
        super().__init__(
            f"hf:{name}" + (f":{config}" if config else ""),
            finite=False,
            info={
                "dataset": name,
                "config": config,
                "split": "train",
                "text_field": text_field,
                "shuffle_buffer_docs": HUB_SHUFFLE_BUFFER,
            },
            skip_bad_records=skip_bad_records,
        )
        self.name, self.config, self.text_field = name, config, text_field

    def documents(self, seed: int) -> Iterator[Document]:
        import datasets

        try:
            stream = datasets.load_dataset(self.name, self.config, split="train", streaming=True)
        except Exception as exc:  # the hub's errors are long; keep the first line
            raise ReproError(
                f"cannot open dataset {self.name!r}: "
                f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__} "
                "(check the name, the network, or HF_HUB_OFFLINE)"
            ) from exc
        stream = stream.shuffle(seed=seed, buffer_size=HUB_SHUFFLE_BUFFER)
        where = f"{self.spec} (shuffled with seed {seed})"
        yield from self._text_documents(stream, self.text_field, where)


class LocalFilesSource(Source):
    """.txt / .jsonl / .json / .parquet files (a path, a directory or a glob) through datasets'
    builders, one file at a time (so a record's number and file are known, and one file's schema
    is never forced on another's)."""

    def __init__(
        self, pattern: str, text_field: str, text_unit: str, skip_bad_records: bool = False
    ) -> None:
        if text_unit not in TEXT_UNITS:
            raise ReproError(
                f"unknown --text-unit {text_unit!r}; choose one of: {', '.join(TEXT_UNITS)}"
            )
        path = Path(pattern)
        if path.is_dir():
            files = sorted(str(p) for p in path.rglob("*") if p.suffix in LOCAL_BUILDERS)
        else:
            files = sorted(glob.glob(pattern, recursive=True))
        if not files:
            raise ReproError(
                f"no files match {pattern!r}; give a .txt/.jsonl/.parquet path, directory or glob"
            )
        kinds = {Path(f).suffix for f in files}
        unknown = kinds - set(LOCAL_BUILDERS)
        if unknown:
            raise ReproError(
                f"unsupported file type {sorted(unknown)[0]!r} in {pattern!r}; "
                "use .txt, .jsonl or .parquet"
            )
        builders = {LOCAL_BUILDERS[k] for k in kinds}
        if len(builders) > 1:
            raise ReproError(
                f"{pattern!r} mixes file types {sorted(kinds)}; build from one type at a time"
            )
        for f in files:
            if not os.access(f, os.R_OK):
                raise ReproError(f"cannot read {f}; check its permissions")
        self.files, self.builder = files, builders.pop()
        self.text_field = "text" if self.builder == "text" else text_field
        self.text_unit = text_unit
        digest = hashlib.sha256()
        for f in files:
            stat = os.stat(f)
            digest.update(f"{Path(f).resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
        super().__init__(
            pattern,
            finite=True,
            info={
                "files": len(files),
                "builder": self.builder,
                "text_field": self.text_field,
                "text_unit": text_unit if self.builder == "text" else None,
                "paths_sizes_mtimes_sha256": digest.hexdigest(),
            },
            skip_bad_records=skip_bad_records,
        )

    def documents(self, seed: int) -> Iterator[Document]:
        import datasets

        kwargs = {"sample_by": TEXT_UNITS[self.text_unit]} if self.builder == "text" else {}
        for file in self.files:
            try:
                stream = datasets.load_dataset(
                    self.builder, data_files=[file], split="train", streaming=True, **kwargs
                )
                yield from self._text_documents(stream, self.text_field, file)
            except StopIteration:  # datasets' json builder on a file without records
                continue
            except ReproError:
                raise
            except Exception as exc:
                raise ReproError(
                    f"cannot read {file!r}: {type(exc).__name__}: "
                    f"{str(exc).splitlines()[0] if str(exc) else ''}"
                ) from exc


def open_source(
    spec: str, text_field: str = "text", text_unit: str = "file", skip_bad_records: bool = False
) -> Source:
    """`stdlib` | `synthetic[:FIELD=VALUE,...]` | `hf:NAME[:CONFIG]` | a path, directory or glob
    of local files; `skip_bad_records` (files and hub datasets): skip records without a string
    text, counting them in `Source.skipped`, instead of failing."""
    if spec == "stdlib":
        return StdlibSource()
    if spec == "synthetic" or spec.startswith("synthetic:"):
        return SyntheticSource(parse_grammar(spec.removeprefix("synthetic").removeprefix(":")))
    if spec.startswith("hf:"):
        name, _, config = spec[3:].partition(":")
        if not name:
            raise ReproError("empty dataset name in 'hf:'; write hf:NAME or hf:NAME:CONFIG")
        return HubSource(name, config or None, text_field, skip_bad_records)
    return LocalFilesSource(spec, text_field, text_unit, skip_bad_records)
