# %% [markdown]
# # 04 — The GPU-time frontier: GPUs and wall-clock time as separate resources
#
# **What this run found** (each claim's verdict, effect and interval, the paper's claim beside
# it) is the table under the first code cell, filled in from this run's claim tables when the
# notebook reaches them; below, the question states what the papers claim.
#
# **Question.** Notebook 02 treated compute as free. But a small batch needs many *sequential*
# steps, and more GPUs cannot shorten that chain. With G GPUs and a deadline T, which batch size
# reaches the lowest validation loss? The study finds that tight deadlines favour larger batches,
# and that under a fixed deadline a smaller batch on fewer GPUs can still beat a larger batch on
# more GPUs.
#
# **Method.** We reuse the runs of notebook 02 at one model size, the preset's first
# (`P.grid.models[0]`), on pool 0: every lr, weight decay and epoch budget (each budget is its own
# run, its schedule ending at its budget) and every evaluation point. We price each evaluation point
# by the time of the steps before it; a deadline's best loss is the best over all those runs. Main
# frontier: the idealised model in *step units* (one GPU processes `P.frontier.micro_batch`
# sequences per unit; a step of batch B on G GPUs costs max(1, ceil(B / (G m))) units;
# `frontier.unit_step_time`). Deadlines are log-spaced from the earliest evaluation on the most GPUs
# to the last one on one GPU (`frontier.deadline_grid`). The frontier is computed from the observed
# curves, never from fitted ones. Latency-oriented parallelism is a *projection* and drawn dashed.

# %% tags=["parameters"]
import os

preset = os.environ.get("REPRO_PRESET", "cpu")  # `repro preset list`, or FILE.yaml
workers = None  # parallel runs; default: the preset's
train = os.environ.get("REPRO_TRAIN", "0") in ("1", "true")  # else read results/<preset>.tar.xz
dry_run = False  # the built-in preset shrunk to CPU size (`repro reproduce --dry-run`)

# %%
from IPython.display import Markdown

from repro.analysis import figures_frontier
from repro.analysis.findings import Findings
from repro.analysis.intervals import claim_count, claim_summary
from repro.study import notebook_study

study = notebook_study(globals())  # checks the parameters above, prints what the study trains
findings = Findings(study.preset.name)  # this run's verdicts, filled in at the end
P = study.preset

# %%
from repro.analysis import deadline_claims, frontier

pools = study.pools()
results = study.sweep(study.batch_sweep_grid())
model_results = results.subset(results.runs["model"] == P.grid.models[0])
results0 = model_results.subset(model_results.runs["pool"] == str(pools[0]))
m = P.frontier.micro_batch
step = frontier.unit_step_time(m)
deadlines = frontier.deadline_grid(results0, P.frontier.gpu_counts, step)
table = frontier.frontier(results0, P.frontier.gpu_counts, deadlines, step)
budgets = sorted(results0.runs["epochs"].unique().tolist())
print(
    f"model {P.grid.models[0]}: {len(results0.runs)} runs (epoch budgets {budgets}), "
    f"{len(results0.evals)} evaluation "
    f"points; deadlines {deadlines[0]:g} .. {deadlines[-1]:g} step units"
)

# %%
print(f"{len(table)} (GPUs, deadline) cells, {int(table['best_val_loss'].notna().sum())} reachable")

# %% [markdown]
# ## Best loss vs deadline, per GPU count
#
# The frontier of each pool (its best loss by each deadline, over every run of that pool), then the
# mean over pools with its interval, at the deadlines every pool reaches
# (`frontier.pool_frontiers`).

# %%
frontiers = frontier.pool_frontiers(model_results, P.frontier.gpu_counts, deadlines, step)
study.save(figures_frontier.loss_vs_deadline(frontiers), "04_loss_vs_deadline")

# %% [markdown]
# ## Optimal batch size over (GPUs, deadline)
#
# Each cell is one deadline of the grid; its colour is the batch size (over every lr and weight
# decay) that reaches the lowest validation loss on that many GPUs within the deadline. The table
# below holds the same batch sizes, a row per deadline and a column per GPU count.

# %%
study.save(
    figures_frontier.optimal_batch_heatmap(table, P.grid.batch_sizes), "04_optimal_batch_heatmap"
)
table.pivot(index="deadline", columns="gpus", values="batch_size")

# %% [markdown]
# ## Fewer GPUs with a smaller batch vs more GPUs with a larger batch
#
# Each batch size runs on the GPUs it fills (B / m of them). Where does the smaller batch on fewer
# GPUs reach the lower loss under the same deadline? Only deadlines at which both batch sizes are
# still training count: once a batch size's longest run has ended its loss is frozen, and beating
# it then says nothing about the deadline. Each comparison is held out on every pool
# (`deadline_claims.judged_crossovers`: each replicate reports the evaluation that the other
# replicates chose, on the other half of the documents), with an interval over replicates and
# documents, all of them together at 90% (Bonferroni). The figure shows exactly these: smaller
# minus larger, one panel per larger batch, one colour per smaller batch; below 0 the smaller
# batch on fewer GPUs wins.

# %%
study.save_table(
    table.pivot(index="deadline", columns="gpus", values="best_val_loss").round(3).reset_index(),
    "04_frontier_table",
)
points = deadline_claims.deadline_points(model_results)
judged = deadline_claims.judged_crossovers(points, model_results, deadlines, step, m)
study.save(
    figures_frontier.fewer_gpus_smaller_batch(judged, P.grid.batch_sizes),
    "04_fewer_gpus_smaller_batch",
)
judged.sort_values("high").head(20)

# %% [markdown]
# ## Projection: latency-oriented parallelism
#
# k GPUs per replica shorten a step to step_time / (1 + e (k - 1)) without enlarging the batch
# (tensor / sequence / pipeline style), here with parallel efficiency e = 0.7. This is a projection
# from the same observed curves, not a measurement.

# %%
efficiency = 0.7
g_max = max(P.frontier.gpu_counts)
projections = {
    f"x{k} GPUs per replica (projection, e={efficiency})": frontier.frontier(
        results0, [g_max], deadlines, step, speedup=frontier.latency_speedup(k, efficiency)
    )
    for k in (2, 4)
}
study.save(figures_frontier.latency_projection(table, projections, g_max), "04_latency_projection")

# %% [markdown]
# ## The measured step-time model on this machine
#
# `repro bench step-time` times forward + backward + optimizer for micro-batches 1..m of the
# preset's model on this device. On more than one GPU the ring all-reduce model adds 2 (G-1)/G ·
# bytes / bandwidth + 2 (G-1) · latency (NVLink inside a node, InfiniBand across). The table gives
# seconds per optimizer step for each batch size (sequences) and GPU count.

# %%
step_model = study.measured_step_time(m)
frontier.step_time_table(P.grid.batch_sizes, P.frontier.gpu_counts, step_model.step_seconds).pivot(
    index="batch_size", columns="gpus", values="step_time"
)

# %% [markdown]
# ## Batch-size schedules as extra policies
#
# A batch size that changes during training (`batch_schedule`, changing at epoch ends; the lr
# follows lr x sqrt(B / B_ref) for Adam) is one more policy. Each schedule is priced step by step at
# its current batch; here on one GPU and on the most GPUs, against the best fixed batch under the
# same deadline (`frontier.schedule_policies`). The schedules train, on each pool, at the epoch
# budget and weight decay of the best fixed batch chosen on the other pools
# (`batch_schedules.schedule_slices`); the figure shows the mean over pools with its interval.

# %%
from repro.analysis import batch_schedules

ramps = list(P.schedules.ramps.values())
scheduled = study.sweep(study.schedule_grid(batch_schedules.schedule_slices(model_results, ramps)))
policy_gpus = [1, g_max]
policy_frontiers, policies = frontier.schedule_policies(
    frontiers, scheduled, P.schedules.texts(), policy_gpus, deadlines, step
)
study.save(
    figures_frontier.schedule_policies(frontiers, policy_frontiers, policy_gpus),
    "04_schedule_policies",
)
policies

# %% [markdown]
# ## Claims vs measurement
#
# `deadline_claims.frontier_claims`, model `P.grid.models[0]` on every pool; differences in
# nats/token with 90% intervals over replicates and validation documents, every arm held out (each
# replicate's evaluation chosen on the other replicates). Tight deadlines favour larger batches: on
# the most GPUs, the smaller half of the batch sizes minus the larger half, at the tightest deadline
# at which both halves have an evaluation and at the loosest; "agrees" when that difference falls as
# the deadline loosens (the difference-in-differences lies below 0), "disagrees" when it rises. A
# smaller batch on fewer GPUs: the comparisons above made while both train; "agrees" when one
# simultaneous interval is below 0, "disagrees" when all are above 0. The latency row is a
# projection, which no measurement here can decide. Fewer than 3 replicates give no verdict.

# %%
claims = deadline_claims.frontier_claims(model_results, judged, deadlines, step, g_max)
table = study.save_claims(claims, "04_claims")
print(claim_count(claims))
Markdown(table.read_text())  # the claims in full, as committed in figures/<preset>/04_claims.md

# %% [markdown]
# ## Summary
#
# Generated from this notebook's claim tables (`intervals.claim_summary`): a sentence per claim.

# %%
findings.report([claims])  # fills in the table under the first code cell
Markdown(claim_summary(P.name, [claims]))
