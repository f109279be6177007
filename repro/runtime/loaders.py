"""Epoch orderings over a pool: REPEAT, SHUFFLE and REPACK.

Packing joins documents with EOS (each document followed by one EOS) into one stream and cuts it
into consecutive, non-overlapping sequences of seq_len + 1 tokens (inputs and targets shifted by
one); the remainder shorter than one sequence is dropped. The stream's length does not depend on
the document order, so every epoch has the same number of sequences. Training reads the epochs'
orders one after another as one stream of sequences (EpochSteps): a batch may span an epoch's end,
so an epoch drops no sequence whatever the batch size, and each training token appears once per
epoch.

- REPEAT:  pack once (a seeded document order); the same sequences in the same batches every epoch.
- SHUFFLE: pack once; every epoch a new seeded permutation of those sequences into batches.
- REPACK:  every epoch a new seeded document order, packed anew (sequence contents and boundaries
           change), and its sequences permuted.

Everything is a deterministic function of (seed, epoch). An epoch costs one permutation of the
documents and one of the sequences (O(n_docs + n_sequences)); tokens are gathered per batch with a
vectorised search over document start positions, so nothing of the size of the pool is copied.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
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
        self.steps_per_epoch = self.sequences_per_epoch // batch_size  # whole batches in an epoch
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

    def stream(self, position: int, count: int) -> np.ndarray:
        """`count` sequences of the stream of epoch orders from `position` (sequences; epoch e's
        order at positions [e * S, (e + 1) * S), S = sequences_per_epoch), int64
        [count, seq_len + 1]: the sequences of a step that spans an epoch's end come from both."""
        parts = []
        while count:
            epoch, offset = divmod(position, self.sequences_per_epoch)
            taken = min(count, self.sequences_per_epoch - offset)
            parts.append(self.sequences(epoch, offset, taken))
            position, count = position + taken, count - taken
        return np.concatenate(parts)

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
class Phase:
    """The steps of one batch size: epochs [start, end), `steps` steps after `first_step` earlier
    ones."""

    start: int  # epochs
    end: int
    batch: int  # sequences per step
    steps: int
    first_step: int


@dataclass(frozen=True)
class EpochSteps:
    """Where each optimizer step takes its batch. The epochs' sequence orders follow each other as
    one stream (epoch e's order at positions [e * S, (e + 1) * S), S = sequences_per_epoch); a phase
    of one batch size B starts at its first epoch's first sequence and takes every whole batch
    before its end, so a batch may span an epoch's end and less than one batch is left out per
    phase, never per epoch. A batch-size schedule changes the batch at epoch boundaries."""

    sequences_per_epoch: int
    batch_by_epoch: tuple[int, ...]  # sequences per step in each epoch

    @cached_property
    def phases(self) -> tuple[Phase, ...]:
        phases, start, first = [], 0, 0
        for batch, epochs in itertools.groupby(self.batch_by_epoch):
            n = len(list(epochs))
            steps = n * self.sequences_per_epoch // batch
            phases.append(Phase(start, start + n, batch, steps, first))
            start, first = start + n, first + steps
        return tuple(phases)

    @property
    def total_steps(self) -> int:
        return sum(phase.steps for phase in self.phases)

    def locate(self, step: int) -> tuple[int, int]:
        """(stream position in sequences, batch size) of global step `step` (0-based)."""
        for phase in self.phases:
            if step < phase.first_step + phase.steps:
                position = phase.start * self.sequences_per_epoch
                return position + (step - phase.first_step) * phase.batch, phase.batch
        raise ValueError("step beyond the last epoch")

    def epochs_done(self, steps: int) -> float:
        """Epochs (fractional) completed after `steps` steps: the stream position over S, a phase's
        last step completing its epochs (the less than one batch it leaves out is not trained
        on)."""
        for phase in self.phases:
            if steps < phase.first_step + phase.steps:
                done = (steps - phase.first_step) * phase.batch / self.sequences_per_epoch
                return phase.start + done
        return float(len(self.batch_by_epoch))

    def steps_at(self, epochs: Fraction) -> int:
        """Steps done when `epochs` (exact) epochs are: the whole batches of its phase up to there;
        at a phase's end, all of the phase's steps."""
        for phase in self.phases:
            if epochs < phase.end:
                batches = (epochs - phase.start) * self.sequences_per_epoch / phase.batch
                return phase.first_step + math.floor(batches)
        return self.total_steps

    def sequences_done(self, steps: int) -> int:
        """Training sequences consumed by the first `steps` steps."""
        return sum(
            min(max(steps - phase.first_step, 0), phase.steps) * phase.batch
            for phase in self.phases
        )


def epoch_batches(
    epochs: int, batch_size: int, batch_schedule: BatchPhases = ()
) -> tuple[int, ...]:
    """The batch (sequences per step) of each epoch: `batch_size`, or each phase's batch from epoch
    floor(f * epochs + 1/2) on."""
    batches = [batch_size] * epochs
    for fraction, batch in batch_schedule:
        for epoch in range(math.floor(fraction * epochs + 0.5), epochs):
            batches[epoch] = batch
    return tuple(batches)


def epoch_steps(
    sequences_per_epoch: int, epochs: int, batch_size: int, batch_schedule: BatchPhases = ()
) -> EpochSteps:
    """The steps of a run of `epochs` epochs of `sequences_per_epoch` sequences (epoch_batches)."""
    return EpochSteps(sequences_per_epoch, epoch_batches(epochs, batch_size, batch_schedule))
