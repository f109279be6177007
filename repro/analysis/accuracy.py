"""Downstream accuracy of tuned endpoints (Study.downstream, repro eval): the per-batch table and
the claim that accuracy follows validation loss."""

from __future__ import annotations

import math

import pandas as pd

from repro.analysis.intervals import Claim, claim_table

CHANCE = {"arc_easy": 0.25, "piqa": 0.5, "sciq": 0.25, "pool_continuation": 0.25}
"""Accuracy of a random guess per task (1 / number of choices)."""
Z90 = 1.645  # a 90% normal interval


def accuracy_per_batch(endpoints: pd.DataFrame, task: str, arm: str = "batch_size") -> pd.DataFrame:
    """Per model and arm (batch size, loader, ...): mean validation loss and accuracy over the
    endpoints (pools, other settings), and the accuracy's standard error: the mean of theirs, a
    conservative bound (the endpoints answer the same questions, so their errors correlate)."""
    acc, se = f"{task} acc", f"{task} acc_stderr"
    return (
        endpoints.groupby(["model", arm])
        .agg(
            val_loss=("val_loss", "mean"),
            acc=(acc, "mean"),
            acc_se=(se, "mean"),
        )
        .reset_index()
    )


def follows_loss_claim(
    endpoints: pd.DataFrame, task: str, model: str, arm: str = "batch_size"
) -> Claim:
    """At `model`: the accuracy of the arm (a batch size, or a loader, ...) with the lowest
    validation loss minus that of the arm with the highest, with a 90% interval. "agrees" when it
    is above 0, "disagrees" below; "undetermined" otherwise, or when the lower-loss arm is within
    noise of chance."""
    mine = endpoints[endpoints["model"] == model]
    table = accuracy_per_batch(mine, task, arm).set_index(arm)
    best, worst = table["val_loss"].idxmin(), table["val_loss"].idxmax()
    diff = table.loc[best, "acc"] - table.loc[worst, "acc"]
    half = Z90 * math.hypot(table.loc[best, "acc_se"], table.loc[worst, "acc_se"])
    chance = CHANCE.get(task)
    at_chance = (
        chance is not None and table.loc[best, "acc"] - chance < Z90 * table.loc[best, "acc_se"]
    )
    if at_chance:
        verdict = "undetermined"
    else:
        verdict = (
            "agrees" if diff - half > 0 else ("disagrees" if diff + half < 0 else "undetermined")
        )
    name = "batch " if arm == "batch_size" else ""
    measured = (
        f"{model}: accuracy of {name}{best} (lowest loss) - {name}{worst} (highest) "
        f"{diff:+.3f} [{diff - half:+.3f}, {diff + half:+.3f}]"
        + (f"; {name}{best} is within noise of chance ({chance:.2f})" if at_chance else "")
    )
    claim = "downstream accuracy follows validation loss"
    return Claim("accuracy-follows-loss", claim, "broadly, noisier", measured, verdict).at(task)


def with_accuracy_claims(
    claims: pd.DataFrame, endpoints: pd.DataFrame | None, tasks: list[str], model: str, arm: str
) -> pd.DataFrame:
    """`claims` and a follows_loss_claim row per task (`claims` alone without tasks)."""
    rows = [follows_loss_claim(endpoints, t, model, arm) for t in tasks]
    if not rows:
        return claims
    return pd.concat([claims, claim_table(rows)])


def ablation_accuracy(
    scored: dict[str, pd.DataFrame], arms: dict[str, list[str]], tasks: list[str]
) -> pd.DataFrame:
    """One row per ablation (name -> scored endpoints), arm (the values of its `arms` fields) and
    task: mean validation loss and accuracy over the arm's endpoints, and the mean of their
    standard errors (as accuracy_per_batch)."""
    rows = []
    for name, endpoints in scored.items():
        fields = arms[name]
        for task in tasks:
            for arm, group in endpoints.groupby(fields):
                se = group[f"{task} acc_stderr"]
                rows.append(
                    {
                        "ablation": name,
                        "arm": ", ".join(f"{f}={v}" for f, v in zip(fields, arm)),
                        "task": task,
                        "val_loss": group["val_loss"].mean(),
                        "acc": group[f"{task} acc"].mean(),
                        "acc_se": se.mean(),
                    }
                )
    return pd.DataFrame(rows)
