"""Analyses behind the notebooks: pool statistics, batch-size sweeps and recipe ablations, and
their paper-claim vs measured tables (computed from results, never typed in).

Claim tables have columns claim | paper | measured here | agrees?. `agrees?` is "agrees" when the
measurement supports the claim (every 90% paired interval over validation documents on the claimed
side, and every pool's difference too), "disagrees" when it contradicts it, and "undetermined"
otherwise. Every loss compared is a cross-fitted tuned endpoint (repro.analysis.selection): lr,
weight decay and epoch budget (and where a claim says so, the batch size) chosen on one half of
the validation documents and reported on the other, so no arm gets a selection bonus.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from repro.analysis.intervals import (
    CLAIM_COLUMNS,
    Difference,
    describe,
    lower_verdict,
    mean_interval,
)
from repro.analysis.selection import TUNED, compare, tuned
from repro.data.pool import load_pool
from repro.runtime.model import param_count_table

Sweep = tuple[pd.DataFrame, pd.DataFrame]  # (runs, evals) as Study.sweep returns them
LITTLE = 0.01
"""nats/token: an effect whose whole interval lies within +-LITTLE "does little" (the paper's
recipe effects are 0.03-0.14 nats)."""


def _exact(ok: bool) -> str:
    """The verdict of a claim measured exactly (a count, no sampling)."""
    return "agrees" if ok else "disagrees"


# --- pools --------------------------------------------------------------------------------------


def pool_table(paths: list[str | Path]) -> pd.DataFrame:
    """One row per pool and split: documents, tokens, document length, and the Bayes floor if
    known."""
    rows = []
    for path in paths:
        meta = load_pool(path).meta
        for split, stats in meta["splits"].items():
            rows.append(
                {
                    "pool": Path(path).name,
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
                    "pool a": Path(paths[i]).name,
                    "pool b": Path(paths[j]).name,
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
    rows = [
        [
            "no validation document contributes to training",
            "yes (document-level split)",
            f"validation documents found in training: {leaks} (exact count)",
            _exact(sum(leaks) == 0),
        ],
        [
            "independent pools share the validation set",
            "yes (fixed held-out set)",
            f"identical val: {identical} (exact)",
            _exact(identical),
        ],
        [
            "independent pools differ in training documents",
            "yes",
            f"shared train docs: {shared.tolist()} of {total.tolist()} (exact count)",
            _exact(bool((shared < total).all())),
        ],
    ]
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


# --- batch-size sweep ---------------------------------------------------------------------------


def batch_endpoints(
    runs: pd.DataFrame,
    evals: pd.DataFrame,
    store: str | Path,
    extra_group: list[str] | None = None,
    also_tuned: tuple[str, ...] = (),
) -> pd.DataFrame:
    """Cross-fitted tuned endpoints (selection.tuned over lr, weight decay, epoch budget and
    `also_tuned`) per pool x model x batch size (x `extra_group`); grid-edge notes are in the
    `edge` column."""
    group_by = ["pool", "model", "batch_size", *(extra_group or [])]
    return tuned(runs, evals, store, group_by, TUNED + also_tuned)


def across_pools(
    endpoints: pd.DataFrame, by: list[str] | None = None, value: str = "val_loss"
) -> pd.DataFrame:
    """Mean, min, max and std over pools of `value` (default the tuned loss, nats/token) per model
    x batch size (or `by`), the mean chosen epoch budget, and for the tuned loss the 90% interval
    (`low`, `high`) of the pool mean over validation documents."""
    by = by or ["model", "batch_size"]
    groups = endpoints.groupby(by)
    agg = groups[value].agg(["mean", "min", "max", "std", "count"])
    agg = agg.join(groups["epochs"].mean().rename("mean epochs"))
    if value == "val_loss":
        intervals = groups.apply(_pool_mean_interval, include_groups=False)
        agg = agg.join(pd.DataFrame(intervals.tolist(), intervals.index, ["low", "high"]))
    return agg.reset_index()


def _pool_mean_interval(rows: pd.DataFrame) -> tuple[float, float]:
    """The 90% interval over validation documents of the pool-mean loss of endpoint `rows`."""
    if rows["val_loss"].isna().any():
        return np.nan, np.nan
    loss = mean_interval(np.mean(list(rows["doc_losses"]), 0), rows["doc_tokens"].iloc[0])
    return loss.low, loss.high


def pool_names(endpoints: pd.DataFrame) -> pd.DataFrame:
    """`endpoints` with each pool path replaced by its folder name (for display)."""
    return endpoints.assign(pool=endpoints["pool"].map(lambda path: Path(path).name))


def endpoint_curve(evals: pd.DataFrame, endpoint: pd.Series) -> pd.DataFrame:
    """Training and validation curve (per evaluation point) of the run an endpoint chose."""
    return evals[evals["run_id"] == endpoint["run_id"]].sort_values("step")


def loss_per_budget(runs: pd.DataFrame, evals: pd.DataFrame, store: str | Path) -> pd.DataFrame:
    """The tuned loss (nats/token, mean over pools) per model x batch size (rows) and epoch budget
    (columns), lr and weight decay tuned within each budget: where the budget axis is censored.
    A budget that only some pools tried (grown past the grid for some) stays empty."""
    ends = batch_endpoints(runs, evals, store, ["epochs"])
    rows = ["model", "batch_size"]
    table = ends.pivot_table("val_loss", rows, "epochs", aggfunc=["mean", "count"])
    return table["mean"].where(table["count"] == ends["pool"].nunique())


def models_by_size(models: list[str], vocab_size: int) -> list[str]:
    """`models` from the largest to the smallest (parameters at `vocab_size`)."""
    params = {row["name"]: row["params"] for row in param_count_table(vocab_size)}
    return sorted(models, key=lambda m: -params[m])


def _arm(
    runs: pd.DataFrame,
    evals: pd.DataFrame,
    store: str | Path,
    mask: pd.Series,
    also_tuned: tuple[str, ...] = ("batch_size",),
) -> pd.DataFrame:
    """Cross-fitted endpoints per pool of the runs in `mask`, tuned over lr, weight decay, epoch
    budget and `also_tuned` (by default the batch size: an arm may span several batches)."""
    return tuned(runs[mask], evals, store, ["pool"], TUNED + also_tuned)


def usual_batch(runs: pd.DataFrame, evals: pd.DataFrame, store: str | Path, preset) -> int:
    """The preset's usual (one-pass) batch: as set, or measured as the batch with the lowest tuned
    loss at an epoch budget of 1, averaged over pools and model sizes
    (Preset.usual_batch_source)."""
    if preset.one_pass_batch_size:
        return preset.one_pass_batch_size
    one = tuned(runs[runs["epochs"] == 1], evals, store, ["pool", "model", "batch_size"])
    return int(one.groupby("batch_size")["val_loss"].mean().idxmin())


def optimum_table(endpoints: pd.DataFrame, models: list[str]) -> pd.DataFrame:
    """Kim et al.'s table per model size (`models` in order): the batch with the lowest loss over
    pools, its lr, weight decay and epoch budget on each pool, and the pool-mean loss with its 90%
    interval over validation documents (the batch is chosen on the same documents)."""
    rows = []
    for model in models:
        ends = endpoints[endpoints["model"] == model]
        batch = ends.groupby("batch_size")["val_loss"].mean().idxmin()
        best = ends[ends["batch_size"] == batch]
        low, high = _pool_mean_interval(best)
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
    """Per model size (parameters at `vocab_size`): the batch with the lowest pool-mean tuned loss,
    each pool's own best batch, and the smallest and largest batch whose pool-mean 90% interval
    (over validation documents) overlaps the optimum's: the batches the data cannot tell apart
    from it."""
    params = {row["name"]: row["params"] for row in param_count_table(vocab_size)}
    rows = []
    for model in models:
        ends = endpoints[endpoints["model"] == model]
        means = across_pools(ends)
        best = means.loc[means["mean"].idxmin()]
        overlaps = (means["low"] <= best["high"]) | (means["batch_size"] == best["batch_size"])
        plausible = means[overlaps]["batch_size"]
        per_pool = ends.loc[ends.groupby("pool")["val_loss"].idxmin(), "batch_size"]
        rows.append(
            {
                "model": model,
                "params": params[model],
                "batch": int(best["batch_size"]),
                "plausible_low": int(plausible.min()),
                "plausible_high": int(plausible.max()),
                "pool_batches": sorted(int(b) for b in per_pool),
            }
        )
    return pd.DataFrame(rows)


def _u_shape_claim(runs, evals, store, batches: list[int]) -> tuple[list[str], str]:
    """The best interior batch (tuned among the interior batches) against each edge batch."""
    claim = "best val loss vs batch size is U-shaped (interior optimum)"
    if len(batches) < 3:
        return [claim, "yes", "fewer than 3 batch sizes", "undetermined"], "undetermined"
    in_ = runs["batch_size"]
    interior = _arm(runs, evals, store, (in_ > batches[0]) & (in_ < batches[-1]))
    edges = [_arm(runs, evals, store, in_ == b) for b in (batches[0], batches[-1])]
    diffs = [compare(interior, edge) for edge in edges]
    names = [f"interior - batch {b}" for b in (batches[0], batches[-1])]
    measured = "; ".join(describe(n, d) for n, d in zip(names, diffs))
    verdict = lower_verdict(diffs)
    return [claim, "yes", measured, verdict], verdict


def _smaller_batch_claim(runs, evals, store, batches: list[int], usual: int, source: str):
    """The best batch below the usual one (tuned among them) against the usual batch."""
    claim = "smaller batches than usual win"
    paper = "yes (optimum below the one-pass batch, 64 at paper scale)"
    smaller = [b for b in batches if b < usual]
    if not smaller or usual not in batches:
        missing = "no smaller batch" if usual in batches else "the usual batch is not"
        measured = f"usual batch {usual} ({source}); {missing} in the grid"
        return [claim, paper, measured, "undetermined"]
    diff = compare(
        _arm(runs, evals, store, runs["batch_size"] < usual),
        _arm(runs, evals, store, runs["batch_size"] == usual),
    )
    measured = f"usual batch {usual} ({source}); " + describe(f"batches < {usual} - {usual}", diff)
    return [claim, paper, measured, lower_verdict([diff])]


def _overfit_claim(runs, evals, store, batches: list[int]) -> list[str]:
    """The smallest batch against the best of the others: worse val loss (interval above 0 on
    every pool) with a lower final train loss on every pool agrees; a better val loss, or a worse
    one with a higher train loss on every pool (under-fitting), disagrees."""
    claim = "the smallest batch overfits: lower train loss, worse val loss"
    if len(batches) < 2:
        return [claim, "yes", "a single batch size", "undetermined"]
    small = _arm(runs, evals, store, runs["batch_size"] == batches[0])
    rest = _arm(runs, evals, store, runs["batch_size"] > batches[0])
    diff = compare(small, rest)
    train = (small.set_index("pool")["train_loss"] - rest.set_index("pool")["train_loss"]).dropna()
    worse = lower_verdict([diff.negated()]) == "agrees"
    if worse and (train < 0).all():
        verdict = "agrees"
    elif lower_verdict([diff]) == "agrees" or (worse and (train > 0).all()):
        verdict = "disagrees"
    else:
        verdict = "undetermined"
    measured = (
        describe(f"val: batch {batches[0]} - best other", diff)
        + f"; final train loss difference per pool {', '.join(f'{t:+.3f}' for t in train)}"
    )
    return [claim, "yes", measured, verdict]


def batch_sweep_claims(
    runs: pd.DataFrame,
    evals: pd.DataFrame,
    store: str | Path,
    models: list[str],
    usual: int,
    usual_source: str,
) -> pd.DataFrame:
    """The study's batch-size claims at each model size (`models`, largest first), and whether
    the U-shape holds across sizes; `usual` is the one-pass batch (sequences) and `usual_source`
    where it comes from."""
    rows, shapes = [], []
    for model in models:
        mine = runs[runs["model"] == model]
        batches = sorted(mine["batch_size"].unique().tolist())
        u_row, u_verdict = _u_shape_claim(mine, evals, store, batches)
        shapes.append(u_verdict)
        for row in (
            u_row,
            _smaller_batch_claim(mine, evals, store, batches, usual, usual_source),
            _overfit_claim(mine, evals, store, batches),
        ):
            rows.append([f"{row[0]} ({model})", *row[1:]])
    if len(models) > 1:
        across = (
            "disagrees"
            if "disagrees" in shapes
            else ("agrees" if set(shapes) == {"agrees"} else "undetermined")
        )
        rows.append(
            [
                "the U-shape holds across model sizes",
                "yes (150M-1.5B)",
                ", ".join(f"{m}: {v}" for m, v in zip(models, shapes)),
                across,
            ]
        )
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


# --- recipe ablations ---------------------------------------------------------------------------


def _loader_claims(runs, evals, store) -> list[list[str]]:
    """One row per batch size: REPACK < SHUFFLE < REPEAT, as two paired differences."""
    rows = []
    for batch in sorted(runs["batch_size"].unique()):
        arm = {
            k: _arm(runs, evals, store, (runs["batch_size"] == batch) & (runs["loader"] == k), ())
            for k in ("repack", "shuffle", "repeat")
        }
        pairs = [("repack", "shuffle"), ("shuffle", "repeat")]
        diffs = [compare(arm[a], arm[b]) for a, b in pairs]
        measured = "; ".join(describe(f"{a} - {b}", d) for (a, b), d in zip(pairs, diffs))
        rows.append(
            [
                f"REPACK < SHUFFLE < REPEAT in val loss (batch {batch})",
                "REPACK < SHUFFLE < REPEAT",
                measured,
                lower_verdict(diffs),
            ]
        )
    return rows


def _little_verdict(diff: Difference) -> str:
    """An effect "does little": its interval within +-LITTLE agrees, wholly outside disagrees. A
    censored arm's loss might still fall: it blocks "agrees" (a gap might open) and "disagrees"
    when it is the worse arm (the gap might close)."""
    first_worse, second_worse = diff.low > LITTLE, diff.high < -LITTLE
    if diff.low > -LITTLE and diff.high < LITTLE and not any(diff.censored):
        return "agrees"
    if (first_worse and not diff.censored[0]) or (second_worse and not diff.censored[1]):
        return "disagrees"
    return "undetermined"


def _embedding_claims(runs, evals, store) -> list[list[str]]:
    """Four arms (untied / tied x no / positive embedding decay, the positive decays tuned inside
    the arm): decay helps, tying alone does little, both together are best."""
    decay_on = runs["embedding_weight_decay"] > 0
    arm = {
        (tie, on): _arm(
            runs,
            evals,
            store,
            (runs["tie_embeddings"] == tie) & (decay_on == on),
            ("embedding_weight_decay",),
        )
        for tie in (False, True)
        for on in (False, True)
    }
    helps = compare(arm[(False, True)], arm[(False, False)])
    tying = compare(arm[(True, False)], arm[(False, False)])
    together = [compare(arm[(True, True)], arm[k]) for k in arm if k != (True, True)]
    names = ["- untied", "- tied alone", "- decay alone"]
    return [
        [
            "positive embedding weight decay helps (untied)",
            "yes",
            describe("decay - none", helps),
            lower_verdict([helps]),
        ],
        [
            "tying alone does little",
            f"yes (here: the whole interval within +-{LITTLE} nats/token)",
            describe("tied - untied", tying),
            _little_verdict(tying),
        ],
        [
            "tying and embedding decay together are best",
            "yes",
            "; ".join(describe(f"both {n}", d) for n, d in zip(names, together)),
            lower_verdict(together),
        ],
    ]


def _stop_later_claim(original: Sweep, combined: Sweep, store: str | Path) -> list[str]:
    """Does the combined recipe gain from epoch budgets beyond the original recipe's best one
    (batch and the rest tuned inside each arm, `original` at the combined recipe's batches)?
    Censored when the original's best budget is the largest tried."""
    claim, paper = (
        "the best stopping point moves later",
        "yes (20 -> 32 epochs at the largest model)",
    )
    budget = float(_arm(*original, store, original[0]["epochs"] > 0)["epochs"].mean())
    later = combined[0]["epochs"] > budget
    if not later.any():
        measured = f"original's best budget {budget:g} epochs is the largest tried (censored)"
        return [claim, paper, measured, "undetermined"]
    diff = compare(
        _arm(*combined, store, later, ("batch_size", "embedding_weight_decay")),
        _arm(*combined, store, ~later, ("batch_size", "embedding_weight_decay")),
    )._replace(censored=(False, False))  # the shorter arm ends below the budgets by design
    measured = (
        f"original's best budget {budget:g} epochs (mean over pools); combined recipe: "
        + describe(f"budgets > {budget:g} - budgets <= {budget:g}", diff)
    )
    return [claim, paper, measured, lower_verdict([diff])]


def recipe_claims(
    loader: Sweep, embedding: Sweep, original: Sweep, combined: Sweep, store: str | Path
) -> pd.DataFrame:
    """Claims of the recipe section from the (runs, evals) of each ablation grid (every arm tuned
    over the same grid), at one model size. The original recipe is compared at the combined
    recipe's batch sizes only, so both arms tune the batch over the same set."""
    e_tuned = ("batch_size", "embedding_weight_decay")
    batches = sorted(combined[0]["batch_size"].unique())
    runs, evals = original
    original = runs[runs["batch_size"].isin(batches)], evals
    batch_list = ", ".join(f"{b:g}" for b in batches)
    lower = compare(
        _arm(*combined, store, combined[0]["epochs"] > 0, e_tuned),
        _arm(*original, store, original[0]["epochs"] > 0),
    )
    rows = [
        *_loader_claims(*loader, store),
        *_embedding_claims(*embedding, store),
        [
            "the combined recipe lowers the best val loss",
            "yes",
            describe(f"combined - original (batch tuned over {batch_list})", lower),
            lower_verdict([lower]),
        ],
        _stop_later_claim(original, combined, store),
    ]
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)
