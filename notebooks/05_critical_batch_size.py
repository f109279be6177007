# %% [markdown]
# # 05 — Critical batch size: where does "small batch" end?
#
# **Question.** Notebook 02 found the best batch size for a fixed pool. The literature gives three
# ways to locate the batch size beyond which more data per step stops paying: McCandlish et al. 2018
# (gradient noise scale B_simple = tr(Σ)/|G|², and the steps/examples hyperbola (S/S_min −
# 1)(E/E_min − 1) = 1 with B_crit = E_min/S_min); Zhang et al. 2025 (S(B) = a + b/B, critical where
# steps exceed linear scaling from the smallest batch by 20%; B* grows with data, ≈ 22.7·D^0.47, D
# in millions of tokens); Zhou et al. 2026 (under WSD, E(S) is piecewise, giving B_min — below it a
# target is not reached — and B_opt, the fewest tokens). And should the batch change during
# training?
#
# **Method.** (1) Runs that log B_simple from micro-batch and global-batch gradient norms (each
# EMA-smoothed before the ratio). (2) Steps-to-target from notebook 02's sweep on pool 0: for each
# target loss and batch size, the fewest steps over the tuned lr / weight decay at which an
# evaluation first reaches it; the three fits, with residuals and bootstrap intervals over the
# points. (3) The same sweep (first weight decay only) on pools of several sizes: B_crit and B*
# against pool size D. (4) Batch-size schedules (notebook 04's runs) against the best fixed batch.
# Units: batch sizes in sequences of `seq_len` tokens; S in optimizer steps; E in tokens.
# Evaluations fall every `eval_every` epochs, so steps-to-target are measured at that resolution.

# %% tags=["parameters"]
import os

preset = os.environ.get("REPRO_PRESET", "cpu")  # smoke | cpu | gpu-small | gpu | FILE.yaml
workers = None  # parallel runs; default: the preset's

# %%
from repro.analysis import analyses, figures
from repro.study import open_study

study = open_study(preset, workers=workers)
P = study.preset
print(study.summary())

# %%
from repro.analysis import cbs

pools = study.pools()
noise_runs, noise_evals = study.sweep(study.noise_scale_grid())
runs, evals = study.sweep(study.batch_sweep_grid())
runs0 = runs[runs["pool"] == str(pools[0])]
evals0 = evals[evals["run_id"].isin(runs0["run_id"])]
print(f"{len(noise_runs)} noise-scale runs, {len(runs0)} sweep runs on pool 0")

# %%
print(
    f"noise-scale evaluation points: {len(noise_evals)}, "
    f"with B_simple: {int(noise_evals['b_simple'].notna().sum())}"
)

# %% [markdown]
# ## The gradient noise scale over training
#
# B_simple at each evaluation (EMA-smoothed estimates); the table shows the first, middle and last
# evaluation of each run.

# %%
study.save(figures.noise_scale(noise_runs, noise_evals), "05_noise_scale")
trajectory = cbs.noise_trajectory(noise_runs, noise_evals)
trajectory.groupby("batch_size").apply(
    lambda t: t.iloc[[0, len(t) // 2, -1]], include_groups=False
).round(3)

# %% [markdown]
# ## Steps and tokens to a target loss, and the three fits
#
# Three targets: the lowest validation loss that two thirds of the batch sizes reach, and two easier
# ones up to 60% of the way to the first evaluation's loss (`cbs.target_losses`). For each target,
# `cbs.fit_targets` fits McCandlish's hyperbola, Zhang's S = a + b/B and Zhou's WSD pieces, with 90%
# bootstrap intervals over the points; an interval end beyond 10x the largest batch measured reads
# "unbounded". Batches that never reach a target are marked on the figure's top edge.

# %%
n_reach = cbs.reach_count(len(P.batch_sizes))
targets = cbs.target_losses(runs0, evals0, n_reach)
reach = cbs.steps_to_target(runs0, evals0, targets, seq_len=P.seq_len)
limit = 10 * max(P.batch_sizes)  # sequences
fits, mccandlish = cbs.fit_targets(reach, limit)
study.save(
    figures.steps_tokens_to_target(reach, mccandlish, P.batch_sizes), "05_steps_tokens_to_target"
)
fits.round(3)

# %%
print(f"{len(targets)} targets, {len(fits)} fitted")

# %% [markdown]
# ## Critical batch size vs pool size
#
# The batch sweep (first weight decay, lr tuned) on pools of several sizes that share the tokenizer
# and validation documents. The target per pool is the lowest loss two thirds of the batch sizes
# reach on that pool, so each pool is judged at its own attainable loss. Intervals: 90% bootstrap
# over each pool's (batch, steps) points (`cbs.pool_size_scaling`); exponents: least squares in
# log-log (`cbs.scaling_laws`).

# %%
sized = study.sized_pools()
scale_runs, scale_evals = study.sweep(study.scaling_grid())
scaling = cbs.pool_size_scaling(
    scale_runs, scale_evals, analyses.train_tokens(sized), n_reach, P.seq_len
)
law = cbs.scaling_laws(scaling)
study.save(figures.cbs_vs_pool_size(scaling, law, limit), "05_cbs_vs_pool_size")
scaling.round(3)

# %% [markdown]
# ## Batch-size schedules vs the best fixed batch
#
# Notebook 04's schedule runs (lr grid of batch `schedule_batch`, lr x sqrt(B / schedule_batch) as
# the batch changes) against notebook 02's best fixed batch on the same pool
# (`cbs.schedules_vs_fixed`).

# %%
schedule_runs, schedule_evals = study.sweep(study.schedule_grid())
schedules, schedule_curves = cbs.schedules_vs_fixed(
    runs0, evals0, schedule_runs, schedule_evals, P.batch_schedules
)
study.save(figures.schedules(schedule_curves), "05_schedules")
schedules.round(4)

# %% [markdown]
# ## Claims vs measurement
#
# `analyses.cbs_claims`: the fits are judged at the middle target; the D^0.47 claim agrees when the
# fitted exponent is within `analyses.ALPHA_TOLERANCE` of 0.47 (three pools: a coarse test).

# %%
claims = analyses.cbs_claims(trajectory, fits, scaling, law, schedules, min(P.batch_sizes))
study.save_table(claims, "05_claims")
claims
