"""The data pools of notebook 01: statistics per pool and split, shared training documents and
identical validation sets between pools, validation documents found in training, and the data
section's claims, each measured exactly (a count, no sampling); and what other notebooks read off
a pool (the Bayes floor, the vocabulary size, the training tokens).

Units: documents and tokens of the pool's tokenizer; losses in nats/token (EOS counted).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from repro.analysis.intervals import Claim, claim_table
from repro.data.pool import load_pool
from repro.design.presets import pool_label


def _exact(ok: bool) -> str:
    """The verdict of a claim measured exactly (a count, no sampling)."""
    return "agrees" if ok else "disagrees"


# --- pools --------------------------------------------------------------------------------------


def pool_table(paths: list[str | Path]) -> pd.DataFrame:
    """One row per pool (named by pool_label) and split: documents, tokens, document length, and
    the Bayes floor if known."""
    rows = []
    for path in paths:
        meta = load_pool(path).meta
        for split, stats in meta["splits"].items():
            rows.append(
                {
                    "pool": pool_label(path),
                    "seed": meta["seed"],
                    "split": split,
                    "docs": stats["docs"],
                    "tokens": stats["tokens"],
                    "mean doc": round(stats["mean_doc_tokens"], 1),
                    "median doc": stats["median_doc_tokens"],
                    "Bayes floor (nats/token)": stats.get("bayes_floor_nats_per_token"),
                }
            )
    table = pd.DataFrame(rows)
    return table.dropna(axis=1, how="all")


def pool_overlap(paths: list[str | Path]) -> pd.DataFrame:
    """Shared training documents between pools (as token sequences) and whether validation sets
    are identical."""
    pools = [load_pool(p) for p in paths]
    docs = [{pool.train.doc(i).tobytes() for i in range(pool.train.n_docs)} for pool in pools]
    rows = []
    for i in range(len(pools)):
        for j in range(i + 1, len(pools)):
            rows.append(
                {
                    "pool a": pool_label(paths[i]),
                    "pool b": pool_label(paths[j]),
                    "shared train docs": len(docs[i] & docs[j]),
                    "train docs a": len(docs[i]),
                    "identical val": bool(np.array_equal(pools[i].val.tokens, pools[j].val.tokens)),
                }
            )
    return pd.DataFrame(rows)


def bayes_floor(path: str | Path) -> float | None:
    """The validation split's Bayes-optimal loss (nats/token, EOS counted) of a pool, where the
    source knows it (synthetic); None otherwise."""
    return load_pool(path).meta["splits"]["val"].get("bayes_floor_nats_per_token")


def pool_vocab_size(path: str | Path) -> int:
    """The vocabulary size of a pool's tokenizer."""
    return int(load_pool(path).meta["vocab_size"])


def train_tokens(paths: list[str | Path]) -> dict[str, int]:
    """Training tokens per pool path (as a string, the runs' `pool` field)."""
    return {str(path): load_pool(path).meta["splits"]["train"]["tokens"] for path in paths}


def train_val_shared_docs(paths: list[str | Path]) -> list[int]:
    """Per pool, how many validation documents (as token sequences) also appear in its training
    split."""
    shared = []
    for path in paths:
        pool = load_pool(path)
        train = {pool.train.doc(i).tobytes() for i in range(pool.train.n_docs)}
        shared.append(sum(pool.val.doc(i).tobytes() in train for i in range(pool.val.n_docs)))
    return shared


def pool_claims(overlap: pd.DataFrame, leaks: list[int]) -> pd.DataFrame:
    """Claims of the data section. `overlap`: pool_overlap(pools); `leaks`:
    train_val_shared_docs(pools)."""
    identical = bool(overlap["identical val"].all())
    shared, total = overlap["shared train docs"], overlap["train docs a"]
    claims = [
        Claim(
            "val-not-in-train",
            "no validation document contributes to training",
            "yes (document-level split)",
            f"validation documents found in training: {leaks} (exact count)",
            _exact(sum(leaks) == 0),
        ),
        Claim(
            "pools-share-val",
            "independent pools share the validation set",
            "yes (fixed held-out set)",
            f"identical val: {identical} (exact)",
            _exact(identical),
        ),
        Claim(
            "pools-differ-in-train",
            "independent pools differ in training documents",
            "yes",
            f"shared train docs: {shared.tolist()} of {total.tolist()} (exact count)",
            _exact(bool((shared < total).all())),
        ),
    ]
    return claim_table(claims)
