"""Notebook 04's claims held out on replicates, on hand-made curves with known answers."""

import numpy as np
import pandas as pd
import pytest

from repro.analysis.deadline_claims import (
    deadline_points,
    frontier_claims,
    held_out_arm,
    judged_crossovers,
)
from repro.analysis.frontier import unit_step_time
from repro.analysis.results import MemoryDocuments, Results
from repro.errors import ReproError

TOKENS = np.full(40, 50)  # 40 validation documents of 50 scored tokens
DIFFICULTY = np.random.default_rng(0).normal(0, 0.5, 40)  # shared by every evaluation
POOLS = ("p0", "p1", "p2")
# Batch 2 (1 GPU) and batch 8 (4 GPUs) at micro-batch 2: one step costs one unit for both.
STEP = unit_step_time(2)
DEADLINES = [10, 20, 25, 40, 80, 160]


def _study(spec: dict, noise: float = 0.01, pool_sd: float = 0.01) -> Results:
    """spec: {batch_size: [(step, mean loss nats/token), ...]}: one run per batch on each pool,
    each evaluation's per-document loss = mean + the document's difficulty + a pool shift + noise;
    evaluation epochs count 1, 2, 3, ... per run."""
    rng = np.random.default_rng(1)
    runs, evals, documents = [], [], {}
    for pool in POOLS:
        shift = pool_sd * rng.standard_normal()
        for batch, points in spec.items():
            rid = f"{pool}-b{batch}"
            runs.append(
                {"run_id": rid, "pool": pool, "seed": 0, "model": "tiny", "batch_size": batch}
                | {"lr": 1e-3, "weight_decay": 0.1, "epochs": 4, "status": "done"}
            )
            for epoch, (step, loss) in enumerate(points, 1):
                per_token = loss + shift + DIFFICULTY + rng.normal(0, noise, len(TOKENS))
                documents[(rid, step)] = (per_token * TOKENS, TOKENS)
                val = float(per_token.mean())
                evals.append({"run_id": rid, "step": step, "epoch": epoch, "val_loss": val})
    return Results(pd.DataFrame(runs), pd.DataFrame(evals), MemoryDocuments(documents))


def _claims(spec, noise=0.01) -> pd.DataFrame:
    results = _study(spec, noise)
    judged = judged_crossovers(deadline_points(results), results, DEADLINES, STEP, 2)
    table = frontier_claims(results, judged, DEADLINES, STEP, 4)
    return table.rename(index=dict(zip(KEYS.values(), KEYS)))


KEYS = {
    "tight": "tight-favours-large",
    "smaller": "fewer-gpus-smaller-batch",
    "latency": "latency-parallelism",
}


@pytest.mark.parametrize(
    "small,large,verdict",
    [
        # batch 8 leads at T=40 (the tightest deadline reaching both), batch 2 leads at T=160
        ([3.8, 2.8, 2.5], [4.0, 3.5, 3.0], "agrees"),
        # batch 2 leads early and stalls, batch 8 keeps improving: the small batches lose ground
        ([3.0, 2.9, 2.9], [3.5, 3.4, 2.0], "disagrees"),
        # equal within document noise
        ([3.0, 3.0, 3.0], [3.0, 3.0, 3.0], "undetermined"),
    ],
)
def test_tight_deadlines_claim_in_all_three_directions(small, large, verdict):
    steps = {"agrees": ([40, 80, 160], [10, 20, 40])}.get(verdict, ([10, 20, 160], [10, 20, 160]))
    spec = {2: list(zip(steps[0], small)), 8: list(zip(steps[1], large))}
    claims = _claims(spec, noise=0.5 if verdict == "undetermined" else 0.01)
    assert claims.loc["tight", "agrees?"] == verdict
    measured = claims.loc["tight", "measured here"]
    assert "difference-in-differences (loose - tight)" in measured
    assert "batches [2] - [8]" in measured  # plain numbers, not numpy reprs
    assert claims.loc["latency", "agrees?"] == "undetermined"  # projected only


def test_a_held_out_arm_reports_what_the_other_replicates_chose():
    """On each pool, within T = 20, batch 8's evaluations at steps 10 and 20: the other pools
    choose step 20 (lower), and each pool reports its own step-20 losses."""
    results = _study({8: [(10, 3.5), (20, 3.0), (40, 2.0)]})
    arm = held_out_arm(deadline_points(results), results, {8: 4}, 20, STEP)
    assert arm["pool"].tolist() == list(POOLS)
    assert arm["val_loss"].to_numpy() == pytest.approx([3.0, 3.0, 3.0], abs=0.05)
    assert (arm["held_out"] == "replicates, documents").all()


@pytest.mark.parametrize(
    "small,large,verdict",
    [
        # batch 2 on 1 GPU is lower at T=10, 20, 25 while both train
        ([3.0, 2.5, 2.4], [3.4, 3.2, 3.1], "agrees"),
        # batch 8 on 4 GPUs is lower at every deadline while both train
        ([3.8, 3.5, 2.0], [3.4, 3.0, 2.8], "disagrees"),
        ([3.0, 3.0, 3.0], [3.0, 3.0, 3.0], "undetermined"),
    ],
)
def test_smaller_batch_claim_counts_only_deadlines_where_both_train(small, large, verdict):
    spec = {2: list(zip([10, 20, 80], small)), 8: list(zip([10, 20, 30], large))}
    results = _study(spec, noise=0.5 if verdict == "undetermined" else 0.01)
    judged = judged_crossovers(deadline_points(results), results, DEADLINES, STEP, 2)
    assert judged["deadline"].tolist() == [10, 20, 25]  # batch 8's last evaluation costs 30
    assert judged["level"].iloc[0] == pytest.approx(1 - 0.1 / 3)  # 3 comparisons
    claims = frontier_claims(results, judged, DEADLINES, STEP, 4)
    assert claims.loc[KEYS["smaller"], "agrees?"] == verdict
    measured = claims.loc[KEYS["smaller"], "measured here"]
    assert "3 (deadline, pair) comparisons while both train" in measured


def test_one_replicate_gives_no_verdict():
    results = _study({2: [(40, 3.8), (80, 2.8), (160, 2.5)], 8: [(10, 4.0), (20, 3.5), (40, 3.0)]})
    one = results.subset(results.runs["pool"] == "p0")
    judged = judged_crossovers(deadline_points(one), one, DEADLINES, STEP, 2)
    claims = frontier_claims(one, judged, DEADLINES, STEP, 4)
    assert set(claims["agrees?"]) == {"undetermined"}


def test_frontier_claims_need_one_model_size():
    results = _study({2: [(10, 3.0)], 8: [(10, 3.0)]})
    results.runs.loc[1, "model"] = "cpu-s"
    with pytest.raises(ReproError, match="one model size"):
        frontier_claims(results, pd.DataFrame(), DEADLINES, STEP, 4)
