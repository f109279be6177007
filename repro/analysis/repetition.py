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
   budget e (lr, weight decay and the budget chosen among those up to e, held out as every
   endpoint is: `budget_points`), predicted as L(D'(R_D = e - 1)) (`fit_r_star`).

R_D* at the top of the grid: the repeated loss kept the fresh curve's pace (no decay measured); at
the bottom, the second epoch added nothing; where D' at the largest budget lies beyond the largest
fresh pool, R_D* rests on the fresh curve extrapolated. None of these is a measurement
(`identified`), and the claim compares only batches whose R_D* is measured. A difference of
log10 R_D* between batches is a t interval over the replicates, widened for their held-out
choices (intervals.t_interval).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import optimize

from repro.analysis.analyses import batch_endpoints
from repro.analysis.intervals import Claim, Difference, describe, lower_verdict, t_interval
from repro.analysis.results import Results
from repro.errors import ReproError

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
    return FreshFit(
        float(E), float(np.exp(log_b)), float(beta), float(np.sqrt(2 * best.cost / len(y)))
    )


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


def fresh_points(
    fresh: dict[float, Results], fresh_pools: dict[float, list[Path]], pools: list[Path]
) -> pd.DataFrame:
    """The tuned one-epoch loss (held out: analyses.batch_endpoints) per pool seed, batch size and
    fresh multiple: rows of pool (the seed's pool of `pools`, whose replicate it is), batch_size,
    multiple, val_loss. `fresh`: the Results of each multiple's runs; `fresh_pools`: each
    multiple's pools, in the order of `pools`."""
    frames = []
    for multiple, results in sorted(fresh.items()):
        replicate = {str(f): str(p) for f, p in zip(fresh_pools[multiple], pools)}
        ends = batch_endpoints(results)
        unknown = sorted(set(ends["pool"]) - set(replicate))
        if unknown:
            raise ReproError(f"fresh run on {unknown[0]}, not one of the fresh pools given")
        frames.append(
            ends.assign(pool=ends["pool"].map(replicate), multiple=multiple)[
                ["pool", "batch_size", "multiple", "val_loss"]
            ]
        )
    return pd.concat(frames, ignore_index=True).dropna(subset=["val_loss"])


ARM_WORDS = {
    "loader": str,
    "tie_embeddings": lambda tied: "tied" if tied else "untied",
    "embedding_weight_decay": lambda decay: f"emb. wd {decay:g}",
}
"""How a recipe arm's run fields read in its name (budget_points)."""


def budget_points(
    results: Results, cap: float | None, arm_fields: tuple[str, ...] = ()
) -> pd.DataFrame:
    """At each epoch budget e, the tuned loss over the budgets up to e: lr, weight decay and the
    budget itself chosen held out (analyses.batch_endpoints over the runs of at most e epochs,
    the study's `cap`), so that no minimum over noisy budgets is taken on the documents it
    reports. Rows of pool, batch_size, epochs (e), val_loss (nats/token), steps_per_epoch
    (optimizer steps), and with `arm_fields` (of ARM_WORDS) an `arm` column naming each recipe arm
    by them and its batch ("repack, batch 2")."""
    steps = results.runs.set_index("run_id")["steps_per_epoch"]
    frames = []
    for budget in sorted(results.runs["epochs"].unique()):
        upto = results.subset(results.runs["epochs"] <= budget)
        ends = batch_endpoints(upto, list(arm_fields), cap=cap).drop(columns="epochs")
        frames.append(ends.assign(epochs=budget, steps_per_epoch=ends["run_id"].map(steps)))
    ends = pd.concat(frames, ignore_index=True)
    if arm_fields:
        words = ends[[*arm_fields, "batch_size"]].apply(
            lambda row: (
                ", ".join(ARM_WORDS[k](row[k]) for k in arm_fields) + f", batch {row['batch_size']}"
            ),
            axis=1,
        )
        ends = ends.assign(arm=words)
    keep = ["pool", "batch_size", *(["arm"] if arm_fields else []), "epochs", "val_loss"]
    return ends[[*keep, "steps_per_epoch"]].dropna(subset=["val_loss"])


def r_star_table(fresh: pd.DataFrame, budgets: pd.DataFrame, group: str) -> pd.DataFrame:
    """One row per `group` value x replicate (pool): the fresh curve fitted to `fresh` (rows of
    pool, batch_size, multiple, val_loss) at the group's batch and R_D* to `budgets`
    (budget_points: pool, batch_size, `group`, epochs, val_loss, steps_per_epoch; a pool's seeds
    averaged): E, B, beta, fresh_rms, r_star, bound, rms, `offset at 1 epoch` (the repeated
    curve's one-epoch loss minus the fresh curve's at D = U, nats/token: a level the law does not
    fit), n_fresh, n_budgets, the fresh tokens D'/U that the fit credits at the largest budget,
    whether that lies beyond the largest fresh pool (`extrapolated`) and the optimizer steps of
    the largest budget (a batch of few steps may be limited by its steps, not its data). A group
    without 3 fresh pool sizes or a budget above 1 epoch is left out."""
    keys = list(dict.fromkeys([group, "pool", "batch_size", "epochs"]))
    budgets = budgets.groupby(keys, as_index=False)[["val_loss", "steps_per_epoch"]].mean()
    fresh = fresh.groupby(["pool", "batch_size", "multiple"], as_index=False)["val_loss"].mean()
    rows = []
    for (value, pool), points in budgets.groupby([group, "pool"], sort=True):
        batch = points["batch_size"].iloc[0]
        own = fresh[(fresh["pool"] == pool) & (fresh["batch_size"] == batch)]
        if own["multiple"].nunique() < 3 or not (points["epochs"] > 1).any():
            continue
        curve = fit_fresh(own["multiple"].to_numpy(), own["val_loss"].to_numpy())
        r = fit_r_star(curve, points["epochs"].to_numpy(), points["val_loss"].to_numpy())
        largest = points["epochs"].max()
        reach = float(effective_data(largest, r.r_star))
        one_epoch = points.loc[points["epochs"] == 1, "val_loss"]
        rows.append(
            {group: value, "pool": pool, "batch_size": batch}
            | {"E": curve.E, "B": curve.B, "beta": curve.beta, "fresh_rms": curve.rms}
            | {"r_star": r.r_star, "bound": r.bound, "rms": r.rms}
            | {"offset at 1 epoch": float(one_epoch.mean() - curve.loss(1.0))}
            | {"n_fresh": len(own), "n_budgets": len(points)}
            | {"D'/U at the largest budget": reach, "extrapolated": reach > own["multiple"].max()}
            | {"steps at the largest budget": largest * points["steps_per_epoch"].mean()}
        )
    columns = [group, "pool", "batch_size", "E", "B", "beta", "fresh_rms", "r_star", "bound"]
    columns += ["rms", "offset at 1 epoch", "n_fresh", "n_budgets"]
    columns += ["D'/U at the largest budget", "extrapolated", "steps at the largest budget"]
    return pd.DataFrame(rows, columns=list(dict.fromkeys(columns)))


def identified(fits: pd.DataFrame) -> bool:
    """Whether the R_D* of these replicates (rows of r_star_table) is measured: every one inside
    R_GRID and none resting on the fresh curve extrapolated."""
    return bool((fits["bound"] == "inside").all() and not fits["extrapolated"].any())


def r_star_summary(table: pd.DataFrame, group: str) -> pd.DataFrame:
    """Per `group` value: R_D* as the geometric mean over replicates with the LEVEL t interval of
    log10 R_D* (held out: each replicate's budgets were chosen on the others) turned back into
    repetitions (`low`, `high`), the replicates' values, how many sit at a bound of R_GRID
    (R_GRID's top reads as "> 1000"), how many rest on the fresh curve extrapolated, whether the
    value is measured (identified) and the optimizer steps of the largest budget."""
    rows = []
    for value, fits in table.groupby(group, sort=True):
        logs = t_interval(np.log10(fits["r_star"]).tolist(), held_out=True)
        rows.append(
            {
                group: value,
                "R_D*": 10**logs.value,
                "low": 10**logs.low,
                "high": 10**logs.high,
                "replicates": ", ".join(map(_r_star_text, fits["r_star"], fits["bound"])),
                "at a bound": int((fits["bound"] != "inside").sum()),
                "extrapolated": int(fits["extrapolated"].sum()),
                "measured": identified(fits),
                "steps at the largest budget": round(fits["steps at the largest budget"].mean()),
                "n": len(fits),
            }
        )
    return pd.DataFrame(rows)


def _r_star_text(r_star: float, bound: str) -> str:
    """An R_D* value as a table shows it: a bound of R_GRID as "> 1000" or "< 0.01"."""
    return {"above": f"> {R_GRID[-1]:g}", "below": f"< {R_GRID[0]:g}"}.get(bound, f"{r_star:.3g}")


def spread_title(summary: pd.DataFrame, group: str, noun: str) -> str:
    """A figure title stating where R_D* (r_star_summary) is lowest and highest over `group`
    among the values no replicate of which sits at a bound of R_GRID, and naming those that do."""
    inside = summary[summary["at a bound"] == 0]
    bounded = ", ".join(str(v) for v in summary.loc[summary["at a bound"] > 0, group])
    note = f"\n{noun} {bounded}: a replicate at the grid's bound, not ranked" if bounded else ""
    if inside.empty:
        return f"R_D* at the grid's bound for every {noun}"
    low, high = inside["R_D*"].idxmin(), inside["R_D*"].idxmax()  # rows: a group keeps its type
    return (
        f"R_D* from {inside.at[low, 'R_D*']:.3g} ({noun} {inside.at[low, group]}) to "
        f"{inside.at[high, 'R_D*']:.3g} ({noun} {inside.at[high, group]}){note}"
    )


def log_ratio(table: pd.DataFrame, first: int, second: int) -> Difference:
    """log10 R_D*(batch `first`) - log10 R_D*(batch `second`), paired by replicate (pool), with
    its held-out t interval (each replicate's budgets were chosen on the others)."""
    one = table[table["batch_size"] == first].set_index("pool")["r_star"]
    two = table[table["batch_size"] == second].set_index("pool")["r_star"]
    pools = sorted(set(one.index) & set(two.index))
    return t_interval((np.log10(one[pools]) - np.log10(two[pools])).tolist(), held_out=True)


def r_star_claim(table: pd.DataFrame) -> Claim:
    """ "Smaller batches keep repeated tokens valuable for longer (larger R_D*)": log10 R_D* at the
    smallest minus at the largest batch whose R_D* is measured (identified: a value at a bound of
    the grid, or resting on the fresh curve extrapolated, is no measurement), in a table of
    r_star_table by batch_size; agrees when the interval lies above 0, disagrees when below."""
    text = "smaller batches keep repeated tokens valuable for longer (larger R_D*)"
    paper = (
        "the seed paper: small batches regularise multi-epoch training; Muennighoff et al.: "
        f"R_D* = {MUENNIGHOFF_R_STAR} at one batch"
    )
    batches = sorted(table["batch_size"].unique())
    measured = [b for b in batches if identified(table[table["batch_size"] == b])]
    left_out = [_why_not(table[table["batch_size"] == b], b) for b in batches if b not in measured]
    note = f" (left out: {'; '.join(left_out)})" if left_out else ""
    if len(measured) < 2:
        return Claim(
            "r-star-vs-batch",
            text,
            paper,
            f"R_D* measured at fewer than two batches{note}",
            "undetermined",
        )
    small, large = measured[0], measured[-1]
    diff = log_ratio(table, small, large)
    described = describe(f"log10 R_D*, batch {small} - batch {large}:", diff, "+.2f")
    return Claim(
        "r-star-vs-batch", text, paper, described + note, lower_verdict([diff.negated()]), diff
    )


def _why_not(fits: pd.DataFrame, batch: int) -> str:
    """Why batch `batch`'s R_D* is not measured (identified), with its steps in all."""
    steps = fits["steps at the largest budget"].mean()
    bounds = int((fits["bound"] != "inside").sum())
    extrapolated = int(fits["extrapolated"].sum())
    reasons = [f"{bounds} of {len(fits)} at the grid's bound"] if bounds else []
    reasons += [f"{extrapolated} of {len(fits)} extrapolated"] if extrapolated else []
    return f"batch {batch}, {', '.join(reasons)}, {steps:,.0f} steps in all"
