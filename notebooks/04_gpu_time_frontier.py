# %% [markdown]
# # 04 — The GPU-time frontier: GPUs and wall-clock time as separate resources
#
# **Question.** Notebook 02 treated compute as free. But a small batch needs many *sequential* steps,
# and more GPUs cannot shorten that chain. With G GPUs and a deadline T, which batch size reaches the
# lowest validation loss? The study finds that tight deadlines favour larger batches, and that under a
# fixed deadline a smaller batch on fewer GPUs can still beat a larger batch on more GPUs.
#
# **Method.** We reuse the runs of notebook 02 (pool 0, every lr / weight decay, every evaluation point)
# and price each evaluation point by the time of the steps before it. Main frontier: the idealised
# model in *step units* (one GPU processes `frontier_micro_batch` sequences per unit; a step of batch B
# on G GPUs costs max(1, ceil(B / (G m))) units). The frontier is computed from the observed curves,
# never from fitted ones. Latency-oriented parallelism is a *projection* and drawn dashed.

# %% tags=["parameters"]
import os

preset = os.environ.get("REPRO_PRESET", "cpu")  # smoke | cpu | gpu-small | gpu | FILE.yaml
workers = None  # parallel runs; default: the preset's

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from pathlib import Path

from repro import analyses, plots
from repro.study import open_study

study = open_study(preset, workers=workers)
P = study.preset
print(study.summary())

# %%
from repro import frontier

pools = study.pools()
runs, evals = study.sweep(study.batch_sweep_grid())
runs0 = runs[(runs["pool"] == str(pools[0])) & (runs["model"] == P.models[0])]
evals0 = evals[evals["run_id"].isin(runs0["run_id"])]
m = P.frontier_micro_batch
step = lambda b, g: frontier.step_units(b, g, m)
points = evals0.merge(runs0[["run_id", "batch_size"]], on="run_id")
first = min(step(int(b), max(P.gpu_counts)) * s for b, s in zip(points["batch_size"], points["step"]))
last = max(step(int(b), 1) * s for b, s in zip(points["batch_size"], points["step"]))
deadlines = np.unique(np.geomspace(first, last, 24).round(1))
table = frontier.frontier(evals0, runs0, P.gpu_counts, deadlines, step)
print(f"{len(runs0)} runs, {len(evals0)} evaluation points; deadlines {deadlines[0]:g} .. {deadlines[-1]:g} step units")

# %%
print(f"{len(table)} (GPUs, deadline) cells, {int(table['best_val_loss'].notna().sum())} reachable")

# %% [markdown]
# ## Best loss vs deadline, per GPU count

# %%
fig, ax = plt.subplots()
for g, part in table.groupby("gpus"):
    ax.step(part["deadline"], part["best_val_loss"], where="post", label=f"{g} GPU{'s' if g > 1 else ''}")
ax.set_xscale("log")
ax.set_xlabel("deadline (step units: one micro-batch forward+backward on one GPU)")
ax.set_ylabel("best validation loss (nats/token)")
ax.set_title("Frontier from observed curves")
ax.legend()
study.save(fig, "04_loss_vs_deadline")

# %% [markdown]
# ## Optimal batch size over (GPUs, deadline)

# %%
grid = table.pivot(index="gpus", columns="deadline", values="batch_size")
fig, ax = plt.subplots(figsize=(7, 3))
image = ax.imshow(np.log2(grid.values.astype(float)), aspect="auto", origin="lower", cmap="viridis")
ax.set_yticks(range(len(grid.index)))
ax.set_yticklabels(grid.index)
ticks = np.linspace(0, len(grid.columns) - 1, 6).astype(int)
ax.set_xticks(ticks)
ax.set_xticklabels([f"{grid.columns[i]:g}" for i in ticks])
ax.set_xlabel("deadline (step units)")
ax.set_ylabel("GPUs")
ax.grid(False)
bar = fig.colorbar(image, ax=ax, ticks=np.log2(P.batch_sizes))
bar.ax.set_yticklabels([str(b) for b in P.batch_sizes])
bar.set_label("optimal batch size (sequences)")
ax.set_title("Optimal batch size (white: nothing reachable yet)")
study.save(fig, "04_optimal_batch_heatmap")
grid

# %% [markdown]
# ## Fewer GPUs with a smaller batch vs more GPUs with a larger batch
#
# Each batch size runs on the GPUs it fills (B / m of them). Where does the smaller batch on fewer GPUs
# reach the lower loss under the same deadline?

# %%
cross = frontier.crossovers(evals0, runs0, deadlines, step, m)
wins = cross[cross["smaller_wins"]]
fig, ax = plt.subplots()
for (b1, b2), part in cross.groupby(["small_batch", "large_batch"]):
    if part["smaller_wins"].any():
        ax.plot(part["deadline"], part["large_loss"] - part["small_loss"], label=f"{b1} on {part['small_gpus'].iloc[0]} vs {b2} on {part['large_gpus'].iloc[0]} GPUs", **plots.MEASURED)
ax.axhline(0, color="k", linewidth=0.8)
ax.set_xscale("log")
ax.set_xlabel("deadline (step units)")
ax.set_ylabel("loss(larger batch) - loss(smaller batch) (nats)")
ax.set_title("Positive: the smaller batch on fewer GPUs wins")
if wins.size:
    ax.legend(fontsize=7)
study.save(fig, "04_fewer_gpus_smaller_batch")
study.save_table(table.pivot(index="deadline", columns="gpus", values="best_val_loss").round(3).reset_index(), "04_frontier_table")
wins.sort_values("deadline").head(20)

# %% [markdown]
# ## Projection: latency-oriented parallelism
#
# k GPUs per replica shorten a step to step_time / (1 + e (k - 1)) without enlarging the batch
# (tensor / sequence / pipeline style), here with parallel efficiency e = 0.7. This is a projection
# from the same observed curves, not a measurement.

# %%
efficiency = 0.7
g_max = max(P.gpu_counts)
fig, ax = plt.subplots()
measured = table[table["gpus"] == g_max]
ax.step(measured["deadline"], measured["best_val_loss"], where="post", label=f"{g_max} GPUs, data parallel (measured curves)")
for k in (2, 4):
    projected = frontier.frontier(evals0, runs0, [g_max], deadlines, step, speedup=frontier.latency_speedup(k, efficiency))
    ax.step(projected["deadline"], projected["best_val_loss"], where="post", label=f"x{k} GPUs per replica (projection, e={efficiency})", **plots.PROJECTED)
ax.set_xscale("log")
ax.set_xlabel("deadline (step units)")
ax.set_ylabel("best validation loss (nats/token)")
ax.set_title("Latency-oriented parallelism (projection)")
ax.legend(fontsize=8)
study.save(fig, "04_latency_projection")

# %% [markdown]
# ## The measured step-time model on this machine
#
# `repro bench step-time` times forward + backward + optimizer for micro-batches 1..m of the preset's
# model on this device. On more than one GPU the ring all-reduce model adds
# 2 (G-1)/G · bytes / bandwidth + 2 (G-1) · latency (NVLink inside a node, InfiniBand across).

# %%
import torch
from repro import bench
from repro.data.pool import load_pool

device = "cuda" if torch.cuda.is_available() else "cpu"
measured_steps = bench.step_time(P.models[0], load_pool(pools[0]).vocab_size, P.seq_len, m, device)
step_model = frontier.MeasuredStepTime(measured_steps["seconds_by_micro_batch"], measured_steps["gradient_bytes"])
frontier.step_time_table(P.batch_sizes, P.gpu_counts, step_model.step_seconds).pivot(index="batch_size", columns="gpus", values="step_time")

# %% [markdown]
# ## Batch-size schedules as extra policies
#
# A batch size that changes during training (`batch_schedule`, changing at epoch ends; the lr follows
# lr x sqrt(B / B_ref) for Adam) is one more policy. Each schedule is priced step by step at its current
# batch; here on one GPU and on the most GPUs, against the best fixed batch under the same deadline.

# %%
schedule_runs, schedule_evals = study.sweep(study.schedule_grid())
g_max = max(P.gpu_counts)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
policy_rows = []
for ax, g in zip(axes, (1, g_max)):
    fixed = table[table["gpus"] == g]
    ax.step(fixed["deadline"], fixed["best_val_loss"], where="post", label="best fixed batch")
    for name, schedule in P.batch_schedules.items():
        mine = schedule_runs[schedule_runs["batch_schedule"] == schedule]
        policy = frontier.frontier(schedule_evals[schedule_evals["run_id"].isin(mine["run_id"])], mine, [g], deadlines, step)
        ax.step(policy["deadline"], policy["best_val_loss"], where="post", label=f"{name} ({schedule})")
        both = policy.merge(fixed, on="deadline", suffixes=("_schedule", "_fixed")).dropna(subset=["best_val_loss_schedule"])
        policy_rows.append({"policy": name, "gpus": g, "deadlines reachable": len(both),
                            "deadlines where it beats every fixed batch": int((both["best_val_loss_schedule"] < both["best_val_loss_fixed"]).sum())})
    ax.set_xscale("log")
    ax.set_xlabel("deadline (step units)")
    ax.set_title(f"{g} GPU{'s' if g > 1 else ''}")
axes[0].set_ylabel("best validation loss (nats/token)")
axes[1].legend(fontsize=7)
study.save(fig, "04_schedule_policies")
policies = pd.DataFrame(policy_rows)
policies

# %% [markdown]
# ## Claims vs measurement

# %%
feasible = table[(table["gpus"] == g_max)].dropna()
tight, loose = feasible.iloc[0], feasible.iloc[-1]
claims = pd.DataFrame([
    ["tight deadlines favour larger batches", "yes",
     f"{g_max} GPUs: optimal batch {int(tight['batch_size'])} at T={tight['deadline']:g} vs {int(loose['batch_size'])} at T={loose['deadline']:g}",
     "yes" if tight["batch_size"] > loose["batch_size"] else "no"],
    ["under a fixed deadline a smaller batch on fewer GPUs can beat a larger batch on more GPUs", "yes",
     f"{len(wins)} of {len(cross)} (deadline, pair) comparisons" + (f", first at T={wins['deadline'].min():g}: batch {int(wins.iloc[0]['small_batch'])} on {int(wins.iloc[0]['small_gpus'])} vs {int(wins.iloc[0]['large_batch'])} on {int(wins.iloc[0]['large_gpus'])} GPUs" if len(wins) else ""),
     "yes" if len(wins) else "no"],
    ["latency-oriented parallelism trades extra GPUs for shorter steps", "yes (projection in the paper too)",
     "projected only (dashed curves above)", "n/a"],
], columns=analyses.CLAIM_COLUMNS)
study.save_table(claims, "04_claims")
claims
