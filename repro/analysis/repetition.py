"""The value of a repeated token: Muennighoff et al.'s data-constrained law fitted to the study.

Muennighoff et al. 2023 ("Scaling Data-Constrained Language Models") count D tokens drawn from U
unique ones (R_D = D / U - 1 repetitions after the first epoch) as the fresh tokens

    D' = U + U R_D* (1 - exp(-R_D / R_D*)),

so that R_D* is the number of repetitions over which a repeated token's value decays by 1/e; they
fit R_D* ~ 15.4 (about 4 epochs are nearly as good as fresh data). Their loss law is
L = E + A / N'^alpha + B / D'^beta; within one of our fits the model size is fixed, so its term
joins E, and only the data terms are fitted. Per group (a batch size of 02, a recipe arm of 03) and
per replicate (a selection pool):

1. the fresh-data curve L(D) = E + B (D / U)^-beta, least squares on the tuned one-epoch losses of
   pools of D fresh tokens (repetition.fresh_multiples of the pool, D in units of U: `fit_fresh`);
2. R_D*, least squares over a log grid (`R_GRID`, repetitions) of the tuned loss at each epoch
   budget e (lr and weight decay tuned within the budget, held out as every endpoint is; then the
   best over the budgets up to e, as a study that may stop earlier has it), predicted as
   L(D'(R_D = e - 1)) (`fit_r_star`).

R_D* at the top of the grid: the repeated loss kept the fresh curve's pace (no decay measured, a
lower bound); at the bottom, the second epoch added nothing (an upper bound). A difference of log10
R_D* between groups is a t interval over the replicates; a bound only counts where it cannot
reverse the verdict (`r_star_verdict`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import optimize

from repro.analysis.analyses import batch_endpoints
from repro.analysis.intervals import Claim, Difference, describe, t_interval
from repro.analysis.results import Results

R_GRID = np.geomspace(0.01, 1000.0, 2001)
"""The R_D* values tried (repetitions, i.e. epochs after the first)."""
MUENNIGHOFF_R_STAR = 15.4  # Muennighoff et al. 2023's fitted R_D* (repetitions)


class FreshFit(NamedTuple):
    """L(D) = E + B (D / U)^-beta (nats/token; D / U: fresh tokens in units of the pool's) and the
    root-mean-square residual of its points (nats/token)."""

    E: float
    B: float
    beta: float
    rms: float

    def loss(self, data: np.ndarray) -> np.ndarray:
        """The predicted loss after `data` fresh tokens, in units of the pool's (D / U)."""
        return self.E + self.B * np.asarray(data, float) ** -self.beta


def fit_fresh(multiples: np.ndarray, losses: np.ndarray) -> FreshFit:
    """The fresh-data curve through one-epoch losses (nats/token) on pools of `multiples` x U
    tokens: least squares with E in [0, min loss), B > 0, beta in (0, 5]; from several starts,
    the best. Needs 3 or more distinct multiples."""
    x, y = np.asarray(multiples, float), np.asarray(losses, float)
    if len(np.unique(x)) < 3:
        raise ValueError("the fresh-data curve needs one-epoch losses at 3 or more pool sizes")

    def residuals(p: np.ndarray) -> np.ndarray:
        return p[0] + np.exp(p[1]) * x ** -p[2] - y

    low, high = [0.0, -20.0, 1e-3], [y.min() * (1 - 1e-9), 20.0, 5.0]
    best = None
    for e_share in (0.0, 0.5, 0.9):
        for beta in (0.1, 0.5, 1.5):
            e0 = e_share * y.min()
            b0 = np.log(max(float(np.interp(1.0, x[np.argsort(x)], y[np.argsort(x)])) - e0, 1e-6))
            fit = optimize.least_squares(residuals, [e0, b0, beta], bounds=(low, high))
            if best is None or fit.cost < best.cost:
                best = fit
    E, log_b, beta = best.x
    return FreshFit(float(E), float(np.exp(log_b)), float(beta), _rms(best.fun))


def effective_data(epochs: np.ndarray, r_star: np.ndarray) -> np.ndarray:
    """D' / U after `epochs` passes over U unique tokens with repetition constant `r_star`
    (broadcast): 1 + R* (1 - exp(-(epochs - 1) / R*))."""
    repetitions = np.asarray(epochs, float) - 1
    r_star = np.asarray(r_star, float)
    return 1 + r_star * -np.expm1(-repetitions / r_star)


class RStarFit(NamedTuple):
    """R_D* (repetitions), where it lies on R_GRID ("inside", "above": at the top, a lower bound;
    "below": at the bottom, an upper bound) and the rms residual of the budgets' losses."""

    r_star: float
    bound: str
    rms: float


def fit_r_star(fresh: FreshFit, epochs: np.ndarray, losses: np.ndarray) -> RStarFit:
    """R_D* by least squares over R_GRID of the losses (nats/token) at `epochs` budgets (those
    above 1 count: one epoch is fresh data whatever R_D*) against fresh.loss(D')."""
    e, y = np.asarray(epochs, float), np.asarray(losses, float)
    keep = e > 1
    if not keep.any():
        raise ValueError("R_D* needs a loss at some budget above one epoch")
    predicted = fresh.loss(effective_data(e[keep][None, :], R_GRID[:, None]))
    errors = ((predicted - y[keep][None, :]) ** 2).mean(1)
    i = int(np.argmin(errors))
    bound = "above" if i == len(R_GRID) - 1 else "below" if i == 0 else "inside"
    return RStarFit(float(R_GRID[i]), bound, float(np.sqrt(errors[i])))


def _rms(residuals: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(residuals))))


def fresh_points(
    fresh: dict[float, Results], fresh_pools: dict[float, list], pools: list
) -> pd.DataFrame:
    """The tuned one-epoch loss (held out: analyses.batch_endpoints) per pool seed, batch size and
    fresh multiple: rows of pool (the seed's pool of `pools`, whose replicate it is), batch_size,
    multiple, val_loss. `fresh`: the Results of each multiple's runs; `fresh_pools`: each
    multiple's pools, in the order of `pools`."""
    frames = []
    for multiple, results in sorted(fresh.items()):
        replicate = {str(f): str(p) for f, p in zip(fresh_pools[multiple], pools)}
        ends = batch_endpoints(results)
        frames.append(
            ends.assign(pool=ends["pool"].map(replicate), multiple=multiple)[
                ["pool", "batch_size", "multiple", "val_loss"]
            ]
        )
    return pd.concat(frames, ignore_index=True).dropna(subset=["val_loss"])


def budget_points(
    results: Results, cap: float | None, arm_fields: tuple[str, ...] = ()
) -> pd.DataFrame:
    """The tuned loss at each epoch budget (lr and weight decay tuned within it, held out:
    analyses.batch_endpoints; study's `cap`, epochs): rows of pool, batch_size, epochs, val_loss
    and steps_per_epoch (optimizer steps), and with `arm_fields` (of ARM_WORDS) an `arm` column
    naming each recipe arm by them ("repack", "tied, emb. wd 1")."""
    ends = batch_endpoints(results, ["epochs", *arm_fields], cap=cap)
    if arm_fields:
        words = ends[list(arm_fields)].apply(
            lambda row: ", ".join(ARM_WORDS[k](v) for k, v in row.items()), axis=1
        )
        ends = ends.assign(arm=words)
    steps = results.runs.set_index("run_id")["steps_per_epoch"]
    ends = ends.assign(steps_per_epoch=ends["run_id"].map(steps))
    keep = ["pool", "batch_size", *(["arm"] if arm_fields else []), "epochs", "val_loss"]
    return ends[[*keep, "steps_per_epoch"]].dropna(subset=["val_loss"])


ARM_WORDS = {
    "loader": str,
    "tie_embeddings": lambda tied: "tied" if tied else "untied",
    "embedding_weight_decay": lambda decay: f"emb. wd {decay:g}",
}
"""How a recipe arm's run fields read in its name (budget_points)."""


def best_so_far(budgets: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """`budgets` (rows of by + epochs + val_loss: the tuned loss at each budget) with val_loss
    replaced by the lowest at that budget or a smaller one, within each group of `by`."""
    ordered = budgets.sort_values([*by, "epochs"])
    best = ordered.groupby(by, sort=False)["val_loss"].cummin()
    return ordered.assign(val_loss=best)


def r_star_table(fresh: pd.DataFrame, budgets: pd.DataFrame, group: str) -> pd.DataFrame:
    """One row per `group` value x replicate (pool): the fresh curve fitted to `fresh` (rows of
    pool, batch_size, multiple, val_loss) at the group's batch and R_D* to `budgets` (rows of
    pool, batch_size, `group`, epochs, val_loss, steps_per_epoch: tuned loss per budget;
    best_so_far is applied): E, B, beta, fresh_rms, r_star, bound, rms, n_fresh, n_budgets, the
    fresh tokens D'/U that the fit credits at the largest budget, whether that lies beyond the
    largest fresh pool measured (`extrapolated`: the fresh curve is extrapolated there) and the
    optimizer steps of the largest budget (a batch of few steps may be limited by its steps, not
    its data). A group without 3 fresh points or a budget above 1 is left out."""
    rows = []
    curves = best_so_far(budgets, [group, "pool"])
    for (value, pool), points in curves.groupby([group, "pool"], sort=True):
        batch = points["batch_size"].iloc[0]
        mine = fresh[(fresh["pool"] == pool) & (fresh["batch_size"] == batch)]
        if mine["multiple"].nunique() < 3 or not (points["epochs"] > 1).any():
            continue
        curve = fit_fresh(mine["multiple"].to_numpy(), mine["val_loss"].to_numpy())
        r = fit_r_star(curve, points["epochs"].to_numpy(), points["val_loss"].to_numpy())
        largest = points["epochs"].max()
        reach = float(effective_data(largest, r.r_star))
        rows.append(
            {group: value, "pool": pool, "batch_size": batch}
            | {"E": curve.E, "B": curve.B, "beta": curve.beta, "fresh_rms": curve.rms}
            | {"r_star": r.r_star, "bound": r.bound, "rms": r.rms}
            | {"n_fresh": len(mine), "n_budgets": len(points)}
            | {"D'/U at the largest budget": reach, "extrapolated": reach > mine["multiple"].max()}
            | {"steps at the largest budget": largest * points["steps_per_epoch"].mean()}
        )
    columns = [group, "pool", "batch_size", "E", "B", "beta", "fresh_rms", "r_star", "bound"]
    columns += ["rms", "n_fresh", "n_budgets", "D'/U at the largest budget", "extrapolated"]
    columns += ["steps at the largest budget"]
    return pd.DataFrame(rows, columns=list(dict.fromkeys(columns)))


def r_star_summary(table: pd.DataFrame, group: str) -> pd.DataFrame:
    """Per `group` value: R_D* as the geometric mean over replicates with the LEVEL t interval of
    log10 R_D* turned back into repetitions (`low`, `high`), the replicates' values, how many sit
    at a bound of R_GRID and how many rest on the fresh curve extrapolated (r_star_table), and the
    optimizer steps of the largest budget."""
    rows = []
    for value, fits in table.groupby(group, sort=True):
        logs = t_interval(np.log10(fits["r_star"]).tolist())
        rows.append(
            {
                group: value,
                "R_D*": 10**logs.value,
                "low": 10**logs.low,
                "high": 10**logs.high,
                "replicates": ", ".join(f"{r:.3g}" for r in fits["r_star"]),
                "at a bound": int((fits["bound"] != "inside").sum()),
                "extrapolated": int(fits["extrapolated"].sum()),
                "steps at the largest budget": round(fits["steps at the largest budget"].mean()),
                "n": len(fits),
            }
        )
    return pd.DataFrame(rows)


def spread_title(summary: pd.DataFrame, group: str, noun: str) -> str:
    """A figure title stating where R_D* (r_star_summary) is lowest and highest over `group`."""
    low, high = summary.loc[summary["R_D*"].idxmin()], summary.loc[summary["R_D*"].idxmax()]
    return (
        f"R_D* from {low['R_D*']:.3g} ({noun} {low[group]}) to {high['R_D*']:.3g} "
        f"({noun} {high[group]}); Muennighoff et al.: {MUENNIGHOFF_R_STAR}"
    )


def log_ratio(table: pd.DataFrame, group: str, first, second) -> tuple[Difference, tuple]:
    """log10 R_D*(first) - log10 R_D*(second), paired by replicate (pool), with its t interval,
    and each arm's bounds (the set of R_GRID bounds its replicates hit)."""
    one = table[table[group] == first].set_index("pool")
    two = table[table[group] == second].set_index("pool")
    pools = sorted(set(one.index) & set(two.index))
    diffs = np.log10(one.loc[pools, "r_star"]) - np.log10(two.loc[pools, "r_star"])
    bounds = (set(one.loc[pools, "bound"]) - {"inside"}, set(two.loc[pools, "bound"]) - {"inside"})
    return t_interval(diffs.tolist()), bounds


def r_star_verdict(diff: Difference, bounds: tuple[set, set]) -> str:
    """For a claim that `diff` (log10 R*(first) - log10 R*(second)) is positive: "agrees" when its
    interval lies above 0, "disagrees" when below, else "undetermined", and fewer than
    MIN_REPLICATES replicates are undetermined. A replicate at a bound reports a bound, not a value:
    it blocks only the verdicts it could reverse (first above or second below: the true
    difference may be larger, which blocks "disagrees"; first below or second above blocks
    "agrees")."""
    if not diff.decisive:
        return "undetermined"
    first, second = bounds
    may_be_larger = "above" in first or "below" in second
    may_be_smaller = "below" in first or "above" in second
    if diff.low > 0 and not may_be_smaller:
        return "agrees"
    if diff.high < 0 and not may_be_larger:
        return "disagrees"
    return "undetermined"


def r_star_claim(table: pd.DataFrame) -> Claim:
    """ "Smaller batches keep repeated tokens valuable for longer (larger R_D*)": log10 R_D* at
    the smallest batch minus at the largest (a table of r_star_table by batch_size)."""
    batches = sorted(table["batch_size"].unique())
    text = "smaller batches keep repeated tokens valuable for longer (larger R_D*)"
    paper = (
        "the seed paper: small batches regularise multi-epoch training; Muennighoff et al.: "
        f"R_D* = {MUENNIGHOFF_R_STAR} at one batch"
    )
    if len(batches) < 2:
        return Claim("r-star-vs-batch", text, paper, "needs two batch sizes", "undetermined")
    small, large = batches[0], batches[-1]
    diff, bounds = log_ratio(table, "batch_size", small, large)
    notes = [
        f"batch {b} at the grid's {'top' if 'above' in s else 'bottom'}"
        for b, s in zip((small, large), bounds)
        if s
    ]
    for b in (small, large):
        mine = table[table["batch_size"] == b]
        if mine["extrapolated"].any():
            steps = mine["steps at the largest budget"].mean()
            notes.append(f"batch {b}: fresh curve extrapolated, {steps:,.0f} steps in all")
    measured = describe(f"log10 R_D*, batch {small} - batch {large}:", diff, "+.2f") + (
        f" ({'; '.join(notes)})" if notes else ""
    )
    return Claim("r-star-vs-batch", text, paper, measured, r_star_verdict(diff, bounds), diff)
