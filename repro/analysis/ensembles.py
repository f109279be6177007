"""Ensembles of a tuned configuration's seeds on one pool (Kim et al. 2025, "Pre-training under
infinite compute"), at the smallest, the largest and the best batch.

An ensemble of K members predicts the mean of their next-token distributions, so its loss on a
token is -log(mean_k p_k), p_k = exp(-loss_k) the probability member k gives the true token: the
members' per-token losses (run field token_losses, RUN/val_docs/token-losses.npy) are all it
needs. `ensemble_curve` averages over every K-member subset of the N members (the expected loss of
an ensemble of K of them), K = 1 ... N; K = 1 is the mean single model. Members differ in seed
(initialisation and data order) only; each pool is a replicate (its own training and validation
documents: a confirmation pool), so intervals are t intervals over the pools.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations

import numpy as np
import pandas as pd
from scipy.special import logsumexp

from repro.analysis.confirmation import pooled_choice
from repro.analysis.intervals import Claim, Difference, describe, lower_verdict, t_interval
from repro.analysis.results import TUNED, Results

ROLES = ("smallest batch", "largest batch", "best batch")
"""The batches whose tuned configurations are ensembled (ensemble_batches)."""


def ensemble_loss(token_losses: np.ndarray) -> float:
    """The mean loss (nats/token) of the ensemble of the members whose per-token losses are the
    rows of `token_losses` (members x tokens): the mean over tokens of -log(mean_k exp(-loss))."""
    losses = np.asarray(token_losses, float)
    log_mean_p = logsumexp(-losses, axis=0) - np.log(len(losses))
    return float(-log_mean_p.mean())


def ensemble_curve(token_losses: np.ndarray) -> np.ndarray:
    """The expected ensemble loss (nats/token) of K = 1 ... N of the N members (rows of
    `token_losses`): ensemble_loss averaged over every K-member subset."""
    n = len(token_losses)
    return np.array(
        [
            np.mean([ensemble_loss(token_losses[list(s)]) for s in combinations(range(n), k)])
            for k in range(1, n + 1)
        ]
    )


def ensemble_batches(results: Results) -> dict[str, int]:
    """The batch (sequences) of each of ROLES in `results` (02's sweep at one model), roles that
    share a batch under one name ("smallest and best batch"): the smallest and the largest batch
    size, and the one whose configuration has the lowest mean final loss over the selection
    replicates (confirmation.pooled_choice with the batch tuned)."""
    batches = sorted(results.runs["batch_size"].unique())
    best = pooled_choice(results, (*TUNED, "batch_size"))["batch_size"]
    roles: dict[int, list[str]] = {}
    for role, batch in zip(ROLES, [batches[0], batches[-1], best]):
        roles.setdefault(int(batch), []).append(role.removesuffix(" batch"))
    return {" and ".join(names) + " batch": batch for batch, names in roles.items()}


def _role(roles, word: str) -> str:
    """The role (ensemble_batches' name) among `roles` that holds `word` ("best", "smallest")."""
    return next(role for role in dict.fromkeys(roles) if word in role.split())


def overfitting_order(
    endpoints: pd.DataFrame, batches: dict[str, int]
) -> tuple[str, str, Difference]:
    """Of the smallest and the largest batch (`batches`: ensemble_batches), which over-fits more,
    judged on the selection pools, not on the ensembles' pools: from 02's held-out endpoints
    (analyses.batch_endpoints: val_loss and train_loss per pool and batch, nats/token), the
    validation minus training loss gap. (the role that over-fits more, the other, its gap minus
    the other's, paired by pool, with its held-out t interval)."""
    small, large = _role(batches, "smallest"), _role(batches, "largest")
    gaps = endpoints.assign(gap=endpoints["val_loss"] - endpoints["train_loss"])
    by_pool = gaps.pivot_table("gap", "pool", "batch_size")
    diff = t_interval((by_pool[batches[small]] - by_pool[batches[large]]).tolist(), held_out=True)
    return (small, large, diff) if diff.value >= 0 else (large, small, diff.negated())


def member_rows(members: dict[str, Results]) -> pd.DataFrame:
    """One row per ensemble member of each role (`members`: role -> the Results of its runs):
    role, batch_size, pool, seed, run_id and the final val_loss and train_loss (nats/token)."""
    frames = []
    for role, results in members.items():
        finals = results.evals.sort_values("step").groupby("run_id")[["val_loss", "train_loss"]]
        runs = results.runs[["run_id", "batch_size", "pool", "seed"]]
        frames.append(runs.join(finals.last(), on="run_id").assign(role=role))
    columns = ["role", "batch_size", "pool", "seed", "run_id", "val_loss", "train_loss"]
    return pd.concat(frames, ignore_index=True)[columns]


def ensemble_table(
    members: pd.DataFrame, token_losses: Callable[[str], np.ndarray]
) -> pd.DataFrame:
    """One row per role x pool x K: `members` (rows of role, batch_size, pool, seed, run_id) with
    `token_losses(run_id)` -> that member's per-token losses; columns role, batch_size, pool, K,
    loss (ensemble_curve, nats/token)."""
    rows = []
    for (role, batch, pool), group in members.groupby(["role", "batch_size", "pool"], sort=False):
        stacked = np.stack([token_losses(rid) for rid in group.sort_values("seed")["run_id"]])
        for k, loss in enumerate(ensemble_curve(stacked), start=1):
            rows.append({"role": role, "batch_size": batch, "pool": pool, "K": k, "loss": loss})
    return pd.DataFrame(rows)


def ensemble_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per role x K: the mean ensemble loss over pools with its t interval (`low`, `high`), and
    the gain over the single model (K = 1 minus K, mean over pools, with its interval)."""
    single = table[table["K"] == 1].set_index(["role", "pool"])["loss"]
    rows = []
    for (role, batch, k), group in table.groupby(["role", "batch_size", "K"], sort=False):
        loss = t_interval(group["loss"].tolist())
        gains = single.loc[[(role, p) for p in group["pool"]]].to_numpy() - group["loss"].to_numpy()
        gain = t_interval(gains.tolist())
        rows.append(
            {"role": role, "batch_size": batch, "K": k, "loss": loss.value, "low": loss.low}
            | {"high": loss.high, "gain": gain.value, "gain low": gain.low}
            | {"gain high": gain.high, "pools": len(group)}
        )
    return pd.DataFrame(rows)


def _gains(table: pd.DataFrame, role: str) -> pd.Series:
    """Per pool: the single model's loss minus the largest ensemble's, at `role`."""
    mine = table[table["role"] == role]
    by_k = mine.pivot_table("loss", "pool", "K")
    return by_k[by_k.columns.min()] - by_k[by_k.columns.max()]


def ensemble_claims(
    table: pd.DataFrame, members: pd.DataFrame, order: tuple[str, str, Difference]
) -> list[Claim]:
    """Kim et al.'s "an ensemble beats the single model": at the best batch, the largest ensemble
    minus the best of its members on each pool (that member chosen on the pool's own documents:
    the single model at its most favoured, where the ensemble's edge over the mean member would
    hold by Jensen's inequality alone); and "the ensemble's gain is larger at the batch that
    overfits more": of the smallest and the largest batch, the one that over-fits more (`order`:
    overfitting_order, decided on the selection pools), its gain (single model minus the largest
    ensemble, table) minus the other's, paired by pool; undetermined unless the order itself is
    decided (its interval above 0). `members`: member_rows."""
    n = int(table["K"].max())
    best = _role(table["role"], "best")
    ensemble = table[(table["role"] == best) & (table["K"] == n)].set_index("pool")["loss"]
    single = members[members["role"] == best].groupby("pool")["val_loss"].min()
    beats = t_interval((ensemble - single[ensemble.index]).tolist())
    first = Claim(
        "ensemble-beats-single",
        f"an ensemble of {n} seeds beats the best of its members (best batch)",
        "Kim et al. 2025: an ensemble of independently trained models lowers the loss asymptote",
        describe(f"ensemble of {n} - best member:", beats),
        lower_verdict([beats]),
        beats,
    )
    overfits, other, gap = order
    gain = t_interval((_gains(table, overfits) - _gains(table, other)).dropna().tolist())
    decided = gap.decisive and gap.low > 0
    measured = (
        describe(f"gain at the {overfits} - at the {other}:", gain)
        + "; "
        + describe("its val - train gap minus the other's on the selection pools", gap)
    )
    second = Claim(
        "ensemble-gain-vs-overfitting",
        "the ensemble's gain is larger at the batch that overfits more",
        "Kim et al. 2025 (ensembles regularise); the seed paper: the smallest batch overfits",
        measured + ("" if decided else " (which batch over-fits more is not decided)"),
        lower_verdict([gain.negated()]) if decided else "undetermined",
        gain,
    )
    return [first, second]
