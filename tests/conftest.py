"""Shared fixtures (the offline environment is set by the conftest.py at the project root)."""

import functools
import re
import signal
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from repro.analysis.results import MemoryDocuments, Results
from repro.data.build import PoolSpec, build_pool

SMALL_SYNTHETIC = PoolSpec(source="synthetic", tokens=30_000, val_tokens=5_000, vocab_size=300)


def _sigint_as_in_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="session")
def popen_as_in_a_terminal():
    """subprocess.Popen for a Ctrl-C test's child: it takes SIGINT as a terminal's process does,
    whatever this test process ignores (an xdist worker may ignore SIGINT; a child inherits it)."""
    return functools.partial(subprocess.Popen, preexec_fn=_sigint_as_in_a_terminal)


@pytest.fixture(scope="session")
def claim_tables() -> int:
    """How many claim tables (NN_..._claims) a full series writes, read off the notebooks."""
    notebooks = Path(__file__).resolve().parents[1] / "notebooks"
    text = "".join(path.read_text() for path in notebooks.glob("[0-9][0-9]_*.py"))
    return len(set(re.findall(r'save_claims\([^)]*"(\d\d_\w*claims)"\)', text)))


@pytest.fixture(scope="session")
def small_synthetic_spec():
    return SMALL_SYNTHETIC


@pytest.fixture(scope="session")
def synthetic_pool(tmp_path_factory):
    """A 30k-token synthetic pool (vocab 300), built once per test session."""
    return build_pool(
        SMALL_SYNTHETIC, tmp_path_factory.mktemp("pools") / "synthetic", progress=False
    )


@pytest.fixture(scope="session")
def stdlib_pool(tmp_path_factory):
    """A 60k-token stdlib pool (vocab 300), built once per test session."""
    spec = PoolSpec(source="stdlib", tokens=60_000, val_tokens=10_000, vocab_size=300)
    return build_pool(spec, tmp_path_factory.mktemp("pools") / "stdlib", progress=False)


class HandMadeSweep:
    """Runs with hand-made results: each run's per-document validation losses are a shared
    per-document difficulty plus the run's mean shift plus small per-run noise (nats/token), held
    in memory as the trainer stores them per evaluation (Results.documents)."""

    DOCS = 40
    TOKENS = np.full(DOCS, 100)
    DIFFICULTY = 0.3 * np.random.default_rng(0).standard_normal(DOCS)
    DIFFICULTY -= DIFFICULTY.mean()  # so that a run's mean loss is about its `loss`
    FIELDS = {
        "pool": "p0",
        "seed": 0,
        "model": "m",
        "batch_size": 4,
        "lr": 1e-3,
        "weight_decay": 0.1,
        "epochs": 4,
        "loader": "shuffle",
        "tie_embeddings": False,
        "embedding_weight_decay": 0.0,
        "schedule": "cosine",
        "status": "done",
    }

    def __init__(self):
        self.runs, self.evals, self.documents = [], [], {}
        self.count = 0

    def add(
        self, loss: float, train: float = 2.0, noise: float = 0.005, rid: str = "", **fields
    ) -> str:
        """One finished run (id `rid`, by default run<N>) whose final evaluation (step 100) has
        mean validation loss about `loss` and training loss `train`; `fields` override FIELDS."""
        self.count += 1
        rid = rid or f"run{self.count}"
        rng = np.random.default_rng(self.count)
        per_token = loss + self.DIFFICULTY + noise * rng.standard_normal(self.DOCS)
        self.documents[(rid, 100)] = (per_token * self.TOKENS, self.TOKENS)
        self.documents[(rid, 50)] = ((per_token + 0.2) * self.TOKENS, self.TOKENS)
        row = self.FIELDS | fields
        self.runs.append({"run_id": rid, **row})
        mean = float((per_token * self.TOKENS).sum() / self.TOKENS.sum())
        for step, epoch, val in ((50, row["epochs"] / 2, mean + 0.2), (100, row["epochs"], mean)):
            self.evals.append(
                {"run_id": rid, "step": step, "epoch": epoch, "val_loss": val, "train_loss": train}
            )
        return rid

    def results(self) -> Results:
        """Results of the runs added since the last call."""
        runs, evals = pd.DataFrame(self.runs), pd.DataFrame(self.evals)
        self.runs, self.evals = [], []
        return Results(runs, evals, MemoryDocuments(dict(self.documents)))


@pytest.fixture
def hand_made():
    """A fresh HandMadeSweep."""
    return HandMadeSweep()
