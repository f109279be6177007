"""Pools: determinism, seeds, document-level split, budgets, dedup, local files, errors."""

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from tokenizers import Tokenizer

from repro.data.build import PoolSpec, build_pool, check_spec
from repro.data.pool import built_meta, load_pool, pool_summary
from repro.data.sources import open_source
from repro.data.synthetic import Grammar, SyntheticLanguage, synthetic_documents
from repro.data.tokenizer import MIN_BPE_VOCAB
from repro.errors import ReproError
from repro.units import parse_count


def _decoded_docs(pool, split):
    tok = Tokenizer.from_file(str(pool.path / "tokenizer.json"))
    s = pool.split(split)
    return [tok.decode(s.doc(i).tolist()) for i in range(s.n_docs)]


def _array_bytes(path):
    return {
        f"{s}/{n}": (path / s / n).read_bytes()
        for s in ("train", "val")
        for n in ("tokens.npy", "doc_offsets.npy")
    }


def test_same_arguments_give_identical_bytes(synthetic_pool, small_synthetic_spec, tmp_path):
    again = build_pool(small_synthetic_spec, tmp_path / "again", progress=False)
    assert _array_bytes(again) == _array_bytes(synthetic_pool)
    assert (again / "tokenizer.json").read_bytes() == (
        synthetic_pool / "tokenizer.json"
    ).read_bytes()


def test_rebuild_is_a_noop(synthetic_pool, small_synthetic_spec):
    before = (synthetic_pool / "meta.json").stat().st_mtime_ns
    assert build_pool(small_synthetic_spec, synthetic_pool, progress=False) == synthetic_pool
    assert (synthetic_pool / "meta.json").stat().st_mtime_ns == before


@pytest.mark.parametrize("source", ["synthetic", "stdlib"])
def test_seeds_give_different_train_and_optionally_the_same_val(tmp_path, source):
    base = PoolSpec(source=source, tokens=20_000, val_tokens=4_000, vocab_size=300, val_seed=7)
    a = load_pool(build_pool(base, tmp_path / "a", progress=False))
    shared_tok = str(a.path / "tokenizer.json")
    b = load_pool(
        build_pool(replace(base, seed=1, tokenizer=shared_tok), tmp_path / "b", progress=False)
    )
    c = load_pool(
        build_pool(
            replace(base, seed=1, val_seed=None, tokenizer=shared_tok),
            tmp_path / "c",
            progress=False,
        )
    )
    assert set(_decoded_docs(a, "train")) != set(_decoded_docs(b, "train"))
    assert np.array_equal(a.val.tokens, b.val.tokens) and np.array_equal(
        a.val.doc_offsets, b.val.doc_offsets
    )
    assert set(_decoded_docs(c, "val")) != set(_decoded_docs(a, "val"))


@pytest.mark.parametrize("fixture", ["synthetic_pool", "stdlib_pool"])
def test_split_is_document_level_and_budgets_are_met(fixture, request):
    pool = load_pool(request.getfixturevalue(fixture))
    train, val = _decoded_docs(pool, "train"), _decoded_docs(pool, "val")
    assert not set(train) & set(val)
    assert len(set(train)) == len(train) and len(set(val)) == len(val)
    want = pool.meta["build_args"]
    for split, target in (("train", want["tokens"]), ("val", want["val_tokens"])):
        s = pool.split(split)
        assert target <= s.n_tokens < target + s.doc_lengths()[-1]
        assert (
            s.n_tokens == len(s.tokens)
            and s.doc_offsets[0] == 0
            and np.all(np.diff(s.doc_offsets) > 0)
        )
    assert pool.meta["splits"]["train"]["tokens"] == pool.train.n_tokens
    assert pool.train.tokens.dtype == np.uint16 and pool.eos_id not in set(
        np.unique(pool.train.tokens).tolist()
    )


def test_stdlib_meta_records_python_version_and_fingerprint(stdlib_pool):
    meta = json.loads((stdlib_pool / "meta.json").read_text())
    assert meta["source_info"]["python_version"] == sys.version.split()[0]
    assert len(meta["source_info"]["content_sha256"]) == 64 and len(meta["fingerprint"]) == 64


def test_synthetic_pool_stores_bayes_floor(synthetic_pool):
    meta = load_pool(synthetic_pool).meta
    floor = meta["bayes_floor_nats_per_token"]
    assert 0.5 < floor < np.log(meta["vocab_size"])


def test_duplicates_are_dropped(tmp_path):
    docs = [f"document number {i} " * 30 for i in range(40)]
    (tmp_path / "docs.jsonl").write_text(
        "".join(json.dumps({"text": d}) + "\n" for d in docs + docs[:10])
    )
    pool = load_pool(
        build_pool(
            PoolSpec(
                source=str(tmp_path / "docs.jsonl"),
                tokens=2_000,
                val_tokens=300,
                vocab_size=MIN_BPE_VOCAB,
            ),
            tmp_path / "pool",
            progress=False,
        )
    )
    texts = _decoded_docs(pool, "train") + _decoded_docs(pool, "val")
    assert len(texts) == len(set(texts)) and set(texts) <= set(docs)
    assert pool.meta["duplicates_dropped"] > 0


@pytest.mark.parametrize("unit,expected_docs", [("file", 2), ("paragraph", 6), ("line", 12)])
def test_local_txt_text_units(tmp_path, unit, expected_docs):
    paragraph = "alpha beta gamma delta\nepsilon zeta eta theta"
    for name in ("a", "b"):
        paras = [f"{paragraph} {name}{i}" for i in range(3)]
        (tmp_path / f"{name}.txt").write_text("\n\n".join(paras) + "\n")
    source = open_source(str(tmp_path / "*.txt"), text_unit=unit)
    assert sum(1 for d in source.documents(0) if d.text.strip()) == expected_docs
    pool = load_pool(
        build_pool(
            PoolSpec(
                source=str(tmp_path / "*.txt"),
                tokens=1,
                val_tokens=1,
                vocab_size=MIN_BPE_VOCAB,
                text_unit=unit,
            ),
            tmp_path / "pool",
            progress=False,
        )
    )
    assert pool.meta["source_info"]["builder"] == "text"
    # tokens=1 takes one document per split; the unit decides what a document is
    assert pool.train.n_docs == 1 and pool.val.n_docs == 1
    doc = _decoded_docs(pool, "train")[0].strip()
    assert doc.count("\n\n") == (2 if unit == "file" else 0) and ("\n" in doc) == (unit != "line")


def test_local_parquet_and_hub_style_directory(tmp_path):
    pd = pytest.importorskip("pandas")
    texts = [f"parquet document {i} " * 20 for i in range(30)]
    pd.DataFrame({"body": texts}).to_parquet(tmp_path / "docs.parquet")
    pool = load_pool(
        build_pool(
            PoolSpec(
                source=str(tmp_path / "docs.parquet"),
                tokens=1_000,
                val_tokens=200,
                vocab_size=MIN_BPE_VOCAB,
                text_field="body",
            ),
            tmp_path / "pq",
            progress=False,
        )
    )
    assert set(_decoded_docs(pool, "train")) <= set(texts)
    # the hub code path (datasets streaming + seeded shuffle) on a local dataset directory
    hub_dir = tmp_path / "hubdata"
    hub_dir.mkdir()
    (hub_dir / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    hub = load_pool(
        build_pool(
            PoolSpec(
                source=f"hf:{hub_dir}", tokens=1_000, val_tokens=200, vocab_size=MIN_BPE_VOCAB
            ),
            tmp_path / "hub",
            progress=False,
        )
    )
    assert set(_decoded_docs(hub, "train")) <= set(texts)
    assert not set(_decoded_docs(hub, "train")) & set(_decoded_docs(hub, "val"))


def test_synthetic_logprobs_match_empirical_frequencies():
    """One- and two-sentence documents from a tiny grammar: exp(log p) must match observed
    frequencies."""
    for n_sent, n_samples in ((1, 40_000), (2, 60_000)):
        grammar = Grammar(
            n_names=3,
            n_places=2,
            n_nouns=3,
            n_adjectives=2,
            n_verbs=2,
            n_topics=2,
            min_sentences=n_sent,
            max_sentences=n_sent,
            language_seed=3,
        )
        stream = synthetic_documents(seed=11, grammar=grammar)
        counts, logp = Counter(), {}
        for _ in range(n_samples):
            _, text, lp = next(stream)
            counts[text] += 1
            assert logp.setdefault(text, lp) == pytest.approx(lp, abs=1e-9)  # same text, same log p
        if n_sent == 1:  # every possible document has been seen: probabilities sum to 1
            assert sum(np.exp(list(logp.values()))) == pytest.approx(1.0, abs=2e-3)
        for text, count in counts.most_common(40):
            p = np.exp(logp[text])
            sigma = np.sqrt(n_samples * p * (1 - p))
            assert abs(count - n_samples * p) < 5 * sigma + 1, (text, count, n_samples * p)


def test_synthetic_is_seeded_and_lengths_spread():
    a = [next(synthetic_documents(5))[1] for _ in range(1)]
    assert a == [next(synthetic_documents(5))[1]] and a != [next(synthetic_documents(6))[1]]
    language = SyntheticLanguage()
    lengths = [len(language.sample(np.random.default_rng(i))[0].split()) for i in range(300)]
    assert max(lengths) > 10 * min(lengths)  # document lengths spread over an order of magnitude


def test_synthetic_grammar_overrides_shorten_documents_and_reject_bad_fields():
    source = open_source("synthetic:max_sentences=20,n_topics=4")
    assert (source.grammar.max_sentences, source.grammar.n_topics) == (20, 4)
    assert source.info["grammar"]["max_sentences"] == 20  # recorded in the pool's meta.json
    docs = source.documents(0)
    short = [len(next(docs).text.split()) for _ in range(200)]
    default = open_source("synthetic").documents(0)
    assert np.mean(short) < 0.5 * np.mean([len(next(default).text.split()) for _ in range(200)])
    for bad in ("synthetic:max_sentence=20", "synthetic:max_sentences=", "synthetic:n_topics=x"):
        with pytest.raises(ReproError, match="synthetic:"):
            open_source(bad)
    with pytest.raises(ReproError, match="min_sentences"):  # checked before any build
        check_spec(PoolSpec("synthetic:min_sentences=9,max_sentences=4", 100))


def test_parse_count():
    assert [parse_count(s) for s in ("500k", "1M", "2.5M", "1B", "1234", "1_000")] == [
        500_000,
        10**6,
        2_500_000,
        10**9,
        1234,
        1000,
    ]
    for bad in ("1.5.3", "ten", "1X", "", "-5", "0"):
        with pytest.raises(ReproError):
            parse_count(bad)


# --- errors: one line, before expensive work, nothing half-written -------------------------------


def _cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "repro.cli", *args], capture_output=True, text=True, cwd=cwd
    )


@pytest.mark.parametrize(
    "args,message",
    [
        (["--source", "synthetic", "--tokens", "1.2.3"], "malformed token count"),
        (["--source", "/nonexistent/*.txt", "--tokens", "1k"], "no files match"),
        (
            [
                "--source",
                "synthetic",
                "--tokens",
                "1k",
                "--vocab-size",
                "70000",
                "--dtype",
                "uint16",
            ],
            "does not fit dtype uint16",
        ),
        (["--source", "synthetic", "--tokens", "1k", "--vocab-size", "100"], "too small"),
        (
            ["--source", "synthetic", "--tokens", "1k", "--tokenizer", "missing/tokenizer.json"],
            "does not exist",
        ),
    ],
)
def test_cli_bad_input_is_one_line(tmp_path, args, message):
    result = _cli("data", "build", *args, "--out", str(tmp_path / "pool"))
    assert result.returncode == 2
    assert (
        message in result.stderr
        and result.stderr.count("\n") == 1
        and result.stderr.startswith("repro: error:")
    )
    assert not (tmp_path / "pool").exists() and not list(tmp_path.iterdir())


def test_errors_of_the_source(tmp_path):
    (tmp_path / "empty.txt").write_text("  \n\n \n")
    with pytest.raises(ReproError, match="no non-empty documents"):
        build_pool(
            PoolSpec(source=str(tmp_path / "empty.txt"), tokens=100, val_tokens=10, vocab_size=300),
            tmp_path / "p1",
            progress=False,
        )
    (tmp_path / "small.jsonl").write_text(
        "".join(json.dumps({"text": f"short doc {i}"}) + "\n" for i in range(20))
    )
    with pytest.raises(ReproError, match=r"supplies only [\d,]+ unique training tokens.*--tokens"):
        build_pool(
            PoolSpec(
                source=str(tmp_path / "small.jsonl"), tokens=10_000, val_tokens=10, vocab_size=300
            ),
            tmp_path / "p2",
            progress=False,
        )
    with pytest.raises(ReproError, match="no field 'body'.*--text-field"):
        build_pool(
            PoolSpec(
                source=str(tmp_path / "small.jsonl"),
                tokens=10,
                val_tokens=10,
                vocab_size=300,
                text_field="body",
            ),
            tmp_path / "p3",
            progress=False,
        )
    (tmp_path / "broken.parquet").write_bytes(b"not a parquet file")
    with pytest.raises(ReproError, match="cannot read"):
        build_pool(
            PoolSpec(
                source=str(tmp_path / "broken.parquet"), tokens=10, val_tokens=10, vocab_size=300
            ),
            tmp_path / "p4",
            progress=False,
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "broken.parquet",
        "empty.txt",
        "small.jsonl",
    ]


def test_existing_different_pool_needs_force(small_synthetic_spec, tmp_path):
    out = tmp_path / "pool"
    build_pool(small_synthetic_spec, out, progress=False)
    other = replace(small_synthetic_spec, seed=3)
    message = "already holds a different pool; move it away or remove it, or replace it with repro"
    with pytest.raises(ReproError, match=f"{message} data build .*--force"):  # not "pass --force":
        build_pool(other, out, progress=False)  # repro reproduce, which builds pools, has none
    build_pool(other, out, force=True, progress=False)
    assert load_pool(out).meta["seed"] == 3 and sorted(p.name for p in tmp_path.iterdir()) == [
        "pool"
    ]


def test_force_through_a_link_rebuilds_its_target_and_leaves_nothing(
    small_synthetic_spec, tmp_path
):
    """--out a symbolic link to a pool: --force replaces the pool it points to; the link stays a
    link and no .old or .tmp folder is left beside either."""
    build_pool(small_synthetic_spec, tmp_path / "real", progress=False)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    build_pool(replace(small_synthetic_spec, seed=3), tmp_path / "link", force=True, progress=False)
    assert (tmp_path / "link").is_symlink() and load_pool(tmp_path / "real").meta["seed"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]


def test_a_pool_too_large_for_the_disk_is_refused_before_reading(tmp_path, monkeypatch):
    """The token arrays' size is checked against the free space of --out's device first: one
    line with both sizes, nothing written, the source never opened."""
    usage = shutil.disk_usage(tmp_path)._replace(free=10 * 2**20)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage)
    monkeypatch.setattr("repro.data.build.open_source", lambda *a: pytest.fail("source read"))
    spec = PoolSpec(source="synthetic", tokens=10_000_000, val_tokens=1_000, vocab_size=512)
    with pytest.raises(ReproError, match=r"needs about 19 MiB .* has 10 MiB free; free space"):
        build_pool(spec, tmp_path / "new" / "pool", progress=False)
    assert not (tmp_path / "new").exists()


def test_cli_build_and_info(tmp_path):
    out = tmp_path / "pool"
    built = _cli(
        "data",
        "build",
        "--source",
        "synthetic",
        "--tokens",
        "5k",
        "--val-tokens",
        "1k",
        "--vocab-size",
        "300",
        "--out",
        str(out),
        "--quiet",
    )
    assert built.returncode == 0, built.stderr
    info = _cli("data", "info", str(out))
    assert info.returncode == 0 and "Bayes floor" in info.stdout
    train_line = next(line for line in info.stdout.splitlines() if line.startswith("train"))
    assert int(train_line.split()[2].replace(",", "")) == load_pool(out).train.n_tokens


# --- compatibility: pools built before the integrity records keep their identity ------------------

SMOKE_FINGERPRINT = "b17b6f9edf6db9a4b388a9e01a1a79f50633e9e630014c9b5073e8762c2e19fc"


def test_default_build_keeps_the_fingerprint_and_build_args_of_older_pools(tmp_path):
    """The smoke preset's main pool: stored runs are identified by this fingerprint, and a pool
    built before the new options must still match the same request (a no-op rebuild)."""
    spec = PoolSpec(source="synthetic", tokens=8_000, val_tokens=2_000, vocab_size=300)
    assert set(spec.build_args()) == {
        "source",
        "tokens",
        "val_tokens",
        "seed",
        "val_seed",
        "vocab_size",
        "tokenizer",
        "text_field",
        "text_unit",
        "dtype",
        "format",
    }
    pool = load_pool(build_pool(spec, tmp_path / "pool", progress=False))
    assert pool.meta["fingerprint"] == SMOKE_FINGERPRINT


def _as_old_pool(path):
    """Strip what older builds did not write from a pool's meta.json."""
    meta = json.loads((path / "meta.json").read_text())
    for key in ("files", "overshoot_tokens", "skipped_records"):
        del meta[key]
    (path / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def test_old_pool_loads_rebuilds_as_a_noop_and_verifies_without_checksums(tmp_path):
    spec = PoolSpec(source="synthetic", tokens=3_000, val_tokens=1_000, vocab_size=300)
    out = build_pool(spec, tmp_path / "pool", progress=False)
    _as_old_pool(out)
    before = (out / "meta.json").read_bytes()
    assert (
        build_pool(spec, out, progress=False) == out and (out / "meta.json").read_bytes() == before
    )
    assert load_pool(out).train.n_tokens >= 3_000
    info = _cli("data", "info", str(out))
    assert info.returncode == 0 and "overshoot" in info.stdout
    verified = _cli("data", "verify", str(out), "--quiet")
    assert verified.returncode == 0 and "checksums are not recorded" in verified.stdout


# --- --out: only a pool is ever replaced ---------------------------------------------------------


SYNTHETIC_1K = ["data", "build", "--source", "synthetic", "--tokens", "1k", "--val-tokens", "500"]
SYNTHETIC_1K += ["--vocab-size", "300", "--quiet"]


def _no_source(monkeypatch):
    """Fail if the build gets as far as opening its source."""

    def refuse(*args, **kwargs):
        raise AssertionError("the source was opened")

    monkeypatch.setattr("repro.data.build.open_source", refuse)


def _tree(path):
    return sorted(
        (str(p.relative_to(path)), p.is_file() and p.read_bytes()) for p in path.rglob("*")
    )


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda out: out.write_text("precious"), "is a file"),
        (lambda out: (out.mkdir(), (out / "train").mkdir()), "has no meta.json"),
        (lambda out: (out.mkdir(), (out / "notes.txt").write_text("precious")), "'notes.txt'"),
        (
            lambda out: (out.mkdir(), (out / "meta.json").write_text("{}"), (out / "x").mkdir()),
            "holds 'x'",
        ),
    ],
    ids=["file", "pool-entries-only", "folder", "meta-json-and-more"],
)
def test_out_that_is_not_a_pool_is_refused_untouched_before_any_work(
    tmp_path, monkeypatch, make, message
):
    out = tmp_path / "pool"
    make(out)
    before = _tree(tmp_path)
    _no_source(monkeypatch)
    spec = PoolSpec(source="synthetic", tokens=1_000, val_tokens=500, vocab_size=300)
    with pytest.raises(ReproError, match=message) as error:
        build_pool(spec, out, force=True, progress=False)
    assert "--force" not in str(error.value) and "\n" not in str(error.value)
    assert _tree(tmp_path) == before


def test_an_empty_out_folder_is_built_into(tmp_path):
    (tmp_path / "pool").mkdir()
    spec = PoolSpec(source="synthetic", tokens=1_000, val_tokens=500, vocab_size=300)
    assert load_pool(build_pool(spec, tmp_path / "pool", progress=False)).train.n_tokens >= 1_000


def test_out_below_a_file_is_refused(tmp_path, monkeypatch):
    (tmp_path / "afile").write_text("x")
    _no_source(monkeypatch)
    spec = PoolSpec(source="synthetic", tokens=1_000, val_tokens=500, vocab_size=300)
    with pytest.raises(ReproError, match="which is a file"):
        build_pool(spec, tmp_path / "afile" / "pool", progress=False)


def test_cli_file_at_out_is_one_line_and_leaves_nothing(tmp_path):
    out = tmp_path / "pool"
    out.write_text("precious")
    result = _cli(*SYNTHETIC_1K, "--out", str(out), "--force")
    assert (
        result.returncode == 2 and result.stderr.count("\n") == 1 and "is a file" in result.stderr
    )
    assert out.read_text() == "precious" and sorted(p.name for p in tmp_path.iterdir()) == ["pool"]


def test_damaged_pool_needs_force_and_force_rebuilds_it(small_synthetic_spec, tmp_path):
    out = build_pool(small_synthetic_spec, tmp_path / "pool", progress=False)
    good = _array_bytes(out)
    (out / "meta.json").write_text('{"format": 1, "splits": ')
    with pytest.raises(ReproError, match="damaged.*not valid JSON.*--force"):
        build_pool(small_synthetic_spec, out, progress=False)
    build_pool(small_synthetic_spec, out, force=True, progress=False)
    assert _array_bytes(out) == good and load_pool(out).meta["fingerprint"]
    tokens = out / "train" / "tokens.npy"  # same request, damaged arrays: --force rebuilds too
    tokens.write_bytes(tokens.read_bytes()[:-10])
    with pytest.raises(ReproError, match="damaged"):
        build_pool(small_synthetic_spec, out, progress=False)
    build_pool(small_synthetic_spec, out, force=True, progress=False)
    assert _array_bytes(out) == good


# --- stale temporary folders of killed builds ----------------------------------------------------


def test_stale_temp_folders_of_dead_builds_are_removed_live_ones_kept(tmp_path):
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    dead, alive = finished.pid, os.getppid()
    for name in (
        f".pool.tmp-{dead}",
        f".pool.old-{dead}",
        f".pool.tmp-{alive}",
        f".other.tmp-{dead}",
    ):
        (tmp_path / name / "train").mkdir(parents=True)
    spec = PoolSpec(source="synthetic", tokens=1_000, val_tokens=500, vocab_size=300)
    build_pool(spec, tmp_path / "pool", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f".other.tmp-{dead}",
        f".pool.tmp-{alive}",
        "pool",
    ]


# --- records of local files: every one is checked ------------------------------------------------

GOOD = [f"good document number {i} " * 12 for i in range(30)]


def _write_records(path, records):
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    elif path.suffix == ".json":
        path.write_text(json.dumps(records))
    else:
        import pandas as pd

        pd.DataFrame({"text": [r.get("text") for r in records]}).to_parquet(path)


@pytest.mark.parametrize(
    "name,bad,found",
    [
        ("docs.jsonl", {"body": "no text field"}, "missing or null"),
        ("docs.jsonl", {"text": 5}, "found int"),
        ("docs.json", {"text": None}, "missing or null"),
        ("docs.parquet", {"text": None}, "missing or null"),
    ],
    ids=["jsonl-missing", "jsonl-int", "json-null", "parquet-null"],
)
def test_bad_record_is_an_error_naming_file_and_record_or_is_skipped(tmp_path, name, bad, found):
    """A bad record after the first: an error naming the file and its number; skipped and counted
    (meta.json, data info) with skip_bad_records."""
    (tmp_path / "corpus").mkdir()
    _write_records(tmp_path / "corpus" / f"a{name}", [{"text": t} for t in GOOD[:15]])
    records = [{"text": t} for t in GOOD[15:]]
    records[6:6] = [bad]
    records[10:10] = [bad]
    second = tmp_path / "corpus" / f"b{name}"
    _write_records(second, records)
    spec = PoolSpec(source=str(tmp_path / "corpus"), tokens=300, val_tokens=100, vocab_size=257)
    with pytest.raises(ReproError, match=rf"{second}: record 7 has .*{found}.*--skip-bad-records"):
        build_pool(spec, tmp_path / "pool", progress=False)
    assert not (tmp_path / "pool").exists()
    out = build_pool(replace(spec, skip_bad_records=True), tmp_path / "pool", progress=False)
    pool = load_pool(out)
    assert pool.meta["skipped_records"] == 2 and pool.meta["build_args"]["skip_bad_records"]
    assert set(_decoded_docs(pool, "train")) <= set(GOOD)
    assert "2 bad records skipped" in pool_summary(pool)


def test_files_are_read_one_by_one_empty_ones_included(tmp_path):
    """An empty file holds no records; one file's schema is not forced on the next (datasets would
    JSON-quote the texts of a file read after one whose `text` column had another type)."""
    (tmp_path / "a.jsonl").write_text("")
    _write_records(tmp_path / "b.jsonl", [{"text": t} for t in GOOD[:20]])
    _write_records(tmp_path / "c.jsonl", [{"text": 7}] + [{"text": t} for t in GOOD[20:]])
    source = open_source(str(tmp_path / "*.jsonl"), skip_bad_records=True)
    assert [d.text for d in source.documents(0)] == GOOD and len(source.skipped) == 1


def test_file_without_the_text_field_is_an_error_even_when_skipping(tmp_path):
    _write_records(tmp_path / "a.jsonl", [{"body": t} for t in GOOD])
    spec = PoolSpec(source=str(tmp_path / "a.jsonl"), tokens=300, val_tokens=100, vocab_size=257)
    with pytest.raises(ReproError, match="no field 'text'.*--text-field"):
        build_pool(replace(spec, skip_bad_records=True), tmp_path / "pool", progress=False)


def test_cli_skip_bad_records_flag(tmp_path):
    _write_records(tmp_path / "a.jsonl", [{"text": t} for t in GOOD] + [{"text": ["a", "b"]}])
    source = str(tmp_path / "a.jsonl")
    args = ["data", "build", "--source", source, "--tokens", "300", "--val-tokens", "100"]
    args += ["--vocab-size", "257", "--quiet"]
    failed = _cli(*args, "--out", str(tmp_path / "p1"))
    assert failed.returncode == 2 and failed.stderr.count("\n") == 1
    assert f"{tmp_path / 'a.jsonl'}: record 31 has no string in field 'text' (found list)" in (
        failed.stderr
    )
    built = _cli(*args, "--skip-bad-records", "--out", str(tmp_path / "p2"))
    assert built.returncode == 0 and "1 bad records skipped" in built.stdout


# --- vocab size the BPE cannot reach -------------------------------------------------------------


def test_unreachable_vocab_size_is_an_error_that_names_the_reachable_one(tmp_path):
    spec = PoolSpec(source="stdlib", tokens=8_000, val_tokens=2_000, vocab_size=100_000_000)
    with pytest.raises(ReproError, match=r"reaches only ([\d,]+) of the 100,000,000") as error:
        build_pool(spec, tmp_path / "pool", progress=False)
    reached = int(str(error.value).split("--vocab-size ")[1].split()[0])
    assert MIN_BPE_VOCAB < reached < 100_000 and not (tmp_path / "pool").exists()
    pool = load_pool(
        build_pool(replace(spec, vocab_size=reached), tmp_path / "pool", progress=False)
    )
    assert pool.vocab_size == reached


# --- tokenizer: a local path or a hub name -------------------------------------------------------


@pytest.mark.parametrize(
    "arg,local",
    [
        ("gpt2", False),
        ("meta-llama/Llama-3.2-1B", False),
        ("data/pools/no-such-pool", True),  # data/ exists: a mistyped local path
        ("no-such-org/tokenizer.json", True),
        ("./tok", True),
        ("../tok", True),
        ("~/no-such-dir/tok", True),
        ("/abs/path", True),
        ("a/b/c", True),
    ],
)
def test_tokenizer_argument_is_a_local_path_or_a_hub_name(tmp_path, monkeypatch, arg, local):
    from repro.data import tokenizer

    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    asked = []
    monkeypatch.setattr(tokenizer, "_from_hub", lambda name: asked.append(name) or "hub tokenizer")
    assert tokenizer.is_local_tokenizer(arg) == local
    if local:
        with pytest.raises(ReproError, match="does not exist"):
            tokenizer.load_tokenizer(arg)
        assert asked == []
    else:
        assert tokenizer.load_tokenizer(arg) == "hub tokenizer" and asked == [arg]


def test_mistyped_local_tokenizer_fails_before_reading_the_source(tmp_path, monkeypatch):
    (tmp_path / "data" / "pools").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("repro.data.tokenizer._from_hub", lambda name: pytest.fail("hub asked"))
    spec = PoolSpec(source="synthetic", tokens=1_000, tokenizer="data/pools/smoke-seed0")
    with pytest.raises(ReproError, match="does not exist"):
        build_pool(spec, tmp_path / "pool", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


# --- budgets: overshoot recorded, exact budget on request ----------------------------------------


@pytest.mark.parametrize("source", ["stdlib", "synthetic"])
def test_overshoot_is_recorded_and_exact_tokens_cuts_the_last_document(tmp_path, source):
    spec = PoolSpec(source=source, tokens=8_000, val_tokens=2_000, vocab_size=300)
    whole = load_pool(build_pool(spec, tmp_path / "whole", progress=False))
    over = whole.meta["overshoot_tokens"]
    assert over == {"train": whole.train.n_tokens - 8_000, "val": whole.val.n_tokens - 2_000}
    assert 0 <= over["train"] < whole.train.doc_lengths()[-1]
    exact = load_pool(
        build_pool(replace(spec, exact_tokens=True), tmp_path / "exact", progress=False)
    )
    assert exact.train.n_tokens == 8_000 == len(exact.train.tokens)
    assert exact.meta["overshoot_tokens"]["train"] == 0
    # the same documents, the last one cut; validation untouched
    assert np.array_equal(exact.train.tokens, whole.train.tokens[:8_000])
    assert np.array_equal(exact.train.doc_offsets[:-1], whole.train.doc_offsets[:-1])
    assert np.array_equal(exact.val.tokens, whole.val.tokens)
    assert exact.meta["fingerprint"] != whole.meta["fingerprint"]
    assert "bayes_floor_nats_per_token" not in exact.meta["splits"]["train"]
    assert f"train +0 over 8,000, val +{over['val']:,} over 2,000 tokens" in pool_summary(exact)


def test_cli_exact_tokens_flag(tmp_path):
    built = _cli(*SYNTHETIC_1K, "--exact-tokens", "--out", str(tmp_path / "p"))
    assert built.returncode == 0, built.stderr
    assert load_pool(tmp_path / "p").train.n_tokens == 1_000


# --- integrity: sizes checked on load, checksums by verify --------------------------------------


def test_meta_records_sizes_and_checksums_and_verify_catches_a_flipped_byte(tmp_path):
    spec = PoolSpec(source="synthetic", tokens=3_000, val_tokens=1_000, vocab_size=300)
    out = build_pool(spec, tmp_path / "pool", progress=False)
    files = load_pool(out).meta["files"]
    assert set(files) == {
        "train/tokens.npy",
        "train/doc_offsets.npy",
        "val/tokens.npy",
        "val/doc_offsets.npy",
        "tokenizer.json",
    }
    for rel, record in files.items():
        assert record["bytes"] == (out / rel).stat().st_size and len(record["sha256"]) == 64
    assert files["train/tokens.npy"]["shape"] == [load_pool(out).train.n_tokens]
    ok = _cli("data", "verify", str(out))
    assert ok.returncode == 0 and "5 files match" in ok.stdout
    tokens = out / "val" / "tokens.npy"
    data = bytearray(tokens.read_bytes())
    data[-2] ^= 0x01  # the last id's low bit: same size, a valid id; only the checksum tells
    tokens.write_bytes(bytes(data))
    load_pool(out)
    bad = _cli("data", "verify", str(out))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "val/tokens.npy does not match the sha256" in bad.stderr and "--force" in bad.stderr


def test_built_meta_reads_each_version_of_meta_json_and_returns_a_new_dict(tmp_path):
    """built_meta caches meta.json's text by the file's version (run ids read it for every run):
    a rebuilt pool (a new file renamed over the old, even of the same size) reads anew."""
    meta = tmp_path / "meta.json"
    assert built_meta(tmp_path) is None
    meta.write_text('{"a": 1}')
    built_meta(tmp_path)["a"] = 2  # a caller's change stays its own
    assert built_meta(tmp_path) == {"a": 1}
    (tmp_path / "new.json").write_text('{"a": 4}')
    os.replace(tmp_path / "new.json", meta)
    assert built_meta(tmp_path) == {"a": 4}
    meta.write_text("[1, 2]")
    with pytest.raises(ReproError, match="not a JSON object"):
        built_meta(tmp_path)
