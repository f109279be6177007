"""Pools: determinism, seeds, document-level split, budgets, dedup, local files, errors."""

import json
import subprocess
import sys
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from tokenizers import Tokenizer

from repro.data.pool import PoolSpec, build_pool, load_pool
from repro.data.sources import open_source
from repro.data.synthetic import Grammar, SyntheticLanguage, synthetic_documents
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
                source=str(tmp_path / "docs.jsonl"), tokens=2_000, val_tokens=300, vocab_size=300
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
                vocab_size=300,
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
                vocab_size=300,
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
            PoolSpec(source=f"hf:{hub_dir}", tokens=1_000, val_tokens=200, vocab_size=300),
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
    with pytest.raises(ReproError, match="already holds a different pool.*--force"):
        build_pool(other, out, progress=False)
    build_pool(other, out, force=True, progress=False)
    assert load_pool(out).meta["seed"] == 3 and sorted(p.name for p in tmp_path.iterdir()) == [
        "pool"
    ]


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
