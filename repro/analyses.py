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

from repro.data.pool import load_pool
from repro.results import tuned_endpoints

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


def train_val_shared_docs(paths: list[str | Path]) -> list[int]:
    """Per pool, how many validation documents (as token sequences) also appear in its training
    split."""
    shared = []
    for path in paths:
        pool = load_pool(path)
        train = {pool.train.doc(i).tobytes() for i in range(pool.train.n_docs)}
        shared.append(sum(pool.val.doc(i).tobytes() in train for i in range(pool.val.n_docs)))
    return shared


# --- batch-size sweep ---------------------------------------------------------------------------


def batch_endpoints(
    runs: pd.DataFrame, evals: pd.DataFrame, extra_group: list[str] | None = None
) -> pd.DataFrame:
    """Tuned endpoints per pool x model x batch size (x extra fields); grid-edge notes are in its
    `edge` column."""
    return tuned_endpoints(
        runs, evals, ["pool", "model", "batch_size", *(extra_group or [])], warn=False
    )


def across_pools(endpoints: pd.DataFrame, by: list[str] | None = None) -> pd.DataFrame:
    """Mean, min, max and std over pools of the tuned best validation loss, per model x batch
    size."""
    by = by or ["model", "batch_size"]
    agg = (
        endpoints.groupby(by)["best_val_loss"]
        .agg(["mean", "min", "max", "std", "count"])
        .reset_index()
    )
    stop = endpoints.groupby(by)["stop_epoch"].mean().rename("mean stop epoch").reset_index()
    return agg.merge(stop, on=by)


def endpoint_curve(evals: pd.DataFrame, endpoint: pd.Series) -> pd.DataFrame:
    """Training and validation curve (per evaluation point) of the run an endpoint chose."""
    return evals[evals["run_id"] == endpoint["run_id"]].sort_values("step")


def _final(evals: pd.DataFrame, rid: str) -> pd.Series:
    return evals[evals["run_id"] == rid].sort_values("step").iloc[-1]


def batch_sweep_claims(
    runs: pd.DataFrame, evals: pd.DataFrame, endpoints: pd.DataFrame, one_pass_batch: int
) -> pd.DataFrame:
    """The study's batch-size claims against this sweep (first model; loss averaged over pools);
    `one_pass_batch` is the batch a one-pass recipe would use at this scale."""
    model = endpoints["model"].iloc[0]
    agg = across_pools(endpoints[endpoints["model"] == model]).sort_values("batch_size")
    batches = agg["batch_size"].tolist()
    b_opt = int(agg.loc[agg["mean"].idxmin(), "batch_size"])
    rows = []
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
    rows.append(
        [
            "best val loss vs batch size is U-shaped (interior optimum)",
            "yes",
            f"optimum at batch {b_opt} of {batches}; edges worse by {margin:.3f} nats "
            f"vs pool std up to {noise:.3f}",
            verdict,
        ]
    )
    usual = agg.loc[agg["batch_size"] == one_pass_batch, "mean"]
    smaller = None if usual.empty else bool(b_opt < one_pass_batch)
    rows.append(
        [
            "smaller batches than usual win",
            "yes (optimum below the one-pass batch, 64 at paper scale)",
            f"optimum {b_opt} vs one-pass batch {one_pass_batch}: {agg['mean'].min():.3f} vs "
            + (f"{usual.item():.3f} nats" if not usual.empty else "not in the grid"),
            _verdict(smaller),
        ]
    )

    def gap(batch: int) -> tuple[float, float]:
        """(final train loss, best val loss) of the tuned endpoint at `batch`, averaged over
        pools."""
        ends = endpoints[(endpoints["model"] == model) & (endpoints["batch_size"] == batch)]
        train = np.mean([_final(evals, rid)["train_loss"] for rid in ends["run_id"]])
        return float(train), float(ends["best_val_loss"].mean())

    if len(batches) >= 2 and b_opt != batches[0]:
        (t_small, v_small), (t_opt, v_opt) = gap(batches[0]), gap(b_opt)
        overfits = t_small < t_opt and v_small > v_opt
        rows.append(
            [
                "the smallest batch overfits: lower train loss, worse val loss",
                "yes",
                f"batch {batches[0]}: train {t_small:.3f}, val {v_small:.3f}; "
                f"optimum {b_opt}: train {t_opt:.3f}, val {v_opt:.3f}",
                _verdict(overfits),
            ]
        )
    else:
        rows.append(
            [
                "the smallest batch overfits: lower train loss, worse val loss",
                "yes",
                f"the smallest batch {batches[0]} is the optimum",
                _verdict(False if len(batches) >= 2 else None),
            ]
        )
    spread = agg["std"].fillna(0).max()
    depth = agg["mean"].max() - agg["mean"].min()
    rows.append(
        [
            "the batch-size effect exceeds pool-to-pool noise",
            "(implicit)",
            f"range over batch sizes {depth:.3f} nats vs largest std over pools {spread:.3f}",
            _verdict(None if agg["count"].max() < 2 else bool(depth > 2 * spread)),
        ]
    )
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


def recipe_claims(
    loaders: pd.DataFrame, embeddings: pd.DataFrame, original: pd.DataFrame, combined: pd.DataFrame
) -> pd.DataFrame:
    """Claims of the recipe section. `loaders`: best_per(.., [batch_size, loader]); `embeddings`:
    best_per(.., [tie_embeddings, embedding_weight_decay]); `original` / `combined`:
    best_per(.., [batch_size])."""
    rows = []
    for batch, group in loaders.groupby("batch_size"):
        loss = group.set_index("loader")["best_val_loss"]
        order = " < ".join(loss.sort_values().index)
        rows.append(
            [
                f"REPACK < SHUFFLE < REPEAT in best val loss (batch {batch})",
                "REPACK < SHUFFLE < REPEAT",
                f"{order} ({', '.join(f'{k} {v:.3f}' for k, v in loss.items())})",
                _verdict(loss["repack"] < loss["shuffle"] < loss["repeat"]),
            ]
        )
    emb = embeddings.set_index(["tie_embeddings", "embedding_weight_decay"])["best_val_loss"]
    untied0, tied0 = emb[(False, 0.0)], emb[(True, 0.0)]
    untied_pos = emb[[k for k in emb.index if not k[0] and k[1] > 0]].min()
    rows.append(
        [
            "positive embedding weight decay helps (untied)",
            "yes",
            f"{untied_pos:.3f} vs {untied0:.3f} without",
            _verdict(untied_pos < untied0),
        ]
    )
    rows.append(
        [
            "tying alone does little",
            "yes",
            f"tied {tied0:.3f} vs untied {untied0:.3f} (change {tied0 - untied0:+.3f}; "
            f"embedding decay changes {untied_pos - untied0:+.3f})",
            _verdict(abs(tied0 - untied0) < abs(untied_pos - untied0)),
        ]
    )
    best_key = emb.idxmin()
    rows.append(
        [
            "tying and embedding decay together are best",
            "yes",
            f"best: tie={best_key[0]}, embedding decay={best_key[1]:g} ({emb.min():.3f})",
            _verdict(bool(best_key[0] and best_key[1] > 0)),
        ]
    )
    o, c = original.set_index("batch_size"), combined.set_index("batch_size")
    b_o, b_c = int(o["best_val_loss"].idxmin()), int(c["best_val_loss"].idxmin())
    rows.append(
        [
            "the combined recipe lowers the best val loss",
            "yes",
            f"{c['best_val_loss'].min():.3f} vs {o['best_val_loss'].min():.3f} "
            f"(change {c['best_val_loss'].min() - o['best_val_loss'].min():+.3f})",
            _verdict(c["best_val_loss"].min() < o["best_val_loss"].min()),
        ]
    )
    rows.append(
        [
            "the best stopping point moves later",
            "yes (20 -> 32 epochs at the largest model)",
            f"{o.loc[b_o, 'stop_epoch']:.1f} -> {c.loc[b_c, 'stop_epoch']:.1f} epochs "
            "(at each recipe's optimal batch)",
            _verdict(c.loc[b_c, "stop_epoch"] > o.loc[b_o, "stop_epoch"]),
        ]
    )
    rows.append(
        [
            "the optimal batch size under the combined recipe",
            "changes (reported)",
            f"{b_o} -> {b_c}",
            "n/a",
        ]
    )
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)
