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

from itertools import combinations

import numpy as np
import pandas as pd
from scipy.special import logsumexp

from repro.analysis.confirmation import pooled_choice
from repro.analysis.intervals import Claim, describe, lower_verdict, t_interval
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
    """The batch of each of ROLES in `results` (02's sweep at one model), roles that share a batch
    under one name ("smallest and best batch"): the smallest and the largest batch size, and the
    one whose configuration has the lowest mean final loss over the selection replicates
    (confirmation.pooled_choice with the batch tuned)."""
    batches = sorted(results.runs["batch_size"].unique())
    best = pooled_choice(results, (*TUNED, "batch_size"))["batch_size"]
    roles: dict[int, list[str]] = {}
    for role, batch in zip(ROLES, [batches[0], batches[-1], best]):
        roles.setdefault(int(batch), []).append(role.removesuffix(" batch"))
    return {" and ".join(names) + " batch": batch for batch, names in roles.items()}


def _role(table: pd.DataFrame, word: str) -> str:
    """The role (ensemble_batches' name) of `table` that holds `word` ("best", "smallest")."""
    return next(role for role in dict.fromkeys(table["role"]) if word in role.split())


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


def overfitting_gaps(members: pd.DataFrame) -> pd.DataFrame:
    """Per role (rows) and pool (columns): the members' mean final validation minus training loss
    (nats/token), how much that batch over-fits on that pool."""
    gap = members.assign(gap=members["val_loss"] - members["train_loss"])
    return gap.pivot_table("gap", "role", "pool", aggfunc="mean")


def ensemble_table(members: pd.DataFrame, token_losses) -> pd.DataFrame:
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


def ensemble_claims(table: pd.DataFrame, gaps: pd.DataFrame) -> list[Claim]:
    """Kim et al.'s "an ensemble beats the single model" (at the best batch: the largest ensemble
    minus the single model, over pools) and "the ensemble's gain is larger at the batch that
    overfits more": of the smallest and the largest batch, the one whose members over-fit more
    (`gaps`: overfitting_gaps; its mean over pools larger), its gain minus the other's, paired by
    pool; undetermined unless that batch's gap is larger by an interval above 0 as well."""
    n = int(table["K"].max())
    beats = t_interval((-_gains(table, _role(table, "best"))).tolist())
    first = Claim(
        "ensemble-beats-single",
        f"an ensemble of {n} seeds beats the single model (best batch)",
        "Kim et al. 2025: an ensemble of independently trained models lowers the loss asymptote",
        describe(f"ensemble of {n} - single model:", beats),
        lower_verdict([beats]),
        beats,
    )
    ends = [_role(table, "smallest"), _role(table, "largest")]
    overfits, other = sorted(ends, key=lambda role: -gaps.loc[role].mean())
    gap = t_interval((gaps.loc[overfits] - gaps.loc[other]).tolist())
    gain = t_interval((_gains(table, overfits) - _gains(table, other)).dropna().tolist())
    verdict = lower_verdict([gain.negated()]) if gap.low > 0 else "undetermined"
    measured = (
        describe(f"gain at the {overfits} - at the {other}:", gain)
        + "; "
        + describe("its val - train gap minus the other's", gap)
    )
    second = Claim(
        "ensemble-gain-vs-overfitting",
        "the ensemble's gain is larger at the batch that overfits more",
        "Kim et al. 2025 (ensembles regularise); the seed paper: the smallest batch overfits",
        measured + ("" if gap.low > 0 else " (which batch over-fits more is not decided)"),
        verdict,
        gain,
    )
    return [first, second]
