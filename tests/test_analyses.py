"""Claim tables are computed from results and say "no" when the data disagree."""

import numpy as np
import pandas as pd

from repro.analysis.analyses import (
    batch_sweep_claims,
    cbs_claims,
    frontier_claims,
    pool_claims,
    recipe_claims,
)


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


def _loader_ends(store, means: dict[int, dict[str, float]]) -> pd.DataFrame:
    """Endpoints of hand-made runs whose 30 validation documents (100 tokens each) have mean loss
    means[batch][loader] plus document effects shared by every run (what pairing removes) and a
    little run noise."""
    rows, doc_effect = [], 0.3 * np.random.default_rng(0).standard_normal(30)
    for batch, by_loader in means.items():
        for loader, mean in by_loader.items():
            rid = f"b{batch}-{loader}"
            (store / rid / "val_docs").mkdir(parents=True)
            noise = 0.002 * np.random.default_rng(len(rows) + 1).standard_normal(30)
            np.save(store / rid / "val_docs" / "tokens.npy", np.full(30, 100))
            np.save(store / rid / "val_docs" / "step-8.npy", (mean + doc_effect + noise) * 100)
            row = {"pool": "p0", "batch_size": batch, "loader": loader, "run_id": rid}
            rows.append(row | {"stop_step": 8, "best_val_loss": mean})
    return pd.DataFrame(rows)


def test_recipe_claims_in_all_three_directions(tmp_path):
    loader_ends = _loader_ends(
        tmp_path,
        {
            2: {"repeat": 3.3, "shuffle": 3.2, "repack": 3.1},  # as the paper: agrees
            4: {"repeat": 3.2, "shuffle": 3.2005, "repack": 3.1},  # within noise: undetermined
            8: {"repeat": 3.1, "shuffle": 3.2, "repack": 3.3},  # reversed: disagrees
        },
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
    claims = recipe_claims(loader_ends, embeddings, original, combined, tmp_path)
    assert claims["agrees?"].tolist()[:3] == ["agrees", "undetermined", "disagrees"]
    assert claims["agrees?"].tolist()[3:] == ["yes", "yes", "yes", "yes", "yes", "n/a"]
    assert claims.loc[0, "measured here"].startswith("repack - shuffle -0.100 [")


def test_pool_claims_yes_for_clean_pools_and_no_for_a_leak():
    overlap = pd.DataFrame(
        {"shared train docs": [1], "train docs a": [12], "identical val": [True]}
    )
    clean = pool_claims(overlap, [0, 0])
    assert clean["agrees?"].tolist() == ["yes", "yes", "yes"]
    assert clean.loc[2, "measured here"] == "shared train docs: [1] of [12]"
    same = overlap.assign(**{"shared train docs": [12], "identical val": [False]})
    assert pool_claims(same, [0, 3])["agrees?"].tolist() == ["no", "no", "no"]


def _frontier_table(batches_by_deadline, gpus=4):
    rows = [
        {
            "gpus": gpus,
            "deadline": t,
            "best_val_loss": 3.0 - t / 100,
            "batch_size": b,
            "run_id": "r",
        }
        for t, b in batches_by_deadline.items()
    ]
    unreachable = {"gpus": gpus, "deadline": 1.0, "best_val_loss": np.nan, "batch_size": np.nan}
    return pd.DataFrame([unreachable | {"run_id": None}, *rows])


def test_frontier_claims_reads_the_tightest_and_loosest_reachable_deadline():
    table = _frontier_table({16.0: 8, 248.0: 2})
    cross = pd.DataFrame(
        {
            "deadline": [16.0, 136.7, 248.0],
            "small_batch": [2, 2, 2],
            "small_gpus": [1, 1, 1],
            "large_batch": [8, 8, 8],
            "large_gpus": [4, 4, 4],
            "smaller_wins": [False, True, True],
        }
    )
    claims = frontier_claims(table, cross, 4)
    assert claims["agrees?"].tolist() == ["yes", "yes", "n/a"]
    assert claims.loc[0, "measured here"] == "4 GPUs: optimal batch 8 at T=16 vs 2 at T=248"
    assert claims.loc[1, "measured here"] == (
        "2 of 3 (deadline, pair) comparisons, first at T=136.7: batch 2 on 1 vs 8 on 4 GPUs"
    )
    none = frontier_claims(
        _frontier_table({16.0: 2, 248.0: 8}), cross.assign(smaller_wins=False), 4
    )
    assert none["agrees?"].tolist() == ["no", "no", "n/a"]
    assert none.loc[1, "measured here"] == "0 of 3 (deadline, pair) comparisons"


def _fits(b_opt=2.2, b_min=0.0, residual=0.13):
    return pd.DataFrame(
        [
            {
                "target": target,
                "B_crit (McCandlish)": 10.4,
                "B_crit 90% CI": "5.4-23.5",
                "max |log residual|": residual,
                "B_opt (Zhou)": b_opt,
                "B_min (Zhou)": b_min,
                "fewest tokens at batch": "1, 2, 4",
            }
            for target in (2.559, 2.689, 2.819)
        ]
    )


def _cbs_inputs(alpha=1.13, fixed=2.524, schedule=2.5775):
    trajectory = pd.DataFrame({"batch_size": [8, 8, 32, 32], "b_simple": [3.9, 95.5, 1.2, 2.2]})
    scaling = pd.DataFrame({"pool tokens": [7904, 12546, 24792]})
    law = {"B*": {"alpha": alpha}, "B_crit": {"alpha": 1.15}}
    schedules = pd.DataFrame({"best val loss": [fixed, schedule, 2.64]})
    return trajectory, scaling, law, schedules


def test_cbs_claims_reads_the_middle_target_and_the_exponent():
    trajectory, scaling, law, schedules = _cbs_inputs()
    claims = cbs_claims(trajectory, _fits(), scaling, law, schedules, min_batch=1)
    assert claims["agrees?"].tolist() == [
        "yes",
        "yes",
        "partly (B* grows, but as D^1.13: more than 0.25 from 0.47)",
        "partly (B_opt only; every batch reaches the target)",
        "no",
    ]
    measured = claims["measured here"].tolist()
    assert measured[0] == "batch 8: B_simple 3.9 -> 95.5; batch 32: B_simple 1.2 -> 2.2"
    assert measured[1] == ("target 2.689: B_crit 10.4 (90% CI 5.4-23.5), max |log residual| 0.13")
    assert measured[2] == (
        "alpha = 1.13 (B_crit: 1.15) over 3 pools of 7,904, 12,546, 24,792 tokens"
    )
    assert measured[4] == "best schedule 2.5775 vs fixed 2.5240 nats"


def test_cbs_claims_other_verdicts_and_missing_fits():
    trajectory, scaling, law, schedules = _cbs_inputs(alpha=0.5, schedule=2.5)
    claims = cbs_claims(trajectory, _fits(b_min=2.0, residual=0.5), scaling, law, schedules, 1)
    assert claims["agrees?"].tolist() == ["yes", "no (poor fit)", "yes", "yes", "yes"]
    shrinking = trajectory.assign(b_simple=[3.0, 2.0, 1.2, 2.2])
    no_fit = cbs_claims(shrinking, pd.DataFrame(), scaling, {}, schedules, 1)
    assert no_fit["agrees?"].tolist() == ["no", "n/a", "n/a", "n/a", "yes"]
    assert no_fit["measured here"].tolist()[1:3] == ["no fit", "not fitted"]
    flat = cbs_claims(trajectory, _fits(b_opt=np.nan), scaling, _cbs_inputs(-0.1)[2], schedules, 1)
    assert flat["agrees?"].tolist()[2:4] == [
        "no (B* does not grow)",
        "no (no interior token minimum)",
    ]
