"""Epoch loaders: packing, determinism, per-epoch orderings, at-most-once per epoch."""

from fractions import Fraction

import numpy as np
import pytest

from repro.data.pool import Split, load_pool
from repro.runtime.loaders import (
    EpochLoader,
    epoch_steps,
    validation_documents,
    validation_sequences,
)

SEQ, BATCH = 32, 4


def _split(doc_lengths, seed=0):
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(doc_lengths)]).astype(np.int64)
    return Split(rng.integers(1, 1000, size=offsets[-1]).astype(np.uint16), offsets)


def _stream(split, eos=0):
    return np.concatenate([np.append(split.doc(i), eos) for i in range(split.n_docs)])


@pytest.fixture(scope="module")
def split():
    return _split(np.random.default_rng(1).integers(5, 200, size=60))


def _epoch(loader, epoch):
    return np.concatenate([loader.batch(epoch, s) for s in range(loader.steps_per_epoch)])


def test_packing_joins_documents_with_eos_and_drops_the_remainder(split):
    loader = EpochLoader(split, 0, SEQ, BATCH, "repeat", seed=0)
    total = split.n_tokens + split.n_docs
    assert loader.sequences_per_epoch == total // (SEQ + 1)
    order = loader._fixed.doc_order
    reordered = Split(
        np.concatenate([split.doc(i) for i in order]),
        np.concatenate([[0], np.cumsum(np.diff(split.doc_offsets)[order])]),
    )
    stream = _stream(reordered)
    seqs = _epoch(loader, 0)
    ids = loader.epoch_sequence_ids(0)
    for row, j in zip(seqs, ids):
        assert np.array_equal(row, stream[j * (SEQ + 1) : (j + 1) * (SEQ + 1)])
    assert (seqs == 0).sum() <= split.n_docs  # EOS only between documents


@pytest.mark.parametrize("kind", ["repeat", "shuffle", "repack"])
def test_each_token_at_most_once_per_epoch_and_deterministic(split, kind):
    a, b = (
        EpochLoader(split, 0, SEQ, BATCH, kind, seed=3),
        EpochLoader(split, 0, SEQ, BATCH, kind, seed=3),
    )
    for epoch in range(3):
        ids = a.epoch_sequence_ids(epoch)
        assert len(set(ids.tolist())) == len(ids) == a.steps_per_epoch * BATCH
        assert np.array_equal(_epoch(a, epoch), _epoch(b, epoch))
        # multiset of non-EOS tokens of an epoch is a sub-multiset of the pool's tokens
        used = np.bincount(_epoch(a, epoch).ravel(), minlength=1000)[1:]
        have = np.bincount(split.tokens.astype(np.int64), minlength=1000)[1:]
        assert np.all(used <= have)
    assert not np.array_equal(
        _epoch(a, 0), _epoch(EpochLoader(split, 0, SEQ, BATCH, kind, seed=4), 0)
    )


def test_repeat_shuffle_repack_semantics(split):
    rep, shu, rpk = (
        EpochLoader(split, 0, SEQ, BATCH, k, seed=0) for k in ("repeat", "shuffle", "repack")
    )
    # REPEAT: identical batches every epoch
    assert np.array_equal(_epoch(rep, 0), _epoch(rep, 1))
    # SHUFFLE: the same set of sequences, a different order into batches
    s0, s1 = _epoch(shu, 0), _epoch(shu, 1)
    assert not np.array_equal(s0, s1)

    def full(ld, e):
        return {tuple(r) for r in _all_sequences(ld, e)}

    assert full(shu, 0) == full(shu, 1)
    # REPACK: sequence contents and boundaries change between epochs
    assert full(rpk, 0) != full(rpk, 1)
    assert len(full(rpk, 0) & full(rpk, 1)) < 0.5 * rpk.sequences_per_epoch


def _all_sequences(loader, epoch):
    from repro.runtime.loaders import gather_sequences

    loader._prepare(epoch)
    return gather_sequences(
        loader.split,
        loader._packing,
        loader.eos_id,
        np.arange(loader.sequences_per_epoch),
        loader.seq_len,
    )


def test_validation_is_packed_once_in_full(split):
    val = validation_sequences(split, 0, SEQ)
    stream = _stream(split)
    n = len(stream) // (SEQ + 1)
    assert np.array_equal(val, stream[: n * (SEQ + 1)].reshape(n, SEQ + 1))


def test_real_pool_batches_are_slices_of_the_packed_stream(synthetic_pool):
    pool = load_pool(synthetic_pool)
    loader = EpochLoader(pool.train, pool.eos_id, 64, 8, "repack", seed=0)
    batch = loader.batch(2, 1)
    order = loader._packing.doc_order
    stream = np.concatenate([np.append(pool.train.doc(i), pool.eos_id) for i in order])
    ids = loader.epoch_sequence_ids(2)[8:16]
    assert batch.shape == (8, 65)
    for row, j in zip(batch, ids):
        assert np.array_equal(row, stream[j * 65 : (j + 1) * 65])


def test_epoch_steps_with_a_batch_schedule():
    steps = epoch_steps(100, 4, 8, ((0.0, 4), (0.5, 16)))
    assert steps.batch_by_epoch == (4, 4, 16, 16)
    # a phase takes every whole batch of its epochs: 200 // 4 and 200 // 16 steps
    assert [(p.batch, p.steps, p.first_step) for p in steps.phases] == [(4, 50, 0), (16, 12, 50)]
    assert steps.locate(50) == (200, 16) and steps.locate(51) == (216, 16)
    assert steps.epochs_done(53) == pytest.approx(2 + 3 * 16 / 100)
    assert steps.epochs_done(62) == 4.0  # a phase's last step completes it
    assert steps.sequences_done(52) == 50 * 4 + 2 * 16
    # a phase from epoch floor(0.5 + 1/2) = 1: none in a one-epoch run
    assert epoch_steps(100, 1, 8, ((0.0, 2), (0.5, 8))).batch_by_epoch == (2,)
    assert epoch_steps(100, 3, 8, ((0.0, 2), (0.5, 8))).batch_by_epoch == (2, 2, 8)


def test_one_batch_size_reads_the_epochs_as_one_stream():
    """100 sequences an epoch, batch 8: 37 steps in 3 epochs (not 3 x 12); step 12 spans the end of
    epoch 0 (sequences 96-99) and the start of epoch 1 (0-3); no sequence of an epoch is dropped."""
    steps = epoch_steps(100, 3, 8)
    assert steps.total_steps == 37 and steps.locate(12) == (96, 8)
    assert steps.epochs_done(12) == 0.96 and steps.epochs_done(37) == 3.0
    assert [steps.steps_at(Fraction(e)) for e in (1, 2, 3)] == [12, 25, 37]


@pytest.mark.parametrize("kind", ["repeat", "shuffle", "repack"])
def test_a_step_across_an_epochs_end_takes_both_epochs_sequences(split, kind):
    loader = EpochLoader(split, 0, SEQ, BATCH, kind, seed=2)
    end = loader.sequences_per_epoch
    batch = loader.stream(end - 3, 8)
    assert np.array_equal(batch[:3], loader.sequences(0, end - 3, 3))
    assert np.array_equal(batch[3:], loader.sequences(1, 0, 5))
    steps = epoch_steps(end, 4, BATCH)
    seen = np.concatenate([loader.stream(*steps.locate(i)) for i in range(steps.total_steps)])
    assert len(seen) == 4 * end - (4 * end) % BATCH  # every epoch whole; the run's tail < 1 batch


def test_validation_documents_name_each_target_tokens_document():
    # documents of 3, 1 and 4 tokens, each followed by EOS in the packed stream:
    # stream d0 d0 d0 E | d1 E | d2 d2 d2 d2 E; sequences of 3 tokens, targets at offsets 1 and 2
    split = Split(np.arange(8, dtype=np.uint16), np.array([0, 3, 4, 8], dtype=np.int64))
    assert validation_documents(split, 2).tolist() == [[0, 0], [1, 1], [2, 2]]
    assert validation_documents(split, 2).shape == validation_sequences(split, 99, 2)[:, 1:].shape
