"""Analyses behind the notebooks: pool statistics, batch-size sweeps, recipe ablations, and the
paper-claim vs measured tables (computed from results, never typed in).

Claim tables have columns claim | paper | measured here | agrees?; `agrees?` is "yes", "no" (with
the reason when the effect is within pool-to-pool noise), or "n/a" when the measurement cannot
decide (for instance a grid with a single batch size).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from repro.analysis.intervals import describe, document_losses, lower_verdict, paired_difference
from repro.analysis.results import tuned_endpoints
from repro.data.pool import load_pool

CLAIM_COLUMNS = ["claim", "paper", "measured here", "agrees?"]


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("yes" if ok else "no")


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
            f"validation documents found in training: {leaks}",
            _verdict(sum(leaks) == 0),
        ],
        [
            "independent pools share the validation set",
            "yes (fixed held-out set)",
            f"identical val: {identical}",
            _verdict(identical),
        ],
        [
            "independent pools differ in training documents",
            "yes",
            f"shared train docs: {shared.tolist()} of {total.tolist()}",
            _verdict(bool((shared < total).all())),
        ],
    ]
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


# --- batch-size sweep ---------------------------------------------------------------------------


def batch_endpoints(
    runs: pd.DataFrame, evals: pd.DataFrame, extra_group: list[str] | None = None
) -> pd.DataFrame:
    """Tuned endpoints per pool x model x batch size (x extra fields); grid-edge notes are in its
    `edge` column."""
    return tuned_endpoints(
        runs, evals, ["pool", "model", "batch_size", *(extra_group or [])], warn=False
    )


def across_pools(
    endpoints: pd.DataFrame, by: list[str] | None = None, value: str = "best_val_loss"
) -> pd.DataFrame:
    """Mean, min, max and std over pools of `value` (default the tuned best validation loss,
    nats/token), per model x batch size (or `by`), with the mean stopping epoch."""
    by = by or ["model", "batch_size"]
    agg = endpoints.groupby(by)[value].agg(["mean", "min", "max", "std", "count"]).reset_index()
    stop = endpoints.groupby(by)["stop_epoch"].mean().rename("mean stop epoch").reset_index()
    return agg.merge(stop, on=by)


def endpoint_curve(evals: pd.DataFrame, endpoint: pd.Series) -> pd.DataFrame:
    """Training and validation curve (per evaluation point) of the run an endpoint chose."""
    return evals[evals["run_id"] == endpoint["run_id"]].sort_values("step")


def _final(evals: pd.DataFrame, rid: str) -> pd.Series:
    return evals[evals["run_id"] == rid].sort_values("step").iloc[-1]


def _u_shape_claim(agg: pd.DataFrame, b_opt: int) -> list[str]:
    """Is the optimum interior, with both edges worse by more than the pool std (nats)?"""
    batches = agg["batch_size"].tolist()
    loss = agg.set_index("batch_size")["mean"]
    noise = float(agg["std"].fillna(0).max())
    margin = min(loss[batches[0]], loss[batches[-1]]) - loss[b_opt]
    if len(batches) < 3:
        verdict = "n/a"
    elif b_opt in (batches[0], batches[-1]):
        verdict = "no"
    else:
        # an interior optimum counts only if both edges are worse by more than the
        # pool-to-pool spread
        verdict = "yes" if margin > noise else "no (within pool noise)"
    return [
        "best val loss vs batch size is U-shaped (interior optimum)",
        "yes",
        f"optimum at batch {b_opt} of {batches}; edges worse by {margin:.3f} nats "
        f"vs pool std up to {noise:.3f}",
        verdict,
    ]


def _smaller_batch_claim(agg: pd.DataFrame, b_opt: int, one_pass_batch: int) -> list[str]:
    """Is the optimal batch (sequences) below the batch a one-pass recipe would use?"""
    usual = agg.loc[agg["batch_size"] == one_pass_batch, "mean"]
    smaller = None if usual.empty else bool(b_opt < one_pass_batch)
    return [
        "smaller batches than usual win",
        "yes (optimum below the one-pass batch, 64 at paper scale)",
        f"optimum {b_opt} vs one-pass batch {one_pass_batch}: {agg['mean'].min():.3f} vs "
        + (f"{usual.item():.3f} nats" if not usual.empty else "not in the grid"),
        _verdict(smaller),
    ]


def _train_val_at(evals: pd.DataFrame, endpoints: pd.DataFrame, batch: int) -> tuple[float, float]:
    """(final train loss, best val loss) in nats of the tuned endpoints at `batch`, averaged over
    pools."""
    ends = endpoints[endpoints["batch_size"] == batch]
    train = np.mean([_final(evals, rid)["train_loss"] for rid in ends["run_id"]])
    return float(train), float(ends["best_val_loss"].mean())


def _overfit_claim(
    evals: pd.DataFrame, endpoints: pd.DataFrame, batches: list[int], b_opt: int
) -> list[str]:
    """Does the smallest batch reach a lower train loss but a worse val loss than the optimum?"""
    claim = "the smallest batch overfits: lower train loss, worse val loss"
    if len(batches) < 2 or b_opt == batches[0]:
        verdict = _verdict(False if len(batches) >= 2 else None)
        return [claim, "yes", f"the smallest batch {batches[0]} is the optimum", verdict]
    t_small, v_small = _train_val_at(evals, endpoints, batches[0])
    t_opt, v_opt = _train_val_at(evals, endpoints, b_opt)
    return [
        claim,
        "yes",
        f"batch {batches[0]}: train {t_small:.3f}, val {v_small:.3f}; "
        f"optimum {b_opt}: train {t_opt:.3f}, val {v_opt:.3f}",
        _verdict(t_small < t_opt and v_small > v_opt),
    ]


def _pool_noise_claim(agg: pd.DataFrame) -> list[str]:
    """Is the loss range over batch sizes (nats) more than twice the largest std over pools?"""
    spread = agg["std"].fillna(0).max()
    depth = agg["mean"].max() - agg["mean"].min()
    return [
        "the batch-size effect exceeds pool-to-pool noise",
        "(implicit)",
        f"range over batch sizes {depth:.3f} nats vs largest std over pools {spread:.3f}",
        _verdict(None if agg["count"].max() < 2 else bool(depth > 2 * spread)),
    ]


def batch_sweep_claims(
    runs: pd.DataFrame, evals: pd.DataFrame, endpoints: pd.DataFrame, one_pass_batch: int
) -> pd.DataFrame:
    """The study's batch-size claims against this sweep (first model; loss averaged over pools);
    `one_pass_batch` is the batch a one-pass recipe would use at this scale."""
    model = endpoints["model"].iloc[0]
    ends = endpoints[endpoints["model"] == model]
    agg = across_pools(ends).sort_values("batch_size")
    b_opt = int(agg.loc[agg["mean"].idxmin(), "batch_size"])
    rows = [
        _u_shape_claim(agg, b_opt),
        _smaller_batch_claim(agg, b_opt, one_pass_batch),
        _overfit_claim(evals, ends, agg["batch_size"].tolist(), b_opt),
        _pool_noise_claim(agg),
    ]
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


# --- recipe ablations ---------------------------------------------------------------------------


def best_per(endpoints: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Best val loss and stopping epoch per combination of `by`, averaged over pools."""
    return (
        endpoints.groupby(by)
        .agg(
            best_val_loss=("best_val_loss", "mean"),
            stop_epoch=("stop_epoch", "mean"),
            pools=("best_val_loss", "count"),
        )
        .reset_index()
    )


def _loader_claims(loader_ends: pd.DataFrame, store: Path) -> list[list[str]]:
    """One row per batch size (first pool): REPACK < SHUFFLE < REPEAT, as two paired differences
    of the tuned endpoints over validation documents, each with its interval."""
    rows = []
    first_pool = loader_ends[loader_ends["pool"] == sorted(loader_ends["pool"])[0]]
    for batch, group in first_pool.groupby("batch_size"):
        ends = group.set_index("loader")
        docs = {
            k: document_losses(store / ends.loc[k, "run_id"], int(ends.loc[k, "stop_step"]))
            for k in ("repack", "shuffle", "repeat")
        }
        tokens = docs["repack"][1]
        pairs = [("repack", "shuffle"), ("shuffle", "repeat")]
        diffs = [paired_difference(docs[a][0], docs[b][0], tokens) for a, b in pairs]
        measured = "; ".join(describe(f"{a} - {b}", d) for (a, b), d in zip(pairs, diffs))
        rows.append(
            [
                f"REPACK < SHUFFLE < REPEAT in best val loss (batch {batch})",
                "REPACK < SHUFFLE < REPEAT",
                f"{measured} (nats/token, 90% paired interval over validation documents)",
                lower_verdict(diffs),
            ]
        )
    return rows


def _embedding_claims(embeddings: pd.DataFrame) -> list[list[str]]:
    """Embedding weight decay helps, tying alone does little, both together are best."""
    emb = embeddings.set_index(["tie_embeddings", "embedding_weight_decay"])["best_val_loss"]
    untied0, tied0 = emb[(False, 0.0)], emb[(True, 0.0)]
    untied_pos = emb[[k for k in emb.index if not k[0] and k[1] > 0]].min()
    best_key = emb.idxmin()
    return [
        [
            "positive embedding weight decay helps (untied)",
            "yes",
            f"{untied_pos:.3f} vs {untied0:.3f} without",
            _verdict(untied_pos < untied0),
        ],
        [
            "tying alone does little",
            "yes",
            f"tied {tied0:.3f} vs untied {untied0:.3f} (change {tied0 - untied0:+.3f}; "
            f"embedding decay changes {untied_pos - untied0:+.3f})",
            _verdict(abs(tied0 - untied0) < abs(untied_pos - untied0)),
        ],
        [
            "tying and embedding decay together are best",
            "yes",
            f"best: tie={best_key[0]}, embedding decay={best_key[1]:g} ({emb.min():.3f})",
            _verdict(bool(best_key[0] and best_key[1] > 0)),
        ],
    ]


def _combined_recipe_claims(original: pd.DataFrame, combined: pd.DataFrame) -> list[list[str]]:
    """Best val loss (nats), stopping epoch and optimal batch: original vs combined recipe."""
    o, c = original.set_index("batch_size"), combined.set_index("batch_size")
    b_o, b_c = int(o["best_val_loss"].idxmin()), int(c["best_val_loss"].idxmin())
    return [
        [
            "the combined recipe lowers the best val loss",
            "yes",
            f"{c['best_val_loss'].min():.3f} vs {o['best_val_loss'].min():.3f} "
            f"(change {c['best_val_loss'].min() - o['best_val_loss'].min():+.3f})",
            _verdict(c["best_val_loss"].min() < o["best_val_loss"].min()),
        ],
        [
            "the best stopping point moves later",
            "yes (20 -> 32 epochs at the largest model)",
            f"{o.loc[b_o, 'stop_epoch']:.1f} -> {c.loc[b_c, 'stop_epoch']:.1f} epochs "
            "(at each recipe's optimal batch)",
            _verdict(c.loc[b_c, "stop_epoch"] > o.loc[b_o, "stop_epoch"]),
        ],
        [
            "the optimal batch size under the combined recipe",
            "changes (reported)",
            f"{b_o} -> {b_c}",
            "n/a",
        ],
    ]


def recipe_claims(
    loader_ends: pd.DataFrame,
    embeddings: pd.DataFrame,
    original: pd.DataFrame,
    combined: pd.DataFrame,
    store: str | Path,
) -> pd.DataFrame:
    """Claims of the recipe section. `loader_ends`: batch_endpoints(.., [loader]) of runs in
    `store`; `embeddings`: best_per(.., [tie_embeddings, embedding_weight_decay]); `original` /
    `combined`: best_per(.., [batch_size])."""
    rows = [
        *_loader_claims(loader_ends, Path(store)),
        *_embedding_claims(embeddings),
        *_combined_recipe_claims(original, combined),
    ]
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


# --- GPU-time frontier --------------------------------------------------------------------------


def frontier_claims(table: pd.DataFrame, cross: pd.DataFrame, gpus: int) -> pd.DataFrame:
    """Claims of the frontier section. `table`: frontier.frontier(..) (deadlines in step units);
    `cross`: frontier.crossovers(..); `gpus`: the GPU count at which deadlines are compared."""
    feasible = table[(table["gpus"] == gpus)].dropna()
    tight, loose = feasible.iloc[0], feasible.iloc[-1]
    wins = cross[cross["smaller_wins"]] if len(cross) else cross
    first = ""
    if len(wins):
        w = wins.iloc[0]
        first = (
            f", first at T={wins['deadline'].min():g}: batch {int(w['small_batch'])} on "
            f"{int(w['small_gpus'])} vs {int(w['large_batch'])} on {int(w['large_gpus'])} GPUs"
        )
    rows = [
        [
            "tight deadlines favour larger batches",
            "yes",
            f"{gpus} GPUs: optimal batch {int(tight['batch_size'])} at T={tight['deadline']:g} "
            f"vs {int(loose['batch_size'])} at T={loose['deadline']:g}",
            _verdict(tight["batch_size"] > loose["batch_size"]),
        ],
        [
            "under a fixed deadline a smaller batch on fewer GPUs can beat a larger batch on "
            "more GPUs",
            "yes",
            f"{len(wins)} of {len(cross)} (deadline, pair) comparisons" + first,
            _verdict(len(wins) > 0),
        ],
        [
            "latency-oriented parallelism trades extra GPUs for shorter steps",
            "yes (projection in the paper too)",
            "projected only (dashed curves above)",
            "n/a",
        ],
    ]
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


# --- critical batch size ------------------------------------------------------------------------

ALPHA_TOLERANCE = 0.25
"""The D^0.47 claim agrees when the fitted exponent is this close (3 pools: a coarse test)."""


def _noise_scale_claim(trajectory: pd.DataFrame) -> list[str]:
    first = trajectory.groupby("batch_size")["b_simple"].first()
    last = trajectory.groupby("batch_size")["b_simple"].last()
    return [
        "the gradient noise scale grows as the loss falls (McCandlish et al.)",
        "yes",
        "; ".join(f"batch {b}: B_simple {first[b]:.1f} -> {last[b]:.1f}" for b in first.index),
        _verdict(bool((last > first).all())),
    ]


def _hyperbola_claim(middle: pd.Series | None) -> list[str]:
    measured, verdict = "no fit", "n/a"
    if middle is not None:
        measured = (
            f"target {middle['target']}: B_crit {middle['B_crit (McCandlish)']:.1f} "
            f"(90% CI {middle['B_crit 90% CI']}), "
            f"max |log residual| {middle['max |log residual|']:.2f}"
        )
        verdict = "yes" if middle["max |log residual|"] < 0.3 else "no (poor fit)"
    return [
        "steps fall ~1/B below B_crit and level off above it (S = S_min + E_min/B)",
        "yes",
        measured,
        verdict,
    ]


def _data_scaling_claim(scaling: pd.DataFrame, law: dict) -> list[str]:
    measured, verdict = "not fitted", "n/a"
    if law:
        alpha = law["B*"]["alpha"]
        measured = (
            f"alpha = {alpha:.2f} (B_crit: {law['B_crit']['alpha']:.2f}) over {len(scaling)} "
            f"pools of {', '.join(f'{t:,}' for t in scaling['pool tokens'])} tokens"
        )
        if alpha <= 0:
            verdict = "no (B* does not grow)"
        elif abs(alpha - 0.47) <= ALPHA_TOLERANCE:
            verdict = "yes"
        else:
            verdict = (
                f"partly (B* grows, but as D^{alpha:.2f}: more than {ALPHA_TOLERANCE} from 0.47)"
            )
    return [
        "critical batch size (20% over linear scaling) B* grows with data size as D^0.47 "
        "(Zhang et al.)",
        "alpha = 0.47",
        measured,
        verdict,
    ]


def _wsd_claim(middle: pd.Series | None, min_batch: int) -> list[str]:
    measured, verdict = "no fit", "n/a"
    if middle is not None:
        b_opt, b_min = middle["B_opt (Zhou)"], middle["B_min (Zhou)"]
        measured = (
            f"B_opt {b_opt:.1f}, B_min {b_min:.2f}; fewest tokens at batch "
            f"{middle['fewest tokens at batch']} (cosine schedule here, not WSD)"
        )
        if np.isfinite(b_opt) and b_min >= min_batch:
            verdict = "yes"
        elif np.isfinite(b_opt):
            verdict = "partly (B_opt only; every batch reaches the target)"
        else:
            verdict = "no (no interior token minimum)"
    return [
        "a minimum batch B_min and a token-optimal batch B_opt exist (Zhou et al., WSD)",
        "yes (WSD)",
        measured,
        verdict,
    ]


def cbs_claims(
    trajectory: pd.DataFrame,
    fits: pd.DataFrame,
    scaling: pd.DataFrame,
    law: dict,
    schedules: pd.DataFrame,
    min_batch: int,
) -> pd.DataFrame:
    """Claims of the critical-batch section. `trajectory`: cbs.noise_trajectory; `fits`:
    cbs.fit_targets (the middle target is judged); `scaling` / `law`: cbs.pool_size_scaling /
    cbs.scaling_laws; `schedules`: cbs.schedules_vs_fixed (row 0 the fixed batch);
    `min_batch`: the smallest batch of the grid (sequences)."""
    middle = fits.iloc[len(fits) // 2] if len(fits) else None
    fixed, best_schedule = (
        schedules.iloc[0]["best val loss"],
        schedules.iloc[1:]["best val loss"].min(),
    )
    rows = [
        _noise_scale_claim(trajectory),
        _hyperbola_claim(middle),
        _data_scaling_claim(scaling, law),
        _wsd_claim(middle, min_batch),
        [
            "a batch-size schedule beats the best fixed batch (Zhou et al.: ramp-up)",
            "yes",
            f"best schedule {best_schedule:.4f} vs fixed {fixed:.4f} nats",
            _verdict(bool(best_schedule < fixed)),
        ],
    ]
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)
