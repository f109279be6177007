"""Claim tables are computed from results and say "no" when the data disagree."""

import pandas as pd

from repro.analyses import batch_sweep_claims, recipe_claims


def _sweep(best_by_batch, final_train_by_batch):
    """Endpoints and curves for two pools with given best val loss and final train loss per
    batch."""
    runs, evals, ends = [], [], []
    for pool in ("p0", "p1"):
        for b, best in best_by_batch.items():
            rid = f"{pool}-{b}"
            runs.append({"run_id": rid, "batch_size": b})
            evals += [
                {"run_id": rid, "step": 1, "epoch": 1.0, "val_loss": best + 0.5, "train_loss": 5.0},
                {
                    "run_id": rid,
                    "step": 2,
                    "epoch": 2.0,
                    "val_loss": best,
                    "train_loss": final_train_by_batch[b],
                },
            ]
            ends.append(
                {
                    "pool": pool,
                    "model": "m",
                    "batch_size": b,
                    "best_val_loss": best + (0.01 if pool == "p1" else 0.0),
                    "stop_epoch": 2.0,
                    "run_id": rid,
                }
            )
    return pd.DataFrame(runs), pd.DataFrame(evals), pd.DataFrame(ends)


def test_u_shape_with_overfitting_small_batch_agrees():
    runs, evals, ends = _sweep({1: 3.2, 4: 3.0, 16: 3.4}, {1: 1.0, 4: 2.0, 16: 3.0})
    claims = batch_sweep_claims(runs, evals, ends, one_pass_batch=16).set_index("claim")["agrees?"]
    assert (
        claims.iloc[0] == "yes"
        and claims.iloc[1] == "yes"
        and claims.iloc[2] == "yes"
        and claims.iloc[3] == "yes"
    )


def test_interior_optimum_within_noise_is_not_a_u():
    runs, evals, ends = _sweep({1: 3.001, 4: 3.0, 16: 3.4}, {1: 1.0, 4: 2.0, 16: 3.0})
    claims = batch_sweep_claims(runs, evals, ends, one_pass_batch=16)
    assert claims.loc[0, "agrees?"] == "no (within pool noise)"


def test_monotone_curve_disagrees_plainly():
    runs, evals, ends = _sweep({1: 3.0, 4: 3.2, 16: 3.4}, {1: 1.0, 4: 2.0, 16: 3.0})
    claims = batch_sweep_claims(runs, evals, ends, one_pass_batch=16)
    assert (
        claims.loc[0, "agrees?"] == "no" and "optimum at batch 1" in claims.loc[0, "measured here"]
    )
    assert claims.loc[2, "agrees?"] == "no"


def test_recipe_claims_both_ways():
    loaders = pd.DataFrame(
        {
            "batch_size": [2] * 3 + [8] * 3,
            "loader": ["repeat", "shuffle", "repack"] * 2,
            "best_val_loss": [3.3, 3.2, 3.1, 3.1, 3.2, 3.3],
        }
    )
    embeddings = pd.DataFrame(
        {
            "tie_embeddings": [False, False, True, True],
            "embedding_weight_decay": [0.0, 0.1, 0.0, 0.1],
            "best_val_loss": [3.2, 3.1, 3.19, 3.0],
        }
    )
    original = pd.DataFrame(
        {"batch_size": [2, 8], "best_val_loss": [3.2, 3.3], "stop_epoch": [4.0, 5.0]}
    )
    combined = pd.DataFrame(
        {"batch_size": [2, 8], "best_val_loss": [3.1, 3.0], "stop_epoch": [6.0, 7.0]}
    )
    claims = recipe_claims(loaders, embeddings, original, combined)["agrees?"].tolist()
    assert claims == ["yes", "no", "yes", "yes", "yes", "yes", "yes", "n/a"]
