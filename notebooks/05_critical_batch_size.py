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
# **Method.** Everything below is measured on one model size, the preset's first (`P.models[0]`,
# printed below). (1) Runs that log B_simple from micro-batch and global-batch gradient norms (each
# EMA-smoothed before the ratio). (2) Steps-to-target from notebook 02's sweep on pool 0: for each
# target loss and batch size, the fewest steps over the batch's runs (lr, weight decay and epoch
# budget; each budget is its own annealed run) in which the val loss falls to it; the three fits,
# with residuals and bootstrap intervals over the points, beside B_simple near the target.
# (3) The same sweep (first weight decay only) on pools of several sizes: B_crit and B* against
# pool size D, the exponents with bootstrap intervals. (4) Batch-size schedules (notebook 04's
# runs, at the best fixed batch's epoch budget and weight decay) against the fixed batches of the
# same pools, budget and weight decay, all as held-out tuned endpoints (`selection.tuned`: each
# replicate's choice made on the other replicates' half of the validation documents, reported on
# its own other half), with an interval over replicates and documents.
# Units: batch sizes in sequences of `seq_len` tokens; S in optimizer steps; E in tokens; losses
# in nats/token. Evaluations fall every `eval_every` epochs (once per epoch on the CPU presets),
# so the step at which a run reaches a target is interpolated between the last evaluation above
# it and the first at or below it, linearly in log(step) (`cbs.crossing_step`): without it, every
# batch that reaches a target in the same epoch gives S exactly proportional to 1/B. A target
# reached at a run's first evaluation has nothing to interpolate from: that point is left-censored
# and left out of the fits (counted in the table's "left-censored" column); "max log miss" still
# checks each fit against every point's evaluation bracket.

# %% tags=["parameters"]
import os

preset = os.environ.get("REPRO_PRESET", "cpu")  # smoke | cpu | gpu-small | gpu | FILE.yaml
workers = None  # parallel runs; default: the preset's

# %%
from IPython.display import Markdown

from repro.analysis import analyses, figures
from repro.analysis.intervals import claim_count
from repro.study import open_study

study = open_study(preset, workers=workers)
P = study.preset
print(study.summary())

# %%
from repro.analysis import cbs

model = P.models[0]
pools = study.pools()
noise = study.sweep(study.noise_scale_grid())
noise_runs, noise_evals = noise.runs, noise.evals
results = study.sweep(study.batch_sweep_grid())
model_results = results.subset(results.runs["model"] == model)
results0 = model_results.subset(model_results.runs["pool"] == str(pools[0]))
runs0, evals0 = results0.runs, results0.evals
print(f"model {model}: {len(noise_runs)} noise-scale runs, {len(runs0)} sweep runs on pool 0")

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
# The growth the claim below judges (`cbs.noise_growth`): per run, the median B_simple over the
# first and over the last third of its evaluations up to its best val loss (while the loss falls).

# %%
cbs.noise_growth(trajectory).round(3)

# %% [markdown]
# ## Steps and tokens to a target loss, and the three fits
#
# Three targets: the lowest validation loss that two thirds of the batch sizes reach, and two easier
# ones up to 60% of the way to the first evaluation's loss (`cbs.target_losses`). For each target,
# `cbs.fit_targets` fits McCandlish's hyperbola (B_crit), Zhang's S = a + b/B (B*) and Zhou's WSD
# pieces (B_opt, B_min), each with its 90% bootstrap interval over the points (lo, hi), beside
# B_simple at the noise-scale evaluations nearest the target (McCandlish's prediction of B_crit).
# Batches that never reach a target are marked on the figure's top edge. One column per target.

# %%
n_reach = cbs.reach_count(len(P.batch_sizes))
targets = cbs.target_losses(runs0, evals0, n_reach)
reach = cbs.steps_to_target(runs0, evals0, targets, seq_len=P.seq_len)
limit = 10 * max(P.batch_sizes)  # sequences
fits, mccandlish = cbs.fit_targets(reach, trajectory)
study.save(
    figures.steps_tokens_to_target(reach, mccandlish, P.batch_sizes), "05_steps_tokens_to_target"
)
fits.set_index("target").T if len(fits) else fits

# %%
print(f"{len(targets)} targets, {len(fits)} fitted")

# %% [markdown]
# ## Critical batch size vs pool size
#
# The batch sweep (first weight decay; lr and epoch budget tuned) of the first model on pools of
# several sizes that share the tokenizer and validation documents. The target per pool is the
# lowest loss two thirds of the batch sizes reach on that pool, so each pool is judged at its own
# attainable loss. Intervals: 90% bootstrap over each pool's (batch, steps) points
# (`cbs.pool_size_scaling`); exponents: least squares in log-log, their intervals from resampling
# every pool's points together (`cbs.scaling_laws`).

# %%
sized = study.sized_pools()
scaled = study.sweep(study.scaling_grid())
scale_runs, scale_evals = scaled.runs[scaled.runs["model"] == model], scaled.evals
scaling, scaling_points = cbs.pool_size_scaling(
    scale_runs, scale_evals, analyses.train_tokens(sized), n_reach, P.seq_len
)
law = cbs.scaling_laws(scaling, scaling_points)
study.save(figures.cbs_vs_pool_size(scaling, law, limit), "05_cbs_vs_pool_size")
scaling.round(3)

# %% [markdown]
# ## Batch-size schedules vs the best fixed batch
#
# Notebook 04's schedule runs (first model, every pool, at the epoch budget and weight decay of
# the best fixed batch on pool 0, `cbs.schedule_slice`; lr grid of batch `schedule_batch`, lr x
# sqrt(B / schedule_batch) as the batch changes) against
# notebook 02's fixed batches of the same model, pools, budget and weight decay
# (`cbs.schedules_vs_fixed`). Every row is a held-out tuned endpoint (`selection.tuned`). The last
# rows are the compared arms: the best fixed batch, with the batch size tuned alongside lr, and
# the best schedule, with the schedule tuned alongside lr; "chose" names the choices made on all
# of each replicate's documents.

# %%
ramps = list(P.batch_schedules.values())
scheduled = study.sweep(study.schedule_grid(*cbs.schedule_slice(model_results, ramps)))
schedules = cbs.schedules_vs_fixed(model_results, scheduled, P.batch_schedules)
study.save(figures.schedules(schedules.curves), "05_schedules")
schedules.table.round(4)

# %% [markdown]
# ## Claims vs measurement
#
# `cbs.cbs_claims`, on the first model only. Verdicts are "agrees", "disagrees" or
# "undetermined" (the reason is in "measured here"); the fits are judged at the middle target.
# A bootstrap interval needs `cbs.MIN_BATCHES` batch sizes (with three, every resample that keeps
# three batch sizes is the points themselves), and none is given where the fit leaves the value
# undetermined in more than 5% of the resamples; without an interval a verdict is undetermined.
# - Noise scale: agrees when B_simple rises by `cbs.NOISE_GROWTH` or more (median of the last third
#   of the evaluations up to the best val loss over the first third) in every noise-scale run;
#   disagrees when it does not rise at all in every run.
# - Hyperbola: agrees when B_crit's 90% interval lies inside the measured batches, the fit misses
#   no point by more than `cbs.RESIDUAL_TOLERANCE` in log steps and B_simple lies within
#   `cbs.B_SIMPLE_FACTOR` of B_crit's interval; disagrees on a larger miss, or with B_simple
#   further off; undetermined when B_crit may lie outside the measured batches (steps never level
#   off, or are flat throughout) or B_simple is not measured.
# - D^0.47: agrees when B*'s exponent interval lies inside `cbs.ZHANG_BAND` (around 0.47);
#   disagrees when it excludes 0.47; undetermined when it is wider than the band.
# - B_min / B_opt: undetermined unless the sweep is WSD, as Zhou et al.'s fits are; with WSD,
#   agrees when B_opt's interval lies inside the measured batches and B_min's above 0, disagrees
#   when B_min's lies below 0 (tokens to target still fall down to the smallest batch).
# - Schedules: the best schedule minus the best fixed batch, both held out; agrees when the 90%
#   interval over replicates and validation documents lies below 0, disagrees when above (at
#   least 3 replicates).

# %%
lr_schedule = "/".join(sorted(runs0["schedule"].unique()))
claims = cbs.cbs_claims(trajectory, fits, scaling, law, schedules, lr_schedule, model)
table = study.save_table(claims, "05_claims")
print(claim_count(claims))
Markdown(table.read_text())  # the claims in full, as committed in figures/<preset>/05_claims.md
