"""Analyses behind notebooks 02 and 03: batch-size sweeps and recipe ablations, and their
paper-claim vs measured tables (computed from results, never typed in). Notebook 01's pool
statistics and claims are repro.analysis.pools.

Claim tables have columns claim | paper | measured here | agrees?. `agrees?` is "agrees" when the
measurement supports the claim (every 90% interval over replicates and validation documents on the
claimed side, repro.analysis.intervals), "disagrees" when it contradicts it, and "undetermined"
otherwise, or with fewer than MIN_REPLICATES replicates. Every loss compared is a held-out tuned
endpoint (repro.analysis.selection): lr, weight decay and epoch budget up to the study's cap
(`cap`, epochs: Grid.cap; and where a claim says so, the batch size) chosen on the other replicates
and the other half of the validation documents, so no arm gets a selection bonus. Each row carries
the difference its verdict hinges on (intervals.Claim.numbers).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from repro.analysis.confirmation import pooled_choice
from repro.analysis.intervals import (
    LEVEL,
    Claim,
    Difference,
    claim_table,
    describe,
    hinge,
    lower_verdict,
    mean_interval,
    t_interval,
)
from repro.analysis.results import REPLICATE_FIELDS, Results
from repro.analysis.selection import TUNED, compare, contrast, tuned
from repro.design.presets import pool_label
from repro.runtime.shapes import param_count_table

LITTLE = 0.01
"""nats/token: an effect whose whole interval lies within +-LITTLE "does little" (the paper's
recipe effects are 0.03-0.14 nats)."""


# --- batch-size sweep ---------------------------------------------------------------------------


def batch_endpoints(
    results: Results,
    extra_group: list[str] | None = None,
    also_tuned: tuple[str, ...] = (),
    cap: float | None = None,
) -> pd.DataFrame:
    """Held-out tuned endpoints (selection.tuned over lr, weight decay, epoch budget and
    `also_tuned`, with the study's epoch `cap`) per replicate (pool, seed) x model x batch size
    (x `extra_group`); grid-edge notes are in the `edge` column."""
    group_by = [*REPLICATE_FIELDS, "model", "batch_size", *(extra_group or [])]
    return tuned(results, group_by, TUNED + also_tuned, cap)


def across_replicates(
    endpoints: pd.DataFrame, by: list[str] | None = None, value: str = "val_loss"
) -> pd.DataFrame:
    """Mean, min, max and std over replicates of `value` (default the tuned loss, nats/token) per
    model x batch size (or `by`), the mean chosen epoch budget, and the LEVEL interval (`low`,
    `high`) of the replicate mean: for the tuned loss over replicates and validation documents,
    for any other value (a training loss: no documents) a t interval over replicates."""
    by = by or ["model", "batch_size"]
    groups = endpoints.groupby(by)
    agg = groups[value].agg(["mean", "min", "max", "std", "count"])
    agg = agg.join(groups["epochs"].mean().rename("mean epochs"))
    if value == "val_loss":
        intervals = groups.apply(_replicate_mean_interval, include_groups=False)
    else:
        intervals = groups[value].apply(lambda v: t_interval(v.tolist())[1:3])
    agg = agg.join(pd.DataFrame(intervals.tolist(), intervals.index, ["low", "high"]))
    return agg.reset_index()


def _replicate_mean_interval(rows: pd.DataFrame) -> tuple[float, float]:
    """The LEVEL interval of the replicate-mean loss of endpoint `rows` (over replicates and
    validation documents)."""
    if rows["val_loss"].isna().any():
        return np.nan, np.nan
    loss = mean_interval(np.stack(list(rows["doc_losses"])), rows["doc_tokens"].iloc[0])
    return loss.low, loss.high


def best_batch(endpoints: pd.DataFrame) -> int:
    """The batch size (sequences) with the lowest mean tuned loss over replicates."""
    return int(endpoints.groupby("batch_size")["val_loss"].mean().idxmin())


def pool_names(endpoints: pd.DataFrame) -> pd.DataFrame:
    """`endpoints` with each pool path replaced by its name (pool_label: "pool 0"), for display."""
    return endpoints.assign(pool=endpoints["pool"].map(pool_label))


def endpoint_curve(evals: pd.DataFrame, endpoint: pd.Series) -> pd.DataFrame:
    """Training and validation curve (per evaluation point) of the run an endpoint chose."""
    return evals[evals["run_id"] == endpoint["run_id"]].sort_values("step")


def loss_per_budget(results: Results) -> pd.DataFrame:
    """The tuned loss (nats/token, mean over replicates) per model x batch size (rows) and epoch
    budget (columns), lr and weight decay tuned within each budget: where the budget axis is
    censored. A budget that only some replicates tried (grown past the grid) stays empty."""
    ends = batch_endpoints(results, ["epochs"])
    rows = ["model", "batch_size"]
    table = ends.pivot_table("val_loss", rows, "epochs", aggfunc=["mean", "count"])
    n_replicates = len(ends[list(REPLICATE_FIELDS)].drop_duplicates())
    return table["mean"].where(table["count"] == n_replicates)


def arm(
    results: Results,
    mask: pd.Series | None = None,
    also_tuned: tuple[str, ...] = ("batch_size",),
    cap: float | None = None,
) -> pd.DataFrame:
    """Held-out endpoints per replicate of the runs in `mask` (default all), tuned over lr, weight
    decay, epoch budget and `also_tuned` (by default the batch size: an arm may span several
    batches), with the study's epoch `cap` (selection.tuned). Where `results` has a confirmation,
    the arm's configuration chosen on all these replicates (confirmation.pooled_choice), one row
    per confirmation pool instead (Confirmation.endpoints)."""
    chosen = results if mask is None else results.subset(mask)
    ends = tuned(chosen, list(REPLICATE_FIELDS), TUNED + also_tuned, cap)
    choice = pooled_choice(chosen, TUNED + also_tuned) if results.confirmation else None
    return ends if choice is None else results.confirmation.endpoints(choice, ends)


def usual_batch(results: Results, preset) -> dict[str, int]:
    """The preset's usual (one-pass) batch per pool: as set, or measured on the *other* pools as
    the batch with the lowest tuned loss at an epoch budget of 1, averaged over them and over
    model sizes (grids.usual_batch_source), so that no pool's own luck picks the batch it is
    tested against; with a single pool, measured on it."""
    pools = sorted(results.runs["pool"].unique())
    if preset.batch_sweep.one_pass_batch_size:
        return dict.fromkeys(pools, preset.batch_sweep.one_pass_batch_size)
    one = batch_endpoints(results.subset(results.runs["epochs"] == 1))
    means = one.groupby(["pool", "batch_size"])["val_loss"].mean().unstack("batch_size")
    others = {pool: means.drop(index=pool) if len(pools) > 1 else means for pool in pools}
    return {pool: int(rest.mean().idxmin()) for pool, rest in others.items()}


def batch_differences(results: Results, models: list[str]) -> pd.DataFrame:
    """Per model size and batch size, that batch's held-out tuned loss minus the tuned optimum's
    (the batch chosen among all of them, per replicate on its selection half), nats/token, with
    the 90% interval over replicates and documents (selection.compare): what the batch-sweep
    claims test, batch by batch. NaN where no replicate measured both."""
    rows = []
    for model in models:
        mine = results.subset(results.runs["model"] == model)
        optimum = arm(mine)
        for batch in sorted(int(b) for b in mine.runs["batch_size"].unique()):
            diff = compare(arm(mine, mine.runs["batch_size"] == batch), optimum)
            rows.append(
                {"model": model, "batch_size": batch, "difference": diff.value}
                | {"low": diff.low, "high": diff.high, "replicates": len(diff.per_replicate)}
            )
    return pd.DataFrame(rows)


def optimum_table(endpoints: pd.DataFrame, models: list[str]) -> pd.DataFrame:
    """Kim et al.'s table per model size (`models` in order): the batch with the lowest loss over
    replicates, its lr, weight decay and epoch budget on each replicate, and the replicate-mean
    loss with its 90% interval (the batch is chosen on the same data: a level, not a verdict)."""
    rows = []
    for model in models:
        ends = endpoints[endpoints["model"] == model]
        batch = ends.groupby("batch_size")["val_loss"].mean().idxmin()
        best = ends[ends["batch_size"] == batch]
        low, high = _replicate_mean_interval(best)
        rows.append(
            {
                "model": model,
                "batch size": int(batch),
                "lr": ", ".join(f"{v:g}" for v in best["lr"]),
                "weight decay": ", ".join(f"{v:g}" for v in best["weight_decay"]),
                "epochs": ", ".join(f"{v:g}" for v in best["epochs"]),
                "val loss": round(best["val_loss"].mean(), 4),
                "90% interval": f"{low:.3f} .. {high:.3f}",
            }
        )
    return pd.DataFrame(rows)


def optimal_batches(endpoints: pd.DataFrame, models: list[str], vocab_size: int) -> pd.DataFrame:
    """Per model size (parameters at `vocab_size`): the batch with the lowest replicate-mean tuned
    loss, each replicate's own best batch, and the smallest and largest batch whose 90% interval
    overlaps the optimum's: the batches the data cannot tell apart from it."""
    params = {row["name"]: row["params"] for row in param_count_table(vocab_size)}
    rows = []
    for model in models:
        ends = endpoints[endpoints["model"] == model]
        means = across_replicates(ends)
        best = means.loc[means["mean"].idxmin()]
        overlaps = (means["low"] <= best["high"]) | (means["batch_size"] == best["batch_size"])
        plausible = means[overlaps]["batch_size"]
        by_replicate = ends.groupby(list(REPLICATE_FIELDS))["val_loss"].idxmin()
        rows.append(
            {
                "model": model,
                "params": params[model],
                "batch": int(best["batch_size"]),
                "plausible_low": int(plausible.min()),
                "plausible_high": int(plausible.max()),
                "replicate_batches": sorted(int(b) for b in ends.loc[by_replicate, "batch_size"]),
            }
        )
    return pd.DataFrame(rows)


def _u_shape_diffs(
    results: Results, batches: list[int], level: float, cap: float | None
) -> list[Difference]:
    """The best interior batch (tuned among the interior batches) minus each edge batch, at
    `level`; empty with fewer than 3 batch sizes."""
    if len(batches) < 3:
        return []
    in_ = results.runs["batch_size"]
    interior = arm(results, (in_ > batches[0]) & (in_ < batches[-1]), cap=cap)
    edges = [arm(results, in_ == b, cap=cap) for b in (batches[0], batches[-1])]
    return [compare(interior, edge, level) for edge in edges]


def _u_shape_claim(results: Results, batches: list[int], cap: float | None) -> Claim:
    """The U-shape at one model size: the interior against both edges (PAIR_LEVEL each)."""
    claim = "best val loss vs batch size is U-shaped (interior optimum)"
    diffs = _u_shape_diffs(results, batches, PAIR_LEVEL, cap)
    if not diffs:
        return Claim("u-shape", claim, "yes", "fewer than 3 batch sizes", "undetermined")
    names = [f"interior - batch {b}" for b in (batches[0], batches[-1])]
    measured = "; ".join(describe(n, d) for n, d in zip(names, diffs))
    measured += f" ({PAIR_LEVEL:.0%} intervals: two edges)"
    return Claim("u-shape", claim, "yes", measured, lower_verdict(diffs), hinge(diffs))


def _u_shape_across_claim(results: Results, models: list[str], cap: float | None) -> Claim:
    """The U-shape at every model size: all 2 k comparisons (k sizes) at once, Bonferroni."""
    level = 1 - (1 - LEVEL) / (2 * len(models))
    per_size, diffs = {}, []
    for model in models:
        mine = results.subset(results.runs["model"] == model)
        batches = sorted(mine.runs["batch_size"].unique().tolist())
        sized = _u_shape_diffs(mine, batches, level, cap)
        per_size[model], diffs = lower_verdict(sized), diffs + sized
    verdicts = set(per_size.values())
    across = (
        "agrees"
        if verdicts == {"agrees"}
        else ("disagrees" if "disagrees" in verdicts else "undetermined")
    )
    measured = ", ".join(f"{m}: {v}" for m, v in per_size.items())
    return Claim(
        "u-shape-across-sizes",
        "the U-shape holds across model sizes",
        "yes (150M-1.5B)",
        f"{measured} ({level:.1%} intervals: {2 * len(models)} comparisons)",
        across,
        hinge(diffs),
    )


def _smaller_batch_claim(
    results: Results, batches: list[int], usual: dict[str, int], source: str, cap: float | None
) -> Claim:
    """The best batch below the usual one (tuned among them) against the usual batch (usual_batch:
    per pool; undetermined where the pools' usual batches differ)."""
    claim = "smaller batches than usual win"
    paper = "yes (optimum below the one-pass batch, 64 at paper scale)"
    if len(set(usual.values())) > 1:
        per_pool = ", ".join(f"{pool_label(p)}: {b}" for p, b in usual.items())
        measured = f"usual batch ({source}) differs between pools ({per_pool})"
        return Claim("smaller-wins", claim, paper, measured, "undetermined")
    usual = next(iter(usual.values()))
    smaller = [b for b in batches if b < usual]
    if not smaller or usual not in batches:
        missing = "no smaller batch" if usual in batches else "the usual batch is not"
        measured = f"usual batch {usual} ({source}); {missing} in the grid"
        return Claim("smaller-wins", claim, paper, measured, "undetermined")
    batch = results.runs["batch_size"]
    diff = compare(arm(results, batch < usual, cap=cap), arm(results, batch == usual, cap=cap))
    measured = f"usual batch {usual} ({source}); " + describe(f"batches < {usual} - {usual}", diff)
    return Claim("smaller-wins", claim, paper, measured, lower_verdict([diff]), diff)


PAIR_LEVEL = 1 - (1 - LEVEL) / 2
"""The level of each interval of a claim that can disagree in two ways (the U-shape's two edges;
a signature's better val loss or under-fitting): Bonferroni, so that together they err at most as
often as one interval at LEVEL."""


def signature_verdict(val: Difference, train: Difference) -> str:
    """The over-fitting signature of an edge batch against the best other batch (`val`, `train`:
    edge minus the others, at PAIR_LEVEL): a worse val loss with a lower train loss agrees; a
    better val loss, or a worse one with a higher train loss (under-fitting), disagrees; else
    undetermined."""
    worse = lower_verdict([val.negated()]) == "agrees"
    if worse and lower_verdict([train]) == "agrees":
        return "agrees"
    if lower_verdict([val]) == "agrees" or (worse and lower_verdict([train.negated()]) == "agrees"):
        return "disagrees"
    return "undetermined"


def train_difference(mine: pd.DataFrame, rest: pd.DataFrame, level: float) -> Difference:
    """Final training loss of endpoints `mine` minus `rest` (rows of selection.tuned per
    replicate), averaged over each pool's seeds (they share the pool's draw: the pool is the
    replicate, as in selection.contrast), with its `level` t interval over pools."""
    key = list(REPLICATE_FIELDS)
    gaps = (mine.set_index(key)["train_loss"] - rest.set_index(key)["train_loss"]).dropna()
    return t_interval(gaps.groupby(level="pool", sort=False).mean().tolist(), level)


def signature(mine: pd.DataFrame, rest: pd.DataFrame, name: str) -> tuple[str, str, Difference]:
    """(measured, verdict, the difference it hinges on) of the over-fitting signature of endpoints
    `mine` against `rest` (rows of selection.tuned per replicate; signature_verdict, PAIR_LEVEL),
    the val difference labelled `name`; the train losses are the final ones of each replicate's
    chosen runs (train_difference: training losses have no documents). It hinges on the val
    difference where mine is better, else on the less clear of a worse val and a lower train loss
    (intervals.hinge)."""
    val = compare(mine, rest, PAIR_LEVEL)
    # the same arms: at the cap where the val difference's are (censoring is about val loss)
    train = train_difference(mine, rest, PAIR_LEVEL)._replace(at_cap=val.at_cap)
    measured = (
        describe(f"val: {name}", val)
        + "; "
        + describe("train", train)
        + f" ({PAIR_LEVEL:.0%} intervals: two ways to disagree)"
    )
    worse = val.negated()
    pivot = hinge([worse, train])
    return measured, signature_verdict(val, train), val if pivot is worse else pivot


def _signature_claim(results: Results, batches: list[int], end: str, cap: float | None) -> Claim:
    """The `end` ("smallest" or "largest") batch against the best of the others (signature)."""
    key, claim = f"{end}-overfits", f"the {end} batch overfits: lower train loss, worse val loss"
    if len(batches) < 2:
        return Claim(key, claim, "yes", "a single batch size", "undetermined")
    edge = batches[0] if end == "smallest" else batches[-1]
    batch = results.runs["batch_size"]
    mine, rest = arm(results, batch == edge, cap=cap), arm(results, batch != edge, cap=cap)
    return Claim(key, claim, "yes", *signature(mine, rest, f"batch {edge} - best other"))


def batch_sweep_claims(
    results: Results,
    models: list[str],
    usual: dict[str, int],
    usual_source: str,
    *,
    cap: float | None,
) -> pd.DataFrame:
    """The study's batch-size claims at each model size (`models`, largest first), and whether
    the U-shape holds across sizes; `usual` is the one-pass batch (sequences) per pool
    (usual_batch) and `usual_source` where it comes from; `cap` the study's epoch cap (Grid.cap;
    None: none, every arm at its largest budget is censored)."""
    claims = []
    for model in models:
        mine = results.subset(results.runs["model"] == model)
        batches = sorted(mine.runs["batch_size"].unique().tolist())
        for row in (
            _u_shape_claim(mine, batches, cap),
            _smaller_batch_claim(mine, batches, usual, usual_source, cap),
            _signature_claim(mine, batches, "smallest", cap),
            _signature_claim(mine, batches, "largest", cap),
        ):
            claims.append(row.at(model))
    if len(models) > 1:
        claims.append(_u_shape_across_claim(results, models, cap))
    return claim_table(claims)


# --- recipe ablations ---------------------------------------------------------------------------


def _loader_claims(results: Results, cap: float | None) -> list[Claim]:
    """One row per batch size: REPACK < SHUFFLE < REPEAT, as two paired differences."""
    rows = []
    runs = results.runs
    for batch in sorted(runs["batch_size"].unique()):
        arms = {
            k: arm(results, (runs["batch_size"] == batch) & (runs["loader"] == k), (), cap)
            for k in ("repack", "shuffle", "repeat")
        }
        pairs = [("repack", "shuffle"), ("shuffle", "repeat")]
        diffs = [compare(arms[a], arms[b], PAIR_LEVEL) for a, b in pairs]
        measured = "; ".join(describe(f"{a} - {b}", d) for (a, b), d in zip(pairs, diffs))
        measured += f" ({PAIR_LEVEL:.0%} intervals: two comparisons)"
        order, verdict = "REPACK < SHUFFLE < REPEAT", lower_verdict(diffs)
        claim = Claim("loader-order", f"{order} in val loss", order, measured, verdict)
        rows.append(claim._replace(difference=hinge(diffs)).at(f"batch {batch}"))
    return rows


def little_verdict(diff: Difference) -> str:
    """An effect "does little": its interval within +-LITTLE agrees, wholly outside disagrees;
    undetermined when not decisive (intervals.Difference.decisive). A censored arm's loss might
    still fall: it blocks "agrees" (a gap might open) and "disagrees" when it is the worse arm
    (the gap might close)."""
    if not diff.decisive:
        return "undetermined"
    first_worse, second_worse = diff.low > LITTLE, diff.high < -LITTLE
    if diff.low > -LITTLE and diff.high < LITTLE and not any(diff.censored):
        return "agrees"
    if (first_worse and not diff.censored[0]) or (second_worse and not diff.censored[1]):
        return "disagrees"
    return "undetermined"


def _embedding_claims(results: Results, cap: float | None) -> list[Claim]:
    """Four arms (untied / tied x no / positive embedding decay, the positive decays tuned inside
    the arm): decay helps, tying alone does little (told from the nearer of +-LITTLE), both
    together are best."""
    runs = results.runs
    decay_on = runs["embedding_weight_decay"] > 0
    arms = {
        (tie, on): arm(
            results,
            (runs["tie_embeddings"] == tie) & (decay_on == on),
            ("embedding_weight_decay",),
            cap,
        )
        for tie in (False, True)
        for on in (False, True)
    }
    helps = compare(arms[(False, True)], arms[(False, False)])
    tying = compare(arms[(True, False)], arms[(False, False)])
    others = [k for k in arms if k != (True, True)]
    level = 1 - (1 - LEVEL) / len(others)  # three comparisons, any of which can disagree
    together = [compare(arms[(True, True)], arms[k], level) for k in others]
    names = ["- untied", "- tied alone", "- decay alone"]
    return [
        Claim(
            "embedding-decay-helps",
            "positive embedding weight decay helps (untied)",
            "yes",
            describe("decay - none", helps),
            lower_verdict([helps]),
            helps,
        ),
        Claim(
            "tying-does-little",
            "tying alone does little",
            f"yes (here: the whole interval within +-{LITTLE} nats/token)",
            describe("tied - untied", tying),
            little_verdict(tying),
            tying,
            float(np.copysign(LITTLE, tying.value)),
        ),
        Claim(
            "tying-and-decay-best",
            "tying and embedding decay together are best",
            "yes",
            "; ".join(describe(f"both {n}", d) for n, d in zip(names, together))
            + f" ({level:.1%} intervals: three comparisons)",
            lower_verdict(together),
            hinge(together),
        ),
    ]


def split_budget(budgets: list[float]) -> float:
    """The budget (epochs) that splits a grid into early (<= it) and later budgets: the lower
    median of the tried budgets, fixed by the design rather than chosen on the data."""
    ordered = sorted(budgets)
    return float(ordered[(len(ordered) - 1) // 2])


def _stop_later_claim(original: Results, combined: Results, cap: float | None) -> Claim:
    """Do later epoch budgets gain more in the combined recipe than in the original? A
    difference-in-differences per replicate: (combined, budgets > T - budgets <= T) - (original,
    the same), batch and the rest tuned inside each arm, T = split_budget of the budgets both
    tried. The early arms' cap is T (they end there by design), the later arms' the study's
    `cap`: a later arm best at its largest budget below the cap is censored, and so is any arm
    whose lr or weight decay is not bracketed."""
    claim, paper = (
        "the best stopping point moves later",
        "yes (20 -> 32 epochs at the largest model)",
    )
    tried = set(original.runs["epochs"]) & set(combined.runs["epochs"])
    if len(tried) < 2:
        measured = "fewer than 2 epoch budgets in both recipes"
        return Claim("stop-later", claim, paper, measured, "undetermined")
    split = split_budget(list(tried))
    e_tuned = ("batch_size", "embedding_weight_decay")
    late, early = {}, {}
    for name, recipe, also in (("combined", combined, e_tuned), ("original", original, None)):
        later = recipe.runs["epochs"] > split
        late[name] = arm(recipe, later, also or ("batch_size",), cap)
        early[name] = arm(recipe, ~later, also or ("batch_size",), split)
    terms = [(1.0, late["combined"]), (-1.0, early["combined"])]
    diff = contrast([*terms, (-1.0, late["original"]), (1.0, early["original"])])
    at_cap = tuple(bool(late[n]["at_cap"].any()) for n in ("combined", "original"))
    diff = diff._replace(at_cap=at_cap)  # the early arms end at the split by design
    measured = describe(
        f"(later - earlier) combined - (later - earlier) original, later = budgets > {split:g}",
        diff,
    )
    return Claim("stop-later", claim, paper, measured, lower_verdict([diff]), diff)


def recipe_claims(
    loader: Results,
    embedding: Results,
    original: Results,
    combined: Results,
    *,
    cap: float | None,
) -> pd.DataFrame:
    """Claims of the recipe section from the results of each ablation grid (every arm tuned over
    the same grid, up to the study's epoch `cap`: Grid.cap), at one model size. The original
    recipe is compared at the combined recipe's batch sizes only, so both arms tune the batch over
    the same set."""
    e_tuned = ("batch_size", "embedding_weight_decay")
    batches = sorted(combined.runs["batch_size"].unique())
    original = original.subset(original.runs["batch_size"].isin(batches))
    batch_list = ", ".join(f"{b:g}" for b in batches)
    lower = compare(arm(combined, None, e_tuned, cap), arm(original, cap=cap))
    claims = [
        *_loader_claims(loader, cap),
        *_embedding_claims(embedding, cap),
        Claim(
            "combined-lowers",
            "the combined recipe lowers the best val loss",
            "yes",
            describe(f"combined - original (batch tuned over {batch_list})", lower),
            lower_verdict([lower]),
            lower,
        ),
        _stop_later_claim(original, combined, cap),
    ]
    return claim_table(claims)
