# %% [markdown]
# # 05 — Critical batch size: where does "small batch" end?
#
# **What this run found** (each claim's verdict, effect and interval, the paper's claim beside
# it) is the table under the first code cell, filled in from this run's claim tables when the
# notebook reaches them; below, the question states what the papers claim.
#
# **Question.** Notebook 02 found the best batch size for a fixed pool. The literature gives three
# ways to locate the batch size beyond which more data per step stops paying: McCandlish et al. 2018
# (gradient noise scale B_simple = tr(Σ)/|G|², and the steps/examples hyperbola (S/S_min −
# 1)(E/E_min − 1) = 1 with B_crit = E_min/S_min); Zhang et al. 2025 (S(B) = a + b/B, critical where
# steps exceed linear scaling from the smallest batch by 20%; B* grows with data, ≈ 22.9·D^0.47, D
# in millions of tokens); Zhou et al. 2026 (under WSD, E(S) is piecewise, giving B_min — below it a
# target is not reached — and B_opt, the fewest tokens). And should the batch change during
# training?
#
# **Method.** Everything below is measured on one model size, the preset's first
# (`P.grid.models[0]`, printed below), and on every pool: the pool is the replicate, each fitted
# quantity is computed on each pool alone (from all of its runs), and its interval is over pools (a
# 90% t interval of the mean over pools, of its log for batch sizes and ratios:
# `cbs.pool_interval`), so the spread between pools, which holds each fit's own noise, sets its
# width. A verdict needs `intervals.MIN_REPLICATES` pools. (1) Runs that log B_simple from
# micro-batch and global-batch gradient norms (each EMA-smoothed before the ratio), on every pool,
# each noise-scale batch at its tuned lr, weight decay and epoch budget from notebook 02's sweep
# (`noise.noise_scale_choices`: the run the growth would choose on that pool), so that their losses
# reach the tuned endpoints'. (2) Steps-to-target from notebook 02's sweep: for each target loss
# (the same on every pool: they share the validation documents), pool and batch size, the fewest
# steps over the batch's runs (lr, weight decay and epoch budget; each budget is its own annealed
# run) in which the val loss falls to it; the three fits per pool, beside B_simple near the target
# on that pool. (3) The same sweep (first weight decay only) on pools of several sizes cut from
# every pool seed: B_crit and B* against pool size D, one exponent per seed and an interval over
# seeds. (4) Batch-size schedules (notebook 04's runs) against the fixed batches of the same pools:
# each pool at the epoch budget and weight decay of the best fixed batch chosen on the *other* pools
# (`batch_schedules.schedule_slices`), all arms as held-out tuned endpoints (`selection.tuned`: each
# pool's choice made on the other pools' half of the validation documents, reported on its own other
# half), compared with an interval over pools and documents. Units: batch sizes in sequences of
# `seq_len` tokens; S in optimizer steps; E in tokens; losses in nats/token. Evaluations fall every
# `eval_every` epochs (once per epoch on the CPU presets), so the step at which a run reaches a
# target is interpolated between the last evaluation above it and the first at or below it, linearly
# in log(step) (`cbs.crossing_step`): without it, every batch that reaches a target in the same
# epoch gives S exactly proportional to 1/B. A target reached at a run's first evaluation has
# nothing to interpolate from: that point is left-censored and left out of the fits (counted in the
# table's "left-censored" column); "max log miss" still checks each fit against every point's
# evaluation bracket.

# %% tags=["parameters"]
import os

preset = os.environ.get("REPRO_PRESET", "cpu")  # `repro preset list`, or FILE.yaml
workers = None  # parallel runs; default: the preset's
train = os.environ.get("REPRO_TRAIN", "0") in ("1", "true")  # else read results/<preset>.tar.xz
dry_run = False  # the built-in preset shrunk to CPU size (`repro reproduce --dry-run`)

# %%
from IPython.display import Markdown, display

from repro.analysis import analyses, figures_cbs
from repro.analysis.findings import Findings
from repro.analysis.intervals import claim_count, claim_summary, describe
from repro.analysis.pools import pool_vocab_size, train_tokens
from repro.design.presets import pool_label
from repro.study import notebook_study

study = notebook_study(globals())  # checks the parameters above, prints what the study trains
findings = Findings(study.preset.name)  # this run's verdicts, filled in at the end
P = study.preset

# %%
from repro.analysis import batch_schedules, cbs, cbs_claims, noise

model = P.grid.models[0]
pools = study.pools()
results = study.sweep(study.batch_sweep_grid())
model_results = results.subset(results.runs["model"] == model)
noise_results = study.sweep(study.noise_scale_grid(model_results))
print(
    f"model {model}: {len(model_results.runs)} sweep runs on {len(pools)} pools; "
    f"{len(noise_results.runs)} noise-scale runs at their tuned points:"
)
noise.noise_runs(noise_results)

# %% [markdown]
# ## The gradient noise scale over training
#
# B_simple at each evaluation (EMA-smoothed estimates), one curve per pool and batch. The growth
# the claim below judges (`noise.noise_growth`): per pool and run, the median B_simple over the
# first and over the last third of its evaluations up to its best val loss (while the loss
# falls); then per batch the geometric mean of that growth over pools with its 90% interval over
# pools (`noise.growth_intervals`).

# %%
study.save(figures_cbs.noise_scale(noise_results), "05_noise_scale")
trajectory = noise.noise_trajectory(noise_results)
growth = noise.noise_growth(trajectory)
display(analyses.pool_names(growth).round(3))
noise.growth_intervals(growth).round(3)

# %% [markdown]
# ## The batch grid against the noise scale
#
# The regime's fourth ratio (README, `Study.summary`): the preset's batches over its gradient
# noise scale, both in tokens. The preset's noise scale is B_simple at the loss its tuned endpoint
# reaches: the target is the best tuned val loss of the first model's batch sweep (the lowest mean
# over pools, among its batch sizes, of the held-out endpoints: `analyses.batch_endpoints`); per
# pool, B_simple is the median over its noise-scale runs of each run's evaluation nearest that
# loss, not interpolated ("loss gap": how far those evaluations lie from it), in sequences and in
# tokens (x `seq_len`), with the batch grid over it (`noise.noise_scale_regime`). The range over
# pools against the paper's estimate (`regime.PAPER_NOISE_SCALE`: Zhang et al.'s B* at 200M
# tokens) follows; the table is saved for `Study.summary`.

# %%
from repro.design.regime import NOISE_RATIO, describe_regime, preset_regime

endpoints = analyses.batch_endpoints(model_results, cap=P.grid.cap)
noise_regime = noise.noise_scale_regime(trajectory, endpoints, P.grid.batch_sizes, P.grid.seq_len)
study.save_table(noise_regime.round(4), noise.NOISE_SCALE_TABLE)
noise_range = noise.noise_scale_range(noise_regime)
regime = preset_regime(P, pool_vocab_size(pools[0]), noise_range)
print(describe_regime({NOISE_RATIO: regime[NOISE_RATIO]}, noise.noise_scale_gap(noise_regime)))
noise_regime.round(4)

# %% [markdown]
# ## Steps and tokens to a target loss, and the three fits per pool
#
# Three targets, the same on every pool: the lowest validation loss that two thirds of the batch
# sizes reach on every pool, and two easier ones up to 60% of the way to the first evaluation's
# loss (`cbs.target_losses`). For each pool and target, `cbs.fit_targets` fits McCandlish's
# hyperbola (B_crit), Zhang's S = a + b/B (B*) and Zhou's WSD pieces (B_opt, B_min), beside
# B_simple at that pool's noise-scale evaluations nearest the target (McCandlish's prediction of
# B_crit) and its ratio to B_crit. Batches that never reach a target are marked on the figure's
# top edge. The first table has one row per pool and target; the second, per target, each fitted
# quantity's mean over pools, its 90% interval over pools and its per-pool values
# (`cbs.fit_intervals`).

# %%
n_reach = cbs.reach_count(len(P.grid.batch_sizes))
targets = cbs.target_losses(model_results, n_reach)
reach = cbs.steps_to_target(
    model_results, targets, by=("pool", "batch_size"), seq_len=P.grid.seq_len
)
limit = 10 * max(P.grid.batch_sizes)  # sequences
fits, mccandlish = cbs.fit_targets(reach, trajectory)
fit_intervals = cbs.fit_intervals(fits)
study.save(
    figures_cbs.steps_tokens_to_target(reach, mccandlish, P.grid.batch_sizes),
    "05_steps_tokens_to_target",
)
print(f"{len(targets)} targets; fitted (pool, target) pairs: {len(mccandlish)} of {len(fits)}")
display(analyses.pool_names(fits).round(3))
fit_intervals.round(3)

# %% [markdown]
# The fitted batch sizes at the judged (middle) target: each pool's value and the mean over pools
# with its 90% interval over pools.

# %%
if mccandlish:
    judged = targets[len(targets) // 2]
    study.save(figures_cbs.fitted_batches(fit_intervals, fits, judged), "05_fitted_batches")

# %% [markdown]
# ## Critical batch size vs pool size
#
# The batch sweep (first weight decay; lr and epoch budget tuned) of the first model on pools of
# several sizes cut from every pool seed; each shares its seed's main pool's tokenizer and the
# validation documents. The target per pool is the lowest loss two thirds of the batch sizes
# reach on that pool, so each pool is judged at its own attainable loss (`cbs.pool_size_scaling`).
# Per pool seed, B_crit and B* against D (least squares in log-log); the exponent's interval is a
# t interval over seeds (`cbs.scaling_laws`). Every seed's pools are cut to the same token
# targets but end at a document boundary, so their sizes differ between seeds (the table's
# "pool tokens" are the actual training tokens that the fits use).

# %%
sized = study.sized_pools()
scaled = study.sweep(study.scaling_grids())
scaled = scaled.subset(scaled.runs["model"] == model)
tokens = train_tokens([pool for sizes in sized.values() for pool in sizes])
by_seed = {seed: {str(p): tokens[str(p)] for p in sizes} for seed, sizes in sized.items()}
scaling, scaling_points = cbs.pool_size_scaling(scaled, by_seed, n_reach, P.grid.seq_len)
laws = cbs.scaling_laws(scaling)
study.save(figures_cbs.cbs_vs_pool_size(scaling, laws, limit), "05_cbs_vs_pool_size")
print({name: describe("alpha", alpha, ".2f") for name, alpha in laws.items()})
scaling.round(3)

# %% [markdown]
# ## Batch-size schedules vs the best fixed batch
#
# Notebook 04's schedule runs (first model, every pool; lr grid of batch `schedules.batch`, lr x
# sqrt(B / schedules.batch) as the batch changes) against notebook 02's fixed batches of the same
# model and pool. Each pool meets them at its own slice: the epoch budget and weight decay of the
# best fixed batch chosen on the other pools (`batch_schedules.schedule_slices`, printed first), so
# no pool's own runs pick the slice it is judged at. Every row is a held-out tuned endpoint
# (`selection.tuned` over lr, at the pool's slice; `batch_schedules.schedules_vs_fixed`). The last
# rows are the compared arms: the best fixed batch, with the batch size tuned alongside lr, and the
# best schedule, with the schedule tuned alongside lr; "chose" names the choices made on all of each
# pool's documents.

# %%
ramps = list(P.schedules.ramps.values())
slices = batch_schedules.schedule_slices(model_results, ramps)
print({pool_label(pool): slice_ for pool, slice_ in slices.items()})
scheduled = study.sweep(study.schedule_grid(slices))
schedules = batch_schedules.schedules_vs_fixed(model_results, scheduled, P.schedules.texts())
study.save(figures_cbs.schedules(schedules.curves), "05_schedules")
schedules.table.round(4)

# %% [markdown]
# ## Claims vs measurement
#
# `cbs_claims.cbs_claims`, on the first model only. Verdicts are "agrees", "disagrees" or
# "undetermined" (the reason is in "measured here"); the fits are judged at the middle target.
# Every interval is a 90% interval over pools (pool seeds for the exponent), each pool's value
# listed beside it; fewer than `intervals.MIN_REPLICATES` pools, or a pool without a finite
# value, give no verdict.
# - Noise scale: agrees when, for every noise-scale batch, the interval of B_simple's growth lies
#   at or above `cbs_claims.NOISE_GROWTH`; disagrees when for some batch it lies at or below 1.
# - Hyperbola: agrees when B_crit's interval lies inside the batches every pool measured, the
#   interval of each pool's largest miss beyond its evaluation brackets lies at or below
#   `cbs_claims.RESIDUAL_TOLERANCE` (log steps) and that of B_simple / B_crit inside
#   [1 / `cbs_claims.B_SIMPLE_FACTOR`, `cbs_claims.B_SIMPLE_FACTOR`]; disagrees when the miss's
#   interval lies above the tolerance, or (B_crit located) the ratio's lies outside that range;
#   undetermined when B_crit may lie outside the measured batches (steps never level off, or are
#   flat).
# - D^0.47: agrees when the exponent's interval over seeds lies inside `cbs_claims.ZHANG_BAND`
#   (around 0.47); disagrees when it excludes 0.47; undetermined when it is wider than the band, or
#   when B* lies beyond the largest batch reaching a pool's target (an extrapolation).
# - B_min / B_opt: undetermined unless the sweep is WSD, as Zhou et al.'s fits are; with WSD,
#   agrees when B_opt's interval lies inside the measured batches and B_min's above 0, disagrees
#   when B_min's lies below 0 (tokens to target still fall down to the smallest batch).
# - Schedules: the best schedule minus the best fixed batch, both held out at each pool's
#   held-out slice; agrees when the 90% interval over pools and validation documents lies below
#   0, disagrees when above.

# %%
lr_schedule = "/".join(sorted(model_results.runs["schedule"].unique()))
claims = cbs_claims.cbs_claims(growth, fits, scaling, laws, schedules, lr_schedule, model)
table = study.save_claims(claims, "05_claims")
print(claim_count(claims))
Markdown(table.read_text())  # the claims in full, as committed in figures/<preset>/05_claims.md

# %% [markdown]
# ## Summary
#
# Generated from this notebook's claim tables (`intervals.claim_summary`): a sentence per claim.

# %%
findings.report([claims])  # fills in the table under the first code cell
Markdown(claim_summary(P.name, [claims]))
