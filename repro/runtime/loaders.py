"""Epoch orderings over a pool: REPEAT, SHUFFLE and REPACK.

Packing joins documents with EOS (each document followed by one EOS) into one stream and cuts it
into consecutive, non-overlapping sequences of seq_len + 1 tokens (inputs and targets shifted by
one); the remainder shorter than one sequence is dropped. The stream's length does not depend on
the document order, so every epoch has the same number of sequences and optimizer steps; the last
partial batch of an epoch is dropped too, so each training token appears at most once per epoch.

- REPEAT:  pack once (a seeded document order); the same sequences in the same batches every epoch.
- SHUFFLE: pack once; every epoch a new seeded permutation of those sequences into batches.
- REPACK:  every epoch a new seeded document order, packed anew (sequence contents and boundaries
           change), and its sequences permuted.

Everything is a deterministic function of (seed, epoch). An epoch costs one permutation of the
documents and one of the sequences (O(n_docs + n_sequences)); tokens are gathered per batch with a
vectorised search over document start positions, so nothing of the size of the pool is copied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from repro.data.pool import Split, packed_sequences

Loader = Literal["repeat", "shuffle", "repack"]  # epoch orderings
BatchPhases = tuple[tuple[float, int], ...]
"""A batch-size schedule: (fraction of the epochs, batch size in sequences) from that point on."""
LOADERS = get_args(Loader)


@dataclass(frozen=True)
class Packing:
    """A document order and where each document starts in the packed stream (tokens)."""

    doc_order: np.ndarray  # [n_docs] indices into the split's documents
    stream_starts: (
        np.ndarray
    )  # [n_docs + 1] start of each ordered document (incl. its EOS) in the stream


def pack(split: Split, doc_order: np.ndarray) -> Packing:
    lengths = np.diff(split.doc_offsets)[doc_order] + 1  # + EOS
    return Packing(doc_order, np.concatenate([[0], np.cumsum(lengths)]))


def gather_sequences(
    split: Split, packing: Packing, eos_id: int, sequence_ids: np.ndarray, seq_len: int
) -> np.ndarray:
    """Sequences `sequence_ids` of the packed stream as an int64 array [n, seq_len + 1]."""
    width = seq_len + 1
    positions = (
        np.asarray(sequence_ids, dtype=np.int64)[:, None] * width + np.arange(width)
    ).ravel()
    slot = (
        np.searchsorted(packing.stream_starts, positions, side="right") - 1
    )  # ordered document index
    within = positions - packing.stream_starts[slot]
    docs = packing.doc_order[slot]
    doc_len = split.doc_offsets[docs + 1] - split.doc_offsets[docs]
    is_eos = within == doc_len
    source = np.where(is_eos, 0, split.doc_offsets[docs] + within)
    out = np.asarray(split.tokens[source], dtype=np.int64)
    out[is_eos] = eos_id
    return out.reshape(-1, width)


class EpochLoader:
    """Global batches (sequences) of one training split for a given loader kind and seed."""

    def __init__(
        self, split: Split, eos_id: int, seq_len: int, batch_size: int, kind: str, seed: int
    ):
        if kind not in LOADERS:
            raise ValueError(f"unknown loader {kind!r}; choose one of: {', '.join(LOADERS)}")
        self.split, self.eos_id, self.seq_len, self.batch_size, self.kind, self.seed = (
            split,
            eos_id,
            seq_len,
            batch_size,
            kind,
            seed,
        )
        self.sequences_per_epoch = packed_sequences(split.n_tokens, split.n_docs, seq_len)
        self.steps_per_epoch = self.sequences_per_epoch // batch_size
        self._epoch: int | None = None
        if kind != "repack":  # REPEAT and SHUFFLE pack once
            self._fixed = pack(split, self._rng(-1).permutation(split.n_docs))
            self._fixed_order = self._rng(-2).permutation(self.sequences_per_epoch)

    def _rng(self, epoch: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, epoch + 2, 0x5EED])

    def _prepare(self, epoch: int) -> None:
        if self._epoch == epoch:
            return
        if self.kind == "repeat":
            self._packing, self._order = self._fixed, self._fixed_order
        elif self.kind == "shuffle":
            self._packing, self._order = (
                self._fixed,
                self._rng(epoch).permutation(self.sequences_per_epoch),
            )
        else:
            rng = self._rng(epoch)
            self._packing = pack(self.split, rng.permutation(self.split.n_docs))
            self._order = rng.permutation(self.sequences_per_epoch)
        self._epoch = epoch

    def batch(self, epoch: int, step: int) -> np.ndarray:
        """Global batch `step` (0-based, within the epoch) as int64 [batch_size, seq_len + 1]."""
        return self.sequences(epoch, step * self.batch_size, self.batch_size)

    def sequences(self, epoch: int, offset: int, count: int) -> np.ndarray:
        """`count` sequences of the epoch's order from position `offset` (sequences), int64
        [count, seq_len + 1]; the order does not depend on the batch size, so a batch-size schedule
        slices the same epoch."""
        self._prepare(epoch)
        return gather_sequences(
            self.split,
            self._packing,
            self.eos_id,
            self._order[offset : offset + count],
            self.seq_len,
        )

    def epoch_sequence_ids(self, epoch: int) -> np.ndarray:
        """Sequence ids used in `epoch`, in batch order (for tests and analyses)."""
        self._prepare(epoch)
        return self._order[: self.steps_per_epoch * self.batch_size]


def validation_sequences(split: Split, eos_id: int, seq_len: int) -> np.ndarray:
    """The validation split packed once in document order: every complete sequence,
    [n, seq_len + 1]."""
    packing = pack(split, np.arange(split.n_docs))
    n = packed_sequences(split.n_tokens, split.n_docs, seq_len)
    return gather_sequences(split, packing, eos_id, np.arange(n), seq_len)


def validation_documents(split: Split, seq_len: int) -> np.ndarray:
    """The document of every target token of validation_sequences, [n, seq_len] (indices into the
    split's documents; a document's EOS counts as its own)."""
    packing = pack(split, np.arange(split.n_docs))
    n = packed_sequences(split.n_tokens, split.n_docs, seq_len)
    width = seq_len + 1
    targets = np.arange(n, dtype=np.int64)[:, None] * width + np.arange(1, width)
    return np.searchsorted(packing.stream_starts, targets, side="right") - 1


@dataclass(frozen=True)
class EpochSteps:
    """Where each optimizer step takes its batch. The batch size may change at epoch boundaries (a
    batch-size schedule); within an epoch, step i takes sequences [i * B, (i + 1) * B) of its
    order."""

    batch_by_epoch: tuple[int, ...]  # sequences per step in each epoch
    steps_by_epoch: tuple[int, ...]

    @property
    def total_steps(self) -> int:
        return sum(self.steps_by_epoch)

    def locate(self, step: int) -> tuple[int, int, int]:
        """(epoch, step within the epoch, batch size) of global step `step` (0-based)."""
        for epoch, n in enumerate(self.steps_by_epoch):
            if step < n:
                return epoch, step, self.batch_by_epoch[epoch]
            step -= n
        raise ValueError("step beyond the last epoch")

    def epochs_done(self, steps: int) -> float:
        """Epochs (fractional) completed after `steps` steps."""
        if len(set(self.steps_by_epoch)) == 1:  # one batch size: steps / steps per epoch, as always
            return steps / self.steps_by_epoch[0]
        for epoch, n in enumerate(self.steps_by_epoch):
            if steps <= n:
                return epoch + steps / n
            steps -= n
        return float(len(self.steps_by_epoch))

    def sequences_done(self, steps: int) -> int:
        """Training sequences consumed by the first `steps` steps."""
        done = 0
        for batch, n in zip(self.batch_by_epoch, self.steps_by_epoch):
            done += min(steps, n) * batch
            steps -= min(steps, n)
        return done


def epoch_steps(
    sequences_per_epoch: int, epochs: int, batch_size: int, batch_schedule: BatchPhases = ()
) -> EpochSteps:
    """The steps of a run: `batch_size` sequences every epoch, or each phase's batch from epoch
    floor(f * epochs + 1/2) on."""
    batches = [batch_size] * epochs
    for fraction, batch in batch_schedule:
        for epoch in range(math.floor(fraction * epochs + 0.5), epochs):
            batches[epoch] = batch
    return EpochSteps(tuple(batches), tuple(sequences_per_epoch // b for b in batches))
